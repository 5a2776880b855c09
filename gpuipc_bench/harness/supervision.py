"""Supervision of a scenario's workers: the worker->parent protocol, the watch over the workers,
and the words for how one failed. Every launcher uses it (fork, persistent pool, MPI ranks).

A worker talks back through its own pipe (an MPI rank through its messages), one tuple each:
  ("row", dict)        one result row, sent as soon as it is measured
  ("progress", n)      n steps done
  ("note", key, text)  a fact for the CSV header
  ("done",)            finished cleanly
  ("aborted",)         left because another worker failed
  ("error", dict)      raised: type, message, traceback, phase
dispatch() hands each to its handler. A worker that dies without saying "done" or "error" was
killed; one that makes no progress for longer than the timeout is declared hung, one stopped
(SIGSTOP) for that long too. Progress is the worker's heartbeat in the segment: every phase it
enters, every row it sends, every progress step. A worker waiting for another lives on the
other's progress (gpuipc_bench.ipc.segment), so a long phase is never mistaken for a hang.
"""

from __future__ import annotations

import dataclasses
import multiprocessing.connection
import os
import signal
import time
from typing import Any, Callable

from gpuipc_bench.engine.scenario import WorkerSpec
from gpuipc_bench.errors import BenchError, WorkerFailed
from gpuipc_bench.sizes import format_size

# After the first failure, how long the other workers get to leave on their own
# (they see the abort word at their next barrier or wait) before being killed.
ABORT_GRACE_S = 2.0
POLL_S = 0.1
REAP_S = 10.0  # how long a killed worker may take to be gone before the run stops waiting for it

KINDS = ("row", "progress", "note", "done", "aborted", "error")


def dispatch(message: tuple, handlers: dict[str, Callable[..., None]]) -> None:
    """Hand one worker message to the handler of its kind, with the message's fields as arguments
    (a kind without a handler is ignored)."""
    handler = handlers.get(message[0])
    if handler is not None:
        handler(*message[1:])


class WorkerLost(WorkerFailed):
    """A worker died or stopped answering: its processes can no longer be trusted, so the run
    ends after this scenario (a worker that raised fails its scenario alone)."""


@dataclasses.dataclass
class Worker:
    spec: WorkerSpec
    process: Any
    conn: multiprocessing.connection.Connection
    finished: bool = False  # said "done", "aborted" or "error"
    closed: bool = False  # pipe reached EOF
    error: dict | None = None
    started: float = dataclasses.field(default_factory=time.monotonic)
    stopped_since: float | None = None  # when it was first seen stopped (SIGSTOP, a debugger)


def supervise(workers, segment, config, on_row, on_progress, on_status=lambda text: None,
               on_note=lambda key, text: None, until_done: bool = False, idle=()) -> BenchError | None:
    """Pump messages until every worker is gone (or, `until_done`, has said it finished: a
    persistent worker stays for the next scenario); return the first real failure. `idle`: the
    workers of the run's other persistent sets, waiting for their next scenario: one that dies
    meanwhile ends this scenario too (WorkerLost)."""
    first_error: BenchError | None = None
    abort_deadline: float | None = None
    by_conn = {w.conn: w for w in workers}

    def fail(error: BenchError, stuck: list[int] | tuple = ()) -> None:
        nonlocal first_error, abort_deadline
        if first_error is None:
            first_error = error
            segment.abort()
            # A worker lost (dead or silent): the others are stopped at once, their rows kept
            # (a persistent set is ended anyway); after a raise they get the grace to leave.
            abort_deadline = time.monotonic() + (0.0 if isinstance(error, WorkerLost) else ABORT_GRACE_S)
            for worker in workers:  # workers that missed a deadline will not leave on their own
                if worker.spec.rank in stuck and worker.process.is_alive():
                    worker.process.kill()  # SIGTERM would wait for a stopped (SIGSTOP) one

    while any((w.process.is_alive() or not w.closed) and not (until_done and w.finished) for w in workers):
        waitables = [w.conn for w in workers if not w.closed]
        waitables += [w.process.sentinel for w in [*workers, *idle] if w.process.is_alive()]
        for ready in multiprocessing.connection.wait(waitables, timeout=POLL_S):
            worker = by_conn.get(ready)
            if worker is not None:
                drain(worker, workers, on_row, on_progress, fail, segment, on_note)
        on_status(status_text(segment, workers))
        for worker in workers:
            if not worker.process.is_alive() and not worker.closed:
                drain(worker, workers, on_row, on_progress, fail, segment, on_note)
            if not worker.process.is_alive() and worker.closed and not worker.finished:
                worker.finished = True
                fail(WorkerLost(death_message(worker, segment)))
        for worker in idle:
            if not worker.process.is_alive():
                fail(WorkerLost(idle_death_message(worker)))
        if first_error is None:
            hung = find_hung(workers, segment, config.timeout)
            if hung is not None:
                message, silent = hung
                fail(WorkerLost(message), stuck=silent)
        if abort_deadline is not None and time.monotonic() >= abort_deadline:
            break  # the rest are stuck; stop_all kills them
    return first_error


def drain(worker: Worker, workers, on_row, on_progress, fail, segment, on_note=lambda key, text: None) -> None:
    """Read everything the worker has sent; a dead worker's pipe still holds its last rows."""
    handlers = worker_handlers(worker, workers, segment, on_row, on_progress, on_note, fail)
    try:
        while worker.conn.poll():
            dispatch(worker.conn.recv(), handlers)
    except (EOFError, OSError):
        worker.closed = True
        return
    if not worker.process.is_alive():
        worker.closed = True


def worker_handlers(worker, workers, segment, on_row, on_progress, on_note, fail) -> dict[str, Callable[..., None]]:
    """What each message of `worker` does: rows, progress and notes to the run; 'done', 'aborted'
    and 'error' mark it finished; an error goes to `fail(error, stuck)` in the user's words
    (`stuck`: the ranks a timed-out wait named). `worker`: a Worker, or anything with its
    spec, finished and error fields (an MPI rank)."""

    def finished() -> None:
        worker.finished = True

    def error(info: dict) -> None:
        worker.finished = True
        worker.error = info
        fail(error_from_worker(worker, workers, info, segment), info.get("missing", ()))

    return {"row": on_row, "progress": on_progress, "note": on_note, "done": finished, "aborted": finished,
            "error": error}


def error_from_worker(worker: Worker, workers, info: dict, segment) -> BenchError:
    if info["type"] == "BarrierTimeout" and info.get("missing"):
        # A wait ran out: name the worker that went silent, not the one that waited.
        chain = segment.waits_chain(info["missing"][0])
        if worker.spec.rank in chain:  # they waited for each other: the first one named is it
            chain = chain[:chain.index(worker.spec.rank)] or chain[:1]
        culprit = next(w for w in workers if w.spec.rank == chain[-1])
        message = (f"{silent_worker(culprit, segment, info['timeout'])}; "
                   f"{worker.spec.describe()} waited for it at {info['where']}")
        return WorkerLost(message, traceback_text=info["traceback"], cause_name=info["type"])
    else:
        where = phase_text(segment, worker.spec.rank, info["phase"], info["bytes"], info["iteration"])
        cause = info["message"] if info["bench"] else f"{info['type']}: {info['message']}"
        message = f"{worker.spec.describe()} failed {where}: {cause}"
    return WorkerFailed(message, traceback_text=info["traceback"], cause_name=info["type"])


def silent_worker(worker: Worker, segment, timeout: float) -> str:
    """A worker silent for `timeout` s: stopped (SIGSTOP, a debugger) or hung, and where."""
    process = getattr(worker, "process", None)  # an MPI rank has none here
    if process is not None and process_stopped(process.pid):
        return stopped_worker(worker, segment, timeout)
    phase, nbytes, iteration = segment.phase(worker.spec.rank)
    where = phase_text(segment, worker.spec.rank, phase, nbytes, iteration)
    if segment.waiting_in_barrier(worker.spec.rank) and phase != "barrier":
        where = "inside the barrier " + where
    return f"{worker.spec.describe()} made no progress for {timeout:g} s {where} (hung? see --timeout)"


def stopped_worker(worker: Worker, segment, timeout: float) -> str:
    phase, nbytes, iteration = segment.phase(worker.spec.rank)
    where = phase_text(segment, worker.spec.rank, phase, nbytes, iteration)
    return f"{worker.spec.describe()} was stopped (SIGSTOP?) for {timeout:g} s {where} (see --timeout)"


def how_it_ended(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code} without reporting"


def death_message(worker: Worker, segment) -> str:
    how = how_it_ended(worker.process)
    rank = worker.spec.rank
    phase, nbytes, iteration = segment.phase(rank)
    where = phase_text(segment, rank, phase, nbytes, iteration)
    if segment.waiting_in_barrier(rank) and phase != "barrier":
        where = "inside the barrier " + where
    return f"{worker.spec.describe()} {how} {where}"


def idle_death_message(worker: Worker) -> str:
    """A persistent worker that ended while it waited for its next scenario."""
    return f"{worker.spec.describe()} {how_it_ended(worker.process)} while idle between scenarios"


def process_stopped(pid: int | None) -> bool:
    """Whether the process is stopped by a signal or a debugger (state T or t in /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def status_text(segment, workers) -> str:
    """What the scenario is doing now, for the progress line: the phase of the worker that
    showed progress last ('ipc/ce stream 4 MiB', 'ceiling d2d@0 1 MiB', 'setup')."""
    live = [w for w in workers if w.process.is_alive()]
    if not live:
        return ""
    rank = max(live, key=lambda w: segment.heartbeat(w.spec.rank)).spec.rank
    phase, nbytes, _ = segment.phase(rank)
    label = segment.phase_label(rank)
    at = format_size(nbytes) if nbytes else ""
    if phase == "ceiling":
        return " ".join(p for p in ("ceiling", label, at) if p)
    if phase in ("sample", "warmup", "latency"):
        return " ".join(p for p in (label, at) if p)
    return phase


def phase_text(segment, rank: int, phase: str, nbytes: int, iteration: int) -> str:
    """What a worker was doing, in a user's words: 'during sample 3 at 64 MiB',
    'while measuring the d2d@0 ceiling at 1 GiB', 'during setup'."""
    at = f" at {format_size(nbytes)}" if nbytes else ""
    if phase == "ceiling":
        label = segment.phase_label(rank)
        return f"while measuring the {label + ' ' if label else ''}ceiling{at}"
    if phase in ("sample", "warmup", "latency"):
        what = {"sample": "sample", "warmup": "warm-up", "latency": "latency sample"}[phase]
        return f"during {what} {iteration}{at}"
    return {"barrier": "inside the barrier", "idle": "before it started", "done": "after it finished"}.get(
        phase, f"during {phase}")


def size_in_flight(segment) -> str:
    """'at 64 MiB' (the largest size a worker is on now), or '' if none is."""
    try:
        sizes = [segment.phase(r)[1] for r in range(segment.nworkers)]
    except ValueError:  # the segment is already closed
        return ""
    return f"at {format_size(max(sizes))}" if any(sizes) else ""


def find_hung(workers, segment, timeout: float) -> tuple[str, list[int]] | None:
    """A worker that has made no progress for `timeout` seconds, and waits for no one who
    has, is hung: (the message, the ranks of every worker that silent), or None. When
    several are silent (one hangs, the others block waiting for it), the one that went
    silent first is named. A stopped process (SIGSTOP, a debugger) is named once it has been
    stopped for `timeout`, or as soon as others are silent: they wait for it."""
    now = time.monotonic()
    for worker in workers:
        is_stopped = not worker.finished and process_stopped(worker.process.pid)
        worker.stopped_since = (worker.stopped_since or now) if is_stopped else None
    stopped = [w for w in workers if w.stopped_since is not None and now - w.stopped_since > timeout]
    if stopped:  # it cannot move, whoever it waits for: no need to wait until another needs it
        worker = min(stopped, key=lambda w: (w.stopped_since, w.spec.rank))
        return stopped_worker(worker, segment, timeout), [w.spec.rank for w in stopped]
    silent = [w for w in workers if not w.finished and w.process.is_alive()
              and now - max(segment.last_progress(w.spec.rank), w.started) > timeout + 1.0]
    if not silent:
        return None
    stopped = [w for w in workers if w.stopped_since is not None]
    if stopped:  # the others are silent because they wait for it
        worker = min(stopped, key=lambda w: (w.stopped_since, w.spec.rank))
        return stopped_worker(worker, segment, timeout), [w.spec.rank for w in silent + stopped]
    # heartbeats are one monotonic clock across processes: the oldest stopped first
    worker = min(silent, key=lambda w: (segment.heartbeat(w.spec.rank), w.spec.rank))
    return silent_worker(worker, segment, timeout), [w.spec.rank for w in silent]


def stop_all(workers: list[Worker]) -> None:
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
    deadline = time.monotonic() + REAP_S
    for worker in workers:
        # bounded: a process the kernel holds (a GPU context being torn down) must not hold the
        # run; it is already killed, and init reaps it once this process has gone
        worker.process.join(max(0.0, deadline - time.monotonic()))


def salvage_rows(workers: list[Worker], deliver: Callable[[dict], None]) -> None:
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


def remove_driver_files(pids: list[int]) -> None:
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
