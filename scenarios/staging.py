"""staging: cudaMemcpy staging through a shared host buffer, producer D2H then consumer H2D.

The host buffer is anonymous MAP_SHARED memory made by the parent before the
fork, so both workers map the same pages. Variants:

  pinned     the buffer is registered (cudaHostRegister portable|mapped) in both
             workers; one transfer = the producer's D2H of the whole message, then
             the consumer's H2D of it, then the next transfer (sequential: about
             half the PCIe figure, since the two hops do not overlap)
  pipelined  the same buffer used as two chunk slots: the producer's D2H of chunk
             i+1 overlaps the consumer's H2D of chunk i (should approach one hop)
  pinned-hostsync  the pinned buffer, ordered by the host instead: each copy is
             synchronised and the other side is told through the mailbox
  pageable   a second shared buffer, not registered: the driver stages every
             copy through its own pinned buffer and the copies block the host,
             so this variant is host-ordered like pinned-hostsync

The host-ordered variants are host-timed (CLOCK_MONOTONIC, from the producer's
first copy to the consumer's last). On one GPU without MPS the difference matters:
a stream waiting on the other process's event keeps its context scheduled, and
every hand-over then costs a time-slice switch (~0.15 ms on an H200), which
host ordering avoids; with the two workers on two GPUs the GPU-ordered variants
overlap and win.

Ordering across the processes is on the GPU: each slot has an interprocess
event per direction. The producer records "slot filled" after its D2H, the
consumer's stream waits for it, copies, and records "slot drained", which the
producer's stream waits for before it refills the slot. Events must be recorded
before the other side waits (a wait captures the most recent record), so the
two workers enqueue in lockstep through mailbox counters; all of it is queued
behind one shared gate, released by one host store after both have enqueued.
The consumer's events time the batch: from its gate to its last H2D.
"""

from __future__ import annotations

import mmap
import time
from dataclasses import dataclass

from gpuipc_bench import cuda
from gpuipc_bench.pair import PairScenario, PairWorker

VARIANTS = ("pinned", "pipelined", "pinned-hostsync", "pageable")
SLOTS_PIPELINED = 2
MAX_CHUNKS_PER_SAMPLE = 64  # each chunk queues 3 operations per worker behind the gate
MAX_CHUNKS_PER_TRANSFER = 64
HOST_ORDERED_MAX_REPS = 32
LATENCY_MAX_BYTES = 64 << 10
ROUND_TRIPS = 100

# Mailbox slots.
FILLED = 0  # producer: chunks enqueued (D2H + record) so far
DRAINED = 1  # consumer: chunks enqueued (wait + H2D + record) so far
T0 = 2  # producer: CLOCK_MONOTONIC ns at the start of a host-timed batch
P_DONE, C_DONE = 3, 4  # host-driven transfers finished
PING, PONG = 5, 6
MAILBOX = 7


@dataclass
class _Shared:
    gate: cuda.SharedGatePage
    pinned: mmap.mmap  # registered by both workers
    pageable: mmap.mmap  # never registered

    def close(self):
        self.gate.close()
        for mm in (self.pinned, self.pageable):
            try:
                mm.close()
            except BufferError:
                pass


def chunking(nbytes: int, variant: str, chunk_bytes: int) -> tuple[int, int]:
    """(chunk size, chunks per transfer). Sequential variants move the message in one piece."""
    if variant != "pipelined":
        return nbytes, 1
    chunks = max(1, min(MAX_CHUNKS_PER_TRANSFER, nbytes // chunk_bytes))
    return -(-nbytes // chunks), chunks


class _StagingWorker(PairWorker):
    path = "staging"

    def __init__(self, ctx, default_sizes):
        super().__init__(ctx, default_sizes)
        self.ceiling = f"h2d@{self.cdev}"  # one hop; sequential staging is two
        self.chunks = 0  # chunks enqueued so far, in step on both sides
        self.transfers = 0  # host-ordered transfers so far, in step

    def open_gpu(self):
        return cuda.Gpu(self.device, shared_gate=self.ctx.shared.gate)

    def measure(self, nbytes):
        for variant in VARIANTS:
            yield from self.bandwidth(variant, nbytes)
        yield from self.ceilings(nbytes)
        if nbytes <= LATENCY_MAX_BYTES:
            yield from self.latency(nbytes)

    def setup(self):
        gpu, seg, shared = self.gpu, self.seg, self.ctx.shared
        self.buffer = gpu.alloc(self.max_bytes)  # the producer's source, the consumer's destination
        self.pinned_addr, keeper = cuda.mmap_address(shared.pinned)
        self.pageable_addr, keeper2 = cuda.mmap_address(shared.pageable)
        self._keepers = (keeper, keeper2)
        registration, seconds = cuda.time_setup(
            lambda: cuda.HostRegistration(self.pinned_addr, len(shared.pinned), self.device), self.device)
        gpu.adopt(registration)
        self.pinned_dptr = registration.dptr
        rows = [self._setup_row("host_register", seconds, nbytes=len(shared.pinned), src="host",
                                dst=self.device)]
        # My events: the producer's say "slot filled", the consumer's "slot drained".
        self.mine = [gpu.adopt(cuda.IpcEvent.create(self.device)) for _ in range(SLOTS_PIPELINED)]
        for slot, event in enumerate(self.mine):
            seg.put_handle(self.ctx.rank, slot, event.export())
        self.ctx.sync()
        self.theirs = []
        for slot in range(SLOTS_PIPELINED):
            event = cuda.IpcEvent.open(seg.get_handle(self.other[0], slot), self.device)
            self.theirs.append(self._import(event))
        self.ceilings_ = cuda.Ceilings(gpu, self.max_bytes)
        self.ctx.sync()
        if not self.producer:
            yield from rows

    # ------------------------------------------------------------------ bandwidth

    def bandwidth(self, variant, nbytes):
        warmup = self.config.warmup
        self.ctx.sync()
        for i in range(warmup + self.config.iterations):
            self.ctx.phase("warmup" if i < warmup else "sample", nbytes, i)
            self.seq += 1
            seed = cuda.seed_for(self.seq)
            if self.producer:
                self.gpu.fill(self.buffer.ptr, nbytes, seed)
                self.gpu.synchronize()
            self.ctx.sync()  # the source holds this sample's pattern
            if variant == "pageable":
                seconds, reps = self.host_ordered_batch(nbytes, self.pageable_addr)
            elif variant == "pinned-hostsync":
                seconds, reps = self.host_ordered_batch(nbytes, self.pinned_dptr)
            else:
                seconds, reps = self.gated_batch(variant, nbytes)
            if self.producer:
                self.ctx.sync()  # the consumer has verified
                continue
            verified = self.gpu.verify(self.buffer.ptr, nbytes, seed, "staging", variant,
                                       corrupt=self.corrupt)
            self.ctx.sync()
            if i >= warmup:
                yield self._row(path="staging", variant=variant, metric="bandwidth", src=self.pdev,
                                dst=self.cdev, bytes=nbytes, iteration=i - warmup, batch=reps,
                                seconds=seconds, verified=verified, ceiling=self.ceiling)

    def gated_batch(self, variant, nbytes):
        chunk, per_transfer = chunking(nbytes, variant, self.config.chunk_bytes)
        slots = SLOTS_PIPELINED if variant == "pipelined" else 1
        reps = max(1, min(cuda.reps_for(nbytes), MAX_CHUNKS_PER_SAMPLE // per_transfer))
        enqueue = self._producer_transfer if self.producer else self._consumer_transfer
        seconds = self.gpu.time_batch(lambda: enqueue(nbytes, chunk, per_transfer, slots), reps,
                                      shared=True, before_release=self.ctx.sync)
        return seconds, reps

    def _producer_transfer(self, nbytes, chunk, count, slots):
        gpu, seg = self.gpu, self.seg
        for c in range(count):
            k = self.chunks  # global chunk index, the same on both sides
            slot = k % slots
            if k >= slots:  # the slot was used before: wait until the consumer drained it
                seg.wait_until(DRAINED, k - slots + 1, self.timeout, waiting_for=self.other)
                self.theirs[slot].wait(gpu.stream)
            length = min(chunk, nbytes - c * chunk)
            gpu.memcpy(self.pinned_dptr + slot * chunk, self.buffer.ptr + c * chunk, length)
            self.mine[slot].record(gpu.stream)
            self.chunks = k + 1
            seg.store(FILLED, self.chunks)

    def _consumer_transfer(self, nbytes, chunk, count, slots):
        gpu, seg = self.gpu, self.seg
        for c in range(count):
            k = self.chunks
            slot = k % slots
            seg.wait_until(FILLED, k + 1, self.timeout, waiting_for=self.other)
            self.theirs[slot].wait(gpu.stream)  # after the producer's record: it published k + 1 after it
            length = min(chunk, nbytes - c * chunk)
            gpu.memcpy(self.buffer.ptr + c * chunk, self.pinned_dptr + slot * chunk, length)
            self.mine[slot].record(gpu.stream)
            self.chunks = k + 1
            seg.store(DRAINED, self.chunks)

    def host_ordered_batch(self, nbytes, host_addr):
        """Host-ordered: each copy is synchronised, then the mailbox tells the other side; no gate
        (pageable copies block the host). Timed on CLOCK_MONOTONIC from the producer's first D2H
        to the consumer's last H2D (one clock for every process of the node)."""
        gpu, seg = self.gpu, self.seg
        reps = max(1, min(HOST_ORDERED_MAX_REPS, (64 << 20) // nbytes))
        first = self.transfers + 1
        self.transfers += reps
        if self.producer:
            seg.store(T0, time.monotonic_ns())
            for k in range(first, first + reps):
                if k > first:
                    seg.wait_until(C_DONE, k - 1, self.timeout, waiting_for=self.other)
                gpu.memcpy(host_addr, self.buffer.ptr, nbytes)
                gpu.synchronize()
                seg.store(P_DONE, k)
            seg.wait_until(C_DONE, first + reps - 1, self.timeout, waiting_for=self.other)
            return 0.0, reps
        for k in range(first, first + reps):
            seg.wait_until(P_DONE, k, self.timeout, waiting_for=self.other)
            gpu.memcpy(self.buffer.ptr, host_addr, nbytes)
            gpu.synchronize()
            seg.store(C_DONE, k)
        return (time.monotonic_ns() - seg.load(T0)) / 1e9 / reps, reps

    # ------------------------------------------------------------------ ceilings, latency

    def ceilings(self, nbytes):
        """Each worker measures the hop it makes (producer D2H, consumer H2D), in turn."""
        def mine():
            if self.producer:
                yield from self._ceiling_rows(self.ceilings_, f"d2h@{self.pdev}", nbytes)
                return
            yield from self._ceiling_rows(self.ceilings_, self.ceiling, nbytes)
            if nbytes <= LATENCY_MAX_BYTES:
                yield from self._ceiling_rows(self.ceilings_, self.ceiling, nbytes, latency=True)

        yield from self._in_turn(mine)

    def latency(self, nbytes):
        """Ping-pong through the pinned buffer: D2H, signal, H2D, and back. One-way = round trip / 2."""
        gpu, seg, timeout = self.gpu, self.seg, self.timeout
        words, ping, pong = seg.words, seg.mailbox_index(PING), seg.mailbox_index(PONG)
        host, mine = self.pinned_dptr, self.buffer.ptr
        warmup = self.config.warmup
        rounds_done = seg.load(PING) if self.producer else seg.load(PONG)
        for i in range(warmup + self.config.iterations):
            self.ctx.phase("latency", nbytes, i)
            self.seq += 1
            seed = cuda.seed_for(self.seq)
            if self.producer:
                gpu.fill(mine, nbytes, seed)
                gpu.synchronize()
            self.ctx.sync()
            first = rounds_done + 1
            rounds_done += ROUND_TRIPS
            t0 = time.perf_counter()
            for k in range(first, rounds_done + 1):
                if self.producer:
                    gpu.memcpy(host, mine, nbytes)
                    gpu.synchronize()
                    words[ping] = k
                    if words[pong] < k:
                        seg.wait_until(PONG, k, timeout, waiting_for=self.other)
                    gpu.memcpy(mine, host, nbytes)
                    gpu.synchronize()
                else:
                    if words[ping] < k:
                        seg.wait_until(PING, k, timeout, waiting_for=self.other)
                    gpu.memcpy(mine, host, nbytes)
                    gpu.synchronize()
                    gpu.memcpy(host, mine, nbytes)
                    gpu.synchronize()
                    words[pong] = k
            seconds = (time.perf_counter() - t0) / ROUND_TRIPS / 2
            if self.producer:
                verified = gpu.verify(mine, nbytes, seed, "staging", "pinned-pingpong", corrupt=self.corrupt)
                if i >= warmup:
                    yield self._row(path="staging", variant="pinned-pingpong", metric="latency",
                                    src=self.pdev, dst=self.cdev, bytes=nbytes, iteration=i - warmup,
                                    batch=ROUND_TRIPS, seconds=seconds, verified=verified,
                                    ceiling=self.ceiling)


class StagingScenario(PairScenario):
    name = "staging"
    summary = "cudaMemcpy D2H into a shared host buffer, H2D out of it (pinned, pipelined, pageable)"
    worker_class = _StagingWorker

    def memory_needed(self, config, specs):
        # Host: the pinned buffer (two slots), the pageable one, and each worker's pinned
        # ceiling buffer. GPU: each worker's buffer and its ceiling buffer.
        largest = max(config.sizes_for(self.default_sizes()))
        per_gpu = 2 * largest * max(sum(1 for s in specs if s.device == d) for d in {s.device for s in specs})
        return 5 * largest, per_gpu

    def mailbox_slots(self, config, specs):
        return MAILBOX

    def prepare(self, config, specs):
        largest = max(config.sizes_for(self.default_sizes()))
        # Room for one whole message, or two pipelined chunks of it.
        return _Shared(cuda.SharedGatePage(),
                       mmap.mmap(-1, largest * 2, flags=mmap.MAP_SHARED),
                       mmap.mmap(-1, largest, flags=mmap.MAP_SHARED))

    def release(self, shared):
        if shared is not None:
            shared.close()
