"""The shared-memory barrier, with real forked processes. Every wait has a deadline
and every child is killed in the end, so a broken barrier fails a test, never hangs it."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
import traceback

import pytest
from click.testing import CliRunner

from gpuipc_bench.cli import cli
from gpuipc_bench.config import RunConfig
from gpuipc_bench.engine.scenario import MAILBOX_SLOTS
from gpuipc_bench.ipc.barrier import Barrier
from gpuipc_bench.errors import BarrierAborted, BarrierTimeout
from gpuipc_bench.ipc.segment import Segment
from gpuipc_bench.results import read_results
from gpuipc_bench.scenarios import SCENARIOS

CTX = multiprocessing.get_context("fork")
pytestmark = pytest.mark.usefixtures("no_leaks")  # conftest: no child process, no /dev/shm file left


def _child(fn, rank, conn, args):
    try:
        conn.send(("ok", fn(rank, *args)))
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the test
        conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"))
    finally:
        conn.close()


class Workers:
    def __init__(self, procs, readers):
        self.procs, self.readers = procs, readers

    def results(self, timeout: float) -> list:
        """Each worker's return value, in rank order; fails the test on error or hang."""
        deadline = time.monotonic() + timeout
        out = []
        for rank, reader in enumerate(self.readers):
            if reader is None:
                out.append(None)
                continue
            if not reader.poll(max(0.0, deadline - time.monotonic())):
                pytest.fail(f"worker {rank} sent nothing within {timeout} s")
            try:
                status, value = reader.recv()
            except EOFError:
                pytest.fail(f"worker {rank} died (exit code {self.procs[rank].exitcode})")
            if status != "ok":
                pytest.fail(f"worker {rank} failed: {value}")
            out.append(value)
        return out


@contextlib.contextmanager
def forked(n: int, fn, *args):
    """Fork n workers running fn(rank, *args); kill whatever is left on the way out."""
    procs, readers = [], []
    try:
        for rank in range(n):
            r, w = CTX.Pipe(duplex=False)
            p = CTX.Process(target=_child, args=(fn, rank, w, args), daemon=True)
            p.start()
            w.close()
            procs.append(p)
            readers.append(r)
        yield Workers(procs, readers)
    finally:
        for p in procs:
            p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join()
        for r in readers:
            if r is not None:
                r.close()


# -- lockstep under contention --------------------------------------------------------


def _lockstep(rank, seg, rounds, spin_seconds):
    b = Barrier(seg, rank, timeout=20, spin_seconds=spin_seconds)
    for k in range(1, rounds + 1):
        seg.store(rank, k)  # "I have reached round k"
        b.wait()
        for j in range(seg.nworkers):
            v = seg.load(j)
            # Nobody may still be before round k (passed early), nor past k + 1
            # (that would need a crossing we are not part of).
            if not k <= v <= k + 1:
                return f"after crossing {k}: worker {j} reports round {v}"
    return seg.epoch(rank)


@pytest.mark.parametrize("spin_seconds", [2e-4, 0.0], ids=["spin", "no-spin"])
def test_lockstep_8_workers_300_crossings(spin_seconds):
    n, rounds = 8, 300
    with Segment.create(n, mailbox_slots=n) as seg, forked(n, _lockstep, seg, rounds, spin_seconds) as w:
        assert w.results(timeout=60) == [rounds] * n
        assert seg.epochs() == [rounds] * n


# -- a dead worker: timeout naming it, then abort releasing the rest ------------------

READY, GO, ABORT_NS = 2, 3, 4  # mailbox slots; 0 and 1 are the survivors' own


def _victim(rank, seg):
    seg.store(READY, 1)
    time.sleep(60)


def _survivor(rank, seg):
    seg.wait_until(GO, 1, timeout=10)
    seg.store(rank, 1)
    seg.wait_until(1 - rank, 1, timeout=10)  # both survivors start the barrier together
    try:
        Barrier(seg, rank, timeout=1.0).wait()
    except BarrierTimeout as exc:
        timed_out = (exc.missing, str(exc))
    else:
        return "the barrier let a worker through while another was dead"
    try:
        Barrier(seg, rank, timeout=30.0).wait()
    except BarrierAborted:
        return timed_out, (time.monotonic_ns() - seg.load(ABORT_NS)) / 1e9
    return "the barrier let a worker through while another was dead"


def _dead_worker_run(rank, seg):
    return (_victim if rank == 2 else _survivor)(rank, seg)


def test_killed_worker_times_out_then_abort_releases():
    with Segment.create(3, mailbox_slots=5) as seg, forked(3, _dead_worker_run, seg) as w:
        seg.wait_until(READY, 1, timeout=10)
        victim = w.procs[2]
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(5)
        assert victim.exitcode == -signal.SIGKILL
        w.readers[2].close()
        w.readers[2] = None
        seg.store(GO, 1)

        # Both survivors time out (1 s), then wait again; then they are inside the barrier.
        deadline = time.monotonic() + 10
        while seg.epochs()[:2] != [2, 2]:
            assert time.monotonic() < deadline, f"survivors never re-entered the barrier: {seg.epochs()}"
            time.sleep(0.01)
        assert seg.waiting_in_barrier(0) and seg.waiting_in_barrier(1)
        assert not seg.waiting_in_barrier(2)

        t0 = time.monotonic()
        seg.store(ABORT_NS, time.monotonic_ns())
        seg.abort()
        results = w.results(timeout=5)
        assert time.monotonic() - t0 < 5
    for rank in (0, 1):
        (missing, message), released_after = results[rank]
        assert missing == [2]
        assert message == "worker 2 made no progress for 1 s (awaited at the barrier)"
        assert 0 <= released_after < 5  # typically ~1 ms: the back-off sleeps at most 1 ms


# -- in one process ---------------------------------------------------------------------


def test_timeout_names_missing_ranks():
    with Segment.create(3) as seg:
        seg.set_epoch(1, 1)  # worker 1 already waits at crossing 1; worker 2 never came
        t0 = time.monotonic()
        with pytest.raises(BarrierTimeout) as info:
            Barrier(seg, 0, timeout=0.05).wait()
        assert 0.05 <= time.monotonic() - t0 < 2
        assert info.value.missing == [2]
        assert "worker 2 made no progress for 0.05 s (awaited at the barrier)" in str(info.value)


def test_abort_before_wait_raises_at_once():
    with Segment.create(2) as seg:
        seg.abort()
        with pytest.raises(BarrierAborted):
            Barrier(seg, 0, timeout=10).wait()


@pytest.mark.parametrize("delay", [0.0001, 0.05], ids=["while-spinning", "while-sleeping"])
def test_abort_while_waiting(delay):
    with Segment.create(2) as seg:
        timer = threading.Timer(delay, seg.abort)
        timer.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(BarrierAborted):
                Barrier(seg, 0, timeout=10).wait()
        finally:
            timer.cancel()
        assert time.monotonic() - t0 < 5


def test_single_worker_barrier_passes():
    with Segment.create(1) as seg:
        b = Barrier(seg, 0, timeout=1)
        for _ in range(3):
            b.wait()
        assert seg.epoch(0) == 3


def test_waiting_in_barrier():
    with Segment.create(3) as seg:
        assert not any(seg.waiting_in_barrier(r) for r in range(3))
        seg.set_epoch(0, 1)
        seg.set_epoch(2, 1)
        assert [seg.waiting_in_barrier(r) for r in range(3)] == [True, False, True]
        seg.set_epoch(1, 1)
        assert not any(seg.waiting_in_barrier(r) for r in range(3))


def test_bad_timeout_refused():
    with Segment.create(2) as seg, pytest.raises(ValueError):
        Barrier(seg, 0, timeout=0)


# -- the benchmark ------------------------------------------------------------------------


def test_on_wait_runs_only_when_waiting_with_the_waiting_word_set():
    with Segment.create(2) as seg:
        seen = []
        b = Barrier(seg, 0, timeout=0.05, on_wait=lambda: seen.append(
            (seg.epoch(0), seg.words[seg.waiting_index(0)], seg.waiting_in_barrier(0))))
        seg.set_epoch(1, 1)  # worker 1 is already there: the fast path, no hook
        b.wait()
        assert seen == [] and seg.words[seg.waiting_index(0)] == 0
        with pytest.raises(BarrierTimeout):  # worker 1 is not at crossing 2: wait, hook, time out
            b.wait()
        assert seen == [(2, 2, True)]
        assert seg.words[seg.waiting_index(0)] == 0, "the waiting word is cleared on the way out"


def test_a_hook_that_raises_leaves_the_barrier_clean():
    with Segment.create(2) as seg:
        def boom():
            raise RuntimeError("injected")

        with pytest.raises(RuntimeError, match="injected"):
            Barrier(seg, 0, timeout=10, on_wait=boom).wait()
        assert seg.words[seg.waiting_index(0)] == 0


def _die_inside(rank, seg):
    """Worker 1 arrives first and is killed while it waits; worker 0 then arrives and passes."""
    if rank == 1:
        Barrier(seg, 1, timeout=30, on_wait=lambda: os.kill(os.getpid(), signal.SIGKILL)).wait()
        return "survived"
    deadline = time.monotonic() + 10
    while seg.epoch(1) < 1:
        if time.monotonic() > deadline:
            return "worker 1 never arrived"
        time.sleep(0.001)
    Barrier(seg, 0, timeout=30).wait()  # worker 1 published its arrival: this passes at once
    return seg.epochs()


def test_killed_while_waiting_is_seen_inside_the_barrier_after_the_others_leave():
    """Epochs alone cannot tell: both are at 1 once worker 0 has passed. The waiting word can."""
    with Segment.create(2) as seg, forked(2, _die_inside, seg) as w:
        w.procs[1].join(10)
        assert w.procs[1].exitcode == -signal.SIGKILL
        w.readers[1].close()
        w.readers[1] = None
        assert w.results(timeout=10)[0] == [1, 1]
        assert seg.waiting_in_barrier(1), "worker 1 died inside the barrier"
        assert not seg.waiting_in_barrier(0), "worker 0 passed it"


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1.0])
def test_timeout_must_be_a_finite_positive_number(timeout):
    with Segment.create(2) as seg, pytest.raises(ValueError):
        Barrier(seg, 0, timeout=timeout)


# --------------------------------------------------------------------------- the most workers a scenario states

FAST = ["--sizes", "64", "--iterations", "2", "--warmup", "0"]
CPU_SCENARIOS_AT_MOST = [(name, s.max_workers) for name, s in SCENARIOS.items()
                         if s.gpus_needed == 0 and s.max_workers > 2]


@pytest.mark.parametrize("name,workers", CPU_SCENARIOS_AT_MOST)
def test_a_cpu_scenario_runs_at_its_most_workers(tmp_path, name, workers, monkeypatch):
    """`list` and `--help` say 2-64 for barrier: 64 must work (each needs its mailbox slot)."""
    from gpuipc_bench.scenarios import barrier

    # 20 crossings a sample, not 1,000: 64 workers on two cores cross about once in 10 ms (the
    # forked workers inherit the patch); the subject is that every worker has its slot and crosses
    monkeypatch.setattr(barrier, "CROSSINGS", 20)
    out = tmp_path / "r.csv"
    result = CliRunner().invoke(cli, ["run", "-s", name, "--workers", str(workers), "--out", str(out), "-q", *FAST])
    assert result.exit_code == 0, result.output
    frame, meta = read_results(out)
    assert meta["partial"] == "false" and set(frame["workers"]) == {workers}


def test_every_scenario_has_a_mailbox_slot_per_worker_at_its_most():
    """The slots a scenario may name do not shrink as its workers grow."""
    for name, scenario in SCENARIOS.items():
        if type(scenario).mailbox_slots is not type(scenario).__mro__[-2].mailbox_slots:
            continue  # a scenario that sizes its own mailbox
        config = RunConfig(scenarios=(name,), workers=scenario.max_workers)
        specs = [None] * scenario.max_workers
        assert scenario.mailbox_slots(config, specs) - scenario.max_workers >= MAILBOX_SLOTS
