"""host: CPU processes moving bytes through a shared-memory buffer. Needs no GPU.

One producer and 1..7 consumers share an anonymous MAP_SHARED buffer created
before the fork. A transfer: the producer copies its source into the shared
buffer and publishes a sequence number; each consumer copies the buffer out
into private memory and acknowledges; the producer waits for every
acknowledgement before the next transfer (one buffer, so no overrun).

A sample is a batch of transfers; its time runs from the producer's first write
to the consumer's last copy-out, on CLOCK_MONOTONIC (one clock for every process
of the node). The ceiling is a single-process memcpy of the same size.
Latency is a ping-pong of the payload between the producer and consumer 1.
"""

from __future__ import annotations

import mmap
import time

import numpy as np

from gpuipc_bench.config import DEFAULT_HOST_SIZES
from gpuipc_bench.errors import VerificationError
from gpuipc_bench.faults import corrupt_requested
from gpuipc_bench.results import new_row
from gpuipc_bench.scenario import Scenario, WorkerSpec

# Mailbox slots.
SEQ = 0  # producer: last transfer written
T0 = 1  # producer: CLOCK_MONOTONIC ns at the start of the sample's batch
PING, PONG = 2, 3  # latency ping-pong
ACK0 = 4  # consumer r acknowledges in slot ACK0 + r

LATENCY_MAX_BYTES = 64 << 10
BATCH_BYTES = 64 << 20  # a sample moves about this much, in at most MAX_BATCH transfers
MAX_BATCH = 1000
LATENCY_ROUND_TRIPS = 200
CEILING = "memcpy@host"


def batch_for(nbytes: int) -> int:
    return max(1, min(MAX_BATCH, BATCH_BYTES // nbytes))


class HostScenario(Scenario):
    name = "host"
    summary = "CPU processes copy through a shared-memory buffer (no GPU; the baseline)"
    gpus_needed = 0
    min_workers = 2
    max_workers = 8
    default_workers = 2

    def default_sizes(self):
        return DEFAULT_HOST_SIZES

    def workers(self, config, machine):
        n = config.workers or self.default_workers
        return [WorkerSpec(r, "producer" if r == 0 else "consumer", None) for r in range(n)]

    def memory_needed(self, config, specs):
        # The shared buffer, and in each worker a base pattern, a sample pattern and a copy.
        largest = max(config.sizes_for(self.default_sizes()))
        return (1 + 3 * len(specs)) * largest, 0

    def mailbox_slots(self, config, specs):
        return ACK0 + len(specs)

    def prepare(self, config, specs):
        largest = max(config.sizes_for(self.default_sizes()))
        return mmap.mmap(-1, largest, flags=mmap.MAP_SHARED)

    def release(self, shared):
        if shared is not None:
            shared.close()

    def run(self, ctx):
        sizes = ctx.config.sizes_for(self.default_sizes())
        shm = np.frombuffer(ctx.shared, dtype=np.uint8)
        base = np.random.default_rng(12345).integers(0, 256, size=max(sizes), dtype=np.uint8)
        producer = ctx.rank == 0
        seq = 0  # transfers so far; both sides count in step
        sample_id = 0
        for nbytes in sizes:
            local = np.empty(nbytes, dtype=np.uint8)
            if producer:
                yield from _ceiling(ctx, base[:nbytes], nbytes)
            for i in range(ctx.config.warmup + ctx.config.iterations):
                warm = i < ctx.config.warmup
                ctx.phase("warmup" if warm else "sample", nbytes, i)
                sample_id += 1
                pattern = np.bitwise_xor(base[:nbytes], sample_id & 0xFF)  # changes every sample
                batch = batch_for(nbytes)
                ctx.sync()
                if producer:
                    _produce(ctx, shm[:nbytes], pattern, seq, batch)
                else:
                    seconds = _consume(ctx, shm[:nbytes], local, seq, batch)
                    verified = _verify(local, pattern, nbytes)
                    if not warm:
                        yield _row(ctx, "bandwidth", "shared-buffer", nbytes, i - ctx.config.warmup,
                                   batch, seconds, verified)
                    if not verified:
                        _raise_mismatch(local, pattern, nbytes)
                seq += batch
            if nbytes <= LATENCY_MAX_BYTES:
                yield from _latency(ctx, shm[:nbytes], local, nbytes, base[:nbytes])
            ctx.sync()
            ctx.progress()


def _row(ctx, metric, variant, nbytes, iteration, batch, seconds, verified, path="host", ceiling=CEILING):
    return new_row(
        scenario="host", path=path, variant=variant, metric=metric, src="host", dst="host",
        bytes=nbytes, iteration=iteration, batch=batch, seconds=seconds, verified=verified,
        workers=ctx.nworkers, sharing="none", ceiling=ceiling,
    )


def _produce(ctx, shm, pattern, seq, batch):
    seg, timeout = ctx.segment, ctx.config.timeout
    consumers = range(1, ctx.nworkers)
    seg.store(T0, time.monotonic_ns())
    for k in range(seq + 1, seq + batch + 1):
        shm[:] = pattern
        seg.store(SEQ, k)
        for r in consumers:
            seg.wait_until(ACK0 + r, k, timeout, waiting_for=[r])


def _consume(ctx, shm, local, seq, batch) -> float:
    seg, timeout = ctx.segment, ctx.config.timeout
    for k in range(seq + 1, seq + batch + 1):
        seg.wait_until(SEQ, k, timeout, waiting_for=[0])
        local[:] = shm
        seg.store(ACK0 + ctx.rank, k)
    end = time.monotonic_ns()
    return (end - seg.load(T0)) / 1e9 / batch


def _verify(local, pattern, nbytes) -> bool:
    if corrupt_requested():
        local[nbytes // 2] ^= 0xFF
    return bool(np.array_equal(local, pattern))


def _raise_mismatch(local, pattern, nbytes):
    offset = int(np.flatnonzero(local != pattern)[0])
    raise VerificationError("host", "shared-buffer", nbytes, offset, int(pattern[offset]), int(local[offset]))


def _ceiling(ctx, src, nbytes):
    """Single-process memcpy of the same size: what the memory system does without a second process."""
    dst = np.empty_like(src)
    batch = batch_for(nbytes)
    for i in range(ctx.config.warmup + ctx.config.iterations):
        start = time.perf_counter_ns()
        for _ in range(batch):
            dst[:] = src
        seconds = (time.perf_counter_ns() - start) / 1e9 / batch
        if i >= ctx.config.warmup:
            yield _row(ctx, "bandwidth", CEILING, nbytes, i - ctx.config.warmup, batch, seconds,
                       bool(np.array_equal(dst, src)), path="ceiling", ceiling="")


def _latency(ctx, shm, local, nbytes, payload):
    """Ping-pong the payload between producer and consumer 1: one-way = round trip / 2.
    Other consumers only cross the same barriers."""
    seg, timeout = ctx.segment, ctx.config.timeout
    producer = ctx.rank == 0
    playing = ctx.rank in (0, 1)
    rounds = LATENCY_ROUND_TRIPS
    ctx.sync()
    seg.store(PING, 0)
    seg.store(PONG, 0)
    ctx.sync()
    for i in range(ctx.config.warmup + ctx.config.iterations):
        ctx.phase("latency", nbytes, i)
        ctx.sync()
        if not playing:
            continue
        start = time.perf_counter_ns()
        base = i * rounds
        for k in range(base + 1, base + rounds + 1):
            if producer:
                shm[:] = payload
                seg.store(PING, k)
                seg.wait_until(PONG, k, timeout, waiting_for=[1])
                local[:] = shm
            else:
                seg.wait_until(PING, k, timeout, waiting_for=[0])
                local[:] = shm  # has the data
                shm[:] = local  # and answers with it
                seg.store(PONG, k)
        seconds = (time.perf_counter_ns() - start) / 1e9 / rounds / 2
        if producer and i >= ctx.config.warmup:
            yield _row(ctx, "latency", "pingpong", nbytes, i - ctx.config.warmup, rounds, seconds,
                       bool(np.array_equal(local, payload)), ceiling="")
