"""symm: PyTorch's symmetric memory (torch.distributed._symmetric_memory) between two processes.

One scenario per backend (symm: CUDA, symm-nvshmem, symm-nccl), each copying from the peer's
buffer with the copy engine ('-ce') or the tool's kernel ('-sm'), as stream and as a hand-off
signalled through the handle's signal pad. The method in full: docs/methods/symm.md.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterator

from gpuipc_bench.errors import UsageError
from gpuipc_bench.gpu.memory import Ring, reps_for
from gpuipc_bench.gpu.timing import QUEUE_OPS, time_setup
from gpuipc_bench.engine.pair import CONSUMER, MEASURES, PRODUCER, PairScenario, PairSharedWithFolder, PairWorker
from gpuipc_bench.engine.sampler import Group, Sample
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.scenarios.symm_support import (
    BACKENDS, ONE_GPU_REFUSALS, SymmSide, missing_reason, worker_environment,
)

ENGINES = ("ce", "sm")
SETUP_BYTES = 1 << 20  # the fresh buffers whose rendezvous the set-up rows time
FILLED, DRAINED, GO, PROBE = 0, 1, 2, 3  # signal-pad channels
HANDOFF_OPS = 4  # operations a side queues per hand-off transfer (two signals, a mark or copy, a wait)
MAX_HANDOFF = max(1, min(64, QUEUE_OPS // HANDOFF_OPS))
PATH = PathInfo("symm", colour="#bcbd22", setup=("rendezvous_first",))


def variants(backend: str) -> tuple[str, ...]:
    """The rows' variants of `backend` ('cuda-ce', 'cuda-sm')."""
    return tuple(f"{backend.lower()}-{engine}" for engine in ENGINES)


class SymmShared(PairSharedWithFolder):
    """The pair's gate page, and a folder for the process group's file store."""

    def __init__(self):
        super().__init__(prefix="gpuipc-bench-symm-")


class SymmWorker(PairWorker):
    path = "symm"

    @property
    def backend(self) -> str:
        return BACKENDS[self.scenario.name]

    def setup(self) -> Iterator[dict]:
        ctx = self.ctx
        ctx.declare("symm.signals")
        os.environ.update(worker_environment(self.same_gpu, ctx.shared.folder))  # before torch starts a backend
        self.views: list[Any] = []  # tensors of the peer's memory (dropped before the peer frees)
        self.kept: list[Any] = []  # this worker's symmetric tensors and handles
        self.side = side = SymmSide(self.device, self.config.timeout)
        side.use_backend(self.backend)
        ctx.sync()
        rows = []
        seconds = side.start_group(os.path.join(ctx.shared.folder, "store"), ctx.rank, 2, self.backend)
        rows.append(self.setup_row("pg_init", seconds, 0, 0, self.pdev, self.cdev))
        for i in range(self.sampler.setup_repeats + 1):  # the first, then the later ones
            ctx.phase("setup", SETUP_BYTES, i)
            tensor, seconds = time_setup(lambda: side.empty(SETUP_BYTES), self.device)
            if i == 0:  # the process's first symmetric allocation (NVSHMEM starts its heap here)
                rows.append(self.setup_row("empty_first", seconds, 0, SETUP_BYTES, self.pdev, self.cdev))
            ctx.sync()
            handle, seconds = time_setup(lambda: side.rendezvous(tensor), self.device)
            self.kept += [tensor, handle]
            rows.append(self.setup_row("rendezvous" if i else "rendezvous_first", seconds, max(0, i - 1),
                                       SETUP_BYTES, self.pdev, self.cdev))
        capacity = self.ring_bytes()
        self.ring = side.empty(capacity)
        ctx.sync()
        self.handle, seconds = time_setup(lambda: side.rendezvous(self.ring), self.device)
        rows.append(self.setup_row("rendezvous_ring", seconds, 0, capacity, self.pdev, self.cdev))
        self.mine = side.ptr(self.ring)
        self.scratch = self.gpu.alloc(max(self.sizes) + 256)  # where warm-ups land
        if not self.producer:
            self.theirs_tensor = side.peer_buffer(self.handle, PRODUCER, capacity)
            self.views.append(self.theirs_tensor)
            self.theirs = side.ptr(self.theirs_tensor)
        self.handoff = self.probe_signals()
        if self.producer:
            ctx.note("backend", f"{self.backend} (torch {side.version})")
        ctx.sync()
        if not self.producer:
            yield from rows

    def probe_signals(self) -> bool:
        """Whether the handle's put_signal/wait_signal work: the producer puts one signal (or says
        why it cannot); the consumer waits for it only if it was put. The producer notes a refusal."""
        ctx, side = self.ctx, self.side
        if self.producer:
            why = side.signals(self.handle)
            if why is None:
                try:
                    with side.on_stream(self.gpu.stream.ptr):
                        side.put_signal(self.handle, CONSUMER, PROBE)
                    self.gpu.synchronize()
                except (RuntimeError, ValueError, NotImplementedError) as exc:
                    why = f"put_signal refused: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ctx.store("symm.signals", 2 if why else 1)
            if why:
                ctx.note("handoff", f"skipped: {why}")
            ctx.sync()
            return why is None
        ctx.sync()
        if ctx.load("symm.signals") != 1:
            return False
        with side.on_stream(self.gpu.stream.ptr):
            side.wait_signal(self.handle, PRODUCER, PROBE)
        self.gpu.synchronize()
        return True

    # ------------------------------------------------------------------ measuring

    def measure(self, nbytes: int) -> Iterator[dict]:
        measures = MEASURES if self.handoff else ("stream",)
        groups = [self.bandwidth(v, m, nbytes) for v in variants(self.backend) for m in measures]
        yield from self.sampler.interleave(groups, nbytes)
        yield from self.in_turn(lambda: self.ceiling_samples(nbytes))

    def ceiling_for(self, variant: str) -> str:
        sm = "-sm" if variant.endswith("-sm") else ""
        return f"d2d{sm}@{self.cdev}" if self.same_gpu else f"peer{sm}@{self.pdev}>{self.cdev}"

    def ceiling_samples(self, nbytes: int) -> Iterator[dict]:
        if self.producer:
            return
        for key in dict.fromkeys(self.ceiling_for(v) for v in variants(self.backend)):
            yield from self.ceiling_rows(key, nbytes)

    def bandwidth(self, variant: str, measure: str, nbytes: int) -> Group:
        if measure == "stream":
            reps, take = reps_for(nbytes), self.stream_sample
        else:
            reps, take = min(reps_for(nbytes), MAX_HANDOFF), self.handoff_sample
        group = self.group(variant, measure, nbytes, self.pdev, self.cdev, self.ceiling_for(variant), reps)
        return self.sampler.run(group, lambda trial: take(variant, nbytes, trial), timer=not self.producer,
                                reps=reps)

    def copy_from_peer(self, variant: str, nbytes: int):
        """f(dst, src) offsets: slot src of the producer's buffer into slot dst of this worker's ring."""
        if variant.endswith("-sm"):
            kernel, mine, theirs = self.gpu.copy_launcher(nbytes, "sm"), self.mine, self.theirs
            return lambda dst, src: kernel(mine + dst, theirs + src)
        return self.side.copier(self.ring, self.theirs_tensor, nbytes)

    def warm_copy(self, variant: str, nbytes: int):
        """A copy like the variant's from the peer's buffer, into the scratch buffer."""
        if variant.endswith("-sm"):
            kernel, theirs, scratch = self.gpu.copy_launcher(nbytes, "sm"), self.theirs, self.scratch.ptr
            return lambda: kernel(scratch, theirs)
        copy = self.copy_from_peer(variant, nbytes)
        return lambda: copy(0, 0)  # slot 0 onto itself: the verified slots are copied after

    def stream_sample(self, variant: str, nbytes: int, trial) -> Sample | None:
        gpu, ring = self.gpu, Ring.for_size(nbytes, trial.reps)
        if self.producer:
            gpu.fill(self.mine, ring, trial.seed)
            gpu.synchronize()
            self.ctx.sync()  # filled
            self.ctx.sync()  # copied: the ring may be filled again
            return None
        self.ctx.sync()
        copy = self.copy_from_peer(variant, nbytes)
        with self.side.on_stream(gpu.stream.ptr):
            marks = gpu.time_batch(lambda r: copy(ring.offset(r), ring.offset(r)), trial.reps,
                                   warm=self.warm_copy(variant, nbytes), transfer_bytes=nbytes)
        self.ctx.sync()
        gpu.verify(self.mine, ring, trial.seed, self.path, variant, corrupt=self.ctx.corrupt)
        return Sample(marks.seconds() / trial.reps, trial.reps)

    def handoff_sample(self, variant: str, nbytes: int, trial) -> Sample | None:
        gpu, side, handle, ring = self.gpu, self.side, self.handle, Ring.for_size(nbytes, trial.reps)
        last = trial.reps - 1
        if self.producer:
            gpu.fill(self.mine, ring, trial.seed, poison_tag=True)  # each mark sets its slot's first bytes right
            gpu.synchronize()
            mark, mine, scratch = gpu.kernels.mark_launcher(nbytes, gpu.stream), self.mine, self.scratch.ptr

            def op(r: int) -> None:
                side.wait_signal(handle, CONSUMER, DRAINED if r else GO)
                mark(mine + ring.offset(r), trial.seed + r)
                side.put_signal(handle, CONSUMER, FILLED)

            warm = lambda: mark(scratch, 0)  # noqa: E731
        else:
            copy = self.copy_from_peer(variant, nbytes)

            def op(r: int) -> None:
                if r == 0:
                    side.put_signal(handle, PRODUCER, GO)  # after the start mark: the producer starts now
                side.wait_signal(handle, PRODUCER, FILLED)
                copy(ring.offset(r), ring.offset(r))
                if r < last:
                    side.put_signal(handle, PRODUCER, DRAINED)

            warm = self.warm_copy(variant, nbytes)
        with side.on_stream(gpu.stream.ptr):
            marks = gpu.time_batch(op, trial.reps, warm=warm, shared=True, before_release=self.ctx.sync,
                                   ops_per_rep=HANDOFF_OPS, transfer_bytes=nbytes)
        self.ctx.sync()  # both batches done before the producer fills again
        if self.producer:
            return None
        gpu.verify(self.mine, ring, trial.seed, self.path, variant, corrupt=self.ctx.corrupt)
        return Sample(marks.seconds() / trial.reps, trial.reps)

    # ------------------------------------------------------------------ teardown

    def teardown(self, clean: bool) -> None:
        """The consumer drops its views of the producer's memory before the barrier; then each
        frees its own and leaves the process group."""
        self.views = []
        self.theirs_tensor = None
        try:
            super().teardown(clean)  # crosses the barrier on a clean exit
        finally:
            side = getattr(self, "side", None)
            self.kept, self.handle, self.ring = [], None, None
            if side is not None and clean:
                side.close()


class SymmScenario(PairScenario):
    persistent_workers = False  # the backend is set once per process, and the process group is its own
    start_method = "forkserver"  # forked by the run's fork server, which imported torch once
    preload = ("torch", "torch.distributed", "cupy", "gpuipc_bench.scenarios.symm")
    in_default_run = False  # named with -s: its processes and torch start in seconds a mode
    in_quick_run = False
    mpi_waiver = "starts a process group of its own between the two workers it forks"
    worker_class = SymmWorker
    paths = (PATH,)
    name = "symm"
    summary = "PyTorch symmetric memory: get_buffer of the peer's buffer (ce, sm), signal-pad hand-off; CUDA backend"

    @property
    def backend(self) -> str:
        return BACKENDS[self.name]

    def waive_reason(self, machine):
        if machine.gpu_count == 1 and self.backend in ONE_GPU_REFUSALS:
            return ONE_GPU_REFUSALS[self.backend]
        return super().waive_reason(machine) or missing_reason(self.backend, machine.gpu_count)

    def workers(self, config, machine):
        if self.backend in ONE_GPU_REFUSALS and not config.devices:
            config = dataclasses.replace(config, devices=(0, 1))
        return super().workers(config, machine)

    def prepare(self, config, specs):
        if self.backend in ONE_GPU_REFUSALS and specs[0].device == specs[1].device:
            raise UsageError(f"--devices: {ONE_GPU_REFUSALS[self.backend]}")
        return SymmShared()


def _backend(name: str, summary: str, gpus: int = 1) -> SymmScenario:
    scenario = SymmScenario()
    scenario.name, scenario.summary, scenario.gpus_needed = name, summary, gpus
    return scenario


SCENARIOS = (
    SymmScenario(),
    _backend("symm-nvshmem", "PyTorch symmetric memory as symm, NVSHMEM backend (two GPUs)", gpus=2),
    _backend("symm-nccl", "PyTorch symmetric memory as symm, NCCL backend (two GPUs)", gpus=2),
)
