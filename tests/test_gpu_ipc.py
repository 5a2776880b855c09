"""GPU tests of the CUDA helpers (gpuipc_bench/cuda.py) and the ipc scenario.

They skip, with the reason, where there is no GPU (conftest marks them). The
pytest process itself never initialises CUDA: every check that touches the GPU
runs in a forked child (in_child) or in the launcher's workers, so that later
tests can still fork workers that use CUDA; test_parent_never_initialised_cuda
proves it.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback

import numpy as np
import pytest

from gpuipc_bench import cuda
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import BenchError, VerificationError, WorkerFailed
from gpuipc_bench.launcher import run_scenario
from gpuipc_bench.scenario import Scenario
from gpuipc_bench.scenarios.ipc import IpcScenario

FORK = multiprocessing.get_context("fork")
MiB = 1 << 20


def in_child(fn, *args, timeout: float = 180.0):
    """Run fn(*args) in a forked child and return its (picklable) result; its exception fails the test."""
    reader, writer = FORK.Pipe(duplex=False)

    def main():
        try:
            writer.send(("ok", fn(*args)))
        except BaseException as exc:  # noqa: BLE001
            writer.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
        finally:
            writer.close()
            os._exit(0)

    child = FORK.Process(target=main, daemon=True)
    child.start()
    writer.close()
    try:
        if not reader.poll(timeout):
            pytest.fail(f"the child did not answer within {timeout:g} s")
        kind, value = reader.recv()
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        reader.close()
    if kind == "error":
        pytest.fail(value)
    return value


# --------------------------------------------------------------------------- no GPU needed


def test_pattern_twin_is_consistent():
    whole = cuda.pattern_bytes(1000, seed=7)
    assert np.array_equal(cuda.pattern_bytes(13, 7, offset=501), whole[501:514])
    assert cuda.expected_byte(999, 7) == whole[999]
    assert not np.array_equal(whole, cuda.pattern_bytes(1000, seed=8)), "a new seed changes the pattern"
    # every word changes with the seed, so stale data fails anywhere
    a = cuda.pattern_words(0, 1 << 16, 1)
    b = cuda.pattern_words(0, 1 << 16, 2)
    assert not np.any(a == b)


def test_reps_for():
    assert cuda.reps_for(4) == cuda.MAX_REPS
    assert cuda.reps_for(1 * MiB) == 256
    assert cuda.reps_for(64 * MiB) == 4
    assert cuda.reps_for(256 * MiB) == 1
    assert cuda.reps_for(1 << 30) == 1


def test_parse_ceiling():
    assert cuda.parse_ceiling("d2d@1") == ("d2d", 1, 1)
    assert cuda.parse_ceiling("h2d@0") == ("h2d", "host", 0)
    assert cuda.parse_ceiling("d2h@0") == ("d2h", 0, "host")
    assert cuda.parse_ceiling("peer@0>1") == ("peer", 0, 1)


class CUDARuntimeError(RuntimeError):
    """Stands in for CuPy's: a real one would load the CUDA driver into the pytest process."""


def test_error_translation(monkeypatch):
    monkeypatch.setattr(cuda, "_free_total", lambda device: (int(0.4 * (1 << 30)), int(79.1 * (1 << 30))))
    err = cuda.translate(CUDARuntimeError("cudaErrorInvalidValue: invalid argument"), "cudaIpcOpenMemHandle", 0)
    assert str(err) == "cudaErrorInvalidValue in cudaIpcOpenMemHandle on GPU 0"
    assert isinstance(err, cuda.CudaError) and isinstance(err, BenchError)
    with pytest.raises(BenchError, match="^cudaErrorInvalidValue in cudaMemcpyAsync on GPU 3$"):
        with cuda.cuda_call("cudaMemcpyAsync", 3):
            raise CUDARuntimeError("cudaErrorInvalidValue: invalid argument")
    with pytest.raises(BenchError, match="^cannot allocate 1 GiB on GPU 0: 0.4 GiB free of 79.1 GiB$"):
        with cuda.cuda_call("cudaMalloc", 0, nbytes=1 << 30):
            raise CUDARuntimeError("cudaErrorMemoryAllocation: out of memory")
    with pytest.raises(ValueError):  # not a CUDA error: untouched
        with cuda.cuda_call("x", 0):
            raise ValueError("mine")


def test_ipc_workers_and_sizes():
    scenario = IpcScenario()
    assert scenario.default_sizes()[0] == 4 and scenario.default_sizes()[-1] == 1 << 30
    same = scenario.workers(RunConfig(scenarios=("ipc",)), None)
    assert [(s.rank, s.role, s.device) for s in same] == [(0, "producer", 0), (1, "consumer", 0)]
    two = scenario.workers(RunConfig(scenarios=("ipc",), devices=(0, 1)), None)
    assert [s.device for s in two] == [0, 1]


# --------------------------------------------------------------------------- kernels and timing (GPU)


def _kernel_checks():
    import cupy

    gpu = cuda.Gpu(0)
    out = {}
    try:
        buf = gpu.alloc(4 * MiB + 64)
        other = gpu.alloc(4 * MiB + 64)
        # fill == numpy twin, aligned and not, with tails
        for offset in (0, 1, 4, 16):
            for n in (1, 3, 4, 5, 15, 16, 17, 1000, 4 * MiB + 7):
                gpu.fill(buf.ptr + offset, n, 1234 + n)
                gpu.synchronize()
                got = cupy.asnumpy(buf.array()[offset:offset + n])
                want = cuda.pattern_bytes(n, 1234 + n)
                assert np.array_equal(got, want), f"fill differs at offset {offset} size {n}"
                assert gpu.mismatch(buf.ptr + offset, n, 1234 + n) == -1
        # first_mismatch finds the first bad byte; a stale seed fails at byte 0 or so
        n = 4 * MiB
        gpu.fill(buf.ptr, n, 99)
        assert gpu.mismatch(buf.ptr, n, 100) in (0, 1, 2, 3)
        for bad in (n - 1, 777_777, 16, 5, 0):
            cuda.flip_byte(buf.ptr + bad, gpu.stream, 0)
            assert gpu.mismatch(buf.ptr, n, 99) == bad
        gpu.fill(buf.ptr, n, 99)
        try:
            gpu.verify(buf.ptr, n, 99, "ipc", "ce", corrupt=True)
        except VerificationError as exc:
            out["verify"] = (exc.offset, str(exc))
        # sm_copy, aligned and not
        for d_off, s_off, size in ((0, 0, 4 * MiB), (0, 0, 4 * MiB + 5), (1, 0, 1000), (3, 7, 65537), (0, 0, 3)):
            gpu.fill(other.ptr + s_off, size, size)
            gpu.kernels.copy(buf.ptr + d_off, other.ptr + s_off, size, gpu.stream)
            assert gpu.mismatch(buf.ptr + d_off, size, size) == -1, f"sm_copy {d_off},{s_off},{size}"
        # a gate that is never released gives up and says so
        quick = cuda.Gate(gpu.kernels, timeout_s=0.2)
        try:
            quick.arm(gpu.stream)
            gpu.synchronize()
            try:
                quick.check()
            except BenchError as exc:
                out["gate"] = str(exc)
        finally:
            quick.close()
        # time_batch on a local copy: plausible, and enqueue failures still release the gate
        seconds = gpu.time_batch(gpu.memcpy_launcher(buf.ptr, other.ptr, 4 * MiB), 64)
        out["d2d_gbps"] = 4 * MiB / seconds / 1e9

        def broken():
            raise RuntimeError("enqueue failed")

        try:
            gpu.time_batch(broken, 4)
        except RuntimeError:
            out["released"] = gpu.time_batch(gpu.memcpy_launcher(buf.ptr, other.ptr, 1024), 8) > 0
        # ceilings: every kind runs, verifies, and gives plausible figures
        ceilings = cuda.Ceilings(gpu, 16 * MiB)
        for key in ("d2d@0", "h2d@0", "d2h@0"):
            seconds, reps, ok = ceilings.bandwidth(key, 16 * MiB)
            out[f"ceiling {key}"] = (16 * MiB / seconds / 1e9, reps, ok)
        out["latency d2d@0"] = ceilings.latency("d2d@0", 4096, reps=20)
        # out of memory names the size and the free memory
        try:
            gpu.alloc(1 << 50)
        except BenchError as exc:
            out["oom"] = str(exc)
    finally:
        gpu.close()
    return out


@pytest.mark.gpu
def test_kernels_and_timing():
    out = in_child(_kernel_checks)
    offset, message = out["verify"]
    assert offset == 2 * MiB and "verification failed on path ipc/ce" in message
    assert "not released within 0.2 s" in out["gate"]
    assert out["d2d_gbps"] > 50, out
    assert out["released"]
    for key, low in (("d2d@0", 100), ("h2d@0", 5), ("d2h@0", 5)):
        gbps, reps, ok = out[f"ceiling {key}"]
        assert ok and reps == 16 and gbps > low, (key, out[f"ceiling {key}"])
    seconds, ok = out["latency d2d@0"]
    assert ok and 0 < seconds < 1e-3
    assert out["oom"].startswith("cannot allocate ") and " on GPU 0: " in out["oom"], out["oom"]
    assert " GiB free of " in out["oom"], out["oom"]


# --------------------------------------------------------------------------- the ipc scenario (GPU)


def run_ipc(monkeypatch, scenario=None, fault=None, **overrides):
    if fault:
        monkeypatch.setenv("GPUIPC_BENCH_FAULT", fault)
    else:
        monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    settings = dict(scenarios=("ipc",), sizes=(4, 4096, MiB, 16 * MiB), iterations=3, warmup=1, timeout=60.0)
    settings.update(overrides)
    config = RunConfig(**settings)
    scenario = scenario or IpcScenario()
    specs = scenario.workers(config, None)
    rows: list[dict] = []
    outcome = run_scenario(scenario, config, specs, on_row=rows.append)
    return outcome, rows


@pytest.mark.gpu
def test_ipc_rows(monkeypatch, no_leaks):
    outcome, rows = run_ipc(monkeypatch)
    assert outcome.ok, outcome.error
    setup = {r["variant"] for r in rows if r["metric"] == "setup"}
    assert {"ipc_export", "ipc_open_cold", "ipc_close", "ipc_open_warm", "ipc_event_open"} <= setup
    for variant in ("ce", "sm", "push"):
        got = [r for r in rows if r["path"] == "ipc" and r["variant"] == variant]
        assert len(got) == 4 * 3, variant
        assert all(r["verified"] is True and r["seconds"] > 0 and r["ceiling"] == "d2d@0" for r in got)
        assert sorted({r["iteration"] for r in got}) == [0, 1, 2]
    ceiling = [r for r in rows if r["path"] == "ceiling" and r["metric"] == "bandwidth"]
    assert {r["variant"] for r in ceiling} == {"d2d@0"} and len(ceiling) == 4 * 3
    latency = [r for r in rows if r["variant"] == "ce-pingpong"]
    assert sorted({r["bytes"] for r in latency}) == [4, 4096, MiB]
    assert all(0 < r["seconds"] < 1e-3 and r["verified"] for r in latency)
    assert [r for r in rows if r["path"] == "ceiling" and r["metric"] == "latency"]
    assert {r["sharing"] for r in rows} == {"time-sliced"} or {r["sharing"] for r in rows} == {"mps"}


@pytest.mark.gpu
def test_ipc_corruption_is_caught(monkeypatch, no_leaks):
    outcome, rows = run_ipc(monkeypatch, fault="corrupt", sizes=(4096,))
    assert isinstance(outcome.error, WorkerFailed)
    assert "verification failed on path ipc/ce at size 4096 B: first bad byte at offset 2048" in str(outcome.error)
    assert not [r for r in rows if r["path"] == "ipc" and r["metric"] == "bandwidth"]


class _MemoryChecked(IpcScenario):
    """The ipc scenario, with each worker checking that GPU memory returns to where it was."""

    def run(self, ctx):
        from cupy.cuda import runtime

        cuda.Gpu(ctx.spec.device).close()  # context, module and stream exist before we look
        ctx.sync()
        free_before = runtime.memGetInfo()[0]
        ctx.sync()
        yield from super().run(ctx)
        ctx.sync()
        free_after = runtime.memGetInfo()[0]
        if free_before - free_after > 16 * MiB:
            raise AssertionError(f"worker {ctx.rank}: {(free_before - free_after) / MiB:.0f} MiB "
                                 "of GPU memory not returned")


@pytest.mark.gpu
def test_ipc_returns_gpu_memory(monkeypatch, no_leaks):
    outcome, rows = run_ipc(monkeypatch, scenario=_MemoryChecked(), sizes=(4096, 64 * MiB), iterations=2)
    assert outcome.ok, outcome.error


def _cuda_works() -> int:
    from cupy.cuda import runtime

    return runtime.getDeviceCount()


@pytest.mark.gpu
def test_parent_never_initialised_cuda(monkeypatch, no_leaks):
    """After a whole run, a child forked from this process can still use CUDA: the parent
    (which loads CuPy, and with it the driver library) never initialised CUDA."""
    outcome, _ = run_ipc(monkeypatch, sizes=(4096,), iterations=1, warmup=0)
    assert outcome.ok, outcome.error
    assert in_child(_cuda_works) >= 1


class _SharedGateScenario(Scenario):
    """Two workers time local copies behind one shared gate, released by one host store."""

    name = "shared-gate-test"
    gpus_needed = 1

    def prepare(self, config, specs):
        return cuda.SharedGatePage()

    def release(self, shared):
        shared.close()

    def run(self, ctx):
        from gpuipc_bench.results import new_row

        gpu = cuda.Gpu(ctx.spec.device, shared_gate=ctx.shared)
        try:
            a, b = gpu.alloc(16 * MiB), gpu.alloc(16 * MiB)
            for i in range(5):
                ctx.phase("sample", 16 * MiB, i)
                gpu.fill(a.ptr, 16 * MiB, i + 1)
                seconds = gpu.time_batch(gpu.memcpy_launcher(b.ptr, a.ptr, 16 * MiB), 8, shared=True,
                                         before_release=ctx.sync)
                ok = gpu.mismatch(b.ptr, 16 * MiB, i + 1) == -1
                yield new_row(scenario="shared-gate-test", path="ceiling", variant=f"d2d@{ctx.spec.device}",
                              src=0, dst=0, bytes=16 * MiB, iteration=i, batch=8, seconds=seconds, verified=ok,
                              workers=2)
            ctx.sync()
        finally:
            gpu.close()


@pytest.mark.gpu
def test_shared_gate_releases_every_process(monkeypatch, no_leaks):
    scenario = _SharedGateScenario()
    config = RunConfig(scenarios=("shared-gate-test",), timeout=60.0)
    rows: list[dict] = []
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append)
    assert outcome.ok, outcome.error
    assert len(rows) == 10 and all(r["verified"] and r["seconds"] > 0 for r in rows)


@pytest.mark.gpu2
def test_ipc_across_two_gpus(monkeypatch, no_leaks):
    outcome, rows = run_ipc(monkeypatch, devices=(0, 1), sizes=(4096, 16 * MiB), iterations=2)
    assert outcome.ok, outcome.error
    pull = [r for r in rows if r["path"] == "ipc" and r["variant"] == "ce"]
    assert all(r["src"] == "0" and r["dst"] == "1" and r["ceiling"] == "peer@0>1" for r in pull)
    push = [r for r in rows if r["path"] == "ipc" and r["variant"] == "push"]
    assert all(r["src"] == "1" and r["dst"] == "0" and r["ceiling"] == "peer@1>0" for r in push)
    ceilings = {r["variant"] for r in rows if r["path"] == "ceiling"}
    assert {"peer@0>1", "peer@1>0"} <= ceilings
    assert {r["sharing"] for r in rows} == {"exclusive"}
