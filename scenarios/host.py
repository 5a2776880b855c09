"""host: CPU processes moving bytes through a shared-memory buffer. Needs no GPU.

One producer and 1..7 consumers share an anonymous MAP_SHARED buffer created before the
fork. A transfer k: the producer copies its payload into the buffer, writes the transfer's
tag into the first bytes and publishes k; each consumer copies the buffer out into private
memory, checks the tag (a copy of the wrong transfer shows) and acknowledges; the producer
waits for every acknowledgement before the next transfer (one buffer: one transfer in
flight, a handoff). The payload changes every sample and is verified after the batch.

A sample is a batch of transfers, timed from the producer's first write to the last
consumer's last acknowledgement on CLOCK_MONOTONIC (one clock for every process of the
node), with spin waits. The ceiling is a single-process memcpy of the same size. Latency
is a ping-pong between the producer and consumer 1: each answers with its own payload and
checks the other's.
"""

from __future__ import annotations

import time

import numpy as np

from gpuipc_bench.errors import VerificationError
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.patterns import check, pattern_bytes
from gpuipc_bench.engine.sampler import Sample, Sampler
from gpuipc_bench.engine.scenario import Scenario, WorkerSpec

PINGPONG_MAX_BYTES = 64 << 10
BATCH_BYTES = 16 << 20  # a sample moves about this much, in at most MAX_BATCH transfers
MAX_BATCH = 1000
PINGPONG_ROUNDS = 200
CEILING = "memcpy@host"
REPLY = 0x5A5A5A5A
TAG = 8  # bytes of the transfer tag at the front of each transfer


def batch_for(nbytes: int) -> int:
    return max(1, min(MAX_BATCH, BATCH_BYTES // nbytes))


def tag_bytes(k: int, nbytes: int) -> np.ndarray:
    """The first min(nbytes, 8) bytes of transfer k."""
    value = (k * 0x9E3779B97F4A7C15 + 1) & (2 ** 64 - 1)
    return np.frombuffer(value.to_bytes(8, "little"), dtype=np.uint8)[: min(nbytes, TAG)]


class HostScenario(Scenario):
    persistent_workers = True
    name = "host"
    summary = "CPU processes copy through a shared-memory buffer (no GPU; the baseline)"
    gpus_needed = 0
    min_workers = 2
    max_workers = 8
    default_workers = 2
    paths = (PathInfo("host", role="reference", colour="#e377c2"),)

    def workers(self, config, machine):
        n = config.workers or self.default_workers
        return [WorkerSpec(r, "producer" if r == 0 else "consumer", None) for r in range(n)]

    def memory_needed(self, config, specs):
        # The shared buffer, and in each worker a payload, a copy and the ceiling's two buffers.
        return (1 + 4 * len(specs)) * max(self.sizes(config)), 0

    def prepare(self, config, specs):
        from gpuipc_bench.ipc.shared import SharedPages

        return SharedPages(max(self.sizes(config)))

    def release(self, shared):
        if shared is not None:
            shared.close()

    def run(self, ctx):
        return HostWorker(ctx, self).run()


class HostWorker:
    """Payloads are random bytes (once per run) XORed with the sample's seed: cheap to make at
    64 MiB, new every sample."""

    def __init__(self, ctx, scenario):
        self.ctx, self.sizes = ctx, scenario.sizes(ctx.config)
        self.name = scenario.name
        self.sampler = Sampler(ctx)
        self.producer = ctx.rank == 0
        self.consumers = range(1, ctx.nworkers)
        self.shm = np.frombuffer(ctx.shared, dtype=np.uint8)
        self.base = np.random.default_rng(12345).integers(0, 256, max(self.sizes), dtype=np.uint8)
        self.transfers = 0  # in step on every worker

    def run(self):
        ctx = self.ctx
        ctx.begin(self.name, sharing="none")
        ctx.phase("setup")
        ctx.declare("sampler", "seq", "t0", "ping", "pong", *(f"ack{r}" for r in self.consumers))
        ctx.lock_names()
        for nbytes in self.sizes:
            if self.producer:
                yield from self.ceiling(nbytes)
            ctx.sync()
            group = dict(path="host", variant="shared-buffer", measure="handoff", metric="bandwidth", src="host",
                         dst="host", bytes=nbytes, ceiling=CEILING)
            yield from self.sampler.run(group, lambda trial: self.sample(nbytes, trial), timer=ctx.rank == 1,
                                        reps=batch_for(nbytes), calibrate=False)
            if nbytes <= PINGPONG_MAX_BYTES:
                yield from self.pingpong(nbytes)
            ctx.sync()
            ctx.progress()
        ctx.phase("teardown")

    def sample(self, nbytes: int, trial) -> Sample | None:
        ctx, shm = self.ctx, self.shm[:nbytes]
        payload = self.payload(nbytes, trial.seed)
        first = self.transfers + 1
        self.transfers += trial.reps
        local = np.empty(nbytes, dtype=np.uint8)
        tags = [tag_bytes(k, nbytes) for k in range(first, first + trial.reps)]  # made, and checked, untimed
        ctx.sync()
        if self.producer:
            ctx.store("t0", time.monotonic_ns())
            for k, tag in enumerate(tags, start=first):
                shm[:] = payload
                shm[:TAG] = tag
                ctx.store("seq", k)
                for r in self.consumers:
                    ctx.spin(f"ack{r}", k, who=[r])
            return None
        seen = np.empty((trial.reps, min(nbytes, TAG)), dtype=np.uint8)  # each transfer's tag, as it came
        for i, k in enumerate(range(first, first + trial.reps)):
            ctx.spin("seq", k, who=[0])
            local[:] = shm
            seen[i] = local[:TAG]
            ctx.store(f"ack{ctx.rank}", k)
        last = first + trial.reps - 1
        for r in self.consumers:
            ctx.spin(f"ack{r}", last, who=[r])  # every consumer is done with the batch
        seconds = (time.monotonic_ns() - ctx.load("t0")) / 1e9 / trial.reps
        for got, want in zip(seen, tags):
            if not np.array_equal(got, want):  # a copy of another transfer's bytes
                raise VerificationError("host", "shared-buffer", nbytes, 0, int(want[0]), int(got[0]))
        if ctx.corrupt:
            local[nbytes // 2] ^= 0xFF
        bad = np.flatnonzero(local[TAG:] != payload[TAG:])  # the tag was checked above
        if bad.size:
            k = TAG + int(bad[0])
            raise VerificationError("host", "shared-buffer", nbytes, k, int(payload[k]), int(local[k]))
        return Sample(seconds, trial.reps) if ctx.rank == 1 else None

    def payload(self, nbytes: int, seed: int) -> np.ndarray:
        return self.base[:nbytes] ^ np.uint8(seed & 0xFF or 1)

    def ceiling(self, nbytes: int):
        """Single-process memcpy of the same size: what the memory system does without a second process."""
        src = self.base[:nbytes]
        dst = np.empty_like(src)

        def take(trial) -> Sample:
            start = time.perf_counter_ns()
            for _ in range(trial.reps):
                dst[:] = src
            seconds = (time.perf_counter_ns() - start) / 1e9 / trial.reps
            return Sample(seconds, trial.reps, bool(np.array_equal(dst, src)))

        group = dict(path="ceiling", variant=CEILING, measure="stream", metric="bandwidth", src="host", dst="host",
                     bytes=nbytes, ceiling="")
        yield from self.sampler.run(group, take, timer=True, solo=True, reps=batch_for(nbytes), calibrate=False,
                                    phase="ceiling")

    def pingpong(self, nbytes: int):
        """Producer and consumer 1: each writes its own payload, the other copies it out and checks it.
        The other consumers cross the same barriers."""
        ctx = self.ctx
        playing = ctx.rank in (0, 1)
        group = dict(path="host", variant="pingpong", measure="pingpong", metric="latency", src="host", dst="host",
                     bytes=nbytes, ceiling="")

        def take(trial) -> Sample | None:
            mine = pattern_bytes(nbytes, trial.seed if self.producer else trial.seed ^ REPLY)
            local = np.empty(nbytes, dtype=np.uint8)
            first = (ctx.load("pong") if self.producer else ctx.load("ping")) + 1
            ctx.sync()
            if not playing:
                ctx.sync()
                return None
            shm = self.shm[:nbytes]
            start = time.perf_counter_ns()
            for k in range(first, first + trial.reps):
                if self.producer:
                    shm[:] = mine
                    ctx.store("ping", k)
                    ctx.spin("pong", k, who=[1])
                    local[:] = shm
                else:
                    ctx.spin("ping", k, who=[0])
                    local[:] = shm
                    shm[:] = mine
                    ctx.store("pong", k)
            seconds = (time.perf_counter_ns() - start) / 1e9 / trial.reps / 2
            check(local, trial.seed ^ REPLY if self.producer else trial.seed, "host", "pingpong", nbytes)
            ctx.sync()
            return Sample(seconds, trial.reps) if self.producer else None

        yield from self.sampler.run(group, take, timer=self.producer, reps=PINGPONG_ROUNDS, calibrate=False,
                                    phase="latency")
