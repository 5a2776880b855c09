"""The symm path: PyTorch's symmetric memory (scenarios/symm.py, scenarios/symm_support.py).

CPU tests: the registry and the skip reasons (no torch, no GPU, an old torch, NCCL on one GPU),
the backend's selection in the worker (a fake torch.distributed._symmetric_memory in sys.modules),
the environment every worker sets, and the whole protocol in real workers on the fake CUDA layer
(fake_gpu.py) with a fake SymmSide: "symmetric tensors" are regions of the fake GPU arena, a
rendezvous trades their addresses through files, and the signal pad is a shared array whose
put_signal / wait_signal behave as torch's (a put waits for the slot to be free, a wait takes it).
GPU tests (marker `gpu`) run `gpuipc-bench run -s symm` and skip without a GPU or a CUDA torch.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import ctypes
import multiprocessing
import os
import subprocess
import sys
import time
import types

import pytest

import fake_gpu
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import BenchError, UsageError, WorkerFailed
from gpuipc_bench.harness.launcher import run_scenario
from gpuipc_bench.scenarios import SCENARIOS, symm, symm_support, torch_support
from fakes import fake_machine

SIZES = (4, 4099)
RUN_REPEATS = 3  # the set-up repeats of a run of at most 3 samples a group
NO_SIGNALS_ENV = "FAKE_SYMM_NO_SIGNALS"
NO_GPU = types.SimpleNamespace(gpu_count=0, no_gpu_reason="no NVIDIA driver on this machine")
# The fake signal pad, shared with the forked workers: [receiver][channel][sender], and what each
# worker found in its environment when its SymmSide was made (1: multicast off and overlap allowed).
PAD = multiprocessing.get_context("fork").RawArray("q", 2 * 8 * 2)
ENV_SEEN = multiprocessing.get_context("fork").RawArray("q", 2)


# --------------------------------------------------------------------------- the fake torch side


class FakeTensor:
    def __init__(self, ptr: int, nbytes: int):
        self.ptr, self.nbytes = ptr, nbytes


class FakeHandle:
    def __init__(self, ptrs: dict[int, int], rank: int):
        self.ptrs, self.rank = ptrs, rank


class FakeSymmSide:
    version = "fake"

    def __init__(self, device, timeout_s):
        self.device, self.timeout_s, self.rendezvous_count = device, timeout_s, 0
        self.rank, self.folder = -1, ""
        wanted = {**symm_support.MULTICAST_OFF, **symm_support.OVERLAPPING}
        self.env_ok = all(os.environ.get(k) == v for k, v in wanted.items())
        self.tmpdir = os.environ.get("TMPDIR", "")

    def use_backend(self, backend):
        assert backend == "CUDA"

    def start_group(self, store_path, rank, world_size, backend):
        self.rank, self.folder = rank, os.path.dirname(store_path)
        ENV_SEEN[rank] = 1 if self.env_ok and self.tmpdir == self.folder else 2
        return 1e-3

    def empty(self, nbytes):
        return FakeTensor(fake_gpu._alloc(nbytes), nbytes)

    def rendezvous(self, tensor):
        """Both ranks publish their address in a file of the run's folder, then read the other's."""
        self.rendezvous_count += 1
        mine = os.path.join(self.folder, f"rdv.{self.rendezvous_count}.{self.rank}")
        with open(mine + ".tmp", "w") as out:
            out.write(str(tensor.ptr))
        os.rename(mine + ".tmp", mine)
        other = os.path.join(self.folder, f"rdv.{self.rendezvous_count}.{1 - self.rank}")
        deadline = time.monotonic() + self.timeout_s
        while not os.path.exists(other):
            assert time.monotonic() < deadline, "the peer never came to the rendezvous"
            time.sleep(0.001)
        with open(other) as peer:
            return FakeHandle({self.rank: tensor.ptr, 1 - self.rank: int(peer.read())}, self.rank)

    def peer_buffer(self, handle, rank, nbytes):
        return FakeTensor(handle.ptrs[rank], nbytes)

    @staticmethod
    def ptr(tensor):
        return tensor.ptr

    @staticmethod
    def copier(dst, src, nbytes):
        return lambda at, frm: ctypes.memmove(dst.ptr + at, src.ptr + frm, nbytes)

    @staticmethod
    def on_stream(stream_ptr):
        return contextlib.nullcontext()

    def signals(self, handle):
        return "the fake handle has no put_signal" if os.environ.get(NO_SIGNALS_ENV) else None

    def _spin(self, index, until, then):
        deadline = time.monotonic() + self.timeout_s
        while PAD[index] != until:
            if time.monotonic() > deadline:
                raise RuntimeError(f"signal pad slot {index} never became {until}")
        PAD[index] = then

    def put_signal(self, handle, peer, channel):
        self._spin(peer * 16 + channel * 2 + self.rank, 0, 1)

    def wait_signal(self, handle, peer, channel):
        self._spin(self.rank * 16 + channel * 2 + peer, 1, 0)

    def synchronize(self):
        pass

    def close(self):
        pass


def run(monkeypatch, name="symm", fault=None, no_signals=False, **overrides):
    fake_gpu.install(monkeypatch)
    monkeypatch.setattr(symm, "SymmSide", FakeSymmSide)
    monkeypatch.setattr(symm, "time_setup", fake_gpu._time_setup)
    for i in range(len(PAD)):
        PAD[i] = 0
    ENV_SEEN[0] = ENV_SEEN[1] = 0
    monkeypatch.setenv("GPUIPC_BENCH_FAULT", fault) if fault else monkeypatch.delenv("GPUIPC_BENCH_FAULT",
                                                                                      raising=False)
    monkeypatch.setenv(NO_SIGNALS_ENV, "1") if no_signals else monkeypatch.delenv(NO_SIGNALS_ENV, raising=False)
    for key in (*symm_support.MULTICAST_OFF, *symm_support.OVERLAPPING):
        monkeypatch.delenv(key, raising=False)  # the worker must set them itself
    settings = dict(scenarios=(name,), sizes=SIZES, min_samples=2, max_samples=3, warmup=1, timeout=20.0)
    settings.update(overrides)
    config = RunConfig(**settings)
    scenario = copy.copy(SCENARIOS[name])
    scenario.start_method = "fork"  # the fakes live in this process's memory
    rows, notes = [], {}
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append,
                           on_note=notes.__setitem__)
    return outcome, rows, notes


def groups(rows, *keys):
    return collections.Counter(tuple(r[k] for k in keys) for r in rows)


# --------------------------------------------------------------------------- registry, plan, skip reasons


def test_symm_is_registered_by_backend_and_only_run_by_name():
    from gpuipc_bench.harness.plan import resolve_names

    assert {n: SCENARIOS[n].backend for n in ("symm", "symm-nvshmem", "symm-nccl")} == \
        {"symm": "CUDA", "symm-nvshmem": "NVSHMEM", "symm-nccl": "NCCL"}
    for name in ("symm", "symm-nvshmem", "symm-nccl"):
        scenario = SCENARIOS[name]
        assert not scenario.in_default_run and not scenario.persistent_workers
        assert scenario.start_method == "forkserver" and "torch" in scenario.preload
        assert name not in resolve_names((), SCENARIOS) and name not in resolve_names((), SCENARIOS, "quick")
        assert resolve_names((name,), SCENARIOS) == [name]
        [info] = scenario.paths
        assert info.name == "symm" and info.ranked and info.setup == ("rendezvous_first",)
    assert SCENARIOS["symm"].sharing_modes and SCENARIOS["symm"].pairable


def test_the_skip_reasons_are_one_line_naming_what_is_missing(monkeypatch, tmp_path):
    one_gpu, two_gpus = types.SimpleNamespace(gpu_count=1), types.SimpleNamespace(gpu_count=2)
    reasons = []
    monkeypatch.setattr(torch_support.importlib.util, "find_spec", lambda name: None)
    reasons.append(SCENARIOS["symm"].waive_reason(NO_GPU))
    assert reasons[-1] == "needs a CUDA GPU: no NVIDIA driver on this machine"
    reasons.append(SCENARIOS["symm"].waive_reason(one_gpu))
    assert reasons[-1] == "needs PyTorch: pip install -e '.[torch]'"
    reasons.append(SCENARIOS["symm-nccl"].waive_reason(one_gpu))
    assert reasons[-1] == symm_support.NCCL_ONE_GPU and "two ranks on one GPU" in reasons[-1]
    # a CUDA build of torch, too old for a backend
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libtorch_cuda.so").touch()
    spec = type("Spec", (), {"origin": str(tmp_path / "__init__.py")})()
    monkeypatch.setattr(torch_support.importlib.util, "find_spec", lambda name: spec)
    monkeypatch.setattr(symm_support, "torch_version", lambda: (2, 7))
    monkeypatch.setattr(symm_support, "nvshmem_libraries", lambda: True)
    assert SCENARIOS["symm"].waive_reason(one_gpu) is None
    assert SCENARIOS["symm-nvshmem"].waive_reason(one_gpu) == symm_support.NVSHMEM_ONE_GPU  # limited MPG
    reasons.append(SCENARIOS["symm-nvshmem"].waive_reason(two_gpus))
    assert reasons[-1].startswith("needs torch >= 2.8 for the NVSHMEM backend of symmetric memory (torch 2.7 here)")
    reasons.append(SCENARIOS["symm-nccl"].waive_reason(two_gpus))
    assert reasons[-1].startswith("needs torch >= 2.9 for the NCCL backend")
    monkeypatch.setattr(symm_support, "torch_version", lambda: (2, 11))
    assert SCENARIOS["symm-nccl"].waive_reason(two_gpus) is None
    monkeypatch.setattr(symm_support, "nvshmem_libraries", lambda: False)
    reasons.append(SCENARIOS["symm-nvshmem"].waive_reason(two_gpus))
    assert reasons[-1].startswith("needs NVSHMEM's libraries")
    assert all("\n" not in r and len(r) < 160 for r in reasons)


def test_running_symm_without_a_gpu_is_one_error_line():
    done = subprocess.run([sys.executable, "-m", "gpuipc_bench.cli", "run", "-s", "symm", "--sizes", "4K"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    if "cannot run here" not in done.stderr + done.stdout:
        pytest.skip("this machine can run symm")
    assert done.returncode == 2
    lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: --scenario symm: cannot run here: needs ")


def test_nccl_takes_two_gpus_by_default_and_refuses_one():
    config = RunConfig(scenarios=("symm-nccl",), sizes=SIZES)
    scenario = SCENARIOS["symm-nccl"]
    assert [s.device for s in scenario.workers(config, None)] == [0, 1]
    assert [s.device for s in SCENARIOS["symm"].workers(config, None)] == [0, 0]
    same = scenario.workers(RunConfig(scenarios=("symm-nccl",), sizes=SIZES, devices=(1, 1)), None)
    with pytest.raises(UsageError, match="two ranks on one GPU"):
        scenario.prepare(config, same)
    assert scenario.waive_reason(fake_machine((80 << 30,))) == symm_support.NCCL_ONE_GPU


def test_every_worker_environment_keeps_multicast_off():
    for same_gpu in (True, False):
        env = symm_support.worker_environment(same_gpu, "/tmp/run")
        assert env["TMPDIR"] == "/tmp/run"
        assert env["NCCL_NVLS_ENABLE"] == "0" and env["NVSHMEM_DISABLE_NVLS"] == "1"
        assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert ("TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES" in env) == same_gpu


def test_the_variants_are_declared_against_the_ipc_classes():
    from gpuipc_bench.analysis.mechanisms import IPC_CE, IPC_SM, declared, mechanism

    for backend in ("CUDA", "NVSHMEM", "NCCL"):
        ce, sm = symm.variants(backend)
        assert (ce, sm) == (f"{backend.lower()}-ce", f"{backend.lower()}-sm")
        assert declared("symm", ce) and declared("symm", sm)
        assert mechanism("symm", ce).name == IPC_CE and mechanism("symm", sm).name == IPC_SM
        assert "torch" in mechanism("symm", ce).needs and mechanism("symm", ce).direction == "pull"


# --------------------------------------------------------------------------- SymmSide on a fake torch module


def fake_torch(monkeypatch, set_backend=True, nvshmem=True, refuse=""):
    """torch, torch.distributed and torch.distributed._symmetric_memory as small modules."""
    calls: list = []
    torch = types.ModuleType("torch")
    torch.__version__ = "2.11.0+fake"
    torch.uint8 = "uint8"
    torch.cuda = types.SimpleNamespace(set_device=lambda d: calls.append(("set_device", d)))
    torch.device = lambda kind, index: f"{kind}:{index}"
    dist = types.ModuleType("torch.distributed")
    dist.FileStore = lambda path, n: ("store", path, n)
    dist.init_process_group = lambda backend, **kw: calls.append(("init", backend, kw.get("device_id")))
    dist.group = types.SimpleNamespace(WORLD=types.SimpleNamespace(group_name="0"))
    symm_mem = types.ModuleType("torch.distributed._symmetric_memory")
    if set_backend:
        def chosen(name):
            if name == refuse:
                raise RuntimeError(f"{name} is not supported\nmore lines")
            calls.append(("set_backend", name))
        symm_mem.set_backend = chosen
    symm_mem.is_nvshmem_available = lambda: nvshmem
    torch.distributed, dist._symmetric_memory = dist, symm_mem
    for name, module in (("torch", torch), ("torch.distributed", dist),
                         ("torch.distributed._symmetric_memory", symm_mem)):
        monkeypatch.setitem(sys.modules, name, module)
    return calls


def test_the_backend_is_set_where_torch_has_it_and_refusals_name_it(monkeypatch):
    calls = fake_torch(monkeypatch)
    side = symm_support.SymmSide(0, 5.0)
    side.use_backend("NVSHMEM")
    assert ("set_backend", "NVSHMEM") in calls
    assert side.start_group("/x/store", 1, 2, "NCCL") >= 0 and ("init", "nccl", "cuda:0") in calls
    side.start_group("/x/store", 1, 2, "CUDA")
    assert calls[-1] == ("init", "gloo", None) and side.group_name == "0"

    fake_torch(monkeypatch, nvshmem=False)
    with pytest.raises(BenchError, match="says NVSHMEM is not available"):
        symm_support.SymmSide(0, 5.0).use_backend("NVSHMEM")
    fake_torch(monkeypatch, refuse="NCCL")
    with pytest.raises(BenchError) as refused:
        symm_support.SymmSide(0, 5.0).use_backend("NCCL")
    assert str(refused.value) == "symm: torch 2.11.0+fake refuses the NCCL backend: NCCL is not supported"
    calls = fake_torch(monkeypatch, set_backend=False)  # an older torch: the CUDA backend only
    symm_support.SymmSide(0, 5.0).use_backend("CUDA")
    with pytest.raises(BenchError, match="has no set_backend: no NVSHMEM backend"):
        symm_support.SymmSide(0, 5.0).use_backend("NVSHMEM")


# --------------------------------------------------------------------------- the protocol, on fakes


def test_symm_protocol_rows_on_one_gpu(monkeypatch, no_leaks):
    outcome, rows, notes = run(monkeypatch)
    assert outcome.ok, outcome.error
    assert list(ENV_SEEN) == [1, 1]  # both set multicast off, the overlap and TMPDIR before torch
    data = [r for r in rows if r["path"] == "symm" and r["metric"] == "bandwidth"]
    got = groups(data, "variant", "measure", "bytes")
    assert set(got) == {(v, m, n) for v in ("cuda-ce", "cuda-sm") for m in ("stream", "handoff") for n in SIZES}
    assert all(2 <= n <= 3 for n in got.values())
    assert all(r["verified"] is True and r["seconds"] > 0 and r["scenario"] == "symm" for r in data)
    assert {(r["variant"], r["ceiling"]) for r in data} == {("cuda-ce", "d2d@0"), ("cuda-sm", "d2d-sm@0")}
    assert {r["variant"] for r in rows if r["path"] == "ceiling"} == {"d2d@0", "d2d-sm@0"}
    setup = groups([r for r in rows if r["metric"] == "setup"], "variant")
    assert setup == {("pg_init",): 1, ("empty_first",): 1, ("rendezvous_first",): 1, ("rendezvous",): RUN_REPEATS,
                     ("rendezvous_ring",): 1}
    firsts = ("rendezvous", "rendezvous_first", "empty_first")
    assert {r["bytes"] for r in rows if r["variant"] in firsts} == {symm.SETUP_BYTES}
    assert notes == {"symm.backend": "CUDA (torch fake)"}


def test_a_handle_without_signals_skips_the_handoff_with_a_note(monkeypatch, no_leaks):
    outcome, rows, notes = run(monkeypatch, no_signals=True, sizes=(4099,))
    assert outcome.ok, outcome.error
    measures = {r["measure"] for r in rows if r["path"] == "symm" and r["metric"] == "bandwidth"}
    assert measures == {"stream"}
    assert notes["symm.handoff"] == "skipped: the fake handle has no put_signal"


def test_a_corrupted_byte_is_caught(monkeypatch, no_leaks):
    outcome, _, _ = run(monkeypatch, fault="corrupt", sizes=(4099,))
    assert isinstance(outcome.error, WorkerFailed)


@pytest.mark.parametrize("fault", ["kill:0:sample:3", "raise:0:sample:3"])
def test_a_failed_producer_ends_the_run_promptly_leaving_nothing(monkeypatch, no_leaks, fault):
    import glob
    import tempfile

    folders = set(glob.glob(os.path.join(tempfile.gettempdir(), "gpuipc-bench-symm-*")))
    start = time.monotonic()
    outcome, rows, _ = run(monkeypatch, fault=fault, sizes=(4099,), timeout=30.0)
    assert isinstance(outcome.error, WorkerFailed) and "worker 0 (producer" in str(outcome.error)
    assert time.monotonic() - start < 20  # the consumer was not left spinning on a signal until --timeout
    assert [r for r in rows if r["metric"] == "setup"]  # rows taken before are kept
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "gpuipc-bench-symm-*"))) == folders


# --------------------------------------------------------------------------- on a GPU


def run_cli(tmp_path, name, devices, sharing=None):
    """`gpuipc-bench run -s NAME` at two sizes: (rows of the symm path, the file's metadata); skips
    with the scenario's own reason where it cannot run here, or where the sharing mode cannot."""
    from gpuipc_bench.machine.probe import probe
    from gpuipc_bench.results.reading import read_results

    reason = SCENARIOS[name].waive_reason(probe())
    if reason:
        pytest.skip(reason)
    out = tmp_path / f"{name}.csv"
    done = subprocess.run([sys.executable, "-m", "gpuipc_bench.cli", "run", "-s", name, "--sizes", "4K,1M",
                           "--devices", devices, *(("--sharing", sharing) if sharing else ()),
                           "--min-samples", "2", "--max-samples", "3",
                           "-o", str(out), "-q"],
                          capture_output=True, text=True, timeout=600)
    if done.returncode == 2 and "--sharing" in done.stderr:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr[-3000:]
    table, meta = read_results(out)
    return table[table["path"] == "symm"], meta


def check_rows(rows, meta, name, measures=("stream", "handoff")):
    backend = symm_support.BACKENDS[name]
    data = rows[rows["metric"] == "bandwidth"]
    assert {(v, m) for v, m in zip(data["variant"], data["measure"])} == \
        {(v, m) for v in symm.variants(backend) for m in measures}
    assert data["verified"].astype(str).eq("True").all() and (data["seconds"] > 0).all()
    assert {"pg_init", "empty_first", "rendezvous_first", "rendezvous", "rendezvous_ring"} <= set(rows["variant"])
    assert meta.get(f"note.{name}.backend", "").startswith(f"{backend} (torch ")


@pytest.mark.gpu
@pytest.mark.parametrize("sharing", ["time-sliced", "mps"])
def test_symm_on_one_gpu_moves_verified_bytes(tmp_path, sharing):
    rows, meta = run_cli(tmp_path, "symm", "0", sharing)
    check_rows(rows, meta, "symm")
    assert set(rows["sharing"]) == {sharing}


@pytest.mark.gpu2
@pytest.mark.parametrize("name", ["symm", "symm-nvshmem", "symm-nccl"])
def test_symm_across_a_pair_moves_verified_bytes(tmp_path, name):
    rows, meta = run_cli(tmp_path, name, "0,1")
    handoff = f"note.{name}.handoff" not in meta or name == "symm"  # the CUDA backend has the signals
    check_rows(rows, meta, name, ("stream", "handoff") if handoff else ("stream",))
    assert set(rows["sharing"]) == {"exclusive"}
    assert set(rows[rows["metric"] == "bandwidth"]["ceiling"]) == {"peer@0>1", "peer-sm@0>1"}
