"""What a scenario is, and what a worker gets to run one.

A scenario module in the top-level `scenarios/` folder defines one subclass of
Scenario. The parent process only calls `waive_reason`, `workers` and `prepare`
(none may touch CUDA: the workers are forked afterwards). Each forked worker calls
`run(ctx)`, which yields result rows (dicts, see results.COLUMNS) as it measures.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    from gpuipc_bench.barrier import Barrier
    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.faults import FaultPlan
    from gpuipc_bench.machine import Machine
    from gpuipc_bench.segment import Segment


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
    rank: int
    role: str  # "producer", "consumer" or "peer"
    device: int | None  # CUDA device index, None for CPU-only workers

    def describe(self) -> str:
        where = f"GPU {self.device}" if self.device is not None else "CPU"
        return f"worker {self.rank} ({self.role}, {where})"


class Scenario:
    name: str = ""
    summary: str = ""
    gpus_needed: int = 0  # 0: runs without a GPU
    min_workers: int = 2
    max_workers: int = 2
    default_workers: int = 2

    def default_sizes(self) -> tuple[int, ...]:
        from gpuipc_bench.config import DEFAULT_GPU_SIZES

        return DEFAULT_GPU_SIZES

    def waive_reason(self, machine: "Machine") -> str | None:
        """None if this scenario can run on `machine`, else why not (shown by `list` and `run`)."""
        if self.gpus_needed and machine.gpu_count < self.gpus_needed:
            if machine.gpu_count == 0:
                return f"needs a CUDA GPU; {machine.cuda_error or 'none found'}"
            return f"needs {self.gpus_needed} GPUs, this machine has {machine.gpu_count}"
        return None

    def workers(self, config: "RunConfig", machine: "Machine") -> list[WorkerSpec]:
        """The workers to fork. Default: producer on the first device, consumers after it."""
        n = config.workers or self.default_workers
        devices = list(config.devices) if config.devices else ([0] if self.gpus_needed else [None])
        specs = []
        for rank in range(n):
            role = "producer" if rank == 0 else "consumer"
            specs.append(WorkerSpec(rank, role, devices[min(rank, len(devices) - 1)]))
        return specs

    def prepare(self, config: "RunConfig", specs: list[WorkerSpec]) -> Any:
        """Runs in the parent before forking, without CUDA: shared host buffers and the like.
        Whatever it returns is inherited by the workers as ctx.shared."""
        return None

    def release(self, shared: Any) -> None:
        """Runs in the parent after the workers are gone: undo `prepare`."""

    def mailbox_slots(self, config: "RunConfig", specs: list[WorkerSpec]) -> int:
        """How many int64 mailbox slots the scenario needs in the shared segment."""
        return 16

    def memory_needed(self, config: "RunConfig", specs: list[WorkerSpec]) -> tuple[int, int]:
        """(host bytes, bytes on each GPU it uses) that the largest size needs at once: checked
        against the machine before any work, so that a size that cannot fit is refused
        with a message instead of ending in the OOM killer or cudaErrorMemoryAllocation.

        A rough default from the largest size L: a CPU scenario 3 L of host memory (a
        shared buffer, a source and a destination); a GPU scenario 2 L of host memory
        (pinned staging) and 3 L on each GPU (source, destination and one more). A
        scenario that knows better overrides it; an estimate that is too high refuses runs
        that would fit, so err low."""
        largest = max(config.sizes_for(self.default_sizes()))
        if self.gpus_needed == 0:
            return 3 * largest, 0
        return 2 * largest, 3 * largest

    def progress_total(self, config: "RunConfig", specs: list[WorkerSpec]) -> int:
        """Progress steps the workers report in all (each worker: one per size by default)."""
        return len(config.sizes_for(self.default_sizes())) * len(specs)

    def run(self, ctx: "WorkerContext") -> Iterator[dict]:
        raise NotImplementedError


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

    @property
    def rank(self) -> int:
        return self.spec.rank

    @property
    def nworkers(self) -> int:
        return len(self.specs)

    def sync(self) -> None:
        """Cross the shared-memory barrier with every worker of this scenario."""
        if self.faults:
            self.faults.hit("barrier")  # arms a 'barrier' fault; the barrier fires it inside
        self.barrier.wait()

    def phase(self, name: str, nbytes: int = 0, iteration: int = 0) -> None:
        """Say what this worker is doing, so that a death or hang can be reported precisely."""
        self.segment.set_phase(self.rank, name, nbytes, iteration)
        if self.faults:
            self.faults.hit(name)

    def progress(self, steps: int = 1) -> None:
        self.send(("progress", steps))
