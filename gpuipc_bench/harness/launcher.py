"""Fork the workers of one scenario, collect their rows, and make sure none outlives the run.

The parent never initialises CUDA: workers are forked with the "fork" start
method (gpuipc_bench.ipc.process.FORK), and a child forked after its parent touched
the CUDA driver cannot use CUDA at all.

Each worker gets its arguments explicitly and talks back through its own pipe, in the
messages of gpuipc_bench.harness.supervision, which watches the workers and words how
one failed.

A signal to the parent (Interrupted, or KeyboardInterrupt) stops every worker at once
(SIGTERM, then SIGKILL a second later), keeps the rows already in the pipes and
propagates as Interrupted naming the scenario and the size in flight.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import traceback
from typing import Any, Callable

from gpuipc_bench.config import RunConfig
from gpuipc_bench.engine.scenario import Scenario, WorkerContext, WorkerSpec
from gpuipc_bench.errors import BarrierAborted, BenchError, Interrupted
from gpuipc_bench.gpu import visible
from gpuipc_bench.harness.supervision import (
    Worker, remove_driver_files, salvage_rows, size_in_flight, stop_all, supervise)
from gpuipc_bench.hooks.faults import FaultPlan
from gpuipc_bench.hooks.profiling import mark_start, profiled
from gpuipc_bench.ipc.barrier import Barrier
from gpuipc_bench.ipc.process import FORK, die_with_parent, exit_worker, output_to, set_process_title, wait_gone
from gpuipc_bench.ipc.segment import Segment

LEAVE_WAIT_S = 3.0  # the most a worker waits for the processes before it to be gone (pool.LEAVE_S: 2 s)


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
    mode_name: str | None = None,
    after: tuple[int, ...] = (),
    leave_to: list | None = None,
) -> Outcome:
    """Run one scenario across forked workers. Rows reach `on_row` as they arrive. `env`: what
    each worker sets before its first CUDA call (the sharing mode's, gpuipc_bench.modes);
    `mode_name`: that mode's name, which the rows' `sharing` says (None: the workers tell).
    `after`: the pids of the run's processes still leaving (wait_for_leavers). `leave_to`: where
    a clean run's workers go once each has said 'done', still exiting (the caller reaps them: its
    next workers start meanwhile); without it, or after a fault, they are reaped here.

    Returns an Outcome carrying the first real error (a worker's exception, death
    or hang). A signal (Interrupted or KeyboardInterrupt) propagates as Interrupted, with
    the scenario and the size in flight, after every worker is gone.
    """
    outcome = Outcome(scenario.name)
    segment = Segment.create(len(specs), scenario.mailbox_slots(config, specs))
    workers: list[Worker] = []
    shared: Any = None

    def deliver(row: dict) -> None:
        outcome.rows += 1
        on_row(row)

    left = False
    try:
        shared = scenario.prepare(config, specs)
        for spec in specs:
            workers.append(_start_worker(scenario, spec, specs, config, segment, shared, env or {}, mode_name,
                                         after))
        outcome.error = supervise(workers, segment, config, deliver, on_progress or (lambda n: None),
                                   on_status or (lambda text: None), on_note or (lambda key, text: None),
                                   until_done=leave_to is not None)
        left = leave_to is not None and outcome.error is None and all(w.finished and w.error is None
                                                                       for w in workers)
    except (KeyboardInterrupt, Interrupted) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        raise Interrupted(signum, scenario.name, size_in_flight(segment)) from None
    finally:
        segment.abort()
        if left:
            leave_to.extend(workers)  # each said 'done' and has nothing more to send: it exits on its own
        else:
            stop_all(workers)
            # Interrupted (Ctrl-C, SIGTERM) or given up on stuck workers: rows they sent
            # may still sit in the pipes. Keep them: they are samples already taken.
            salvage_rows(workers, deliver)
            remove_driver_files([w.process.pid for w in workers])
        try:
            scenario.release(shared)
        finally:
            segment.close()
    return outcome


def _start_worker(scenario, spec, specs, config, segment, shared, env, mode_name=None, after=()) -> Worker:
    # "spawn" (scenario.start_method): a fresh interpreter that gets the segment and the
    # scenario's shared objects by pickle (they map the same pages again: gpuipc_bench.ipc.shared).
    context = multiprocessing.get_context(scenario.start_method) if scenario.start_method != "fork" else FORK
    reader, writer = context.Pipe(duplex=False)
    process = context.Process(
        target=_worker_main,
        args=(scenario, spec, specs, config, segment, shared, writer, env, mode_name, tuple(after)),
        name=f"gpuipc-bench-{scenario.name}-{spec.rank}",
        daemon=True,
    )
    process.start()
    writer.close()  # only the child writes; closing here lets EOF mean "child gone"
    return Worker(spec, process, reader)


def _worker_main(scenario, spec, specs, config, segment, shared, conn, env=None, mode_name=None, after=()) -> None:
    enter_worker(spec, env, config.worker_log)
    wait_for_leavers(spec, after)
    name_worker(scenario, spec, specs)
    code = 1
    try:
        code = run_worker(scenario, spec, specs, config, segment, shared, conn.send, mode_name)
    finally:
        exit_worker(conn, code)


def enter_worker(spec: WorkerSpec, env: dict[str, str] | None, worker_log: str = "") -> None:
    """What every forked worker does first, persistent or not: signals left to the parent, gone
    with the parent, its output to the run's worker log, its environment before CUDA starts."""
    # Ctrl-C and a hang-up reach the whole process group; the parent decides and ends us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    die_with_parent()
    if worker_log:
        output_to(worker_log)
    os.environ.update(worker_env(spec, env))  # before anything initialises CUDA
    mark_start("forked")
    visible.enter()  # the GPUs it sees (gpu.visible): the run's numbers -> its CUDA ordinals


def warm_worker(spec: WorkerSpec) -> None:
    """A persistent worker's CUDA context on its GPU made ahead of its first task (harness.pool
    WorkerSet.warm: the sets a check forks together start at once). An error here is left to the
    scenario's own open of the GPU, which says it in its words."""
    if spec.device is None:
        return
    try:
        import cupy  # (imported by the parent before the fork: machine.probe.import_cupy)

        from gpuipc_bench.gpu.visible import cuda_index
        from gpuipc_bench.machine.mig import device_of

        runtime = cupy.cuda.runtime  # (import_cupy returns nothing: calling through it never warmed a context)
        runtime.setDevice(cuda_index(device_of(spec)))
        runtime.free(0)  # the context is made here
    except Exception:  # noqa: BLE001 - said by the scenario's run
        pass


def wait_for_leavers(spec: WorkerSpec, after) -> None:
    """Before anything timed: the run's processes still leaving the GPU (`after`: the pids of the
    scenario or process set before, told to go as this worker was forked) are gone. Its own CUDA
    context is made first, while they tear theirs down: the overlap is what the wait buys. A
    process still there after LEAVE_WAIT_S is the parent's to kill (harness.pool): this worker
    goes on."""
    if not after:
        return
    warm_worker(spec)
    mark_start("context made")
    wait_gone(after, LEAVE_WAIT_S)
    mark_start("leavers gone")


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


def run_worker(scenario, spec, specs, config, segment, shared, post: Callable[[tuple], None],
               mode_name: str | None = None) -> int:
    """One worker's whole run, wherever it runs (a forked child, a spawned one, an MPI rank):
    every message goes to `post` ('row', 'progress', 'note', then 'done', 'aborted' or
    'error'). `mode_name`: the sharing mode the parent started for it (None: none handed).
    Returns the exit code (1 after an error)."""
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

        ctx = WorkerContext(spec, specs, config, segment, barrier, shared, send, faults, mode=mode_name)
        ctx.phase("setup")
        with profiled(scenario.name, rank, lambda: str(ctx.row_fields.get("sharing", "") or mode_name or "")):
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


