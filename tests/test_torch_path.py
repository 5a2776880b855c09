"""The torch path: CUDA tensors through a torch.multiprocessing queue (scenarios/torch_share.py).

CPU tests run the scenario's protocol in real workers on the fake CUDA layer (fake_gpu.py) with
a fake torch in its place: "tensors" are regions of the fake GPU arena that pickle to their
address, so they travel through the real multiprocessing queue, and a receipt can be refused
the way the kernel refuses pidfd_getfd. GPU tests (marker `gpu`) run the real thing and skip
without a GPU or without a CUDA build of PyTorch.
"""

from __future__ import annotations

import collections
import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import time
import types
from pathlib import Path

import pytest

from gpuipc_bench.engine.sampler import SETUP_REPEATS

import fake_gpu
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import WorkerFailed
from gpuipc_bench.harness.launcher import run_scenario
from gpuipc_bench.scenarios import SCENARIOS, torch_share, torch_support

SIZES = (4, 4099)
REFUSE_ENV = "FAKE_TORCH_REFUSE_FDS"
SETUP_OPS = ("send", "receive_cold", "release")
GPU_SKIP = torch_share.missing_torch() or torch_share.torch_without_cuda()
# These tests' runs take at most 3 samples a group, and time each set-up operation as often
RUN_REPEATS = min(SETUP_REPEATS, 3)


# --------------------------------------------------------------------------- the fake torch


class FakeTensor:
    """A region of the fake GPU arena; pickles to its address (what an IPC handle is here)."""

    def __init__(self, ptr: int, nbytes: int, expandable: bool):
        self.ptr, self.nbytes, self.expandable = ptr, nbytes, expandable

    def __reduce__(self):
        return _receive, (self.ptr, self.nbytes, self.expandable)


def _receive(ptr, nbytes, expandable):
    if expandable and os.environ.get(REFUSE_ENV):
        raise RuntimeError("pidfd_getfd: Operation not permitted")  # torch's words
    return FakeTensor(ptr, nbytes, expandable)


class FakeTorchSide:
    def __init__(self, device):
        self.expandable_segments = False

    def use_allocator(self, variant):
        self.expandable_segments = variant == "expandable"

    def empty(self, nbytes):
        return FakeTensor(fake_gpu._alloc(nbytes), nbytes, self.expandable_segments)

    @staticmethod
    def ptr(tensor):
        return tensor.ptr

    @staticmethod
    def view(tensor, offset, nbytes):
        return FakeTensor(tensor.ptr + offset, nbytes, tensor.expandable)

    @staticmethod
    def expandable(tensor):
        return tensor.expandable

    @staticmethod
    def copy(dst, src):
        ctypes.memmove(dst.ptr, src.ptr, src.nbytes)

    def collect(self):
        pass


def forked(name):
    """The scenario, its workers forked (the fakes live in this process's memory)."""
    scenario = type(SCENARIOS[name])()
    scenario.start_method = "fork"
    return scenario


def run(monkeypatch, name="torch", fault=None, refuse=False, **overrides):
    fake_gpu.install(monkeypatch)
    monkeypatch.setattr(torch_share, "TorchSide", FakeTorchSide)
    monkeypatch.setenv("GPUIPC_BENCH_FAULT", fault) if fault else monkeypatch.delenv("GPUIPC_BENCH_FAULT",
                                                                                      raising=False)
    monkeypatch.setenv(REFUSE_ENV, "1") if refuse else monkeypatch.delenv(REFUSE_ENV, raising=False)
    settings = dict(scenarios=(name,), sizes=SIZES, min_samples=2, max_samples=3, warmup=1, timeout=20.0)
    settings.update(overrides)
    config = RunConfig(**settings)
    scenario = forked(name)
    rows, notes, progress = [], {}, []
    specs = scenario.workers(config, None)
    outcome = run_scenario(scenario, config, specs, on_row=rows.append, on_progress=progress.append,
                           on_note=notes.__setitem__)
    if outcome.ok:
        assert sum(progress) == scenario.progress_total(config, specs)
    return outcome, rows, notes


def groups(rows, *keys):
    return collections.Counter(tuple(r[k] for k in keys) for r in rows)


def semaphores() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("sem.mp-*")} if Path("/dev/shm").is_dir() else set()


# --------------------------------------------------------------------------- registry, waive reasons


def test_torch_is_registered_with_its_facts_and_asks_for_fork_server_workers():
    from gpuipc_bench.harness.plan import resolve_names

    scenario = SCENARIOS["torch"]
    assert scenario.start_method == "forkserver" and "forkserver" in scenario.summary
    assert "torch" in scenario.preload and not scenario.persistent_workers
    [info] = scenario.paths
    assert info.name == "torch" and info.ranked and info.setup == ("caching_receive_cold",)
    study = SCENARIOS["torch-sizes"]
    assert study.start_method == "forkserver" and not study.in_default_run
    assert "torch" in resolve_names((), SCENARIOS) and "torch-sizes" not in resolve_names((), SCENARIOS)


def test_the_waive_reasons_name_what_is_missing(monkeypatch, tmp_path):
    no_gpu = types.SimpleNamespace(gpu_count=0, no_gpu_reason="no NVIDIA driver on this machine")
    one_gpu = types.SimpleNamespace(gpu_count=1)
    scenario = SCENARIOS["torch"]
    monkeypatch.setattr(torch_support.importlib.util, "find_spec", lambda name: None)
    assert scenario.waive_reason(no_gpu) == "needs a CUDA GPU: no NVIDIA driver on this machine"
    assert scenario.waive_reason(one_gpu) == "needs PyTorch: pip install -e '.[torch]'"
    # A CPU-only build: no libtorch_cuda next to torch's __init__.py.
    (tmp_path / "lib").mkdir()
    spec = type("Spec", (), {"origin": str(tmp_path / "__init__.py")})()
    monkeypatch.setattr(torch_support.importlib.util, "find_spec", lambda name: spec)
    reason = scenario.waive_reason(one_gpu)
    assert reason is not None and reason.startswith("needs a CUDA build of PyTorch")
    (tmp_path / "lib" / "libtorch_cuda.so").touch()
    assert scenario.waive_reason(one_gpu) is None


def test_list_shows_the_extra_that_enables_torch(monkeypatch):
    from click.testing import CliRunner

    from gpuipc_bench.cli import cli

    monkeypatch.setattr(torch_support.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(torch_share.PairScenario, "waive_reason", lambda self, machine: None)  # as if on a GPU
    out = CliRunner().invoke(cli, ["list"], env={"COLUMNS": "400"}).output
    assert "needs PyTorch: pip install -e '.[torch]'" in out  # the extra's brackets survive rich's markup


# --------------------------------------------------------------------------- the protocol, on fakes


def test_every_tensor_fills_a_caching_allocator_segment_of_its_own():
    """torch gives 10 MiB or more a segment of its own, rounded up to 2 MiB: nothing left free in it."""
    assert torch_share.whole_segment(8 << 20) == 10 << 20  # not a shared 20 MiB segment
    assert torch_share.whole_segment((272 << 20) + 1) == 274 << 20
    assert torch_share.whole_segment(12 << 20) == 12 << 20


def test_torch_protocol_both_allocators(monkeypatch, no_leaks):
    before = semaphores()
    outcome, rows, notes = run(monkeypatch)
    assert outcome.ok, outcome.error
    data = [r for r in rows if r["path"] == "torch" and r["metric"] == "bandwidth"]
    got = groups(data, "variant", "measure", "bytes")
    assert set(got) == {(v, m, n) for v in ("caching", "expandable") for m in ("stream", "handoff") for n in SIZES}
    assert all(2 <= n <= 3 for n in got.values())
    assert all(r["verified"] is True and r["seconds"] > 0 and r["scenario"] == "torch" for r in data)
    assert {r["ceiling"] for r in data} == {"d2d@0"}
    assert {r["variant"] for r in rows if r["path"] == "ceiling"} == {"d2d@0"}
    setup = groups([r for r in rows if r["metric"] == "setup"], "variant", "bytes")
    capacity = max(n for _, n in setup)
    assert setup == {(f"{v}_{op}", capacity): RUN_REPEATS for v in ("caching", "expandable") for op in SETUP_OPS}
    assert notes == {"torch.workers": torch_share.workers_note("forked")}
    assert semaphores() == before  # the queue's locks went with it


def test_a_refused_descriptor_skips_expandable_with_a_note(monkeypatch, no_leaks):
    outcome, rows, notes = run(monkeypatch, refuse=True)
    assert outcome.ok, outcome.error
    variants = groups([r for r in rows if r["path"] == "torch"], "variant")
    assert set(variants) == {("caching",), ("expandable_send",), *((f"caching_{op}",) for op in SETUP_OPS)}
    assert variants[("expandable_send",)] == 1  # the export worked; the consumer's import was refused
    assert notes["torch.expandable"].startswith("skipped: the consumer may not take the producer's file "
                                                "descriptors (pidfd_getfd: Operation not permitted)")


def test_a_corrupted_byte_is_caught(monkeypatch, no_leaks):
    outcome, _, _ = run(monkeypatch, fault="corrupt", sizes=(4099,))
    assert isinstance(outcome.error, WorkerFailed)
    assert "verification failed on path torch/caching" in str(outcome.error)


@pytest.mark.parametrize("fault", ["kill:0:sample:3", "raise:0:sample:3"])
def test_a_failed_producer_ends_the_run_promptly(monkeypatch, no_leaks, fault):
    start = time.monotonic()
    outcome, rows, _ = run(monkeypatch, fault=fault, sizes=(4099,), timeout=30.0)
    assert isinstance(outcome.error, WorkerFailed) and "worker 0 (producer" in str(outcome.error)
    assert time.monotonic() - start < 15  # the consumer left its get on the abort, not after --timeout
    assert [r for r in rows if r["metric"] == "setup"]  # rows taken before are kept


def test_a_hung_producer_is_named_after_the_timeout(monkeypatch, no_leaks):
    start = time.monotonic()
    outcome, _, _ = run(monkeypatch, fault="hang:0:sample:3", sizes=(4099,), timeout=2.0)
    assert isinstance(outcome.error, WorkerFailed)
    assert "worker 0 (producer, GPU 0) made no progress for 2 s" in str(outcome.error)
    assert time.monotonic() - start < 20


def test_the_study_times_first_receipts_at_each_size(monkeypatch, no_leaks):
    outcome, rows, notes = run(monkeypatch, name="torch-sizes", sizes=(4096, 65536, 1 << 20))
    assert outcome.ok, outcome.error
    assert notes["torch-sizes.skipped"] == "1 MiB: more than a quarter of GPU 0's 1 MiB"
    assert notes["torch-sizes.workers"] == torch_share.workers_note("forked")
    setup = groups(rows, "path", "variant", "bytes")
    assert setup == {("torch", f"{v}_{op}", n): RUN_REPEATS for v in ("caching", "expandable") for op in SETUP_OPS
                     for n in (4096, 65536)}


# --------------------------------------------------------------------------- plumbing


def _spawned_child(shared, rank):
    shared.pids[rank] = os.getpid()
    shared.queue.put((torch_share.how_started(), b"x" * 100))


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_shared_queue_and_pids_reach_the_workers_and_release_cleans_up(tmp_path, monkeypatch, method):
    shared = torch_share.TorchShared(2)
    pickle.dumps(torch_share.TorchScenario())  # such a worker gets the scenario pickled too
    child = multiprocessing.get_context(method).Process(target=_spawned_child, args=(shared, 1))
    child.start()
    try:
        assert shared.queue.get(timeout=60) == ({"spawn": "spawned"}.get(method, method), b"x" * 100)
    finally:
        child.join(30)
        if method == "forkserver":
            multiprocessing.forkserver._forkserver._stop()
    assert shared.pids[1] == child.pid and shared.pids[0] == 0
    # torch's reference-count files of a worker that ended without torch's exit handlers
    monkeypatch.setattr(torch_share, "SHM", str(tmp_path))
    for name in (f"torch_{child.pid}_123_0", f"torch_{child.pid}_123_1", f"torch_{child.pid + 1}_5_0", "other"):
        (tmp_path / name).touch()
    shared.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", f"torch_{child.pid + 1}_5_0"]


def test_forked_processes_say_so():
    assert torch_share.how_started() == "forked"  # pytest is no spawned child
    assert torch_share.workers_note("spawned").startswith("spawned (a fresh interpreter each")
    assert torch_share.workers_note("forkserver").startswith("forkserver (forked by multiprocessing's fork server")


def test_a_get_gives_up_when_the_producer_is_silent():
    from gpuipc_bench.errors import BarrierAborted, BarrierTimeout

    class Segment:
        aborted = False

        def last_progress(self, rank):
            return 0.0

    ctx = type("Ctx", (), {"segment": Segment(), "config": RunConfig(scenarios=("torch",), timeout=0.3)})()
    q = multiprocessing.get_context("spawn").Queue()
    try:
        start = time.monotonic()
        with pytest.raises(BarrierTimeout, match="a tensor on the torch queue"):
            torch_share.TensorQueue(ctx, q).get()
        assert 0.3 <= time.monotonic() - start < 2
        ctx.segment.aborted = True
        with pytest.raises(BarrierAborted):
            torch_share.TensorQueue(ctx, q).get()
    finally:
        q.close()


def test_an_error_while_pickling_is_raised_in_the_sender():
    from gpuipc_bench.errors import BenchError

    class Segment:
        aborted = False

    ctx = type("Ctx", (), {"segment": Segment(), "config": RunConfig(scenarios=("torch",), timeout=5.0)})()
    q = multiprocessing.get_context("spawn").Queue()
    try:
        with pytest.raises(BenchError, match="torch could not send a tensor"):
            torch_share.TensorQueue(ctx, q).send(lambda: None)  # a lambda does not pickle
    finally:
        q.close()
        q.join_thread()


# --------------------------------------------------------------------------- on a GPU with PyTorch


def gpu_run(name, sizes, **overrides):
    settings = dict(scenarios=(name,), sizes=sizes, min_samples=2, max_samples=3, warmup=1, timeout=60.0)
    settings.update(overrides)
    config = RunConfig(**settings)
    scenario = SCENARIOS[name]
    rows, notes = [], {}
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append,
                           on_note=notes.__setitem__)
    return outcome, rows, notes


def variants_run(notes) -> tuple[str, ...]:
    """Both allocators, or caching alone where the kernel refused the fds (the note says so)."""
    return ("caching",) if "torch.expandable" in notes else ("caching", "expandable")


@pytest.mark.gpu
@pytest.mark.skipif(GPU_SKIP is not None, reason=GPU_SKIP or "")
def test_gpu_torch_moves_verified_tensors_with_both_allocators(no_leaks):
    sizes = (4096, 8 << 20)
    outcome, rows, notes = gpu_run("torch", sizes)
    assert outcome.ok, outcome.error
    variants = variants_run(notes)
    data = [r for r in rows if r["path"] == "torch" and r["metric"] == "bandwidth"]
    assert set(groups(data, "variant", "measure", "bytes")) == {
        (v, m, n) for v in variants for m in ("stream", "handoff") for n in sizes}
    assert all(r["verified"] is True and r["seconds"] > 0 for r in data)
    setup = groups([r for r in rows if r["metric"] == "setup"], "variant")
    assert setup == {(f"{v}_{op}",): RUN_REPEATS for v in variants for op in SETUP_OPS}
    assert notes["torch.workers"].startswith(("forkserver", "spawned", "forked"))
    # after import, a copy out of the producer's tensor runs at device-copy speed, not at a fraction of it
    ceiling = min(r["seconds"] for r in rows if r["path"] == "ceiling" and r["bytes"] == 8 << 20)
    stream = [r["seconds"] for r in data if r["measure"] == "stream" and r["bytes"] == 8 << 20]
    assert min(stream) < 3 * ceiling


@pytest.mark.gpu
@pytest.mark.skipif(GPU_SKIP is not None, reason=GPU_SKIP or "")
def test_gpu_torch_small_sizes_keep_each_allocator_s_own_segments(no_leaks):
    """A run of small sizes alone (the resampling pass runs one size): the caching ring of 8 MiB took a
    shared 20 MiB cudaMalloc segment whose free part the expandable variant's tensors were carved from,
    and the set-up refused the run (H200, two default runs of three)."""
    outcome, rows, notes = gpu_run("torch", (64 << 10,))
    assert outcome.ok, outcome.error
    variants = variants_run(notes)
    data = [r for r in rows if r["path"] == "torch" and r["metric"] == "bandwidth"]
    assert {r["variant"] for r in data} == set(variants)


@pytest.mark.gpu2
@pytest.mark.skipif(GPU_SKIP is not None, reason=GPU_SKIP or "")
def test_gpu_torch_across_two_gpus(no_leaks):
    """The producer's tensor lives on GPU 0, the consumer copies it to GPU 1: checked on the GPU
    whose context maps it, copied with a peer copy, bounded by peer@0>1."""
    sizes = (4096, 8 << 20)
    outcome, rows, notes = gpu_run("torch", sizes, devices=(0, 1))
    assert outcome.ok, outcome.error
    data = [r for r in rows if r["path"] == "torch" and r["metric"] == "bandwidth"]
    assert set(groups(data, "variant", "measure", "bytes")) == {
        (v, m, n) for v in variants_run(notes) for m in ("stream", "handoff") for n in sizes}
    assert all(r["verified"] is True and r["seconds"] > 0 and r["ceiling"] == "peer@0>1" for r in data)


@pytest.mark.gpu
@pytest.mark.skipif(GPU_SKIP is not None, reason=GPU_SKIP or "")
def test_gpu_torch_handles_times_first_receipts_against_size(no_leaks):
    sizes = (1 << 20, 64 << 20)
    outcome, rows, notes = gpu_run("torch-sizes", sizes)
    assert outcome.ok, outcome.error
    setup = groups(rows, "variant", "bytes")
    assert setup == {(f"{v}_{op}", n): RUN_REPEATS for v in variants_run(notes) for op in SETUP_OPS for n in sizes}
    assert all(r["metric"] == "setup" and r["seconds"] > 0 for r in rows)
