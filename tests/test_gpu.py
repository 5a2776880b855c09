"""GPU tests: the kernels and the gated batch, and every GPU scenario end to end in forked workers.

They skip with the reason where there is no GPU (`gpu`, `gpu2` markers). The pytest process
never initialises CUDA: GPU work runs in forked children (in_child, run_scenario), and one
test proves a child forked after a whole run can still use CUDA.
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback

import pytest

from fakes import ODD_SIZES, count_by, run_scenario_rows
from gpuipc_bench.modes import daemon as mps
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import BarrierAborted, WorkerFailed
from gpuipc_bench.harness.launcher import run_scenario
from gpuipc_bench.engine.sampler import SETUP_REPEATS
from gpuipc_bench.scenarios import SCENARIOS
from gpuipc_bench.scenarios.latency import LatencyScenario, LatencyWorker

FORK = multiprocessing.get_context("fork")
MiB = 1 << 20
SIZES = ODD_SIZES


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


# --------------------------------------------------------------------------- kernels, gate, ceilings


def _kernel_checks() -> dict:
    from gpuipc_bench.errors import BenchError, VerificationError
    from gpuipc_bench.gpu.ceilings import Ceilings
    from gpuipc_bench.gpu.device import Gpu
    from gpuipc_bench.gpu.memory import Ring, read, write
    from gpuipc_bench.gpu.timing import Gate

    out: dict = {}
    gpu = Gpu(0)
    try:
        ring = Ring.for_size(4099, 8)
        a, b = gpu.alloc(ring.bytes), gpu.alloc(ring.bytes)
        gpu.fill(a.ptr, ring, 77)
        gpu.verify(a.ptr, ring, 77, "t", "fill")
        at = a.ptr + 5 * ring.stride + 1000  # plant a bad byte in slot 5
        write(at, read(at, 1, gpu.stream, 0) ^ 0x01, gpu.stream, 0)
        try:
            gpu.verify(a.ptr, ring, 77, "t", "planted")
        except VerificationError as exc:
            out["planted"] = (exc.slot, exc.offset)
        # A poisoned tag fails until the mark writes it; the kernel copy moves a whole ring.
        gpu.fill(a.ptr, ring, 99, poison_tag=True)
        out["poisoned"] = gpu.kernels.mismatch(a.ptr, ring, 99, gpu.stream)
        mark = gpu.kernels.mark_launcher(ring.nbytes, gpu.stream)
        for r in range(ring.slots):
            mark(a.ptr + ring.offset(r), 99 + r)
        copy = gpu.copy_launcher(ring.nbytes, "sm")
        marks = gpu.time_batch(lambda r: copy(b.ptr + ring.offset(r), a.ptr + ring.offset(r)), ring.slots,
                               warm=lambda: copy(b.ptr, a.ptr))
        out["sm ring"] = gpu.verify(b.ptr, ring, 99, "t", "sm") and marks.seconds() > 0
        # A lost release: the gate gives up and says so.
        gate = Gate(gpu.kernels, timeout_s=0.2)
        gate.arm(gpu.stream)
        gpu.synchronize()
        try:
            gate.check()
        except BenchError as exc:
            out["gate"] = str(exc)
        gate.close()
        ceilings = Ceilings(gpu, Ring.for_size(8 * MiB).bytes)
        for key in ("d2d@0", "d2d-sm@0", "h2d@0", "d2h@0", "h2d-sm@0", "d2h-sm@0"):
            seconds, reps = ceilings.bandwidth(key, 8 * MiB, 5, 16)
            out[key] = (8 * MiB / seconds / 1e9, reps)
        out["latency d2d@0"] = ceilings.latency("d2d@0", 4096, 6, reps=20)
        out["l2"] = gpu.l2_bytes
        try:
            gpu.alloc(1 << 50)
        except BenchError as exc:
            out["oom"] = str(exc)
    finally:
        gpu.close()
    return out


@pytest.mark.gpu
def test_kernels_gate_and_ceilings():
    out = in_child(_kernel_checks)
    assert out["planted"] == (5, 1000)
    assert out["poisoned"] == (0, 0) and out["sm ring"]
    assert "not released within 0.2 s" in out["gate"]
    for key, low in (("d2d@0", 100), ("d2d-sm@0", 100), ("h2d@0", 5), ("d2h@0", 5), ("h2d-sm@0", 5), ("d2h-sm@0", 5)):
        gbps, reps = out[key]
        assert reps == 16 and gbps > low, (key, out[key])
    assert 0 < out["latency d2d@0"] < 1e-3
    assert out["l2"] >= 1 << 20
    assert out["oom"].startswith("cannot allocate ") and " GiB free of " in out["oom"], out["oom"]


# --------------------------------------------------------------------------- the paths


@pytest.mark.gpu
@pytest.mark.parametrize("name, variants", [
    ("ipc", {("ce", "stream"), ("ce", "handoff"), ("sm", "stream"), ("sm", "handoff"), ("push", "stream"),
             ("push", "handoff")}),
    ("vmm", {("ce", "stream"), ("ce", "handoff"), ("sm", "stream"), ("sm", "handoff"), ("push", "stream"),
             ("push", "handoff")}),
    ("mempool", {("ce", "stream"), ("ce", "handoff"), ("sm", "stream"), ("sm", "handoff"), ("push", "stream"),
                 ("push", "handoff")}),
    ("staging", {("pinned", "stream"), ("pinned", "handoff"), ("pipelined", "stream"), ("pipelined", "handoff"),
                 ("pinned-hostsync", "handoff"), ("pageable", "handoff")}),
    ("mmap", {("zero-copy", "stream"), ("zero-copy", "handoff"), ("dma", "stream"), ("dma", "handoff")}),
    ("hostpool", {("host-pool", "stream"), ("host-pool", "handoff")}),
])
def test_each_path_moves_the_right_bytes(monkeypatch, no_leaks, name, variants):
    outcome, rows = run_scenario_rows(monkeypatch, name)
    assert outcome.ok, outcome.error
    data = [r for r in rows if r["path"] == name and r["metric"] == "bandwidth"]
    got = count_by(data, "variant", "measure", "bytes")
    assert set(got) == {(v, m, n) for v, m in variants for n in SIZES}
    assert all(2 <= n <= 3 for n in got.values())
    assert all(r["verified"] is True and r["seconds"] > 0 for r in data)
    assert {r["sharing"] for r in rows if r["path"] == name} <= {"time-sliced", "mps"}
    assert [r for r in rows if r["path"] == "ceiling"] and [r for r in rows if r["metric"] == "setup"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["ipc", "vmm", "mempool", "hostpool", "staging", "mmap"])
def test_a_corrupted_byte_is_caught(monkeypatch, no_leaks, name):
    outcome, rows = run_scenario_rows(monkeypatch, name, fault="corrupt", sizes=(4096 + 3,))
    assert isinstance(outcome.error, WorkerFailed)
    assert f"verification failed on path {name}/" in str(outcome.error) and "ring slot" in str(outcome.error)


def memory_checked(name):
    """The scenario, with each worker checking that its GPU memory returns to where it was."""
    base = type(SCENARIOS[name])

    def checked_run(self, ctx):
        from cupy.cuda import runtime

        from gpuipc_bench.gpu.device import Gpu

        Gpu(ctx.spec.device).close()  # context and module exist before we look
        ctx.sync()
        free_before = runtime.memGetInfo()[0]
        ctx.sync()
        yield from base.run(self, ctx)
        ctx.sync()
        lost = free_before - runtime.memGetInfo()[0]
        if lost > 16 * MiB:
            raise AssertionError(f"worker {ctx.rank}: {lost / MiB:.0f} MiB of GPU memory not returned")

    return type(f"Checked{base.__name__}", (base,), {"run": checked_run})()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["ipc", "vmm", "mempool", "hostpool", "staging", "mmap"])
def test_gpu_memory_is_returned(monkeypatch, no_leaks, name):
    outcome, _ = run_scenario_rows(monkeypatch, name, scenario=memory_checked(name), sizes=(4096, 64 * MiB),
                                   max_samples=2)
    assert outcome.ok, outcome.error


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["staging", "mmap", "vmm", "mempool"])
def test_killed_worker_frees_everything(monkeypatch, no_leaks, name):
    outcome, _ = run_scenario_rows(monkeypatch, name, fault="kill:1:sample:3")
    assert isinstance(outcome.error, WorkerFailed) and "killed by SIGKILL" in str(outcome.error)


def _cuda_works() -> int:
    from cupy.cuda import runtime

    return runtime.getDeviceCount()


@pytest.mark.gpu
def test_parent_never_initialised_cuda(monkeypatch, no_leaks):
    """After a whole run, a child forked from this process can still use CUDA: the parent
    (which loads CuPy, and with it the driver library) never initialised CUDA."""
    outcome, _ = run_scenario_rows(monkeypatch, "ipc", sizes=(4096,), max_samples=2)
    assert outcome.ok, outcome.error
    assert in_child(_cuda_works) >= 1


@pytest.mark.gpu2
def test_peer_moves_the_right_bytes(monkeypatch, no_leaks):
    outcome, rows = run_scenario_rows(monkeypatch, "peer", sizes=(4096 + 3, 8 * MiB))
    assert outcome.ok, outcome.error
    got = count_by([r for r in rows if r["path"] == "peer" and r["metric"] == "bandwidth"], "variant", "measure")
    assert set(got) == {("p2p-off", "stream"), ("bidir", "stream"),
                        *((v, m) for v in ("ce", "sm", "push") for m in ("stream", "handoff"))}
    assert all(r["verified"] is True for r in rows if r["path"] == "peer" and r["metric"] != "setup")
    assert {"peer@0>1", "peer-sm@0>1", "peer@1>0"} <= {r["variant"] for r in rows if r["path"] == "ceiling"}
    assert {r["sharing"] for r in rows if r["path"] == "peer"} == {"exclusive"}


# --------------------------------------------------------------------------- latency


@pytest.mark.gpu
def test_latency_on_one_gpu(monkeypatch, no_leaks):
    outcome, rows = run_scenario_rows(monkeypatch, "latency", sizes=(0, 4, 4096))
    assert outcome.ok, outcome.error
    variants = {r["variant"] for r in rows}
    assert {"device-pingpong", "device-ll", "host-pingpong", "flag-pingpong", "barrier"} <= variants
    device = [r for r in rows if r["variant"].startswith("device")]
    assert all(r["verified"] is True and r["seconds"] > 0 for r in device)
    if {r["sharing"] for r in device} == {"time-sliced"}:
        # Each hop waits for the other context's time slice: measured at 0 B and 4 KiB only, 3 samples.
        assert min(r["seconds"] for r in device) > 20e-6
        assert {r["bytes"] for r in device} <= {0, 4096}


@pytest.mark.gpu
def test_latency_catches_a_wrong_answer(monkeypatch, no_leaks):
    outcome, rows = run_scenario_rows(monkeypatch, "latency", fault="corrupt", sizes=(64,), min_samples=1,
                                      max_samples=1, warmup=0)
    assert isinstance(outcome.error, WorkerFailed)
    assert "verification failed on path ipc/" in str(outcome.error)


@pytest.mark.gpu
@pytest.mark.parametrize("protocol, nbytes", [("device-pingpong", 0), ("device-ll", 4096)])
def test_a_silent_peer_ends_the_kernel_within_the_spin_timeout(monkeypatch, no_leaks, protocol, nbytes):
    from gpuipc_bench.engine.pingpong import DevicePingPong

    class Silent(DevicePingPong):
        def launch(self, proto, n, first, rounds):
            if self.initiator or proto != protocol:
                return super().launch(proto, n, first, rounds)
            while not self.ctx.segment.aborted:  # never answers; leaves when the run ends
                time.sleep(0.01)
            raise BarrierAborted("run aborted")

    class Worker(LatencyWorker):
        def setup(self):
            import gpuipc_bench.scenarios.latency as latency

            monkeypatch.setattr(latency, "DevicePingPong", Silent)
            return super().setup()

    class Scenario(LatencyScenario):
        def run(self, ctx):
            return Worker(ctx, self).run()

    t0 = time.monotonic()
    outcome, _ = run_scenario_rows(monkeypatch, "latency", scenario=Scenario(), sizes=(nbytes,),
                                   extra=(("spin_timeout", "0.5"),))
    assert isinstance(outcome.error, WorkerFailed), outcome.error
    assert "did not answer the handshake (round 0) within the 0.5 s spin timeout" in str(outcome.error)
    assert time.monotonic() - t0 < 30


# --------------------------------------------------------------------------- sharing


def run_in_modes(monkeypatch, name, **overrides):
    """The scenario once per sharing mode that can run here (the MPS daemon stopped after)."""
    from gpuipc_bench import modes

    outcomes, rows = [], []
    for mode in modes.make(("time-sliced", "mps")):
        if mode.unavailable():
            continue
        mode.start()
        try:
            settings = dict(scenarios=(name,), sizes=SIZES, min_samples=2, max_samples=3, warmup=1, timeout=60.0)
            settings.update(overrides)
            config = RunConfig(**settings)
            scenario = SCENARIOS[name]
            outcomes.append(run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append,
                                         env=mode.env()))
        finally:
            daemon = getattr(mode, "daemon", None)
            pid = daemon.pid if daemon is not None else None
            mode.stop()
            if daemon is not None:
                assert pid is None or not mps.alive(pid), "the MPS control daemon is still running"
                assert not os.path.exists(daemon.pipe_dir)
    return outcomes, rows


@pytest.mark.gpu
def test_sharing_time_sliced_and_mps(monkeypatch, no_leaks):
    outcomes, rows = run_in_modes(monkeypatch, "sharing", workers=2, sizes=(MiB + 16,))
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    modes = {r["sharing"] for r in rows}
    assert "time-sliced" in modes and modes <= {"time-sliced", "mps"}
    for mode in modes:
        mine = [r for r in rows if r["sharing"] == mode]
        got = count_by(mine, "path", "variant", "workers")
        for transfer in ("d2d", "h2d"):
            assert 2 <= got[("sharing", f"{transfer}-aggregate", 2)] <= 3
        assert all(r["verified"] is True for r in mine if r["metric"] != "setup")


@pytest.mark.gpu
def test_sharing_catches_corruption_and_still_stops_the_daemon(monkeypatch, no_leaks):
    monkeypatch.setenv("GPUIPC_BENCH_FAULT", "corrupt")
    outcomes, _ = run_in_modes(monkeypatch, "sharing", workers=2, sizes=(MiB + 16,), min_samples=1,
                               max_samples=1, warmup=0)
    assert outcomes and all(isinstance(o.error, WorkerFailed) for o in outcomes)
    assert all("verification failed on path sharing/" in str(o.error) for o in outcomes)


@pytest.mark.gpu
def test_handles_times_opens_against_size(monkeypatch, no_leaks):
    outcome, rows = run_scenario_rows(monkeypatch, "handles", sizes=(MiB, 64 * MiB))
    assert outcome.ok, outcome.error
    got = count_by(rows, "path", "variant")
    for key in (("ipc", "ipc_open_cold"), ("vmm", "vmm_import"), ("vmm", "vmm_map"), ("mempool", "pool_import"),
                ("mempool", "ptr_import_first")):
        assert got[key] == 2 * min(SETUP_REPEATS, 3), key  # at each of the two sizes, as often as a figure (3)
    for key in (("ipc", "ipc_open_suballoc"), ("mempool", "pool_import_full"), ("mempool", "ptr_import_full")):
        assert got[key] == SETUP_REPEATS, key
    big = {r["bytes"] for r in rows if r["variant"] == "pool_import_full"}
    assert len(big) == 1 and big.pop() > 64 * MiB  # most of the GPU
    assert all(r["metric"] == "setup" and r["seconds"] > 0 for r in rows)
