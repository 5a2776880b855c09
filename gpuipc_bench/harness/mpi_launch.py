"""Run the workers as MPI ranks: `mpirun -np 2 gpuipc-bench run ...`, `srun -n 2 gpuipc-bench run ...`.

Every rank runs the same command line. Rank 0 plays the parent's part (the plan, the CSV,
the progress and the summary) and is worker 0 as well; rank r is worker r. No launcher of
our own: mpirun or srun starts the processes, mpi4py (the `mpi` extra) gives the rank, the
job's size and the node-local rank (a COMM_TYPE_SHARED split), which picks the GPU.

For each scenario rank 0 makes the shared-memory segment and the scenario's shared objects
(prepare()) as the fork launcher does, and sends them to the other ranks pickled: they map
the same pages through /proc/<pid>/fd (gpuipc_bench.ipc.shared), so every path works unchanged
and the workers meet in the tool's own barrier. Rank 0's worker runs in a thread beside the
supervisor; the other ranks send their rows, progress and notes to rank 0 as they measure
them, so rows taken before a failure are kept (the CSV is appended to as they arrive).

Faults: a worker that raises ends the scenario with the same message as a forked one, and
the run goes on. A rank that dies or hangs is named the same way ("worker 1 (consumer,
GPU 0), rank 1, ... made no progress for 60 s during sample 3 at 64 MiB"), the CSV is
written, and the job is ended by MPI_Abort, mpirun's own abort (a process that died
already makes mpirun end the job itself; rank 0 then names it from its last heartbeat).

Across nodes the workers cannot share a segment: the scenarios here all move data within
one node, so a job whose ranks span several hosts is refused with the reason (the design
for cross-node paths: staging over MPI, NCCL and NVSHMEM, is in the README).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import queue
import socket
import threading
import time
from typing import Any, Callable

from gpuipc_bench.errors import BenchError, UsageError, WorkerFailed

CONTROL, MESSAGE = 1, 2  # MPI tags: rank 0's instructions; a worker's messages to rank 0
IDLE_POLL_S = 0.002  # a rank waiting for a message looks this often (idle_recv)
INSTALL_HINT = "pip install -e '.[mpi]' (mpi4py, built against the MPI library mpirun belongs to)"
# Environment variables that MPI launchers and Slurm set in each process they start.
SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS")


def idle_recv(comm, source: int, tag: int, poll_s: float = IDLE_POLL_S):
    """comm.recv without spinning a core: Open MPI's blocking receive polls at full speed, so a rank
    that waits (for its next scenario, or while other nodes measure) would take a core from the
    workers measuring beside it. Probes, sleeping `poll_s` between probes."""
    while not comm.iprobe(source=source, tag=tag):
        time.sleep(poll_s)
    return comm.recv(source=source, tag=tag)


def launched_by_mpi(environ=os.environ) -> bool:
    """Whether this process is one of several started by mpirun/mpiexec/srun."""
    if "PMIX_RANK" in environ and "OMPI_COMM_WORLD_SIZE" not in environ and "SLURM_NTASKS" not in environ:
        return True  # a PMIx launcher that says no size: ask MPI
    for name in SIZE_VARIABLES:
        value = environ.get(name, "")
        if value.isdigit() and int(value) > 1:
            return name != "SLURM_NTASKS" or "SLURM_PROCID" in environ
    return False


def _launcher_variable(environ=os.environ) -> str:
    """The variable that says this process is an MPI rank ('OMPI_COMM_WORLD_SIZE=2')."""
    for name in (*SIZE_VARIABLES, "PMIX_RANK"):
        if name in environ:
            return f"{name}={environ[name]}"
    return "its environment"


def resolve_launcher(asked: str | None) -> str:
    """'fork' or 'mpi': as asked with --launcher, else detected from the environment."""
    if asked:
        return asked
    return "mpi" if launched_by_mpi() else "fork"


@dataclasses.dataclass
class Job:
    """This process's place in the MPI job."""

    comm: Any
    rank: int
    size: int
    local_ranks: list[int]  # each rank's rank on its node
    hosts: list[str]  # each rank's host

    def __post_init__(self) -> None:
        global _scenario_comm
        _scenario_comm = self.comm  # what mpi_world() gives this process's scenarios

    @classmethod
    def start(cls, asked: bool = True) -> "Job":
        """Join the MPI job. `asked`: --launcher mpi was given (else the environment said so),
        which the message names when MPI cannot be used."""
        why = "--launcher mpi" if asked else f"started by an MPI launcher ({_launcher_variable()})"
        try:
            from mpi4py import MPI
        except ImportError as exc:
            raise UsageError(f"{why}: needs mpi4py: {INSTALL_HINT} ({exc}); or use --launcher fork") from None
        except (RuntimeError, OSError) as exc:  # mpi4py is there, the MPI library it needs is not
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            detail = lines[1] if len(lines) > 1 else (lines[0] if lines else type(exc).__name__)
            raise UsageError(f"{why}: mpi4py cannot load an MPI library ({detail[:160]}); install the MPI "
                             "library mpi4py was built against, or use --launcher fork") from None
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:  # rank 0 runs its worker beside the supervisor
            raise UsageError("--launcher mpi: the MPI library gives no MPI_THREAD_MULTIPLE, which rank 0 "
                             "needs (its worker runs beside the supervisor)")
        if MPI.COMM_WORLD.Get_size() < 2:
            raise UsageError("--launcher mpi: this process is the only rank of its MPI job; start the workers "
                             "with `mpirun -np 2 gpuipc-bench run ...` or `srun -n 2 gpuipc-bench run ...`")
        # COMM_WORLD itself, no Dup (a collective without a deadline): the tool's messages have tags of
        # their own, and MPI never matches a collective (the barrier's reference) with a message.
        comm = MPI.COMM_WORLD
        local = comm.Split_type(MPI.COMM_TYPE_SHARED)
        local_rank = local.Get_rank()
        local.Free()
        return cls(comm, comm.Get_rank(), comm.Get_size(), comm.allgather(local_rank),
                   comm.allgather(socket.gethostname()))

    # ------------------------------------------------------------------ the job's facts

    def one_node(self) -> bool:
        return len(set(self.hosts)) == 1

    def metadata(self) -> dict[str, str]:
        return {"launcher": "mpi", "mpi.ranks": str(self.size),
                "mpi.hosts": ",".join(f"{r}:{h}" for r, h in enumerate(self.hosts))}

    def devices(self, gpu_count: int) -> tuple[int, ...] | None:
        """Each rank's GPU from its node-local rank (None on a node of one GPU or none: the
        scenarios' own choice, GPU 0, applies)."""
        if gpu_count < 2:
            return None
        return tuple(r % gpu_count for r in self.local_ranks)

    # ------------------------------------------------------------------ ranks other than 0

    @staticmethod
    def leave_if_nixl(code: int) -> None:
        """End this rank without C library destructors where NIXL was loaded in it. NIXL's wheel
        bundles UCX with its own libnl; Open MPI's verbs components load the system's; at exit the
        two copies' destructors crash the rank (SIGSEGV in rtnl_tc_unregister) after all its work is
        done and sent. So: finalize MPI, flush, and leave at once. Elsewhere this does nothing."""
        if not any(name.split(".")[0] in ("nixl_cu12", "nixl_cu13") for name in sys.modules):
            return
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized():
            MPI.Finalize()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):
                pass
        os._exit(code)

    def serve(self) -> int:
        """Ranks 1..n-1: run each scenario rank 0 sends, as worker `rank`, until told to stop."""
        from gpuipc_bench.harness.launcher import run_worker

        while True:
            message = idle_recv(self.comm, 0, CONTROL)
            if message[0] == "stop":
                return 0
            _, scenario, specs, config, segment, shared = message
            spec = specs[self.rank]
            try:
                run_worker(scenario, spec, specs, config, segment, shared,
                           lambda m: self.comm.send(m, dest=0, tag=MESSAGE))
            finally:
                segment.close()

    def stop_others(self) -> None:
        for r in range(1, self.size):
            self.comm.send(("stop",), dest=r, tag=CONTROL)

    def abort(self, code: int = 1) -> None:
        """End the whole job the way mpirun does it (MPI_Abort)."""
        self.comm.Abort(code)

    # ------------------------------------------------------------------ rank 0

    def run_scenario(self, scenario, config, specs, on_row, on_progress=None, on_status=None, on_note=None):
        """launcher.run_scenario's counterpart: the same Outcome, the same messages. Raises
        RanksLost (after the scenario's rows are delivered) when a rank died or hung."""
        from gpuipc_bench.harness.launcher import Outcome, run_worker
        from gpuipc_bench.ipc.segment import Segment

        outcome = Outcome(scenario.name)
        segment = Segment.create(len(specs), scenario.mailbox_slots(config, specs))
        shared = None
        on_progress = on_progress or (lambda n: None)
        try:
            shared = scenario.prepare(config, specs)
            for r in range(1, len(specs)):
                self.comm.send(("scenario", scenario, specs, config, segment, shared), dest=r, tag=CONTROL)
            local: queue.Queue = queue.Queue()
            thread = threading.Thread(target=run_worker, name="gpuipc-bench worker 0", daemon=True,
                                      args=(scenario, specs[0], specs, config, segment, shared, local.put))
            thread.start()

            def deliver(row: dict) -> None:
                outcome.rows += 1
                on_row(row)

            outcome.error = _Supervisor(self, specs, segment, config, thread, local).run(
                deliver, on_progress, on_status or (lambda text: None), on_note or (lambda k, t: None))
        finally:
            segment.abort()
            thread_left = True
            if "thread" in locals():  # rank 0's worker sees the abort word and leaves
                thread.join(2.0)
                thread_left = not thread.is_alive()
            try:
                scenario.release(shared)
            finally:
                if thread_left:  # else it still reads the segment: the mapping goes with the process
                    segment.close()
        return outcome


class RanksLost(WorkerFailed):
    """A rank died or hung: the job cannot go on (its process is gone or stuck), so after the
    CSV is written the run ends with MPI_Abort."""


class _Rank:
    """What the supervisor knows of one worker (supervision.Worker's fields, for its messages)."""

    def __init__(self, spec, segment, thread=None):
        self.spec, self.segment, self.thread = spec, segment, thread
        self.finished, self.closed, self.error = False, False, None
        self.started = time.monotonic()

    def alive(self) -> bool:
        if self.thread is not None:
            return self.thread.is_alive()
        from gpuipc_bench.modes.daemon import alive

        pid = self.segment.pid(self.spec.rank)
        return not pid or alive(pid)  # no pid yet: not started


class _Supervisor:
    def __init__(self, job: Job, specs, segment, config, thread, local: queue.Queue):
        self.job, self.segment, self.config, self.local = job, segment, config, local
        self.ranks = [_Rank(s, segment, thread if s.rank == 0 else None) for s in specs]

    def run(self, on_row, on_progress, on_status, on_note) -> BenchError | None:
        from mpi4py import MPI

        from gpuipc_bench.harness import supervision

        first: BenchError | None = None
        deadline: float | None = None
        status = MPI.Status()

        def fail(error: BenchError, stuck=()) -> None:
            nonlocal first, deadline
            if first is None:
                first, deadline = error, time.monotonic() + supervision.ABORT_GRACE_S
                self.segment.abort()

        handlers = {id(rank): supervision.worker_handlers(rank, self.ranks, self.segment, on_row, on_progress,
                                                          on_note, fail) for rank in self.ranks}

        def handle(rank: _Rank, message: tuple) -> None:
            supervision.dispatch(message, handlers[id(rank)])

        while not all(r.finished for r in self.ranks):
            busy = False
            while True:
                try:
                    handle(self.ranks[0], self.local.get_nowait())
                    busy = True
                except queue.Empty:
                    break
            while self.job.comm.iprobe(source=MPI.ANY_SOURCE, tag=MESSAGE, status=status):
                source = status.Get_source()
                handle(self.ranks[source], self.job.comm.recv(source=source, tag=MESSAGE))
                busy = True
            on_status(supervision.status_text(self.segment, [_Live(r) for r in self.ranks]))
            for rank in self.ranks:
                if not rank.finished and not rank.alive() and rank.thread is not None:
                    while not self.local.empty():  # the thread said goodbye, then ended: read it first
                        handle(rank, self.local.get_nowait())
                if not rank.finished and not rank.alive():
                    rank.finished = True
                    where = supervision.phase_text(self.segment, rank.spec.rank, *self.segment.phase(rank.spec.rank))
                    raise RanksLost(f"{_describe(rank.spec)} died {where}")
            if first is None:
                silent = [r for r in self.ranks if not r.finished and time.monotonic() - max(
                    self.segment.last_progress(r.spec.rank), r.started) > self.config.timeout + 1.0]
                if silent:
                    worker = min(silent, key=lambda r: (self.segment.heartbeat(r.spec.rank), r.spec.rank))
                    self.segment.abort()
                    raise RanksLost(supervision.silent_worker(worker, self.segment, self.config.timeout)
                                    .replace(worker.spec.describe(), _describe(worker.spec)))
            if deadline is not None and time.monotonic() > deadline:
                stuck = [r for r in self.ranks if not r.finished]
                if stuck:
                    raise RanksLost(f"{first}; {', '.join(_describe(r.spec) for r in stuck)} did not leave after it")
            if not busy:
                time.sleep(0.002)
        return first


class _Live:
    """supervision.status_text wants objects with .spec and .process.is_alive()."""

    def __init__(self, rank: _Rank):
        self.spec, self.process = rank.spec, self

    def is_alive(self) -> bool:
        return True


def _describe(spec) -> str:
    return spec.describe().replace(")", f", rank {spec.rank})", 1)


_scenario_comm: Any = None


def mpi_world() -> Any:
    """The communicator of this process's job (its workers' ranks only: a node's pair under
    `check`) for a scenario that measures MPI itself (the barrier's reference)."""
    if _scenario_comm is None:
        raise RuntimeError("mpi_world(): this process is in no MPI job (Job) yet")
    return _scenario_comm


def on_rank_failure(job: Job, error: BaseException, emit: Callable[[str], None]) -> None:
    """After rank 0 wrote what it has: say which rank was lost, then MPI_Abort the job."""
    emit(str(error))
    job.abort(1)
