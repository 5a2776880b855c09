"""What a scenario is, and what a worker gets to run one.

A scenario module in the top-level `scenarios/` folder defines one subclass of
Scenario and adds it to the registry (`scenarios/__init__.py`). The parent process
only calls `waive_reason`, `workers`, `sizes`, `memory_needed` and `prepare` (none may
touch CUDA: the workers are forked afterwards). Each forked worker calls `run(ctx)`,
which yields result rows as it measures, through a Sampler (gpuipc_bench.engine.sampler).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator

from gpuipc_bench.defaults import (
    DEFAULT_GPU_SIZES, DEFAULT_HOST_SIZES, QUICK_GPU_SIZES, QUICK_HOST_SIZES, THOROUGH_GPU_SIZES, THOROUGH_HOST_SIZES,
)
from gpuipc_bench.errors import BarrierAborted
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.hooks.profiling import mark
from gpuipc_bench.results import base_mode

if TYPE_CHECKING:
    from gpuipc_bench.ipc.barrier import Barrier
    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.hooks.faults import FaultPlan
    from gpuipc_bench.machine.probe import Machine
    from gpuipc_bench.ipc.segment import Segment

MAILBOX_SLOTS = 64  # the slots a scenario may name (ctx.slot), whatever its worker count
SPIN_LIMIT_S = 0.05  # ctx.spin() spins this long, then waits like ctx.wait()


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    rank: int
    role: str  # "producer", "consumer" or "peer"
    device: int | None  # CUDA device index, None for CPU-only workers
    cpus: tuple[int, ...] = ()  # CPUs to pin the worker to (its GPU's NUMA-local ones); () = any
    # The MIG instance (its UUID) this worker alone sees: the launcher sets CUDA_VISIBLE_DEVICES to
    # it before CUDA starts, and `device` is 0, its index inside (gpuipc_bench.machine.mig). '': a whole GPU.
    mig: str = ""

    def describe(self) -> str:
        where = f"GPU {self.device}" if self.device is not None else "CPU"
        if self.mig:
            where = f"MIG instance {self.mig}"
        return f"worker {self.rank} ({self.role}, {where})"


def gpu_cpus(machine: "Machine | None", device: int | None) -> tuple[int, ...]:
    """The CPUs local to GPU `device` (NVML), or () when unknown or CPU-only."""
    if machine is None or device is None or device >= machine.gpu_count:
        return ()
    return tuple(machine.gpus[device].cpus)


class Scenario:
    name: str = ""
    summary: str = ""
    gpus_needed: int = 0  # 0: runs without a GPU
    # Its workers are a producer GPU and a consumer GPU (--devices A,B): run once per GPU pair by
    # --pairs, and on a multi-GPU node's default pair beside its same-GPU run (plan.plan_pairs).
    pairable: bool = False
    # Runs once per sharing mode of the run (--sharing) where its workers share one GPU: the
    # harness sets the mode's environment in each worker; the scenario never knows.
    sharing_modes: bool = False
    min_workers: int = 2
    max_workers: int = 2
    default_workers: int = 2
    paths: tuple[PathInfo, ...] = ()  # the paths its rows carry, with their facts
    in_default_run: bool = True  # False: run only when named with --scenario (a long study)
    # False: --quick without --scenario leaves it out (a library or a set of processes to start: seconds
    # before its first sample); the default run and -s keep it
    in_quick_run: bool = True
    # How the launcher starts this scenario's workers: "fork" (the default; the parent never
    # touches CUDA) or "spawn" (a fresh interpreter, as PyTorch's CUDA sharing asks for).
    start_method: str = "fork"
    # Run in the run's persistent process set of these workers (gpuipc_bench.harness.pool) rather than in
    # fresh processes: only where nothing the scenario sets up outlives it in a process (a library
    # that reads its settings once per process, peer access that must start off) and its shared
    # objects travel by pickle.
    persistent_workers: bool = False
    # Its bytes cross pinned host memory (staging, mmap, hostpool): in a shared process set it runs after the
    # device paths, whose figures then decide its far-behind groups early (harness.plan.shuffle_paths).
    through_host: bool = False
    # Set on a copy by the plan: the sizes of its sweep this run measures (a headline pair's,
    # harness.classes.headline); None: the whole sweep
    only_sizes: tuple[int, ...] | None = None
    # Why the scenario cannot run with MPI ranks as its workers ('' if it can).
    mpi_waiver: str = ""

    def default_sizes(self, preset: str = "") -> tuple[int, ...]:
        """The sweep when --sizes is not given: the default, or a preset's (--quick, --thorough)."""
        if preset == "quick":
            return QUICK_GPU_SIZES if self.gpus_needed else QUICK_HOST_SIZES
        if preset == "thorough":
            return THOROUGH_GPU_SIZES if self.gpus_needed else THOROUGH_HOST_SIZES
        return DEFAULT_GPU_SIZES if self.gpus_needed else DEFAULT_HOST_SIZES

    def sizes(self, config: "RunConfig") -> tuple[int, ...]:
        """The sizes this scenario measures in this run (resolved once, by the plan)."""
        sizes = config.sizes if config.sizes is not None else self.default_sizes(config.preset)
        if self.only_sizes is not None:
            sizes = tuple(n for n in sizes if n in self.only_sizes)
        return tuple(sorted(sizes))

    def waive_reason(self, machine: "Machine") -> str | None:
        """None if this scenario can run on `machine`, else why not (shown by `list` and `run`)."""
        if self.gpus_needed and machine.gpu_count < self.gpus_needed:
            if machine.gpu_count == 0:
                return f"needs a CUDA GPU: {machine.no_gpu_reason}"
            return f"needs {self.gpus_needed} GPUs, this machine has {machine.gpu_count}"
        return None

    def workers(self, config: "RunConfig", machine: "Machine | None") -> list[WorkerSpec]:
        """The workers to fork. Default: producer on the first device, consumers after it."""
        n = config.workers or self.default_workers
        devices = list(config.devices) if config.devices else ([0] if self.gpus_needed else [None])
        specs = []
        for rank in range(n):
            device = devices[min(rank, len(devices) - 1)]
            specs.append(WorkerSpec(rank, "producer" if rank == 0 else "consumer", device,
                                    gpu_cpus(machine, device)))
        return specs

    def prepare(self, config: "RunConfig", specs: list[WorkerSpec]) -> Any:
        """Runs in the parent before forking, without CUDA: shared host buffers and the like.
        Whatever it returns is inherited by the workers as ctx.shared."""
        return None

    def release(self, shared: Any) -> None:
        """Runs in the parent after the workers are gone: undo `prepare`."""

    def mailbox_slots(self, config: "RunConfig", specs: list[WorkerSpec]) -> int:
        """How many int64 mailbox slots the scenario needs in the shared segment: the ones the
        workers name through ctx.slot(name), and one per worker for lock_names()' checksum."""
        return MAILBOX_SLOTS + len(specs)

    def memory_needed(self, config: "RunConfig", specs: list[WorkerSpec]) -> tuple[int, int]:
        """(host bytes, bytes on each GPU it uses) that the largest size needs at once: checked
        against the machine before any work. A rough default from the largest ring R (a sample's
        slots, about 256 MiB, or the largest size): a CPU scenario 3 R of host memory, a GPU
        scenario 2 R of host memory and 3 R on each GPU. Err low: a high estimate refuses runs
        that would fit."""
        from gpuipc_bench.gpu.memory import ring_capacity

        largest = ring_capacity(self.sizes(config))
        if self.gpus_needed == 0:
            return 3 * max(self.sizes(config)), 0
        return 2 * largest, 3 * largest

    def progress_total(self, config: "RunConfig", specs: list[WorkerSpec]) -> int:
        """Progress steps the workers report in all (each worker: one per size by default)."""
        return len(self.sizes(config)) * len(specs)

    def run(self, ctx: "WorkerContext") -> Iterator[dict]:
        raise NotImplementedError


def shares_processes(scenario) -> bool:
    """Whether a scenario may run in a persistent process set (gpuipc_bench.harness.pool): it says so, and
    its workers are forked by this process."""
    return bool(getattr(scenario, "persistent_workers", False)) and scenario.start_method == "fork"


MPS_THREAD_PCT_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


def sharing_mode(devices: list[int | None], mode: str | None = None) -> str:
    """How workers share their GPUs: 'none' without GPUs, 'exclusive' when each has its own, and
    where processes share one GPU, its mode (same_gpu_mode)."""
    gpus = [d for d in devices if d is not None]
    if not gpus:
        return "none"
    if len(set(gpus)) == len(gpus):
        return "exclusive"
    return same_gpu_mode(mode)


def same_gpu_mode(mode: str | None = None) -> str:
    """The rows' `sharing` of processes on one GPU: the run's sharing mode, `mode`, whose name the
    parent that started it hands to the workers ('time-sliced', 'mps', 'time-sliced+compute'; the
    rows of 'mps:25' say 'mps', their share in mps_thread_pct, and those of a busy neighbour beside
    a share, 'mps:25+copy', say 'mps+copy', the analysis keying both by their share again:
    analysis.conditions.with_mps_shares); where none was handed (MPI ranks, a scenario run on
    its own), what this process is: 'mps' when an MPS daemon serves it, else 'time-sliced'."""
    if mode is None:
        from gpuipc_bench.modes.daemon import serves_this_process

        return "mps" if serves_this_process() else "time-sliced"
    base = base_mode(mode)
    return base.partition(":")[0] + mode[len(base):]


def unlink_driver_files(pid: int) -> None:
    """Unlink the CUDA driver's /dev/shm/cuda.shm.<n>.<pid in hex>.<n> files of process `pid`
    (made for its interprocess events, never removed by the driver). Called by each worker once
    every worker has opened the others' handles (lock_names): the mappings stay valid, and no
    file is left behind however the run ends, a SIGKILL of the parent included."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for name in names:
        parts = name.split(".")
        if len(parts) == 5 and parts[:2] == ["cuda", "shm"] and parts[3] == f"{pid:x}":
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass


@dataclasses.dataclass
class WorkerContext:
    """Everything a worker has. Built by the launcher inside the forked child."""

    spec: WorkerSpec
    specs: list[WorkerSpec]
    config: "RunConfig"
    segment: "Segment"
    barrier: "Barrier"
    shared: Any
    send: Callable[[tuple], None]  # message to the parent; used for progress
    faults: "FaultPlan | None" = None  # test hook, see faults.py
    clock: "Callable[[], float] | None" = None  # this worker's GPU's SM clock in MHz (gpu/clock.py), if it has one
    mode: str | None = None  # the run's sharing mode these workers are in (its name), None: none handed
    row_fields: dict = dataclasses.field(default_factory=dict)  # stamped on every row (begin())
    _slots: dict = dataclasses.field(default_factory=dict)
    _handles: dict = dataclasses.field(default_factory=dict)
    _locked: bool = False

    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def nworkers(self) -> int:
        return len(self.specs)

    @property
    def corrupt(self) -> bool:
        """The test hook GPUIPC_BENCH_FAULT=corrupt: flip a received byte before verifying."""
        from gpuipc_bench.hooks.faults import corrupt_requested

        return corrupt_requested()

    def begin(self, scenario: str, sharing: str | None = None) -> None:
        """Start of a scenario's run in this worker: pin it to its GPU's CPUs, and fix the fields
        every row carries (scenario, workers, sharing)."""
        if self.spec.cpus:
            try:
                os.sched_setaffinity(0, self.spec.cpus)
            except (OSError, AttributeError):
                pass  # a restricted cpuset: run where we are allowed to
        if sharing is None:  # a pair on MIG instances is 'mig', within one instance or across two
            sharing = "mig" if any(s.mig for s in self.specs) else sharing_mode([s.device for s in self.specs],
                                                                                 self.mode)
        self.row_fields.update(scenario=scenario, workers=self.nworkers, sharing=sharing)
        # the share of the SMs this client may use, as CUDA reads it (MPS's default: all)
        if base_mode(sharing) == "mps":
            self.row_fields["mps_thread_pct"] = int(os.environ.get(MPS_THREAD_PCT_ENV) or 100)

    def sync(self) -> None:
        """Cross the shared-memory barrier with every worker of this scenario."""
        if self.faults:
            self.faults.hit("barrier")  # arms a 'barrier' fault; the barrier fires it inside
        self.barrier.wait()

    def phase(self, name: str, nbytes: int = 0, iteration: int = 0, label: str = "") -> None:
        """Say what this worker is doing (and that it is alive), so that a death or hang is
        reported precisely and a long phase is not taken for a hang. `label` names what the
        phase measures where the phase alone does not (a ceiling: 'd2d@0')."""
        self.segment.set_phase(self.rank, name, nbytes, iteration, label=label)
        mark("phase", name, nbytes, label)
        if self.faults:
            self.faults.hit(name)

    def progress(self, steps: int = 1) -> None:
        self.send(("progress", steps))

    def note(self, key: str, text: str) -> None:
        """A fact found while running (e.g. a handle type the driver refuses, and why), kept
        in the CSV header as `# note.<scenario>.<key>: text`."""
        self.send(("note", f"{self.row_fields.get('scenario', '')}.{key}", " ".join(str(text).split())))

    # ---------------------------------------------------------------- the mailbox, by name

    def slot(self, name: str) -> int:
        """The mailbox slot called `name`. Slots are numbered in the order names are first used,
        so every worker names them in the same order during setup; lock_names() then checks that
        they did, and refuses new names."""
        if name not in self._slots:
            if self._locked:
                raise RuntimeError(f"mailbox slot {name!r} was not named during setup")
            if len(self._slots) >= self.segment.mailbox_slots - self.nworkers:
                raise RuntimeError(f"mailbox full: no slot left for {name!r}")
            self._slots[name] = len(self._slots)
        return self._slots[name]

    def declare(self, *names: str) -> None:
        for name in names:
            self.slot(name)

    def lock_names(self) -> None:
        """After setup: check that every worker numbered the same slot and handle names the same
        way (each publishes a checksum in a slot kept at the end of the mailbox), then refuse new
        names. Crosses one barrier."""
        import zlib

        table = "\n".join(list(self._slots) + ["--"] + list(self._handles)).encode()
        last = self.segment.mailbox_slots - 1
        self.segment.store(last - self.rank, zlib.crc32(table) + 1)
        self.sync()
        sums = {self.segment.load(last - s.rank) for s in self.specs}
        if len(sums) != 1:
            raise RuntimeError("the workers named their mailbox slots or handles in different orders")
        self._locked = True
        unlink_driver_files(os.getpid())

    def store(self, name: str, value: int) -> None:
        self.segment.store(self.slot(name), value)

    def load(self, name: str) -> int:
        return self.segment.load(self.slot(name))

    def others(self) -> list[int]:
        return [s.rank for s in self.specs if s.rank != self.rank]

    def wait(self, name: str, target: int, who: list[int] | None = None, what: str | None = None) -> None:
        """Wait (spin, then yield, then sleep) until slot `name` reaches `target`."""
        self.segment.wait_until(self.slot(name), target, self.config.timeout,
                                waiting_for=who if who is not None else self.others(), where=what)

    def spin(self, name: str, target: int, who: list[int] | None = None) -> None:
        """Wait for slot `name` to reach `target` by spinning (no sleep): for waits inside a timed
        interval, where a sleep's late wake-up would be measured. A wait longer than SPIN_LIMIT_S
        is no longer a matter of microseconds: it goes on as wait(), which publishes whom it
        waits for and gives up only once they have been silent for --timeout."""
        index = self.segment.mailbox_index(self.slot(name))
        words = self.segment.words
        if words[index] >= target:
            return
        limit = time.monotonic() + SPIN_LIMIT_S
        n = 0
        while words[index] < target:
            n += 1
            if n & 1023 == 0:
                if self.segment.aborted:
                    raise BarrierAborted("run aborted")
                if time.monotonic() > limit:
                    self.wait(name, target, who)
                    return
                os.sched_yield()

    # ---------------------------------------------------------------- the handle table, by name

    def handle_slot(self, name: str) -> int:
        """The handle-table slot called `name` (numbered like mailbox slots)."""
        from gpuipc_bench.ipc.segment import HANDLE_SLOTS

        if name not in self._handles:
            if self._locked:
                raise RuntimeError(f"handle {name!r} was not named during setup")
            if len(self._handles) >= HANDLE_SLOTS:
                raise RuntimeError(f"handle table full: no slot left for {name!r}")
            self._handles[name] = len(self._handles)
        return self._handles[name]

    def publish(self, name: str, data: bytes) -> None:
        """Put this worker's handle `name` (at most 64 bytes) where the others can read it."""
        self.segment.put_handle(self.rank, self.handle_slot(name), data)

    def receive(self, rank: int, name: str) -> bytes:
        """Worker `rank`'s handle `name` (after a barrier that follows its publish)."""
        return self.segment.get_handle(rank, self.handle_slot(name))
