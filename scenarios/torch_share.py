"""torch: CUDA tensors through a torch.multiprocessing queue, as PyTorch programs share GPU memory.

Two allocator variants (caching: cudaIpcMemHandles; expandable: cuMemCreate fds through
pidfd_getfd), measured as stream and hand-off, with the send, cold receive and release as set-up
rows; workers come from a fork server. The method in full: docs/methods/torch-share.md.
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterator

from gpuipc_bench.errors import BenchError
from gpuipc_bench.gpu import timing
from gpuipc_bench.gpu.memory import Ring, on_device, reps_for
from gpuipc_bench.engine.pair import CONSUMER, MEASURES, PairScenario, PairWorker
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.patterns import seed_for
from gpuipc_bench.engine.sampler import Sample
from gpuipc_bench.engine.scenario import SPIN_LIMIT_S
from gpuipc_bench.scenarios import handles
from gpuipc_bench.scenarios.torch_support import (  # noqa: F401  (tests reach them through this module)
    EXTRA, TensorQueue, TorchSide, allow_ptrace, how_started, missing_torch, queue_semaphores, refused,
    torch_without_cuda, workers_note,
)
from gpuipc_bench.sizes import format_size

VARIANTS = ("caching", "expandable")
HANDOFF_REPS = 64  # tensors per handoff sample before calibration (each is a host round trip)
SHM = "/dev/shm"
# torch.multiprocessing allows 'spawn' and 'forkserver' for CUDA; the fork server imports torch once, for
# every worker of the run, while the paths before torch are measured (a spawned interpreter takes 3-5 s to)
START_METHOD = "forkserver"
SETUP_SEEDS = 0x70C4E5ED  # the fresh tensors' seeds differ from the samples'


# --------------------------------------------------------------------------- can it run here


def remove_torch_files(pid: int, folder: str | None = None) -> None:
    """Unlink the shared-memory files of process `pid` that torch names /torch_<pid>_<n>_<n>
    (the reference counts of the tensors it sent), which a process that ends without torch's
    exit handlers leaves behind."""
    folder = folder or SHM
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if name.startswith(f"torch_{pid}_"):
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass


# --------------------------------------------------------------------------- torch and the queue


class TorchShared:
    """What the parent makes for the workers (picklable for the fork server's): the queue, and a
    word per worker for its pid (close() removes the files torch left under it).

    The queue of the forkserver context holds three named semaphores (/dev/shm/sem.mp-*) and each
    worker leaves torch's files: if the parent is killed (SIGKILL: no clean-up of its own), a
    janitor forked here removes the files and the semaphores once the workers are gone (else
    the files stay, and multiprocessing's resource tracker warns of "leaked semaphore
    objects" as it removes the semaphores)."""

    def __init__(self, nworkers: int = 2):
        import multiprocessing

        from gpuipc_bench.ipc.janitor import Janitor

        context = multiprocessing.get_context(START_METHOD)
        self.queue = context.Queue()
        self.pids = context.RawArray("q", nworkers)
        self.janitor: Janitor | None = Janitor(self._after_parent_death, pids=lambda: list(self.pids),
                                               title="gpuipc-bench: torch janitor")

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "janitor"}  # the janitor stays here

    def __setstate__(self, state):
        self.__dict__.update(state, janitor=None)

    def close(self) -> None:
        if self.janitor is not None:
            self.janitor.close()
        self._remove_files()
        self.queue.close()

    def _remove_files(self) -> None:
        for pid in list(self.pids):
            if pid:
                remove_torch_files(pid)

    def _after_parent_death(self) -> None:
        """In the janitor, once the parent and the workers are gone."""
        import _multiprocessing
        from multiprocessing import resource_tracker

        self._remove_files()
        for name in queue_semaphores(self.queue):
            try:
                _multiprocessing.sem_unlink(name)
            except OSError:
                continue
            resource_tracker.unregister(name, "semaphore")  # removed: nothing for the tracker to warn of


# torch's caching allocator gives a request of 10 MiB or more a segment of its own, rounded up to 2 MiB;
# a smaller one is carved from a shared 20 MiB segment. A caching-variant ring of 8 MiB (a run of small
# sizes, or the resampling pass's run of one) left 12 MiB free in its cudaMalloc segment, and the
# expandable variant's next tensor was carved from it. Every tensor here is one segment, whole.
OWN_SEGMENT_BYTES, SEGMENT_ROUND = 10 << 20, 2 << 20


def whole_segment(nbytes: int) -> int:
    """The tensor size at which `nbytes` fill a caching-allocator segment of their own, exactly."""
    return max(OWN_SEGMENT_BYTES, -(-nbytes // SEGMENT_ROUND) * SEGMENT_ROUND)


class TorchWorker(PairWorker):
    path = "torch"

    def open_torch(self) -> None:
        """torch (after the tool's context), the queue, the ptracer; both workers cross a barrier."""
        ctx = self.ctx
        ctx.shared.pids[ctx.rank] = os.getpid()
        ctx.declare("torch.ack", *(f"torch.refused.{v}" for v in VARIANTS))
        self.side = TorchSide(self.device)
        self.queue = TensorQueue(ctx, ctx.shared.queue)
        self.acks = 0  # tensors acknowledged so far (the same count in both workers)
        self.setup_seq = 0  # fresh tensors so far (their seeds)
        self.refused: set[str] = set()
        self.rings: dict[str, Any] = {}  # the producer's ring tensor of each variant
        self.received: dict[str, Any] = {}  # ... as the consumer received it (kept: torch's cache holds it open)
        ctx.sync()  # both pids published
        if self.producer:
            allow_ptrace(ctx.segment.pid(CONSUMER))
            ctx.note("workers", workers_note(how_started()))

    def setup(self) -> Iterator[dict]:
        self.open_torch()
        capacity = whole_segment(self.ring_bytes())
        if not self.producer:
            self.mine = self.side.empty(capacity)
            self.scratch = self.gpu.alloc(max(self.sizes) + 256)  # where warm-up copies land
        for variant in VARIANTS:
            self.side.use_allocator(variant)
            yield from self.setup_costs(variant, capacity)
            if variant in self.refused:
                continue
            if self.producer:
                self.rings[variant] = self.fresh(variant, capacity)
                self.queue.put(self.rings[variant])
            else:
                self.received[variant] = self.queue.get()
        self.ctx.sync()

    def fresh(self, variant: str, nbytes: int) -> Any:
        """A new tensor from the allocator, checked to lie in `variant`'s kind of segment."""
        tensor = self.side.empty(nbytes)
        kind = self.side.expandable(tensor)
        if kind is not None and kind != (variant == "expandable"):
            raise BenchError(f"torch/{variant}: the allocator gave {'an expandable' if kind else 'a cudaMalloc'} "
                             f"segment despite expandable_segments:{variant == 'expandable'}")
        return tensor

    def setup_costs(self, variant: str, nbytes: int) -> Iterator[dict]:
        """First receipts of fresh tensors: <v>_send, <v>_receive_cold (verified), <v>_release.
        The kernel's refusal of the fds ends the variant for the run, with a note."""
        ctx, side, src, dst = self.ctx, self.side, self.pdev, self.cdev
        one = Ring.for_size(nbytes, 1)
        for i in range(self.sampler.setup_repeats):
            if variant in self.refused:
                return
            ctx.phase("setup", nbytes, i)
            self.setup_seq += 1
            seed = seed_for(self.setup_seq) ^ SETUP_SEEDS
            tensor = None
            if self.producer:
                tensor = self.fresh(variant, nbytes)
                self.gpu.fill(side.ptr(tensor), one, seed)
                self.gpu.synchronize()
                _, seconds = timing.time_setup(lambda: self.queue.send(tensor), self.device)
                yield self.setup_row(f"{variant}_send", seconds, i, nbytes, src, dst)
            ctx.sync()  # the message is in the pipe
            if not self.producer:
                try:
                    tensor, seconds = timing.time_setup(self.queue.get, self.device)
                except RuntimeError as exc:
                    if not refused(exc):
                        raise
                    ctx.store(f"torch.refused.{variant}", 1)
                    ctx.note(variant, f"skipped: the consumer may not take the producer's file descriptors "
                                      f"({str(exc).splitlines()[0]}); pidfd_getfd needs ptrace rights over the "
                                      "producer: CAP_SYS_PTRACE, or no seccomp filter on it")
                else:
                    yield self.setup_row(f"{variant}_receive_cold", seconds, i, nbytes, src, dst)
                    # torch maps the producer's memory in the producer GPU's context of this process,
                    # where no other GPU's kernel may read it, peer access or not: check it there
                    if self.same_gpu:
                        self.gpu.verify(side.ptr(tensor), one, seed, self.path, variant)
                    else:
                        with on_device(self.pdev):
                            self.meter().gpu_for(self.pdev).verify(side.ptr(tensor), one, seed, self.path, variant)
                    held, tensor = [tensor], None
                    _, seconds = timing.time_setup(held.clear, self.device)  # the last reference: torch closes it
                    yield self.setup_row(f"{variant}_release", seconds, i, nbytes, src, dst)
            ctx.sync()  # released (or refused) before the producer frees it
            if ctx.load(f"torch.refused.{variant}"):
                self.refused.add(variant)
            if self.producer:
                tensor = None
                side.collect()

    # ------------------------------------------------------------------ measuring

    def measure(self, nbytes: int) -> Iterator[dict]:
        for variant in VARIANTS:
            if variant not in self.refused:
                for measure in MEASURES:
                    yield from self.bandwidth(variant, measure, nbytes)
        yield from self.in_turn(lambda: self.ceiling_rows(self.ceiling_for(), nbytes) if not self.producer
                                else iter(()))

    def ceiling_for(self) -> str:
        return f"d2d@{self.cdev}" if self.same_gpu else f"peer@{self.pdev}>{self.cdev}"

    def bandwidth(self, variant: str, measure: str, nbytes: int) -> Iterator[dict]:
        if measure == "stream":
            reps, take = reps_for(nbytes), self.stream_sample
        else:
            reps, take = min(reps_for(nbytes), HANDOFF_REPS), self.handoff_sample
        group = self.group(variant, measure, nbytes, self.pdev, self.cdev, self.ceiling_for(), reps)
        yield from self.sampler.run(group, lambda trial: take(variant, nbytes, trial), timer=not self.producer,
                                    reps=reps)

    def stream_sample(self, variant: str, nbytes: int, trial) -> Sample | None:
        gpu, side, ring = self.gpu, self.side, Ring.for_size(nbytes, trial.reps)
        if self.producer:
            gpu.fill(side.ptr(self.rings[variant]), ring, trial.seed)
            gpu.synchronize()
            self.queue.put(self.rings[variant])
            return None
        tensor = self.queue.get()  # held until verified: a receipt that reopened it would close it when dropped
        theirs, mine = side.ptr(tensor), side.ptr(self.mine)
        # torch maps the producer's memory in the producer GPU's context: across GPUs, a peer copy
        copy = gpu.copy_launcher(nbytes) if self.same_gpu else gpu.peer_copy_launcher(nbytes, self.pdev)
        marks = gpu.time_batch(lambda r: copy(mine + ring.offset(r), theirs + ring.offset(r)), trial.reps,
                               warm=lambda: copy(self.scratch.ptr, theirs), transfer_bytes=nbytes)
        seconds = marks.seconds() / trial.reps
        gpu.verify(mine, ring, trial.seed, self.path, variant, corrupt=self.ctx.corrupt)
        return Sample(seconds, trial.reps)

    def handoff_sample(self, variant: str, nbytes: int, trial) -> Sample | None:
        ctx, gpu, side, ring = self.ctx, self.gpu, self.side, Ring.for_size(nbytes, trial.reps)
        first, self.acks = self.acks + 1, self.acks + trial.reps
        if self.producer:
            src = self.rings[variant]
            base = side.ptr(src)
            gpu.fill(base, ring, trial.seed, poison_tag=True)  # each mark below sets its slot's first bytes right
            mark = gpu.kernels.mark_launcher(nbytes, gpu.stream)
            gpu.synchronize()
            ctx.sync()
            for r in range(trial.reps):
                mark(base + ring.offset(r), trial.seed + r)
                gpu.synchronize()
                self.queue.put(side.view(src, ring.offset(r), nbytes))
                self.await_ack(first + r)
            return None
        ctx.sync()
        t0 = time.perf_counter()
        for r in range(trial.reps):
            side.copy(side.view(self.mine, ring.offset(r), nbytes), self.queue.get())
            ctx.store("torch.ack", first + r)
        seconds = (time.perf_counter() - t0) / trial.reps
        gpu.verify(side.ptr(self.mine), ring, trial.seed, self.path, variant, corrupt=ctx.corrupt)
        return Sample(seconds, trial.reps)

    def await_ack(self, target: int) -> None:
        """Wait for the consumer's ack without holding the GIL: put() leaves the pickling and the
        write to the queue's feeder thread, which a spinning main thread starves (ctx.spin
        measured ~51 ms a tensor, its whole spin limit). time.sleep(0) lets the feeder run."""
        ctx = self.ctx
        index, words = ctx.segment.mailbox_index(ctx.slot("torch.ack")), ctx.segment.words
        limit = time.monotonic() + SPIN_LIMIT_S
        while words[index] < target:
            time.sleep(0)
            if time.monotonic() > limit:
                ctx.wait("torch.ack", target, what="the consumer's receipt of a tensor")
                return

    # ------------------------------------------------------------------ teardown

    def teardown(self, clean: bool) -> None:
        """The consumer lets go of what it received (closing it) before the producer frees it."""
        self.received = {}
        try:
            super().teardown(clean)  # crosses the barrier on a clean exit
        finally:
            if self.producer and clean and getattr(self, "side", None) is not None:
                self.rings = {}
                self.side.collect()


class TorchSizesWorker(TorchWorker):
    """First receipts of fresh tensors at every size of the sweep, nothing else."""

    def setup(self) -> Iterator[dict]:
        self.open_torch()
        _, total = handles.free_and_total(self.device)
        self.cap = total // 4
        skipped = [n for n in self.sizes if n > self.cap]
        if skipped and self.producer:
            self.ctx.note("skipped", f"{', '.join(format_size(n) for n in skipped)}: more than a quarter of "
                                     f"GPU {self.device}'s {format_size(total)}")
        return iter(())

    def measure(self, nbytes: int) -> Iterator[dict]:
        if nbytes > self.cap:
            return
        for variant in VARIANTS:
            self.side.use_allocator(variant)
            yield from self.setup_costs(variant, nbytes)


# --------------------------------------------------------------------------- the scenarios


class TorchScenario(PairScenario):
    persistent_workers = False  # processes of its own, forked by the fork server that imported torch
    name = "torch"
    in_quick_run = False  # its processes and PyTorch start in about a second a mode
    mpi_waiver = "shares tensors through a torch.multiprocessing queue, which reaches only the processes it starts"
    summary = "PyTorch: CUDA tensors through a torch.multiprocessing queue (caching, expandable); forkserver workers"
    worker_class: type[PairWorker] = TorchWorker
    start_method = START_METHOD
    preload = ("torch", "torch.multiprocessing", "cupy", "gpuipc_bench.scenarios.torch_share")
    paths: tuple[PathInfo, ...] = (PathInfo("torch", colour="#ff7f0e", setup=("caching_receive_cold",)),)

    def waive_reason(self, machine):
        return super().waive_reason(machine) or missing_torch() or torch_without_cuda()

    def prepare(self, config, specs):
        return TorchShared(len(specs))

    def release(self, shared):
        if shared is not None:
            shared.close()


class TorchSizesScenario(TorchScenario):
    name = "torch-sizes"
    summary = "set-up cost against allocation size (1 MiB to 1/4 of the GPU) for torch (caching, expandable)"
    worker_class = TorchSizesWorker
    in_default_run = False
    paths = ()  # its rows are the torch path's set-up rows

    def default_sizes(self, preset: str = "") -> tuple[int, ...]:
        return {"quick": handles.QUICK_SIZES, "thorough": handles.THOROUGH_SIZES}.get(preset, handles.SIZES)

    def memory_needed(self, config, specs) -> tuple[int, int]:
        return 0, 2 * min(self.sizes(config))  # larger sizes adapt to the GPU, as the handles study's
