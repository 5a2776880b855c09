"""Persistent workers: the processes of one process set, forked once per run, run scenario after
scenario (the design card's forked workers, kept).

A scenario that declares `persistent_workers` runs in the process set of its workers' specs
(rank, role, GPU, MIG instance, CPUs) and its sharing mode's environment: the first such
scenario forks the set, the next ones send it their task, pickled as an MPI rank gets it
(scenario, specs, config, segment, shared: the pages travel through /proc/<pid>/fd,
gpuipc_bench.ipc.shared). The workers keep their CUDA context, CuPy's modules and its memory pool
between scenarios; each scenario still opens and closes its own buffers, and the same two
processes then time every path they compare. A scenario that needs a setting its library
reads once per process (NCCL's and UCX's variables, NVSHMEM's initialisation, torch's spawned
interpreters) keeps its own fresh processes (launcher.run_scenario).

Faults: a worker that fails, dies or hangs ends its scenario (named, rows kept), and its whole
set is ended with it: a later scenario forks a fresh set, never running in a broken worker. A
worker that dies or stops (WorkerLost) ends every set, and the run loop ends the run:
in its scenario, while its set is idle and another set runs (watched through `idle`), or
between scenarios (seen before the next one starts). A mode's sets end before the next mode
starts (no context of one mode is left on the GPU while the other runs, and no worker waits,
unwatched, while an MPS daemon starts: `ready_for`) and every set ends with the run, under every
fault.
"""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import signal
import time
from typing import Any, Callable

from gpuipc_bench.engine.scenario import shares_processes
from gpuipc_bench.errors import Interrupted, WorkerFailed
from gpuipc_bench.harness import launcher
from gpuipc_bench.harness.launcher import Outcome
from gpuipc_bench.harness.supervision import (
    Worker, WorkerLost, idle_death_message, remove_driver_files, salvage_rows, size_in_flight, stop_all, supervise)
from gpuipc_bench.hooks.profiling import mark
from gpuipc_bench.ipc.process import FORK, exit_worker, output_to
from gpuipc_bench.gpu.visible import visibility_env
from gpuipc_bench.ipc.segment import Segment
from gpuipc_bench.machine.probe import import_cupy
from gpuipc_bench.modes.mps import Mps
from gpuipc_bench.results import base_mode

LEAVE_S = 2.0  # how long a set's workers get to leave on their own at its end


def set_key(specs, mode_name: str | None, env: dict[str, str]) -> tuple:
    """What decides which process set a scenario runs in: the mode, its environment and each
    worker's rank, role and place. Never shared between GPU pairs, nor between A>B and B>A: on four
    H200s (driver 580.159.04) a worker that had taken part in one pair's IPC failed the next pair's
    cudaIpcOpenEventHandle with cudaErrorMapBufferObjectFailed in 6 of 11 pairs."""
    return (mode_name, tuple(sorted(env.items())), tuple((s.rank, s.role, *place(s)) for s in specs))


def place(spec) -> tuple:
    """Where a worker sits: its GPU (-1: none), MIG instance and CPUs; what a set's process keeps
    (its CUDA context) from scenario to scenario."""
    device = -1 if spec.device is None else int(spec.device)
    return (device, getattr(spec, "mig", ""), tuple(getattr(spec, "cpus", ()) or ()))


class WorkerSet:
    """The persistent workers of one set: forked on the first scenario, fed one task per scenario."""

    def __init__(self, specs, env: dict[str, str], worker_log: str = "", members: list | None = None,
                 after: tuple[int, ...] = ()):
        """Fork one worker per spec, or (`members`: (Worker, task connection) per spec) take
        workers forked before, as a set of another GPU pair did (WorkerSets). `after`: the pids of
        the run's processes still leaving, which the forked workers wait for (launcher.wait_for_leavers)."""
        self.specs = list(specs)
        self.env = dict(env)
        self.broken = False
        self.scenarios = 0  # how many this set has run
        self.leaving: float | None = None  # when the workers were told to leave (let_go)
        self.workers: list[Worker] = [worker for worker, _ in members or ()]
        self.tasks: list[multiprocessing.connection.Connection] = [tasks for _, tasks in members or ()]
        for spec in self.specs if members is None else ():
            reader, writer = FORK.Pipe(duplex=False)  # the worker's messages to us
            task_reader, task_writer = FORK.Pipe(duplex=False)  # our tasks to the worker
            process = FORK.Process(target=_set_main, args=(task_reader, writer, spec, self.env, worker_log, after),
                                   name=f"gpuipc-bench-set-{spec.rank}", daemon=True)
            process.start()
            writer.close()
            task_reader.close()
            self.workers.append(Worker(spec, process, reader))
            self.tasks.append(task_writer)

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers]

    def alive(self) -> bool:
        return not self.broken and all(w.process.is_alive() for w in self.workers)

    def run(self, scenario, config, specs, on_row: Callable[[dict], None],
            on_progress: Callable[[int], None] | None = None, on_status: Callable[[str], None] | None = None,
            on_note: Callable[[str, str], None] | None = None, idle=(), mode_name: str | None = None) -> Outcome:
        """launcher.run_scenario's counterpart in these workers: the same Outcome and messages. A
        failure ends the set (self.broken). `idle`: the workers of the run's other sets, watched
        meanwhile (one that dies ends this scenario). `mode_name`: the sharing mode the set's
        environment is of, handed to the workers (the rows' `sharing`)."""
        outcome = Outcome(scenario.name)
        self.assign(specs)
        segment = Segment.create(len(specs), scenario.mailbox_slots(config, specs))
        shared: Any = None

        def deliver(row: dict) -> None:
            outcome.rows += 1
            on_row(row)

        clean = False
        try:
            shared = scenario.prepare(config, specs)
            fault = os.environ.get("GPUIPC_BENCH_FAULT", "")  # the test suite's, read per scenario
            for worker, tasks, spec in zip(self.workers, self.tasks, specs):
                worker.finished, worker.error, worker.stopped_since = False, None, None
                worker.started = time.monotonic()
                tasks.send((scenario, spec, specs, config, segment, shared, fault, mode_name))
            self.scenarios += 1
            outcome.error = supervise(
                self.workers, segment, config, deliver, on_progress or (lambda n: None),
                on_status or (lambda text: None), on_note or (lambda key, text: None), until_done=True,
                idle=idle)
            clean = outcome.error is None and all(w.finished and w.error is None for w in self.workers)
        except (KeyboardInterrupt, Interrupted) as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            raise Interrupted(signum, scenario.name, size_in_flight(segment)) from None
        except OSError as exc:  # a task that could not be sent: a worker is gone
            outcome.error = WorkerFailed(f"a worker of {scenario.name} could not be reached: {exc}")
        finally:
            if not clean:
                self.broken = True
                segment.abort()
                self.close(graceful=False, deliver=deliver)
            try:
                scenario.release(shared)
            finally:
                segment.close()
        return outcome

    def assign(self, specs) -> None:
        """Each spec of this scenario to the worker that sits where it does (the set's workers in the
        specs' order, each taking its spec's rank and role: what supervision names)."""
        free = list(range(len(self.workers)))
        order = []
        for spec in specs:
            index = next(i for i in free if place(self.workers[i].spec) == place(spec))
            free.remove(index)
            order.append(index)
        self.workers = [self.workers[i] for i in order]
        self.tasks = [self.tasks[i] for i in order]
        for worker, spec in zip(self.workers, specs):
            worker.spec = spec
        self.specs = list(specs)

    def warm(self) -> None:
        """Have every (idle) worker make its CUDA context now (launcher.warm_worker), without waiting:
        warmed() waits for them."""
        for tasks in self.tasks:
            tasks.send("warm")

    def warmed(self, timeout: float) -> bool:
        """Wait (at most `timeout` seconds a worker) until every worker told to warm() says it has;
        False, the set broken (a later run forks a fresh one), where one did not."""
        try:
            for worker in self.workers:
                if not worker.conn.poll(timeout) or worker.conn.recv() != ("warm",):
                    self.broken = True
        except (EOFError, OSError):
            self.broken = True
        return not self.broken

    def let_go(self) -> None:
        """Tell every (idle) worker to leave, without waiting: close() then reaps them, given
        LEAVE_S from now (their CUDA contexts go down while the parent renders the answer)."""
        for tasks in self.tasks:
            if tasks is None:  # told to leave already (WorkerSets.let_go)
                continue
            try:
                tasks.send(None)
            except OSError:
                pass
            tasks.close()
        self.tasks = []
        if self.leaving is None:
            self.leaving = time.monotonic()

    def close(self, graceful: bool = True, deliver: Callable[[dict], None] | None = None) -> None:
        """Tell every worker to leave (graceful: idle workers, given LEAVE_S), then terminate, kill
        and reap. Not graceful (a failure, a signal): at once, as the fork launcher ends its own.
        `deliver`: where the rows still unread in the pipes go (a scenario cut short by a signal or
        a failure: samples already taken); without it they are not wanted (a scenario's pipes were
        read to its 'done')."""
        if graceful:
            self.let_go()
        for tasks in self.tasks:
            if tasks is not None:
                tasks.close()
        self.tasks = []
        deadline = time.monotonic()
        if graceful and self.leaving is not None:  # let_go() above set it (or earlier, at the run's end)
            deadline = self.leaving + LEAVE_S
        for worker in self.workers:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        stop_all(self.workers)
        if deliver is not None:
            salvage_rows(self.workers, deliver)
        for worker in self.workers:
            worker.conn.close()
        remove_driver_files(self.pids)


class WorkerSets:
    """Every persistent worker of a run (the members, by their set's key and index). A scenario runs
    in the set of its workers (set_key), forked on first use; end_mode_other_than() ends a mode's
    workers, close() all."""

    def __init__(self, worker_log: str = "", persistent: bool = True, uuids: dict[int, str] | None = None):
        """`uuids`: every GPU of the run by its number (the probe's), so that each set's workers see
        only their own GPUs (gpu.visible); {}: they see every GPU."""
        self.worker_log, self.persistent = worker_log, persistent
        self.uuids = dict(uuids or {})
        self.sets: dict[tuple, WorkerSet] = {}
        self.members: dict[tuple, tuple[Worker, Any]] = {}  # (set_key, index) -> (worker, its task pipe)
        self.started = 0  # times workers were forked over the run (a test's and the notes' count)
        self.forkserver = False  # started by prestart(): stopped by end()
        self.leaving: float | None = None  # when every worker was told to leave (let_go)
        # workers told to leave before the run's end, with their mode (retire; a fresh scenario's once done; the
        # persistent sets a fresh scenario follows): the next workers wait for them (wait_for_leavers), reap() reaps
        self.retired: list[tuple[WorkerSet, str | None]] = []

    def prestart(self, scenarios) -> None:
        """Before the first worker: start multiprocessing's fork server, with the modules of the
        scenarios whose workers it forks (torch, nvshmem: `preload`) imported in it once, so that
        their import (seconds) runs while the paths before them are measured, not in front of each
        mode's pair; then import CuPy here once for the workers this process forks. Neither the
        server nor this process touches CUDA, so what they fork may start it."""
        import multiprocessing.forkserver

        scenarios = list(scenarios)
        preload = sorted({m for s in scenarios if s.start_method == "forkserver" for m in getattr(s, "preload", ())})
        if preload:
            server = multiprocessing.get_context("forkserver")
            server.set_forkserver_preload(["gpuipc_bench.harness.launcher", *preload])
            multiprocessing.forkserver.ensure_running()
            self.forkserver = True
        if any(s.start_method == "fork" for s in scenarios):
            import_cupy()

    def run(self, scenario, config, specs, mode_name: str | None = None, env: dict[str, str] | None = None,
            **callbacks) -> Outcome:
        """Run `scenario` in its set where it declares persistent_workers, else in fresh workers."""
        env = env or {}
        lost = self.ready_for(scenario, mode_name)
        if lost is not None:  # a worker died between scenarios: the run's processes are not whole
            return lost
        if not self.persistent:
            self.close()
            return launcher.run_scenario(scenario, config, specs, env={**env, **self.visibility(specs)},
                                         mode_name=mode_name, **callbacks)
        if not shares_processes(scenario):
            # no idle context of the run beside a scenario of its own processes: the sets leave, and its
            # workers make their contexts while the sets' go down, then wait for them before anything timed
            self.leave_all()
            left: list[Worker] = []
            after = self.leaving_pids()
            mark("leaving", len(after))
            outcome = launcher.run_scenario(scenario, config, specs, env={**env, **self.visibility(specs)},
                                            mode_name=mode_name, after=after, leave_to=left, **callbacks)
            self.reap(block=False)  # those it waited for
            if left:  # its workers exit on their own now, while the next ones start
                self._retire([(worker, None) for worker in left], mode_name)
            return outcome
        key = set_key(specs, mode_name, env)
        workers = self.sets.get(key)
        if workers is not None and not workers.alive():
            self.drop(workers, close=True)
            workers = None
        if workers is not None and workers.scenarios and getattr(scenario, "first_in_set", False):
            self.retire(specs, mode_name, env)  # it must be the first path its processes run: a fresh set
            workers = None
        if workers is None:
            self.end_mode_other_than(mode_name)
            workers = self.sets[key] = self.assemble(scenario, specs, mode_name, env)
        mine = {id(w) for w in workers.workers}
        idle = [w for w, _ in self.members.values() if id(w) not in mine]
        outcome = workers.run(scenario, config, specs, idle=idle, mode_name=mode_name, **callbacks)
        if isinstance(outcome.error, WorkerLost):
            self.close()  # every worker: the run ends
        elif workers.broken:
            self.drop(workers)
        return outcome

    def prepare(self, scenario, specs, mode_name: str | None = None, env: dict[str, str] | None = None) -> None:
        """Fork the set `scenario` will run in, where none is alive yet (harness.rounds: the sets of
        a round are forked here, in the caller's thread, before their runs start in threads)."""
        if not (self.persistent and shares_processes(scenario)):
            return
        key = set_key(specs, mode_name, env or {})
        workers = self.sets.get(key)
        if workers is None or not workers.alive():
            if workers is not None:
                self.drop(workers, close=True)
            self.end_mode_other_than(mode_name)
            self.sets[key] = self.assemble(scenario, specs, mode_name, env or {})

    def adopt(self, key: tuple, workers: WorkerSet, worker_log: str = "") -> None:
        """A set forked before the plan (harness.head_start), its contexts made (warmed): its members
        under `key` (set_key of its specs, mode and environment), as assemble would have forked them,
        told where the run's worker log is (they were forked before its name was known)."""
        if worker_log:
            for tasks in workers.tasks:
                tasks.send(("log", worker_log))
        for index, member in enumerate(zip(workers.workers, workers.tasks)):
            self.members[(key, index)] = member
        self.started += 1

    def retire(self, specs, mode_name: str | None = None, env: dict[str, str] | None = None) -> None:
        """The set of `specs` has done its work for the run: its workers are told to leave now (their
        contexts go down while other sets work) and reaped at close()."""
        key = set_key(specs, mode_name, env or {})
        self.sets.pop(key, None)
        self._leave([(key, i) for i in range(len(specs)) if (key, i) in self.members])

    def leave_all(self) -> None:
        """Every persistent set is told to leave now, without waiting (reaped once gone: reap)."""
        self._leave(list(self.members))
        self.sets = {}

    def _leave(self, keys) -> None:
        """The members of `keys` told to leave now, without waiting: retired with their mode."""
        by_mode: dict[str | None, list] = {}
        for key in keys:
            by_mode.setdefault(key[0][0], []).append(self.members.pop(key))
        for mode_name, members in by_mode.items():
            self._retire(members, mode_name)

    def _retire(self, members, mode_name: str | None) -> None:
        """`members` ((worker, its task pipe or None)) told to leave now, without waiting: retired
        with their mode, reaped once gone (reap)."""
        leaving = self._everyone(members)
        leaving.let_go()
        self.retired.append((leaving, mode_name))

    def leaving_pids(self) -> tuple[int, ...]:
        """The pids of the workers told to leave that still run (those gone are reaped here): what
        the next workers wait for before anything timed."""
        self.reap(block=False)
        return tuple(w.process.pid for leaving, _ in self.retired for w in leaving.workers if w.process.is_alive())

    def reap(self, block: bool = True, other_than: str | None | object = ...) -> None:
        """Reap the workers told to leave: every one (`block`: each is given LEAVE_S from when it was
        told, then killed), else those gone or past LEAVE_S; `other_than`: only those of another mode."""
        kept = []
        for leaving, mode_name in self.retired:
            if other_than is not ... and mode_name == other_than:
                kept.append((leaving, mode_name))
            elif block or not any(w.process.is_alive() for w in leaving.workers) or (
                    leaving.leaving is not None and time.monotonic() > leaving.leaving + LEAVE_S):
                leaving.close()
            else:
                kept.append((leaving, mode_name))
        self.retired = kept

    def ready_for(self, scenario, mode_name: str | None) -> Outcome | None:
        """Before `scenario`'s sharing mode starts (an MPS daemon takes seconds): an outcome naming
        an idle worker that ended (the run ends, the mode is not started), else None, every set of
        another mode told to leave now rather than when the mode's first set forks: while a mode
        starts no worker of the run waits idle, so none can die unseen (end_mode_other_than)."""
        lost = self.idle_loss()
        if lost is not None:
            self.close()
            return Outcome(scenario.name, error=WorkerLost(lost))
        self.end_mode_other_than(mode_name)
        return None

    def assemble(self, scenario, specs, mode_name: str | None, env: dict[str, str]) -> WorkerSet:
        """The set for `specs`: a member for each (forked now where none sits there yet)."""
        key = set_key(specs, mode_name, env)
        keys = [(key, index) for index in range(len(specs))]  # the set's own: never another set's (set_key)
        missing = [(key, spec) for key, spec in zip(keys, specs)
                   if key not in self.members or not self.members[key][0].process.is_alive()]
        if missing:
            mark("set fork", scenario.name)
            fresh = WorkerSet([spec for _, spec in missing], {**env, **self.visibility(specs)}, self.worker_log,
                              after=self.leaving_pids())
            self.started += 1
            for (key, _), worker, tasks in zip(missing, fresh.workers, fresh.tasks):
                self.members[key] = (worker, tasks)
        return WorkerSet(specs, env, self.worker_log, members=[self.members[key] for key in keys])

    def visibility(self, specs) -> dict[str, str]:
        """The environment that shows a set's workers (`specs`) their own GPUs alone (gpu.visible):
        none for a MIG instance's (it sees its instance alone already)."""
        if any(getattr(spec, "mig", "") for spec in specs):
            return {}
        return visibility_env([spec.device for spec in specs], self.uuids)

    def drop(self, workers: WorkerSet, close: bool = False) -> None:
        """A set that broke (its workers ended by its run, or here with `close`): its members leave
        the pool, and every set that holds one of them goes too."""
        gone = {id(w) for w in workers.workers}
        if close:
            workers.close(graceful=False)
        self.members = {k: m for k, m in self.members.items() if id(m[0]) not in gone}
        for key in [k for k, v in self.sets.items() if v is workers or gone & {id(w) for w in v.workers}]:
            self.sets.pop(key).broken = True

    def idle_loss(self) -> str | None:
        """How an idle worker ended while it waited, or None (every worker alive)."""
        if self.leaving is not None:
            return None
        for worker, _ in self.members.values():
            if not worker.process.is_alive():
                return idle_death_message(worker)
        return None

    def end_mode_other_than(self, mode_name: str | None) -> None:
        """The workers of every other sharing mode leave: no context of one mode times anything beside
        another's. Before MPS (its daemon may start now) they are reaped here; before another mode (the
        time-sliced one after MPS, the host paths' CPUs) its workers make their contexts meanwhile and
        wait for them to be gone (wait_for_leavers)."""
        self._leave([k for k in self.members if k[0][0] != mode_name])
        for key in [k for k in self.sets if k[0] != mode_name]:
            self.sets.pop(key)
        if mode_name is not None and base_mode(mode_name) == Mps.name:
            self.reap(other_than=mode_name)

    def _everyone(self, members=None) -> WorkerSet:
        """One set of the members given (default: all), to tell them to leave or end them at once."""
        members = list(self.members.values()) if members is None else members
        together = WorkerSet([worker.spec for worker, _ in members], {}, self.worker_log, members=members)
        together.leaving = self.leaving
        return together

    def close(self) -> None:
        self._everyone().close()
        for leaving, _ in self.retired:
            leaving.close()
        self.sets, self.members, self.retired = {}, {}, []

    def let_go(self) -> None:
        """The run's work is done: every worker is told to leave now; end() reaps them."""
        everyone = self._everyone()
        everyone.let_go()
        self.leaving = everyone.leaving
        self.members = {k: (worker, None) for k, (worker, _) in self.members.items()}  # their task pipes are closed

    def end(self) -> None:
        """The run's end: every worker, and the fork server (its children are gone by now)."""
        self.close()
        if self.forkserver:
            import multiprocessing.forkserver

            server = multiprocessing.forkserver._forkserver
            stop = getattr(server, "_stop", None)
            if stop is not None:
                mark("workers ended")
                # Killed, not told to leave: its children are reaped (close() above) and it holds nothing of
                # the run's but its socket (gone with it); left to exit, it would first finalize the torch,
                # NVSHMEM and CuPy it imported (0.4-0.7 s on one H200, which the user waited for)
                pid = getattr(server, "_forkserver_pid", None)
                if pid:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                stop()
                mark("fork server stopped")
            self.forkserver = False


def _set_main(tasks, conn, spec, env, worker_log, after=()) -> None:
    """One persistent worker: the fork launcher's set-up once, then every task it is sent."""
    launcher.enter_worker(spec, env, worker_log)
    launcher.wait_for_leavers(spec, after)
    code = 0
    try:
        while code == 0:
            try:
                task = tasks.recv()
            except (EOFError, OSError):
                break
            if task is None:
                break
            if task == "warm":
                launcher.warm_worker(spec)
                conn.send(("warm",))
                continue
            if isinstance(task, tuple) and len(task) == 2 and task[0] == "log":  # (WorkerSets.adopt)
                output_to(task[1])
                continue
            scenario, spec, specs, config, segment, shared, fault, mode_name = task
            launcher.name_worker(scenario, spec, specs, " (persistent)")
            os.environ["GPUIPC_BENCH_FAULT"] = fault
            try:
                code = launcher.run_worker(scenario, spec, specs, config, segment, shared, conn.send, mode_name)
            finally:
                for mapped in (segment, shared):
                    close = getattr(mapped, "close", None)
                    if close is not None:
                        try:
                            close()
                        except Exception:  # noqa: BLE001 - a view still alive: it goes with the process
                            pass
    finally:
        exit_worker(conn, code)
