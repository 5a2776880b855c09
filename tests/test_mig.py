"""MIG on fakes (gpuipc_bench.machine.mig): NVML's instances, the pairs a run plans on them (within one
instance, across two), the environment each worker gets, rows naming instances by UUID, the
driver's refusal of CUDA IPC across instances (simulated in fake_gpu.py, caught and worded by the
real code), host memory crossing, and the summary's heading. No MIG machine was at hand: nothing
here has run on MIG hardware."""

from __future__ import annotations

import dataclasses
import io

import pytest

import fake_gpu
from gpuipc_bench.machine import mig
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import WorkerFailed
from gpuipc_bench.harness.launcher import run_scenario, worker_env
from gpuipc_bench.machine.probe import GpuInfo, Machine
from gpuipc_bench.harness.plan import modes_for, plan_runs, plan_scenarios
from gpuipc_bench.engine.scenario import Scenario, WorkerSpec
from gpuipc_bench.scenarios import SCENARIOS

A = "MIG-aaaaaaaa-1111-2222-3333-444444444444"
B = "MIG-bbbbbbbb-1111-2222-3333-444444444444"
C = "MIG-cccccccc-1111-2222-3333-444444444444"
PROFILES = ("1g.10gb", "1g.10gb", "2g.20gb")


def mig_machine(instances=(A, B, C), profiles=PROFILES, whole_gpus=0) -> Machine:
    """GPU 0 with MIG on and these instances (then `whole_gpus` GPUs without MIG)."""
    def gpu(index, mode="n/a", found=(), names=()):
        return GpuInfo(index=index, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-{index}", pci_bus_id="",
                       memory_bytes=80 << 30, compute_capability="9.0", pcie_gen=None, pcie_width=None,
                       pcie_max_gen=None, pcie_max_width=None, mig_mode=mode, mig_instances=tuple(found),
                       mig_profiles=tuple(names), cpus=(0, 1))
    gpus = (gpu(0, "enabled", instances, profiles[:len(instances)]),) + tuple(gpu(i + 1) for i in range(whole_gpus))
    return Machine(hostname="fake", cpu_model="cpu", cpu_count=2, os="Linux", python="3", gpus=gpus,
                   cuda_error=None, driver_version="580.159.04", cuda_driver_version=None, cuda_runtime_version=None,
                   cupy_version=None, peer_access=frozenset(), links={}, mps="not running")


def planned(machine, names=("staging", "ipc", "mmap", "host")):
    config = RunConfig(scenarios=tuple(names))
    plan, _ = plan_scenarios(config, SCENARIOS, machine, explicit=True)
    return plan, config


def mig_specs(name, producer, consumer):
    config = RunConfig(scenarios=(name,))
    return [dataclasses.replace(s, mig=producer if s.rank == 0 else consumer)
            for s in SCENARIOS[name].workers(config, None)]


# --------------------------------------------------------------------------- NVML and the header


def test_nvml_names_each_instance_of_a_gpu_with_mig_on(monkeypatch):
    import pynvml

    from gpuipc_bench.machine import nvml as nvml_facts

    class Handle:
        def __init__(self, name):
            self.name = name

    gpu = Handle("gpu")
    migs = [Handle(u) for u in (A, B, C)]

    def mig_handle(handle, k):
        if k >= len(migs):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)  # a free slot: no instance there
        return migs[k]

    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "580.159.04")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 1)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda k: gpu)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPciInfo", lambda h: type("Pci", (), {"busId": "00000000:17:00.0"})())
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigMode", lambda h: (pynvml.NVML_DEVICE_MIG_ENABLE,) * 2)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMaxMigDeviceCount", lambda h: 7)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigDeviceHandleByIndex", mig_handle)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetUUID", lambda h: "GPU-0" if h is gpu else h.name)
    names = dict(zip((A, B, C), ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                                 "NVIDIA H100 80GB HBM3 MIG 2g.20gb")))
    monkeypatch.setattr(pynvml, "nvmlDeviceGetName", lambda h: names[h.name])
    found = nvml_facts.nvml_facts()["gpus"]["0000:17:00.0"]
    assert found["mig_mode"] == "enabled"
    assert found["mig_instances"] == (A, B, C) and found["mig_profiles"] == PROFILES

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMigMode", lambda h: (0, 0))  # MIG off: no instance asked for
    found = nvml_facts.nvml_facts()["gpus"]["0000:17:00.0"]
    assert found["mig_mode"] == "disabled" and found["mig_instances"] == ()


def test_a_mig_profile_from_nvml_s_name():
    from gpuipc_bench.machine.nvml import mig_profile

    assert mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb") == "1g.10gb"
    assert mig_profile("NVIDIA A100-SXM4-40GB MIG 1g.5gb+me") == "1g.5gb+me"
    assert mig_profile("Something else") == "Something else" and mig_profile("") == ""


def test_the_csv_header_carries_the_instance_uuids():
    meta = mig_machine().metadata()
    assert meta["gpu.0.mig"] == "enabled"
    assert meta["gpu.0.mig_instances"] == f"{A},{B},{C}"
    assert meta["gpu.0.mig_profiles"] == "1g.10gb,1g.10gb,2g.20gb"
    assert meta[f"mig.{A}"] == "GPU 0 · 1g.10gb · A" and meta[f"mig.{C}"] == "GPU 0 · 2g.20gb · C"
    assert not any(k.startswith("mig.") for k in mig_machine(whole_gpus=1).metadata() if "GPU-1" in k)
    assert set(mig.names(meta)) == {A, B, C} and mig.names(meta)[B].name == "MIG 1g.10gb B"


# --------------------------------------------------------------------------- planning


def test_planning_pairs_within_one_instance_and_across_two():
    machine = mig_machine()
    plan, config = planned(machine)
    pairs, notes = mig.plan_mig(plan, config, machine)
    got = [(s.name, [(w.rank, w.role, w.device, w.mig) for w in specs]) for s, specs in pairs]
    for name in ("staging", "ipc", "mmap"):  # host is not a GPU pair: none
        assert (name, [(0, "producer", 0, A), (1, "consumer", 0, A)]) in got  # within instance A
        assert (name, [(0, "producer", 0, A), (1, "consumer", 0, B)]) in got  # across: A -> B
    assert len(got) == 6 and notes == {}
    assert all(w.cpus == (0, 1) for _, specs in pairs for w in specs)  # the parent GPU's CPUs
    assert mig.pair_label(pairs[1][1], machine) == "MIG A>B"


def test_a_gpu_with_one_instance_plans_no_pair_across_and_says_why():
    machine = mig_machine(instances=(A,))
    plan, config = planned(machine, ("staging",))
    pairs, notes = mig.plan_mig(plan, config, machine)
    assert [[w.mig for w in specs] for _, specs in pairs] == [[A, A]]  # within it only
    assert notes == {"mig.gpu0": f"GPU 0 has MIG on with one instance ({A}): no pair across MIG instances, "
                                 "which takes two (this tool never changes the GPU's MIG setup)"}
    whole = dataclasses.replace(machine, gpus=tuple(dataclasses.replace(g, mig_mode="disabled", mig_instances=())
                                                    for g in machine.gpus))
    assert mig.plan_mig(plan, config, whole) == ([], {})


def test_mig_pairs_run_once_outside_the_mode_axis():
    from gpuipc_bench import modes

    sliced, mps_mode = modes.make(("time-sliced", "mps"))
    within, across = mig_specs("ipc", A, A), mig_specs("ipc", A, B)
    assert modes_for(SCENARIOS["ipc"], within, [sliced, mps_mode]) == [sliced]
    assert modes_for(SCENARIOS["ipc"], across, [sliced, mps_mode]) == [sliced]
    assert modes_for(SCENARIOS["ipc"], across, [mps_mode]) == [None]
    runs = plan_runs([(SCENARIOS["ipc"], across)], [sliced, mps_mode])
    assert [(s.name, m) for s, _, m in runs] == [("ipc", sliced)]


def test_the_run_plans_mig_pairs_and_records_the_note(monkeypatch, tmp_path):
    """Through `run`: the planned runs (the launcher stubbed) and the header's note of a GPU
    whose single instance gives no pair across."""
    from click.testing import CliRunner

    from gpuipc_bench.harness import launcher

    from gpuipc_bench.machine import probe as machine_mod
    from gpuipc_bench.cli import cli
    from gpuipc_bench.harness.launcher import Outcome
    from gpuipc_bench.results import read_results

    started = []

    def stub(scenario, config, specs, on_row, **kw):
        started.append((scenario.name, tuple(s.mig for s in specs)))
        return Outcome(scenario.name)

    monkeypatch.setattr(launcher, "run_scenario", stub)
    monkeypatch.setattr(machine_mod, "probe", lambda **k: mig_machine(instances=(A,)))
    out = tmp_path / "run.csv"
    result = CliRunner().invoke(cli, ["run", "-s", "staging", "--sizes", "4K", "-o", str(out), "--sharing",
                                      "time-sliced", "--launcher", "fork-fresh"])  # the stub is fork-fresh's
    assert result.exit_code == 0, result.output
    assert started == [("staging", ("", "")), ("staging", (A, A))]
    assert "no pair across MIG instances" in " ".join(result.output.split())
    _, meta = read_results(out)
    assert "one instance" in meta["note.mig.gpu0"] and meta[f"mig.{A}"] == "GPU 0 · 1g.10gb · A"


# --------------------------------------------------------------------------- the workers


class EnvProbe(Scenario):
    """Says what each worker sees (no CUDA): its CUDA_VISIBLE_DEVICES and its rows' sharing."""

    name = "env-probe"
    gpus_needed = 1

    def run(self, ctx):
        import os

        ctx.begin(self.name)
        ctx.note(f"visible.{ctx.rank}", os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)"))
        ctx.note(f"sharing.{ctx.rank}", ctx.row_fields["sharing"])
        return iter(())


def test_each_worker_sees_its_own_instance_before_cuda_starts(monkeypatch, no_leaks):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    notes = {}
    specs = [WorkerSpec(0, "producer", 0, mig=A), WorkerSpec(1, "consumer", 0, mig=B)]
    outcome = run_scenario(EnvProbe(), RunConfig(scenarios=("env-probe",), timeout=20.0), specs, on_row=None,
                           on_note=notes.__setitem__, env={"CUDA_MPS_PIPE_DIRECTORY": "/nowhere"})
    assert outcome.ok, outcome.error
    assert notes == {"env-probe.visible.0": A, "env-probe.visible.1": B,
                     "env-probe.sharing.0": "mig", "env-probe.sharing.1": "mig"}
    whole = [WorkerSpec(0, "producer", 0), WorkerSpec(1, "consumer", 0)]
    outcome = run_scenario(EnvProbe(), RunConfig(scenarios=("env-probe",), timeout=20.0), whole, on_row=None,
                           on_note=notes.__setitem__)
    assert notes["env-probe.visible.1"] == "0" and notes["env-probe.sharing.1"] != "mig"
    assert worker_env(specs[1], {"X": "1"}) == {"X": "1", "CUDA_VISIBLE_DEVICES": B}
    assert "MIG instance " + A in specs[0].describe()


def run_pair(monkeypatch, name, producer, consumer):
    fake_gpu.install(monkeypatch)
    monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    config = RunConfig(scenarios=(name,), sizes=(4, 4099), min_samples=2, max_samples=3, warmup=1, timeout=20.0)
    specs = mig_specs(name, producer, consumer)
    rows, notes = [], {}
    outcome = run_scenario(SCENARIOS[name], config, specs, on_row=rows.append, on_note=notes.__setitem__)
    return outcome, rows, notes, specs


@pytest.mark.parametrize("name", ["ipc", "staging"])
def test_within_one_instance_a_pair_runs_like_a_same_gpu_pair(monkeypatch, no_leaks, name):
    outcome, rows, notes, _ = run_pair(monkeypatch, name, A, A)
    assert outcome.ok, outcome.error
    assert {r["sharing"] for r in rows} == {"mig"}
    assert {(r["src"], r["dst"]) for r in rows if r["metric"] != "setup" and r["path"] != "ceiling"} == {(A, A)}
    assert {r["src"] for r in rows if r["path"] == "ceiling"} <= {A, "host"}
    variants = {r["variant"] for r in rows}
    assert ("push" in variants) if name == "ipc" else ({"pinned", "pipelined"} <= variants)
    assert not notes


@pytest.mark.parametrize("name, call", [("ipc", "cudaIpcOpen"), ("vmm", "cuMemImportFromShareableHandle"),
                                        ("mempool", "cuMemPoolImportFromShareableHandle"),
                                        ("latency", "cudaIpcOpen")])
def test_cuda_ipc_across_instances_ends_in_the_driver_s_own_words(monkeypatch, no_leaks, name, call):
    outcome, rows, _, specs = run_pair(monkeypatch, name, A, B)
    assert isinstance(outcome.error, WorkerFailed)
    key, text = mig.refusal(name, specs, outcome.error)
    assert key == f"{name}.across_mig.{A}"
    assert text.startswith(f"{name} across MIG instances {A} -> {B}: not measured, the driver refused: ")
    assert call in text and "invalid device ordinal (fake driver: another MIG instance)" in text
    assert "cudaErrorInvalidDevice" in text or "CUDA_ERROR_INVALID_DEVICE" in text
    assert all(r["sharing"] == "mig" and {r["src"], r["dst"]} <= {A, B, "host"} for r in rows)  # set-up rows


def test_staging_crosses_instances_through_host_memory(monkeypatch, no_leaks):
    """The host-ordered variants are measured across; the GPU-ordered ones hand off through CUDA
    IPC events, which the (fake) driver refuses: left out, with its words in a note."""
    outcome, rows, notes, _ = run_pair(monkeypatch, "staging", A, B)
    assert outcome.ok, outcome.error
    measured = {r["variant"] for r in rows if r["path"] == "staging" and r["metric"] != "setup"}
    assert measured == {"pinned-hostsync", "pageable", "pinned-pingpong"}
    assert {(r["src"], r["dst"]) for r in rows if r["path"] == "staging" and r["metric"] != "setup"} == {(A, B)}
    assert {(r["variant"], r["src"], r["dst"]) for r in rows if r["path"] == "ceiling"} == {
        ("d2h@0", A, "host"), ("h2d@0", "host", B)}  # each measured by its own worker, on its instance
    assert {r["sharing"] for r in rows} == {"mig"}
    note = notes[f"staging.across_mig.{A}"]
    assert note.startswith(f"staging across MIG instances {A} -> {B}: pinned, pipelined not measured")
    assert "cudaErrorInvalidDevice in cudaIpcOpenEventHandle on GPU 0 (invalid device ordinal (fake driver" in note


def test_mmap_across_instances_says_its_hand_offs_were_refused(monkeypatch, no_leaks):
    outcome, rows, notes, _ = run_pair(monkeypatch, "mmap", A, B)
    assert outcome.ok, outcome.error
    assert not [r for r in rows if r["path"] == "mmap" and r["metric"] != "setup"]
    assert "zero-copy, dma not measured (they hand off through CUDA IPC events)" in notes[f"mmap.across_mig.{A}"]


def test_only_a_cuda_error_across_instances_is_a_refusal():
    across, within = mig_specs("ipc", A, B), mig_specs("ipc", A, A)
    refused = WorkerFailed("worker 1 (consumer) failed during setup: cudaErrorInvalidDevice in cudaIpcOpenMemHandle",
                           cause_name="CudaError")
    assert mig.refusal("ipc", across, refused) is not None
    assert mig.refusal("ipc", within, refused) is None  # within one instance it is a failure
    assert mig.refusal("ipc", mig_specs("ipc", "", ""), refused) is None
    for other in (WorkerFailed("worker 1 (consumer, GPU 0) was killed by SIGKILL during setup"),
                  WorkerFailed("cannot allocate 1 GiB on GPU 0", cause_name="BenchError"),
                  WorkerFailed("verification failed", cause_name="VerificationError")):
        assert mig.refusal("ipc", across, other) is None
    assert mig.refusal("ipc", across, None) is None


# --------------------------------------------------------------------------- the summary


def test_the_summary_heads_mig_pairs_by_profile_and_letter(monkeypatch, tmp_path, no_leaks):
    from rich.console import Console

    from gpuipc_bench.harness.header import path_facts
    from gpuipc_bench.report import render_run_summary
    from gpuipc_bench.results import ResultsFile, read_results

    out = ResultsFile(tmp_path / "mig.csv", {"host": "fake", **mig_machine().metadata(), **path_facts()})
    for producer, consumer in ((A, A), (A, B)):
        for name in ("staging", "ipc"):
            outcome, rows, notes, specs = run_pair(monkeypatch, name, producer, consumer)
            out.add(rows)
            for key, text in [*notes.items(), *filter(None, [mig.refusal(name, specs, outcome.error)])]:
                out.set_meta(f"note.{key}", text)
    out.write(partial=False)
    df, meta = read_results(out.path)
    assert set(df["src"]) >= {A} and set(df["dst"]) >= {A, B} and set(df["sharing"]) == {"mig"}
    console = Console(record=True, width=100, color_system=None, file=io.StringIO())
    render_run_summary(df, meta, console, source=str(out.path))
    text = console.export_text()
    assert "MIG 1g.10gb A → MIG 1g.10gb A · within one instance" in text
    assert "MIG 1g.10gb A → MIG 1g.10gb B · across instances of GPU 0" in text
    assert ("! across MIG instances the driver refused: staging/pinned, pipelined (cudaErrorInvalidDevice in "
            "cudaIpcOpenEventHandle); ipc (cudaErrorInvalidDevice in cudaIpcOpenMemHandle)") in " ".join(text.split())
