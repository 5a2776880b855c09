"""staging: cudaMemcpy staging through a shared host buffer, producer D2H then consumer H2D.

The host buffers are anonymous MAP_SHARED memory made by the parent before the fork, so both
workers map the same pages; a transfer r moves slot r of the producer's device ring into slot
r of the host ring (D2H), and that into slot r of the consumer's device ring (H2D).

  pinned           the host ring registered (cudaHostRegister portable|mapped) in both workers;
                   GPU-ordered through interprocess events (gpuipc_bench.engine.exchange)
  pipelined        the same, each message cut into chunks (--chunk, at most 64), so that the
                   consumer's H2D of chunk i overlaps the producer's D2H of chunk i + 1
  pinned-hostsync  the pinned ring, ordered by the host: each copy synchronised, the other
                   side told through the mailbox (one transfer in flight: handoff only)
  pageable         a second shared ring, not registered: the driver stages every copy through
                   its own pinned buffer and the copies block the host (handoff only)

pinned and pipelined are measured both ways: `stream` (the producer runs ahead; the two hops
overlap where the GPUs allow) and `handoff` (one transfer in flight: D2H, signal, H2D, signal
back). Both are timed from the earlier start to the later end across the two processes, so
no hop falls outside the interval. The bound of pinned handoff is the two hops in sequence,
1 / (1/d2h + 1/h2d) (ceiling 'd2h@P+h2d@C'); where the hops may overlap (pipelined chunks, or
stream) it is the slower hop (ceiling 'd2h@P|h2d@C'). The host-ordered variants are
host-timed on CLOCK_MONOTONIC (one clock for the node) with spin waits, never sleeps, inside
the interval.

Ping-pong latency ('pinned-pingpong'): the producer's payload D2H into one host slot and H2D
by the consumer, whose own payload (another seed) comes back the same way; each side
verifies the other's bytes. Ceilings: the producer's d2h@GPU and the consumer's h2d@GPU.

The health form (`check --preset health`; StagingScenario.health, set on a copy by
check.node.health_form): what the check's health figures judge, the GPU's host link both ways, and
nothing else: the producer's d2h@GPU and the consumer's h2d@GPU at the run's largest size, with one
pinned source ring for h2d (filled for every sample: a few samples fill it for less than a second
ring's cudaHostAlloc). No shared host ring (its first touch and registration), no pageable ring, no
staged variant and no ping-pong.
"""

from __future__ import annotations

import mmap
import time
from dataclasses import dataclass

from gpuipc_bench.engine.exchange import Exchange, max_transfers
from gpuipc_bench.gpu.errors import CudaError
from gpuipc_bench.gpu.memory import HostRegistration, Ring, mmap_address, prefault, reps_for, ring_capacity
from gpuipc_bench.gpu.timing import SharedGatePage, host_scratch_bytes, host_warm_bytes
from gpuipc_bench.engine.pair import CONSUMER, MEASURES, PRODUCER, PairScenario, PairWorker
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.engine.sampler import Sample
from gpuipc_bench.ipc.shared import SharedPages

VARIANTS = ("pinned", "pipelined", "pinned-hostsync", "pageable")
GPU_ORDERED = ("pinned", "pipelined")
MAX_CHUNKS = 64
HOST_ORDERED_BYTES = 64 << 20  # a host-ordered sample moves about this much ...
HOST_ORDERED_MAX_REPS = 32  # ... in at most this many transfers
PINGPONG_SIZES = (4, 4 << 10, 64 << 10, 1 << 20)
PINGPONG_ROUNDS = 100
PINGPONG_FIRST_ROUNDS = 20  # the first warm-up's (time-sliced, a round trip pays two context switches)
REPLY = 0x5A5A5A5A


def host_ordered_reps(nbytes: int) -> int:
    return reps_for(nbytes, HOST_ORDERED_BYTES, HOST_ORDERED_MAX_REPS)


def chunking(nbytes: int, variant: str, chunk_bytes: int) -> tuple[int, int]:
    """(chunk size, chunks per transfer). Sequential variants move the message in one piece."""
    if variant != "pipelined":
        return nbytes, 1
    chunks = max(1, min(MAX_CHUNKS, nbytes // chunk_bytes))
    return -(-nbytes // chunks), chunks


@dataclass
class _Shared:
    gate: SharedGatePage
    pinned: mmap.mmap  # the host ring, registered by both workers; then a scratch message
    pageable: mmap.mmap  # never registered

    def close(self):
        self.gate.close()
        for mm in (self.pinned, self.pageable):
            try:
                mm.close()
            except BufferError:
                pass


class StagingWorker(PairWorker):
    path = "staging"
    peer_access_at = "never"  # every byte goes through host memory; no GPU touches the other's

    def host_region(self) -> mmap.mmap:
        """The shared host memory both workers register: the ring, then a scratch message."""
        return self.ctx.shared.pinned

    # The variants whose hand-offs go through CUDA IPC events (gpuipc_bench.engine.exchange).
    event_variants: tuple[str, ...] = GPU_ORDERED

    def setup(self):
        if self.health:  # the ceilings alone: nothing shared to set up
            return
        ctx, gpu = self.ctx, self.gpu
        ctx.declare("h.sent", "h.done", "h.t0", "ping", "pong", "refused.0", "refused.1")
        self.ring_buf = gpu.alloc(self.ring_bytes())  # producer: source ring; consumer: destination ring
        self.scratch = gpu.alloc(max(self.sizes) + 256)
        rows = list(self.share_host_ring())
        # this worker's ceiling buffers now, both workers at once (after the timed registration):
        # made at the first ceiling sample instead, each waits for the other's (in_turn)
        self.meter().reserve(f"d2h@{self.pdev}" if self.producer else f"h2d@{self.cdev}")
        self.host_scratch = self.host + self.ring_bytes()
        self.exchange = Exchange(ctx, self.path, PRODUCER, CONSUMER, self.same_gpu)
        self.exchange.create(gpu)
        ctx.sync()
        self.events_refused = self.open_events()
        ctx.sync()
        self.transfers = 0  # host-ordered transfers so far, in step on both sides
        self.pageable_touched = 0  # bytes of the pageable ring this process has faulted in (touch_pageable)
        yield from rows

    def open_events(self) -> str:
        """Open the other side's events; '' when they opened. Across MIG instances the driver may
        refuse them (CUDA IPC between GPU instances): then both sides leave out the variants that
        hand off through them, and a note says so in the driver's words (the bytes themselves go
        through host memory, which crosses: the host-ordered variants are measured)."""
        if not self.across_mig:
            self.exchange.open(self.gpu, self.imports)
            return ""
        ctx, refused = self.ctx, ""
        try:
            self.exchange.open(self.gpu, self.imports)
        except CudaError as exc:
            refused = str(exc)
        ctx.store(f"refused.{ctx.rank}", 1 if refused else 0)
        ctx.sync()
        if refused:
            a, b = ctx.specs[PRODUCER].mig, ctx.specs[CONSUMER].mig
            ctx.note(f"across_mig.{a}", f"{self.path} across MIG instances {a} -> {b}: "
                     f"{', '.join(self.event_variants)} not measured (they hand off through CUDA IPC events), "
                     f"the driver refused: {ctx.spec.describe()}: {refused}")
        return refused or ("refused on the other side" if any(ctx.load(f"refused.{r}") for r in (0, 1)) else "")

    def share_host_ring(self):
        """Make the host ring (then a scratch message) that both workers reach, and set self.host
        to its device pointer in this process; yields its set-up rows. Here: the shared region,
        registered by each worker."""
        ctx, gpu = self.ctx, self.gpu
        region = self.host_region()
        self.host_addr, keeper = mmap_address(region)
        self._keepers = [keeper]
        if isinstance(ctx.shared, _Shared):
            self.pageable_addr, keeper = mmap_address(ctx.shared.pageable)
            self._keepers.append(keeper)
        if not self.producer:
            yield from self.registration_rows(region)
        ctx.sync()  # first touch done before anyone registers for good
        self.host = gpu.adopt(HostRegistration(self.host_addr, len(region), self.device)).dptr

    def registration_rows(self, region: mmap.mmap):
        """First touch of the region's pages (once), then, where the path declares host_register as its
        set-up (mmap), cudaHostRegister/Unregister of the whole region, SETUP_REPEATS times each, with its
        pages already there. Staging registers a region of the same size the same way: timing it again
        cost ~0.35 s a sharing mode (one H200) for rows no decision read."""
        from gpuipc_bench.gpu.timing import time_setup

        t0 = time.perf_counter()
        prefault(region)
        yield self.setup_row("host_first_touch", time.perf_counter() - t0, 0, len(region), "host", self.device)
        if not any("host_register" in info.setup for info in self.scenario.paths):
            return
        for i in range(self.sampler.setup_repeats):
            self.ctx.phase("setup", len(region), i)
            registration, seconds = time_setup(lambda: HostRegistration(self.host_addr, len(region), self.device),
                                               self.device)
            yield self.setup_row("host_register", seconds, i, len(region), "host", self.device)
            _, seconds = time_setup(registration.close, self.device)
            yield self.setup_row("host_unregister", seconds, i, len(region), "host", self.device)

    # ------------------------------------------------------------------ measuring

    def two_hops(self, variant: str, measure: str, sm: str = "") -> str:
        """The ceiling of a transfer's two hops: 'a+b' when they run in sequence (one message in
        flight, whole: bound 1 / (1/a + 1/b)), 'a|b' when they may overlap (chunks of one message,
        or several messages in flight: bound min(a, b))."""
        joint = "+" if measure == "handoff" and variant != "pipelined" else "|"
        return f"d2h{sm}@{self.pdev}{joint}h2d{sm}@{self.cdev}"

    def host_rings(self) -> int:
        return 1 if self.health else super().host_rings()

    def measure(self, nbytes):
        if self.health:
            if nbytes == max(self.sizes):
                yield from self.ceilings_in_turn(nbytes)
            return
        yield from self.sampler.interleave([
            self.bandwidth(variant, measure, nbytes) for variant in VARIANTS
            # across MIG instances, the driver may refuse the events (see open_events)
            if not (self.events_refused and variant in self.event_variants)
            for measure in (MEASURES if variant in GPU_ORDERED else ("handoff",))], nbytes)
        yield from self.ceilings_in_turn(nbytes)
        if nbytes in PINGPONG_SIZES:
            yield from self.pingpong(nbytes)

    def ceilings_in_turn(self, nbytes):
        """The producer's d2h@GPU, then the consumer's h2d@GPU, each alone."""
        yield from self.in_turn(lambda: self.ceiling_rows(
            f"d2h@{self.pdev}" if self.producer else f"h2d@{self.cdev}", nbytes))

    def bandwidth(self, variant, measure, nbytes):
        handoff = measure == "handoff"
        if variant in GPU_ORDERED:
            chunk, units = chunking(nbytes, variant, self.config.chunk_bytes)
            reps = min(reps_for(nbytes), max_transfers(units, handoff))
            take = lambda trial: self.gpu_ordered(variant, nbytes, chunk, units, handoff, trial)  # noqa: E731
        else:
            reps = host_ordered_reps(nbytes)
            take = lambda trial: self.host_ordered(variant, nbytes, trial)  # noqa: E731
        group = self.group(variant, measure, nbytes, self.pdev, self.cdev, self.two_hops(variant, measure), reps)
        return self.sampler.run(group, take, timer=not self.producer, reps=reps)

    def gpu_ordered(self, variant, nbytes, chunk, units, handoff, trial, engine="ce"):
        """One GPU-ordered batch through the host ring: the producer's hop (D2H, or a kernel
        storing into host memory) into slot r, signalled; the consumer's hop out of it."""
        gpu, ring = self.gpu, Ring.for_size(nbytes, trial.reps)
        mine, host = self.ring_buf.ptr, self.host
        last = nbytes - (units - 1) * chunk
        copies = {chunk: gpu.copy_launcher(chunk, engine), last: gpu.copy_launcher(last, engine)}

        def hop(r, i):  # (dst, src) of this side's part of transfer r, unit i
            at = ring.offset(r) + i * chunk
            copy = copies[chunk if i < units - 1 else last]
            if self.producer:
                copy(host + at, mine + at)
            else:
                copy(mine + at, host + at)

        warm_copy = gpu.copy_launcher(host_warm_bytes(last), engine)  # 1 MiB for a large transfer
        if self.producer:
            gpu.fill(mine, ring, trial.seed)
            warm = lambda: warm_copy(self.host_scratch, mine)  # noqa: E731
        else:
            warm = lambda: warm_copy(self.scratch.ptr, self.host_scratch)  # noqa: E731
        op = hop
        seconds = self.exchange.run(gpu, trial.reps, units, op, handoff, warm, transfer_bytes=last)
        if self.producer:
            return None
        gpu.verify(mine, ring, trial.seed, self.path, variant, corrupt=self.ctx.corrupt)
        return Sample(seconds, trial.reps)

    def host_ordered(self, variant, nbytes, trial):
        """One transfer in flight, ordered by the host: D2H + synchronize, flag, H2D + synchronize,
        flag. Timed from the producer's first copy to the consumer's last (CLOCK_MONOTONIC)."""
        ctx, gpu, ring = self.ctx, self.gpu, Ring.for_size(nbytes, trial.reps)
        mine = self.ring_buf.ptr
        host = self.pageable_addr if variant == "pageable" else self.host
        if variant == "pageable":
            self.touch_pageable(ring.bytes)
        first = self.transfers + 1
        self.transfers += trial.reps
        if self.producer:
            gpu.fill(mine, ring, trial.seed)
            gpu.synchronize()
        ctx.sync()
        if self.producer:
            ctx.store("h.t0", time.monotonic_ns())
            for r in range(trial.reps):
                if r:
                    ctx.spin("h.done", first + r - 1)
                gpu.memcpy(host + ring.offset(r), mine + ring.offset(r), nbytes)
                gpu.synchronize()
                ctx.store("h.sent", first + r)
            return None
        for r in range(trial.reps):
            ctx.spin("h.sent", first + r)
            gpu.memcpy(mine + ring.offset(r), host + ring.offset(r), nbytes)
            gpu.synchronize()
            ctx.store("h.done", first + r)
        seconds = (time.monotonic_ns() - ctx.load("h.t0")) / 1e9 / trial.reps
        gpu.verify(mine, ring, trial.seed, self.path, variant, corrupt=ctx.corrupt)
        return Sample(seconds, trial.reps)

    def touch_pageable(self, span: int) -> None:
        """Fault in this process's pages of the pageable ring up to `span` bytes, once, before the
        timed interval: no sample is charged with the first touch of the slots it is the first to
        use. Without it the first timed sample of each size took ~2x the others (a warm-up uses
        fewer slots than a sample): 125-138 us against 70-82 us per 64 KiB hand-off on one H200."""
        if span <= self.pageable_touched:
            return
        region = self.ctx.shared.pageable
        start = self.pageable_touched // mmap.PAGESIZE * mmap.PAGESIZE
        end = min(len(region), -(-span // mmap.PAGESIZE) * mmap.PAGESIZE)
        prefault(region, start, end - start)
        self.pageable_touched = end

    # ------------------------------------------------------------------ latency

    def pingpong(self, nbytes):
        group = dict(path=self.path, variant="pinned-pingpong", measure="pingpong", metric="latency",
                     src=self.pdev, dst=self.cdev, bytes=nbytes, ceiling=f"h2d@{self.cdev}")
        yield from self.sampler.run(group, lambda trial: self.pingpong_sample(nbytes, trial), timer=self.producer,
                                    reps=PINGPONG_ROUNDS, min_reps=10, phase="latency",
                                    first_reps=PINGPONG_FIRST_ROUNDS)

    def pingpong_sample(self, nbytes, trial):
        """`trial.reps` round trips through two host slots: the producer's payload D2H into slot A,
        H2D by the consumer; the consumer's answer (another seed) D2H into slot B, H2D back."""
        ctx, gpu = self.ctx, self.gpu
        one = Ring.for_size(nbytes, 1)
        payload, received = self.scratch.ptr, self.ring_buf.ptr
        question, answer = self.host, self.host + one.stride
        seed = trial.seed if self.producer else trial.seed ^ REPLY
        gpu.fill(payload, one, seed)
        gpu.synchronize()
        first = (ctx.load("pong") if self.producer else ctx.load("ping")) + 1
        ctx.sync()
        t0 = time.perf_counter()
        for k in range(first, first + trial.reps):
            if self.producer:
                gpu.memcpy(question, payload, nbytes)
                gpu.synchronize()
                ctx.store("ping", k)
                ctx.spin("pong", k)
                gpu.memcpy(received, answer, nbytes)
                gpu.synchronize()
            else:
                ctx.spin("ping", k)
                gpu.memcpy(received, question, nbytes)
                gpu.synchronize()
                gpu.memcpy(answer, payload, nbytes)
                gpu.synchronize()
                ctx.store("pong", k)
        seconds = (time.perf_counter() - t0) / trial.reps / 2
        other = trial.seed ^ REPLY if self.producer else trial.seed
        gpu.verify(received, one, other, self.path, "pinned-pingpong", corrupt=ctx.corrupt)
        ctx.sync()
        return Sample(seconds, trial.reps) if self.producer else None


class StagingScenario(PairScenario):
    name = "staging"
    health = False  # the health form (the module's docstring); set on a copy, never on the registry's
    through_host = True
    summary = "cudaMemcpy D2H into a shared host buffer, H2D out of it (pinned, pipelined, host-ordered, pageable)"
    worker_class = StagingWorker
    paths = (PathInfo("staging", role="baseline", colour="#d62728"),)

    def host_bytes(self, config) -> tuple[int, int]:
        sizes = self.sizes(config)
        pageable = max(Ring.for_size(n, host_ordered_reps(n)).bytes for n in sizes)
        return ring_capacity(sizes) + host_scratch_bytes(sizes), pageable

    def memory_needed(self, config, specs):
        # Host: the pinned ring, the pageable ring, each worker's pinned ceiling buffer.
        # GPU: each worker's ring, scratch and ceiling buffer.
        pinned, pageable = self.host_bytes(config)
        ring = ring_capacity(self.sizes(config))
        per_gpu = max(sum(1 for s in specs if s.device == d) for d in {s.device for s in specs})
        return pinned + pageable + 2 * ring, per_gpu * (2 * ring + max(self.sizes(config)))

    def prepare(self, config, specs):
        if self.health:  # no shared host ring: the pair's gate page only
            return super().prepare(config, specs)
        pinned, pageable = self.host_bytes(config)
        return _Shared(SharedGatePage(), SharedPages(pinned), SharedPages(pageable))

    def release(self, shared):
        if shared is not None:
            shared.close()
