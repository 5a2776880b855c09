"""Stand-ins and helpers that several test files share: fake machines, crafted runs for the
analysis, a GPU scenario run in forked workers, Open MPI's `mpirun` and NVML's memory figure.
(tests/fake_gpu.py is the stand-in for the CUDA layer; fixtures live in conftest.py.)"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import time

import pandas as pd
import pytest

from conftest import ROOT
from gpuipc_bench.config import RunConfig
from gpuipc_bench.engine.scenario import Scenario, WorkerSpec
from gpuipc_bench.errors import BenchError
from gpuipc_bench.harness.launcher import Outcome, run_scenario
from gpuipc_bench.harness.plan import Plan
from gpuipc_bench.harness.session import Reporter, Session
from gpuipc_bench.harness.supervision import WorkerLost
from gpuipc_bench.machine.probe import GpuInfo, Machine
from gpuipc_bench.paths import BUILTIN, PathInfo, to_metadata
from gpuipc_bench.results import empty_frame, new_row, typed_frame, write_results
from gpuipc_bench.scenarios import SCENARIOS

KIB, MIB = 1 << 10, 1 << 20
BENCH = [sys.executable, "-m", "gpuipc_bench.cli"]

# --------------------------------------------------------------------------- machines


def fake_machine(gpu_memory: tuple[int, ...]) -> Machine:
    """A machine with one GPU per entry of `gpu_memory` (its bytes), all peers of each other."""
    gpus = tuple(GpuInfo(index=i, name="Fake GPU", uuid="", pci_bus_id="", memory_bytes=m,
                         compute_capability="9.0", pcie_gen=None, pcie_width=None, pcie_max_gen=None,
                         pcie_max_width=None, mig_mode="n/a") for i, m in enumerate(gpu_memory))
    return Machine(hostname="fake", cpu_model="cpu", cpu_count=2, os="Linux", python="3",
                   gpus=gpus, cuda_error=None, driver_version=None, cuda_driver_version=None,
                   cuda_runtime_version=None, cupy_version=None,
                   peer_access=frozenset((i, j) for i in range(len(gpus)) for j in range(len(gpus)) if i != j),
                   links={}, mps="not running")


def h100_node(gpus: int) -> Machine:
    """A node of `gpus` H100s joined by NVLink, with every version and PCIe fact filled in."""
    infos = tuple(
        GpuInfo(
            index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{i}", pci_bus_id=f"0000:{0x17 + i:02x}:00.0",
            memory_bytes=85_520_809_984, compute_capability="9.0", pcie_gen=5, pcie_width=16,
            pcie_max_gen=5, pcie_max_width=16, mig_mode="disabled",
        )
        for i in range(gpus)
    )
    pairs = [(i, j) for i in range(gpus) for j in range(gpus) if i != j]
    return Machine(
        hostname="node1", cpu_model="Some CPU", cpu_count=16, os="Linux", python="CPython 3.11.7",
        gpus=infos, cuda_error=None, driver_version="580.159.04", cuda_driver_version="13.0",
        cuda_runtime_version="12.9", cupy_version="14.2.0", peer_access=frozenset(pairs),
        links={p: "NV18" for p in pairs}, mps="not running",
    )


# --------------------------------------------------------------------------- crafted runs for the analysis

PATHS = BUILTIN + (PathInfo("vmm", setup=("vmm_import",)), PathInfo("torch", setup=("caching_receive_cold",)))
META = {"schema_version": "2", **to_metadata(PATHS)}


def frame(rows: list[dict]) -> pd.DataFrame:
    return typed_frame(pd.DataFrame.from_records(rows)) if rows else empty_frame()


def figure(path, variant, seconds, sizes=(4 * KIB,), n=6, measure="stream", scenario=None, ceiling="d2d@0",
           sharing="time-sliced", src="0", dst="0", metric="bandwidth", spread=1e-3, samples=None):
    """n samples per size: `seconds` (a number or a function of the size) times 1 + a spread
    evenly from -spread to +spread; or the given `samples` (relative factors)."""
    rows = []
    for size in sizes:
        base = seconds(size) if callable(seconds) else seconds
        factors = samples or [1 + spread * (2 * i / max(1, n - 1) - 1) for i in range(n)]
        for i, f in enumerate(factors):
            rows.append(new_row(scenario=scenario or path, path=path, variant=variant, measure=measure,
                                metric=metric, src=src, dst=dst, bytes=size, iteration=i, seconds=base * f,
                                verified=True if metric != "setup" else None, workers=2, sharing=sharing,
                                ceiling=ceiling if path != "ceiling" else ""))
    return rows


def pairs_run(disagree: bool = False, replicas: tuple[int, ...] = (1,), repeats: bool = True):
    """peer/ce and peer/sm on three NV18 pairs, sm 10% faster; with `disagree` sm is 1.5x slower
    on 0>2 in the first process set, and in the others too where it `repeats`."""
    groups = []
    for replica in replicas:
        for src, dst in (("0", "1"), ("1", "0"), ("0", "2")):
            odd = disagree and (src, dst) == ("0", "2") and (replica == 1 or repeats)
            slow = 1.5 if odd else 0.9
            groups += [[{**row, "replica": replica} for row in found] for found in (
                figure("peer", "ce", 20e-6, src=src, dst=dst, ceiling="", sharing="exclusive"),
                figure("peer", "sm", 20e-6 * slow, src=src, dst=dst, ceiling="", sharing="exclusive"))]
    return groups


NV18 = {**META, "link.0-1": "NV18", "link.0-2": "NV18", "link.1-2": "NV18"}


def setup(path, op, seconds, n=9):
    """n set-up samples of `op` on `path`."""
    return figure(path, op, seconds, metric="setup", measure="", ceiling="", n=n)


def write_run(tmp_path, name, groups, meta=META):
    """The rows of `groups` written as the results file tmp_path/name; its path."""
    path = tmp_path / name
    write_results(path, frame([r for g in groups for r in g]), {k: v for k, v in meta.items()
                                                                 if k != "schema_version"})
    return path


# --------------------------------------------------------------------------- a GPU scenario in forked workers

ODD_SIZES = (4, 4096 + 3, 8 * MIB + 16)  # odd sizes: vector tails, unaligned chunk ends


def run_scenario_rows(monkeypatch, name, scenario=None, fault=None, **overrides):
    """Scenario `name` through the real launcher (forked workers), small and quick: (outcome, rows)."""
    if fault:
        monkeypatch.setenv("GPUIPC_BENCH_FAULT", fault)
    else:
        monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    settings = dict(scenarios=(name,), sizes=ODD_SIZES, min_samples=2, max_samples=3, warmup=1, timeout=60.0,
                    chunk_bytes=MIB)
    settings.update(overrides)
    config = RunConfig(**settings)
    scenario = scenario or SCENARIOS[name]
    rows: list[dict] = []
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append)
    return outcome, rows


def count_by(rows, *keys):
    """How many rows hold each combination of the values of `keys`."""
    return collections.Counter(tuple(r[k] for k in keys) for r in rows)


# --------------------------------------------------------------------------- Open MPI

HAVE_MPI = shutil.which("mpirun") is not None and subprocess.run(
    [sys.executable, "-c", "import mpi4py"], capture_output=True).returncode == 0
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="needs Open MPI's mpirun and mpi4py (pip install -e '.[mpi]')")


def mpi_env(**extra) -> dict:
    """This environment without a fault, with Open MPI allowed to run as root and oversubscribe."""
    out = {k: v for k, v in os.environ.items() if k != "GPUIPC_BENCH_FAULT"}
    out.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
               **extra)
    return out


def mpirun(n: int, *args, fault: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`mpirun -np n gpuipc-bench run ARGS`, with `fault` set in every rank."""
    command = ["mpirun", "--oversubscribe", "-np", str(n)]
    if fault:
        command += ["-x", f"GPUIPC_BENCH_FAULT={fault}"]
    return subprocess.run(command + BENCH + ["run", *args], capture_output=True, text=True, timeout=timeout,
                          env=mpi_env())


def ours_in_shm() -> list[str]:
    """The tool's segments in /dev/shm."""
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith("gpuipc-bench-"))


# --------------------------------------------------------------------------- GPU memory from NVML


def gpu_memory_used(machine, device: int = 0) -> int | None:
    """Bytes in use on CUDA device `device`, from NVML (which makes no CUDA context)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001
        return None
    try:
        bus_id = machine.gpus[device].pci_bus_id
        handle = (pynvml.nvmlDeviceGetHandleByPciBusId(bus_id) if bus_id
                  else pynvml.nvmlDeviceGetHandleByIndex(device))
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    except Exception:  # noqa: BLE001
        return None
    finally:
        pynvml.nvmlShutdown()


def assert_gpu_memory_back(machine, before: int | None, device: int = 0) -> None:
    """Used memory back within 64 MiB of `before`: the driver frees a dead process's memory
    as the process is reaped, so allow it a moment, no more."""
    if before is None:
        pytest.skip("NVML gives no memory figure here")
    deadline = time.monotonic() + 10
    after = gpu_memory_used(machine, device)
    while after > before + (64 << 20) and time.monotonic() < deadline:
        time.sleep(0.2)
        after = gpu_memory_used(machine, device)
    assert after <= before + (64 << 20), f"GPU memory not given back: {(after - before) >> 20} MiB more in use"


# --------------------------------------------------------------------------- the tool as a real process


def bench_process(*args: str, env: dict | None = None, cwd=None, **kwargs) -> subprocess.CompletedProcess:
    """`python -m gpuipc_bench.cli ARGS` as a real process, without this process's fault, MPI or
    tool settings (plus `env`)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUIPC_BENCH_", "OMPI_", "PMI"))}
    full_env.update({"PYTHONPATH": str(ROOT)}, **(env or {}))
    return subprocess.run([*BENCH, *args], env=full_env, cwd=cwd, capture_output=True, text=True, timeout=120,
                          **kwargs)


# --------------------------------------------------------------------------- a session's stand-ins

CPU = [WorkerSpec(0, "producer", None), WorkerSpec(1, "consumer", None)]
SAME_GPU = [WorkerSpec(0, "producer", 0), WorkerSpec(1, "consumer", 0)]


class Named(Scenario):
    """A scenario that is only its name (its workers are the stand-in sets')."""

    def __init__(self, name: str, sharing_modes: bool = False):
        self.name, self.sharing_modes = name, sharing_modes


class Sets:
    """Stands in for harness.pool.WorkerSets: each run delivers the rows, progress, status and
    notes its script says and returns its outcome (an error, or raises a signal)."""

    def __init__(self, script=None):
        self.script = script or {}  # scenario name -> (rows, error or exception to raise)
        self.calls: list[tuple] = []  # (scenario, mode_name, env)
        self.started = 1
        self.ended = self.let_go_called = False

    def prestart(self, scenarios) -> None:
        pass

    def ready_for(self, scenario, mode_name) -> Outcome | None:
        """An idle worker's death, where the script says one is seen before this mode starts."""
        lost = self.script.get(("lost before", mode_name))
        return Outcome(scenario.name, error=WorkerLost(lost)) if lost else None

    def run(self, scenario, config, specs, mode_name=None, env=None, on_row=None, on_progress=None,
            on_status=None, on_note=None) -> Outcome:
        self.calls.append((scenario.name, mode_name, env))
        rows, error = self.script.get(scenario.name, ([host_row(scenario.name)], None))
        if callable(rows):
            rows = rows()
        on_status(f"sample 1 of {scenario.name}")
        for row in rows:
            on_row(row)
            on_progress(1)
        on_note(f"{scenario.name}.said", "hello")
        if isinstance(error, BaseException) and not isinstance(error, BenchError):
            raise error
        return Outcome(scenario.name, rows=len(rows), error=error)

    def let_go(self) -> None:
        self.let_go_called = True

    def retire(self, specs, mode_name=None, env=None) -> None:
        self.calls.append(("retired", tuple(spec.device for spec in specs), mode_name))

    def end(self) -> None:
        self.ended = True


class Heard(Reporter):
    """What the session said, in order."""

    def __init__(self):
        self.events: list[tuple] = []
        self.summary = ""

    def __enter__(self):
        self.events.append(("enter",))
        return self

    def __exit__(self, *exc) -> None:
        self.events.append(("exit",))

    def started(self, label, total):
        self.events.append(("started", label))
        return label

    def advance(self, line, steps):
        self.events.append(("advance", line, steps))

    def status(self, line, text):
        self.events.append(("status", line, text))

    def failed(self, line):
        self.events.append(("failed", line))

    def note(self, text):
        self.events.append(("note", text))

    def written(self, frame, metadata, analysis=None):
        self.events.append(("written", len(frame), metadata["status"]))


def host_row(scenario: str, iteration: int = 0) -> dict:
    return new_row(scenario=scenario, path="host", variant="memcpy", measure="stream", metric="bandwidth",
                   src="host", dst="host", bytes=4096, iteration=iteration, batch=1, seconds=1e-6, verified=True,
                   workers=2, sharing="none")


def plan_of(*runs, modes=(), machine=None) -> Plan:
    config = RunConfig(scenarios=tuple(dict.fromkeys(s.name for s, _ in runs)), iterations=3)
    return Plan(config, machine or fake_machine(()), list(runs), list(modes), {}, [])


def run_session(tmp_path, plan, sets, reporter=None):
    reporter = reporter or Heard()
    out = tmp_path / "run.csv"
    outcome = Session(out, reporter, sets=sets).run(plan)
    return outcome, reporter, out


# --------------------------------------------------------------------------- NVML's PCIe link readings


class FakeNvml:
    """A stand-in for the pynvml module (put in sys.modules): GPUs by PCI bus id whose PCIe link
    reads at the `idle` generation until `loaded` is set (a host copy runs), then their entry of
    `busy` (generation, width; default: the maximum); the width is the busy one either way (a lost
    lane stays lost); the maximum is `maximum`. No process, no clock event."""

    class NVMLError(Exception):
        pass

    NVML_P2P_CAPS_INDEX_READ = 0

    def __init__(self, bus_ids: list[str], busy: dict[int, tuple[int, int]] | None = None,
                 idle: int = 1, maximum: tuple[int, int] = (5, 16)):
        self.bus_ids, self.busy, self.idle, self.maximum = bus_ids, busy or {}, idle, maximum
        self.loaded = False
        self.reads = 0  # link readings taken
        self.users = 0  # nvmlInit calls not yet shut down (a watch that reads now)

    def nvmlInit(self):
        self.users += 1

    def nvmlShutdown(self):
        self.users -= 1

    def nvmlDeviceGetCount(self):
        return len(self.bus_ids)

    def nvmlDeviceGetHandleByIndex(self, k):
        return k

    def nvmlDeviceGetPciInfo(self, handle):
        return type("PciInfo", (), {"busId": self.bus_ids[handle].encode()})()

    def _link(self, handle) -> tuple[int, int]:
        self.reads += 1
        busy = self.busy.get(handle, self.maximum)
        return busy if self.loaded else (self.idle, busy[1])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._link(handle)[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._link(handle)[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self.maximum[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self.maximum[1]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return []

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return 0
