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
A worker that dies without saying "done" or "error" was killed; one that makes no
progress for longer than the timeout is declared hung. Progress is the worker's
heartbeat in the segment: every phase it enters, every row it sends, every progress
step. A worker waiting for another lives on the other's progress (segment.py), so a
long phase is never mistaken for a hang.

A signal to the parent (Interrupted, or KeyboardInterrupt) stops every worker at once
(SIGTERM, then SIGKILL a second later), keeps the rows already in the pipes and
propagates as Interrupted naming the scenario and the size in flight.
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

from gpuipc_bench.ipc.barrier import Barrier
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import BarrierAborted, BenchError, Interrupted, WorkerFailed
from gpuipc_bench.hooks.faults import FaultPlan
from gpuipc_bench.hooks.profiling import profiled
from gpuipc_bench.engine.scenario import Scenario, WorkerContext, WorkerSpec
from gpuipc_bench.ipc.segment import Segment

FORK = multiprocessing.get_context("fork")

# After the first failure, how long the other workers get to leave on their own
# (they see the abort word at their next barrier or wait) before being killed.
ABORT_GRACE_S = 2.0
POLL_S = 0.1
REAP_S = 10.0  # how long a killed worker may take to be gone before the run stops waiting for it


class WorkerLost(WorkerFailed):
    """A worker died or stopped answering: its processes can no longer be trusted, so the run
    ends after this scenario (a worker that raised fails its scenario alone)."""


@dataclasses.dataclass
class Outcome:
    scenario: str
    rows: int = 0
    error: BenchError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def run_scenario(
    scenario: Scenario,
    config: RunConfig,
    specs: list[WorkerSpec],
    on_row: Callable[[dict], None],
    on_progress: Callable[[int], None] | None = None,
    on_status: Callable[[str], None] | None = None,
    on_note: Callable[[str, str], None] | None = None,
    env: dict[str, str] | None = None,
) -> Outcome:
    """Run one scenario across forked workers. Rows reach `on_row` as they arrive. `env`: what
    each worker sets before its first CUDA call (the sharing mode's, gpuipc_bench.modes).

    Returns an Outcome carrying the first real error (a worker's exception, death
    or hang). A signal (Interrupted or KeyboardInterrupt) propagates as Interrupted, with
    the scenario and the size in flight, after every worker is gone.
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
            workers.append(_start_worker(scenario, spec, specs, config, segment, shared, env or {}))
        outcome.error = _supervise(workers, segment, config, deliver, on_progress or (lambda n: None),
                                   on_status or (lambda text: None), on_note or (lambda key, text: None))
    except (KeyboardInterrupt, Interrupted) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        raise Interrupted(signum, scenario.name, _size_in_flight(segment)) from None
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
    started: float = dataclasses.field(default_factory=time.monotonic)
    stopped_since: float | None = None  # when it was first seen stopped (SIGSTOP, a debugger)


def _start_worker(scenario, spec, specs, config, segment, shared, env) -> _Worker:
    # "spawn" (scenario.start_method): a fresh interpreter that gets the segment and the
    # scenario's shared objects by pickle (they map the same pages again: gpuipc_bench.ipc.shared).
    context = multiprocessing.get_context(scenario.start_method) if scenario.start_method != "fork" else FORK
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(
        target=_worker_main,
        args=(scenario, spec, specs, config, segment, shared, writer, env),
        name=f"gpuipc-bench-{scenario.name}-{spec.rank}",
        daemon=True,
    )
    process.start()
    writer.close()  # only the child writes; closing here lets EOF mean "child gone"
    return _Worker(spec, process, reader)


def _worker_main(scenario, spec, specs, config, segment, shared, conn, env=None) -> None:
    enter_worker(spec, env, config.worker_log)
    name_worker(scenario, spec, specs)
    code = 1
    try:
        code = run_worker(scenario, spec, specs, config, segment, shared, conn.send)
    finally:
        try:
            conn.close()
        finally:
            # Skip atexit handlers and finalizers inherited from the parent.
            os._exit(code)


def enter_worker(spec: WorkerSpec, env: dict[str, str] | None, worker_log: str = "") -> None:
    """What every forked worker does first, persistent or not: signals left to the parent, gone
    with the parent, its output to the run's worker log, its environment before CUDA starts."""
    # Ctrl-C and a hang-up reach the whole process group; the parent decides and ends us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _die_with_parent()
    if worker_log:
        _output_to(worker_log)
    os.environ.update(worker_env(spec, env))  # before anything initialises CUDA


def name_worker(scenario, spec: WorkerSpec, specs, suffix: str = "") -> None:
    """The worker's process title for the scenario it runs now ('gpuipc-bench: ipc producer GPU0')."""
    where = "CPU" if spec.device is None else f"MIG {spec.mig[4:12]}" if spec.mig else f"GPU{spec.device}"
    same_role = sum(1 for other in specs if other.role == spec.role)
    set_process_title(f"gpuipc-bench: {scenario.name} {spec.role}{f' {spec.rank}' if same_role > 1 else ''} "
                      f"{where}{suffix}", f"{scenario.name[:6]} {spec.role[:4]}{spec.rank}")


def worker_env(spec: WorkerSpec, env: dict[str, str] | None = None) -> dict[str, str]:
    """What a worker sets in its environment before its first CUDA call: the sharing mode's
    `env`, and for a worker on a MIG instance CUDA_VISIBLE_DEVICES=<its UUID> (it then sees that
    instance alone, as CUDA device 0)."""
    out = dict(env or {})
    if spec.mig:
        out["CUDA_VISIBLE_DEVICES"] = spec.mig
    return out


def _output_to(path: str) -> None:
    """Send this worker's stdout and stderr (and its children's: torch's, NCCL's) to the run's
    worker log: what libraries print, and tracebacks printed by their threads, never reach the
    terminal's progress lines. The worker's own errors travel to the parent through the pipe."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return  # the terminal, then: nothing is lost
    for std in (1, 2):
        os.dup2(fd, std)
    os.close(fd)


def run_worker(scenario, spec, specs, config, segment, shared, post: Callable[[tuple], None]) -> int:
    """One worker's whole run, wherever it runs (a forked child, a spawned one, an MPI rank):
    every message goes to `post` ('row', 'progress', 'note', then 'done', 'aborted' or
    'error'). Returns the exit code (1 after an error)."""
    rank = spec.rank
    try:
        segment.bind(rank)
        segment.set_pid(rank, os.getpid())
        segment.set_device(rank, spec.device)
        faults = FaultPlan(rank)
        barrier = Barrier(segment, rank, timeout=config.timeout, on_wait=faults.barrier_hook)

        def send(message: tuple) -> None:  # every message to the parent is a sign of progress
            segment.beat(rank)
            post(message)

        ctx = WorkerContext(spec, specs, config, segment, barrier, shared, send, faults)
        ctx.phase("setup")
        with profiled(scenario.name, rank, lambda: str(ctx.row_fields.get("sharing", ""))):
            for row in scenario.run(ctx):
                send(("row", row))
        if segment.phase(spec.rank)[0] != "teardown":
            ctx.phase("teardown")  # the scenario did not say; from here on only goodbyes
        ctx.phase("done")
        post(("done",))
        return 0
    except BarrierAborted:
        post(("aborted",))
        return 0
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
        segment.abort()
        phase, nbytes, iteration = segment.phase(spec.rank)
        try:
            post(("error", {
                "type": type(exc).__name__,
                "message": str(exc),
                "bench": isinstance(exc, BenchError),
                "traceback": traceback.format_exc(),
                "phase": phase, "bytes": nbytes, "iteration": iteration,
                "missing": list(getattr(exc, "missing", [])),  # BarrierTimeout: who was silent
                "where": getattr(exc, "where", ""), "timeout": getattr(exc, "timeout", config.timeout),
            }))
        except OSError:
            pass
        return 1


def set_process_title(title: str, short: str) -> None:
    """Name this process for ps: `title` where setproctitle is installed (ps -f, ps aux),
    and always `short`, the kernel's 15-byte name of it (ps, top, pgrep)."""
    try:
        import setproctitle  # optional

        setproctitle.setproctitle(title)
    except ImportError:
        pass
    try:
        import ctypes

        PR_SET_NAME = 15
        ctypes.CDLL(None).prctl(PR_SET_NAME, short.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


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


def _supervise(workers, segment, config, on_row, on_progress, on_status=lambda text: None,
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
                _drain(worker, workers, on_row, on_progress, fail, segment, on_note)
        on_status(status_text(segment, workers))
        for worker in workers:
            if not worker.process.is_alive() and not worker.closed:
                _drain(worker, workers, on_row, on_progress, fail, segment, on_note)
            if not worker.process.is_alive() and worker.closed and not worker.finished:
                worker.finished = True
                fail(WorkerLost(_death_message(worker, segment)))
        for worker in idle:
            if not worker.process.is_alive():
                fail(WorkerLost(idle_death_message(worker)))
        if first_error is None:
            hung = _find_hung(workers, segment, config.timeout)
            if hung is not None:
                message, silent = hung
                fail(WorkerLost(message), stuck=silent)
        if abort_deadline is not None and time.monotonic() >= abort_deadline:
            break  # the rest are stuck; _stop_all kills them
    return first_error


def _drain(worker: _Worker, workers, on_row, on_progress, fail, segment, on_note=lambda key, text: None) -> None:
    """Read everything the worker has sent; a dead worker's pipe still holds its last rows."""
    try:
        while worker.conn.poll():
            message = worker.conn.recv()
            kind = message[0]
            if kind == "row":
                on_row(message[1])
            elif kind == "progress":
                on_progress(message[1])
            elif kind == "note":  # ("note", key, text): a fact for the CSV header
                on_note(message[1], message[2])
            elif kind in ("done", "aborted"):
                worker.finished = True
            elif kind == "error":
                worker.finished = True
                worker.error = message[1]
                fail(_error_from_worker(worker, workers, message[1], segment),
                     stuck=message[1].get("missing", ()))
    except (EOFError, OSError):
        worker.closed = True
        return
    if not worker.process.is_alive():
        worker.closed = True


def _error_from_worker(worker: _Worker, workers, info: dict, segment) -> BenchError:
    if info["type"] == "BarrierTimeout" and info.get("missing"):
        # A wait ran out: name the worker that went silent, not the one that waited.
        chain = segment.waits_chain(info["missing"][0])
        if worker.spec.rank in chain:  # they waited for each other: the first one named is it
            chain = chain[:chain.index(worker.spec.rank)] or chain[:1]
        culprit = next(w for w in workers if w.spec.rank == chain[-1])
        message = (f"{_silent_worker(culprit, segment, info['timeout'])}; "
                   f"{worker.spec.describe()} waited for it at {info['where']}")
        return WorkerLost(message, traceback_text=info["traceback"], cause_name=info["type"])
    else:
        where = _phase_text(segment, worker.spec.rank, info["phase"], info["bytes"], info["iteration"])
        cause = info["message"] if info["bench"] else f"{info['type']}: {info['message']}"
        message = f"{worker.spec.describe()} failed {where}: {cause}"
    return WorkerFailed(message, traceback_text=info["traceback"], cause_name=info["type"])


def _silent_worker(worker: _Worker, segment, timeout: float) -> str:
    phase, nbytes, iteration = segment.phase(worker.spec.rank)
    where = _phase_text(segment, worker.spec.rank, phase, nbytes, iteration)
    if segment.waiting_in_barrier(worker.spec.rank) and phase != "barrier":
        where = "inside the barrier " + where
    return f"{worker.spec.describe()} made no progress for {timeout:g} s {where} (hung? see --timeout)"


def _how_it_ended(process) -> str:
    code = process.exitcode
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code} without reporting"


def idle_death_message(worker: _Worker) -> str:
    """A persistent worker that ended while it waited for its next scenario."""
    return f"{worker.spec.describe()} {_how_it_ended(worker.process)} while idle between scenarios"


def _stopped_worker(worker: _Worker, segment, timeout: float) -> str:
    phase, nbytes, iteration = segment.phase(worker.spec.rank)
    where = _phase_text(segment, worker.spec.rank, phase, nbytes, iteration)
    return f"{worker.spec.describe()} was stopped (SIGSTOP?) for {timeout:g} s {where} (see --timeout)"


def process_stopped(pid: int | None) -> bool:
    """Whether the process is stopped by a signal or a debugger (state T or t in /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t")
    except (OSError, IndexError):
        return False


def _death_message(worker: _Worker, segment) -> str:
    how = _how_it_ended(worker.process)
    rank = worker.spec.rank
    phase, nbytes, iteration = segment.phase(rank)
    where = _phase_text(segment, rank, phase, nbytes, iteration)
    if segment.waiting_in_barrier(rank) and phase != "barrier":
        where = "inside the barrier " + where
    return f"{worker.spec.describe()} {how} {where}"


def status_text(segment, workers) -> str:
    """What the scenario is doing now, for the progress line: the phase of the worker that
    showed progress last ('ipc/ce stream 4 MiB', 'ceiling d2d@0 1 MiB', 'setup')."""
    from gpuipc_bench.sizes import format_size

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


def _phase_text(segment, rank: int, phase: str, nbytes: int, iteration: int) -> str:
    """What a worker was doing, in a user's words: 'during sample 3 at 64 MiB',
    'while measuring the d2d@0 ceiling at 1 GiB', 'during setup'."""
    from gpuipc_bench.sizes import format_size

    at = f" at {format_size(nbytes)}" if nbytes else ""
    if phase == "ceiling":
        label = segment.phase_label(rank)
        return f"while measuring the {label + ' ' if label else ''}ceiling{at}"
    if phase in ("sample", "warmup", "latency"):
        what = {"sample": "sample", "warmup": "warm-up", "latency": "latency sample"}[phase]
        return f"during {what} {iteration}{at}"
    return {"barrier": "inside the barrier", "idle": "before it started", "done": "after it finished"}.get(
        phase, f"during {phase}")


def _size_in_flight(segment) -> str:
    """'at 64 MiB' (the largest size a worker is on now), or '' if none is."""
    from gpuipc_bench.sizes import format_size

    try:
        sizes = [segment.phase(r)[1] for r in range(segment.nworkers)]
    except ValueError:  # the segment is already closed
        return ""
    return f"at {format_size(max(sizes))}" if any(sizes) else ""


def _find_hung(workers, segment, timeout: float) -> tuple[str, list[int]] | None:
    """A worker that has made no progress for `timeout` seconds, and waits for no one who
    has, is hung: (the message, the ranks of every worker that silent), or None. When
    several are silent (one hangs, the others block waiting for it), the one that went
    silent first is named."""
    now = time.monotonic()
    for worker in workers:
        stopped = not worker.finished and process_stopped(worker.process.pid)
        worker.stopped_since = (worker.stopped_since or now) if stopped else None
    stopped = [w for w in workers if w.stopped_since is not None and now - w.stopped_since > timeout]
    if stopped:  # it cannot move, whoever it waits for: no need to wait until another needs it
        worker = min(stopped, key=lambda w: (w.stopped_since, w.spec.rank))
        return _stopped_worker(worker, segment, timeout), [w.spec.rank for w in stopped]
    silent = [w for w in workers if not w.finished and w.process.is_alive()
              and now - max(segment.last_progress(w.spec.rank), w.started) > timeout + 1.0]
    if not silent:
        return None
    # heartbeats are one monotonic clock across processes: the oldest stopped first
    worker = min(silent, key=lambda w: (segment.heartbeat(w.spec.rank), w.spec.rank))
    return _silent_worker(worker, segment, timeout), [w.spec.rank for w in silent]


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
    deadline = time.monotonic() + REAP_S
    for worker in workers:
        # bounded: a process the kernel holds (a GPU context being torn down) must not hold the
        # run; it is already killed, and init reaps it once this process has gone
        worker.process.join(max(0.0, deadline - time.monotonic()))


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
