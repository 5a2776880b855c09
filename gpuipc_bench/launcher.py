"""Fork the workers of one scenario, collect their rows, and make sure none outlives the run.

The parent never initialises CUDA: workers are forked with the "fork" start
method (explicitly: Python 3.14 changed the default), and a child forked after
its parent touched the CUDA driver cannot use CUDA at all.

Each worker gets its arguments explicitly and talks back through its own pipe:
  ("row", dict)        one result row, sent as soon as it is measured
  ("progress", n)      n steps done
  ("done",)            finished cleanly
  ("aborted",)         left because another worker failed
  ("error", dict)      raised: type, message, traceback, phase
A worker that dies without saying "done" or "error" was killed; one whose
heartbeat stops for longer than the timeout is declared hung.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
import traceback
from typing import Any, Callable

from gpuipc_bench.barrier import Barrier
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import BarrierAborted, BenchError, WorkerFailed
from gpuipc_bench.faults import FaultPlan
from gpuipc_bench.scenario import Scenario, WorkerContext, WorkerSpec
from gpuipc_bench.segment import Segment

FORK = multiprocessing.get_context("fork")

# After the first failure, how long the other workers get to leave on their own
# (they see the abort word at their next barrier or wait) before being killed.
ABORT_GRACE_S = 2.0
POLL_S = 0.1


@dataclasses.dataclass
class Outcome:
    scenario: str
    rows: int = 0
    error: BenchError | None = None
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and not self.interrupted


def run_scenario(
    scenario: Scenario,
    config: RunConfig,
    specs: list[WorkerSpec],
    on_row: Callable[[dict], None],
    on_progress: Callable[[int], None] | None = None,
) -> Outcome:
    """Run one scenario across forked workers. Rows reach `on_row` as they arrive.

    Returns an Outcome carrying the first real error (a worker's exception, death
    or hang); KeyboardInterrupt and SystemExit propagate after every worker is gone.
    """
    outcome = Outcome(scenario.name)
    segment = Segment.create(len(specs), scenario.mailbox_slots(config, specs))
    workers: list[_Worker] = []
    shared: Any = None

    def deliver(row: dict) -> None:
        outcome.rows += 1
        on_row(row)

    try:
        shared = scenario.prepare(config, specs)
        for spec in specs:
            workers.append(_start_worker(scenario, spec, specs, config, segment, shared))
        outcome.error = _supervise(workers, segment, config, deliver, on_progress or (lambda n: None))
    finally:
        segment.abort()
        _stop_all(workers)
        # Interrupted (Ctrl-C, SIGTERM) or given up on stuck workers: rows they sent
        # may still sit in the pipes. Keep them: they are samples already taken.
        _salvage_rows(workers, deliver)
        _remove_driver_files([w.process.pid for w in workers])
        try:
            scenario.release(shared)
        finally:
            segment.close()
    return outcome


@dataclasses.dataclass
class _Worker:
    spec: WorkerSpec
    process: Any
    conn: multiprocessing.connection.Connection
    finished: bool = False  # said "done", "aborted" or "error"
    closed: bool = False  # pipe reached EOF
    error: dict | None = None
    last_beat: int = 0
    last_change: float = dataclasses.field(default_factory=time.monotonic)


def _start_worker(scenario, spec, specs, config, segment, shared) -> _Worker:
    reader, writer = FORK.Pipe(duplex=False)
    process = FORK.Process(
        target=_worker_main,
        args=(scenario, spec, specs, config, segment, shared, writer),
        name=f"gpuipc-bench-{scenario.name}-{spec.rank}",
        daemon=True,
    )
    process.start()
    writer.close()  # only the child writes; closing here lets EOF mean "child gone"
    return _Worker(spec, process, reader)


def _worker_main(scenario, spec, specs, config, segment, shared, conn) -> None:
    # Ctrl-C reaches the whole process group; the parent decides and ends us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()
    code = 0
    try:
        segment.set_pid(spec.rank, os.getpid())
        segment.set_device(spec.rank, spec.device)
        faults = FaultPlan(spec.rank)
        barrier = Barrier(segment, spec.rank, timeout=config.timeout, on_wait=faults.barrier_hook)
        ctx = WorkerContext(spec, specs, config, segment, barrier, shared, conn.send, faults)
        ctx.phase("setup")
        for row in scenario.run(ctx):
            conn.send(("row", row))
        if segment.phase(spec.rank)[0] != "teardown":
            ctx.phase("teardown")  # the scenario did not say; from here on only goodbyes
        ctx.phase("done")
        conn.send(("done",))
    except BarrierAborted:
        conn.send(("aborted",))
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
        segment.abort()
        phase, nbytes, iteration = segment.phase(spec.rank)
        try:
            conn.send(("error", {
                "type": type(exc).__name__,
                "message": str(exc),
                "bench": isinstance(exc, BenchError),
                "traceback": traceback.format_exc(),
                "phase": phase, "bytes": nbytes, "iteration": iteration,
                "missing": list(getattr(exc, "missing", [])),  # BarrierTimeout: who did not come
            }))
        except OSError:
            pass
        code = 1
    finally:
        try:
            conn.close()
        finally:
            # Skip atexit handlers and finalizers inherited from the parent.
            os._exit(code)


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker if the parent dies, so none is ever orphaned."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)
    except (OSError, AttributeError):
        pass


def _supervise(workers, segment, config, on_row, on_progress) -> BenchError | None:
    """Pump messages until every worker is gone; return the first real failure."""
    first_error: BenchError | None = None
    abort_deadline: float | None = None
    by_conn = {w.conn: w for w in workers}

    def fail(error: BenchError, stuck: list[int] | tuple = ()) -> None:
        nonlocal first_error, abort_deadline
        if first_error is None:
            first_error = error
            segment.abort()
            abort_deadline = time.monotonic() + ABORT_GRACE_S
            for worker in workers:  # workers that missed a deadline will not leave on their own
                if worker.spec.rank in stuck and worker.process.is_alive():
                    worker.process.terminate()

    while any(w.process.is_alive() or not w.closed for w in workers):
        waitables = [w.conn for w in workers if not w.closed]
        waitables += [w.process.sentinel for w in workers if w.process.is_alive()]
        for ready in multiprocessing.connection.wait(waitables, timeout=POLL_S):
            worker = by_conn.get(ready)
            if worker is not None:
                _drain(worker, on_row, on_progress, fail, segment)
        for worker in workers:
            if not worker.process.is_alive() and not worker.closed:
                _drain(worker, on_row, on_progress, fail, segment)
            if not worker.process.is_alive() and worker.closed and not worker.finished:
                worker.finished = True
                fail(WorkerFailed(_death_message(worker, segment)))
        if first_error is None:
            hung = _find_hung(workers, segment, config.timeout)
            if hung is not None:
                message, silent = hung
                fail(WorkerFailed(message), stuck=silent)
        if abort_deadline is not None and time.monotonic() > abort_deadline:
            break  # the rest are stuck; _stop_all kills them
    return first_error


def _drain(worker: _Worker, on_row, on_progress, fail, segment) -> None:
    """Read everything the worker has sent; a dead worker's pipe still holds its last rows."""
    try:
        while worker.conn.poll():
            message = worker.conn.recv()
            kind = message[0]
            if kind == "row":
                on_row(message[1])
            elif kind == "progress":
                on_progress(message[1])
            elif kind in ("done", "aborted"):
                worker.finished = True
            elif kind == "error":
                worker.finished = True
                worker.error = message[1]
                fail(_error_from_worker(worker, message[1], segment), stuck=message[1].get("missing", ()))
    except (EOFError, OSError):
        worker.closed = True
        return
    if not worker.process.is_alive():
        worker.closed = True


def _error_from_worker(worker: _Worker, info: dict, segment) -> BenchError:
    where = _phase_text(info["phase"], info["bytes"], info["iteration"])
    message = info["message"] if info["bench"] else f"{info['type']}: {info['message']}"
    missing = _missing_from_timeout(info, segment)
    return WorkerFailed(
        f"{worker.spec.describe()} failed {where}: {message}{missing}",
        traceback_text=info["traceback"],
        cause_name=info["type"],
    )


def _missing_from_timeout(info: dict, segment) -> str:
    """For a barrier timeout, say what the late workers were doing."""
    if info["type"] != "BarrierTimeout":
        return ""
    notes = []
    for rank in info.get("missing", ()):
        if 0 <= rank < segment.nworkers:
            phase, nbytes, iteration = segment.phase(rank)
            where = _phase_text(phase, nbytes, iteration)
            if segment.waiting_in_barrier(rank):
                where = "inside the barrier " + where
            notes.append(f"worker {rank} was last seen {where}")
    return " (" + "; ".join(notes) + ")" if notes else ""


def _death_message(worker: _Worker, segment) -> str:
    code = worker.process.exitcode
    if code is not None and code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code} without reporting"
    phase, nbytes, iteration = segment.phase(worker.spec.rank)
    where = _phase_text(phase, nbytes, iteration)
    if segment.waiting_in_barrier(worker.spec.rank):
        where = "inside the barrier " + where
    return f"{worker.spec.describe()} {how} {where}"


def _phase_text(phase: str, nbytes: int, iteration: int) -> str:
    from gpuipc_bench.sizes import format_size

    if phase in ("sample", "warmup", "latency") and nbytes:
        return f"during {phase} {iteration} at {format_size(nbytes)}"
    if phase == "barrier":
        return "inside the barrier"
    return f"during {phase}"


def _find_hung(workers, segment, timeout: float) -> tuple[str, list[int]] | None:
    """A worker whose phase heartbeat has not moved for `timeout` seconds is hung:
    (the message, the ranks of every worker that silent), or None. When several are
    silent (one hangs, the others block waiting for it), the one that went silent
    first is named."""
    now = time.monotonic()
    silent = []
    for worker in workers:
        if worker.finished or not worker.process.is_alive():
            continue
        beat = segment.heartbeat(worker.spec.rank)
        if beat != worker.last_beat:
            worker.last_beat, worker.last_change = beat, now
        elif now - worker.last_change > timeout + 1.0:
            silent.append(worker)
    if not silent:
        return None
    worker = min(silent, key=lambda w: (w.last_beat, w.spec.rank))  # heartbeats: one monotonic clock
    phase, nbytes, iteration = segment.phase(worker.spec.rank)
    message = (f"{worker.spec.describe()} made no progress for {timeout:g} s "
               f"{_phase_text(phase, nbytes, iteration)} (hung; see --timeout)")
    return message, [w.spec.rank for w in silent]


def _remove_driver_files(pids: list[int]) -> None:
    """The CUDA driver gives each process that makes interprocess events a file
    /dev/shm/cuda.shm.<n>.<pid in hex>.<n> and does not remove it when the process
    exits. Our workers are gone by now, so their files are stale: remove them."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    ours = {f"{pid:x}" for pid in pids if pid}
    for name in names:
        parts = name.split(".")
        if len(parts) == 5 and parts[:2] == ["cuda", "shm"] and parts[3] in ours:
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


def _stop_all(workers: list[_Worker]) -> None:
    """Terminate, then kill, then reap every worker. Nothing is left behind."""
    for worker in workers:
        if worker.process.is_alive():
            worker.process.terminate()
    deadline = time.monotonic() + 1.0
    for worker in workers:
        worker.process.join(max(0.0, deadline - time.monotonic()))
    for worker in workers:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join()


def _salvage_rows(workers: list[_Worker], deliver: Callable[[dict], None]) -> None:
    """After the workers are gone: deliver the rows still unread in their pipes, then
    close the pipes. A no-op after a normal run, which read every pipe to its end."""
    for worker in workers:
        try:
            while not worker.closed and worker.conn.poll():
                message = worker.conn.recv()
                if message[0] == "row":
                    deliver(message[1])
        except Exception:  # noqa: BLE001 - a torn last message, or a bad row: keep what we have
            pass
        finally:
            worker.conn.close()
