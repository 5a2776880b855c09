"""ipc: CUDA IPC mapping. A second process maps the producer's cudaMalloc memory and copies.

Worker 0 (producer) cudaMallocs one buffer of the largest size and exports its
cudaIpcMemHandle and an interprocess event through the segment's handle table.
Worker 1 (consumer) opens them once and keeps them open (setup rows time the
export, the first open, a close and a second open). Both sit on config.devices[0]
unless --devices names two GPUs, then the consumer sits on the second.

A bandwidth sample, variants 'ce' and 'sm' (the consumer pulls):
  producer: fill the pattern of a new seed, record the IPC event, publish the
            sample's sequence number in the mailbox; wait for the consumer's ack
  consumer: wait for the number (CPU, untimed), cudaStreamWaitEvent on the IPC
            event, then a gated batch of copies from the mapped buffer into a
            local one: cudaMemcpyAsync ('ce') or the sm_copy kernel ('sm');
            verify the local copy, ack
Variant 'push': the consumer fills a local buffer and copies it into the
producer's memory in a gated batch, records its own IPC event and publishes;
the producer waits on that event and verifies its buffer; the consumer emits
the row once the producer has said so.

Latency ('ce-pingpong', sizes up to 1 MiB): the producer copies into the
consumer's mapped buffer, synchronises and stores a mailbox counter; the
consumer spins on it, copies the bytes back into the producer's buffer,
synchronises and answers. One-way = round trip / 2, many round trips a sample.
On one GPU without MPS this is dominated by the switch between the two
processes' contexts (~140 us a hop measured on an H200, against ~4 us when only
one process uses the GPU): that is the real cost of alternating GPU work
between two processes there, not an artefact of the signalling (~0.2 us).

Ceilings, measured by the consumer with the same method: 'd2d@<consumer GPU>'
(or 'peer@A>B' in each direction when the workers sit on two GPUs) for
bandwidth, and a host-timed single copy + synchronize for latency.
"""

from __future__ import annotations

import time
from typing import Iterator

from gpuipc_bench import cuda
from gpuipc_bench.pair import PairScenario, PairWorker

# Mailbox slots.
READY = 0  # producer: pattern of sample `seq` written, IPC event recorded
CONSUMED = 1  # consumer: sample `seq` read and verified
PUSHED = 2  # consumer: push sample `seq` written, its IPC event recorded
VERIFIED = 3  # producer: push sample `seq` verified
PING, PONG = 4, 5  # latency ping-pong counters
SLOTS = 6

# Handle-table slots (per worker).
MEM, EVENT = 0, 1

VARIANTS = ("ce", "sm", "push")
LATENCY_MAX_BYTES = 1 << 20
ROUND_TRIPS = 100


class IpcWorker(PairWorker):
    path = "ipc"  # the peer scenario reuses this worker with path "peer"

    def __init__(self, ctx, default_sizes):
        super().__init__(ctx, default_sizes)
        self.cross = self.pdev != self.cdev
        if self.cross:
            self.pull_ceiling = f"peer@{self.pdev}>{self.cdev}"
            self.push_ceiling = f"peer@{self.cdev}>{self.pdev}"
        else:
            self.pull_ceiling = self.push_ceiling = f"d2d@{self.cdev}"
        self.latency_ceiling = self.pull_ceiling
        self.rounds = 0  # ping-pong round trips so far; both workers count in step

    def measure(self, nbytes: int) -> Iterator[dict]:
        yield from self.bandwidth(nbytes)
        if not self.producer:
            yield from self.ceilings(nbytes)
        if nbytes <= LATENCY_MAX_BYTES:
            yield from self.latency(nbytes)

    # ------------------------------------------------------------------ setup

    def setup(self) -> Iterator[dict]:
        gpu, seg, n = self.gpu, self.seg, self.max_bytes
        me = self.ctx.rank
        rows = []
        # Each worker exports one buffer and one event: the producer its source
        # buffer and its "data ready" event; the consumer its receive buffer (the
        # ping-pong target) and its "push done" event.
        self.buffer = gpu.alloc(n)
        handle, seconds = cuda.time_setup(self.buffer.export, self.device)
        if self.producer:
            rows.append(self._setup_row("ipc_export", seconds, n, src=self.device, dst=self.cdev))
        self.event = gpu.adopt(cuda.IpcEvent.create(self.device))
        event_handle, seconds = cuda.time_setup(self.event.export, self.device)
        if self.producer:
            rows.append(self._setup_row("ipc_event_export", seconds, 0, src=self.device, dst=self.cdev))
        seg.put_handle(me, MEM, handle)
        seg.put_handle(me, EVENT, event_handle)
        if self.producer:
            self.source = gpu.alloc(min(n, LATENCY_MAX_BYTES))  # ping-pong payload
        self.ctx.sync()  # handles published

        other = self.other[0]
        peer_handle = seg.get_handle(other, MEM)
        if self.producer:
            self.mapped = self._import(cuda.MappedBuffer(peer_handle, n, self.device))
            self.peer_event = self._import(cuda.IpcEvent.open(seg.get_handle(other, EVENT), self.device))
        else:
            src, dst = self.pdev, self.cdev
            first, cold = cuda.time_setup(lambda: cuda.MappedBuffer(peer_handle, n, self.device), self.device)
            rows.append(self._setup_row("ipc_open_cold", cold, n, src=src, dst=dst))
            _, seconds = cuda.time_setup(first.close, self.device)
            rows.append(self._setup_row("ipc_close", seconds, n, src=src, dst=dst))
            mapped, warm = cuda.time_setup(lambda: cuda.MappedBuffer(peer_handle, n, self.device), self.device)
            self.mapped = self._import(mapped)
            rows.append(self._setup_row("ipc_open_warm", warm, n, src=src, dst=dst))
            event, seconds = cuda.time_setup(
                lambda: cuda.IpcEvent.open(seg.get_handle(other, EVENT), self.device), self.device)
            self.peer_event = self._import(event)
            rows.append(self._setup_row("ipc_event_open", seconds, 0, src=src, dst=dst))
            self.ceilings_ = cuda.Ceilings(gpu, n)  # its buffers are the Gpu's: freed by gpu.close()
            if self.cross:
                for device, peer in ((self.cdev, self.pdev), (self.pdev, self.cdev)):
                    seconds = cuda.enable_peer_access(device, peer)
                    if seconds is not None:  # None: already on (the IPC open enables it lazily)
                        rows.append(self._setup_row("peer_enable", seconds, 0, src=peer, dst=device))
        self.ctx.sync()  # everything open
        yield from rows

    # ------------------------------------------------------------------ bandwidth

    def bandwidth(self, nbytes: int) -> Iterator[dict]:
        warmup, iterations = self.config.warmup, self.config.iterations
        for variant in VARIANTS:
            self.ctx.sync()
            for i in range(warmup + iterations):
                warm = i < warmup
                self.ctx.phase("warmup" if warm else "sample", nbytes, i)
                self.seq += 1
                seed = cuda.seed_for(self.seq)
                if variant == "push":
                    row = self.push_sample(nbytes, seed)
                else:
                    row = self.pull_sample(variant, nbytes, seed)
                if row is not None and not warm:
                    row["iteration"] = i - warmup
                    yield row

    def pull_sample(self, variant: str, nbytes: int, seed: int) -> dict | None:
        gpu, seg, seq = self.gpu, self.seg, self.seq
        if self.producer:
            gpu.fill(self.buffer.ptr, nbytes, seed)
            self.event.record(gpu.stream)
            seg.store(READY, seq)
            seg.wait_until(CONSUMED, seq, self.timeout, waiting_for=self.other)
            return None
        seg.wait_until(READY, seq, self.timeout, waiting_for=self.other)
        self.peer_event.wait(gpu.stream)  # after the producer's record: it published seq after it
        dst, src = self.buffer.ptr, self.mapped.ptr
        if variant == "ce":
            enqueue = gpu.memcpy_launcher(dst, src, nbytes)
        else:
            enqueue = gpu.kernels.copy_launcher(dst, src, nbytes, gpu.stream)
        reps = cuda.reps_for(nbytes)
        seconds = gpu.time_batch(enqueue, reps)
        verified = gpu.verify(dst, nbytes, seed, self.path, variant, corrupt=self.corrupt)
        seg.store(CONSUMED, seq)
        return self._row(path=self.path, variant=variant, metric="bandwidth", src=self.pdev, dst=self.cdev,
                         bytes=nbytes, batch=reps, seconds=seconds, verified=verified,
                         ceiling=self.pull_ceiling)

    def push_sample(self, nbytes: int, seed: int) -> dict | None:
        gpu, seg, seq = self.gpu, self.seg, self.seq
        if self.producer:
            seg.wait_until(PUSHED, seq, self.timeout, waiting_for=self.other)
            self.peer_event.wait(gpu.stream)
            gpu.verify(self.buffer.ptr, nbytes, seed, self.path, "push", corrupt=self.corrupt)
            seg.store(VERIFIED, seq)
            return None
        src, dst = self.buffer.ptr, self.mapped.ptr
        gpu.fill(src, nbytes, seed)  # on the stream ahead of the gate: not timed
        reps = cuda.reps_for(nbytes)
        seconds = gpu.time_batch(gpu.memcpy_launcher(dst, src, nbytes), reps)
        self.event.record(gpu.stream)
        seg.store(PUSHED, seq)
        seg.wait_until(VERIFIED, seq, self.timeout, waiting_for=self.other)
        return self._row(path=self.path, variant="push", metric="bandwidth", src=self.cdev, dst=self.pdev,
                         bytes=nbytes, batch=reps, seconds=seconds, verified=True,
                         ceiling=self.push_ceiling)

    # ------------------------------------------------------------------ ceilings

    def ceilings(self, nbytes: int) -> Iterator[dict]:
        keys = [self.pull_ceiling] + ([self.push_ceiling] if self.push_ceiling != self.pull_ceiling else [])
        for key in keys:
            yield from self._ceiling_rows(self.ceilings_, key, nbytes)

    # ------------------------------------------------------------------ latency

    def latency(self, nbytes: int) -> Iterator[dict]:
        gpu, seg, timeout = self.gpu, self.seg, self.timeout
        warmup, iterations = self.config.warmup, self.config.iterations
        words = seg.words
        ping, pong = seg.mailbox_index(PING), seg.mailbox_index(PONG)
        stream = gpu.stream
        copy = (gpu.memcpy_launcher(self.mapped.ptr, self.source.ptr, nbytes) if self.producer
                else gpu.memcpy_launcher(self.mapped.ptr, self.buffer.ptr, nbytes))
        for i in range(warmup + iterations):
            self.ctx.phase("latency", nbytes, i)
            self.seq += 1
            seed = cuda.seed_for(self.seq)
            if self.producer:
                gpu.fill(self.source.ptr, nbytes, seed)
                gpu.synchronize()
            self.ctx.sync()
            first, last = self.rounds + 1, self.rounds + ROUND_TRIPS
            self.rounds = last
            if self.producer:
                t0 = time.perf_counter()
                for k in range(first, last + 1):
                    copy()
                    stream.synchronize()
                    words[ping] = k
                    if words[pong] < k:
                        seg.wait_until(PONG, k, timeout, waiting_for=self.other)
                seconds = (time.perf_counter() - t0) / ROUND_TRIPS / 2
                verified = gpu.verify(self.buffer.ptr, nbytes, seed, self.path, "ce-pingpong",
                                      corrupt=self.corrupt)
                if i >= warmup:
                    yield self._row(path=self.path, variant="ce-pingpong", metric="latency", src=self.pdev,
                                    dst=self.cdev, bytes=nbytes, iteration=i - warmup, batch=ROUND_TRIPS,
                                    seconds=seconds, verified=verified, ceiling=self.latency_ceiling)
            else:
                for k in range(first, last + 1):
                    if words[ping] < k:
                        seg.wait_until(PING, k, timeout, waiting_for=self.other)
                    copy()
                    stream.synchronize()
                    words[pong] = k
        if not self.producer:
            yield from self.ceilings_.latency_rows(
                self.latency_ceiling, nbytes, warmup, iterations, reps=ROUND_TRIPS,
                on_sample=lambda i: self.ctx.phase("latency", nbytes, i), **self.fields)


class IpcScenario(PairScenario):
    name = "ipc"
    summary = "CUDA IPC: a second process maps the producer's cudaMalloc memory (pull ce/sm, push)"
    worker_class = IpcWorker

    def mailbox_slots(self, config, specs):
        return SLOTS
