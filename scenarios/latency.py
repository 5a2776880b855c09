"""latency: the latency floor between two processes, device-initiated next to host-driven.

Two workers: the initiator on the first GPU of --devices (default 0), the responder on the
second (default: the same GPU). Each cudaMallocs one buffer, exports its cudaIpcMemHandle
and maps the other's, so each kernel can store straight into the other process's memory:

    offset 0      flag (uint32): the last round number the other side sent
    offset 256    payload region (flag-and-fence protocol, host ping-pong)
    after it      LL region: one 8-byte word per 4 payload bytes

Variants, all metric 'latency', one-way = round trip / 2 (path 'ipc' on one GPU, 'peer'
across two; 'sharing' says whether the two share a GPU time-sliced, under MPS, or not):

  device-pingpong  a one-block kernel in each process. The initiator's threads store the
                   payload into the responder's buffer, __threadfence_system(), then one
                   store of the round number into the responder's flag; the responder's
                   kernel spins on its own flag (volatile loads), copies the payload back
                   the same way (cache-bypassing loads) and stores the initiator's flag.
                   At 0 bytes: the flags alone.
  device-ll        the LL protocol (NCCL's "low latency"): each 8-byte word carries 4
                   payload bytes and the round number in one single-copy-atomic store, so
                   no fence is needed; the receiver waits until every word shows the round.
  host-pingpong    host-driven: the initiator's cudaMemcpyAsync into the responder's buffer,
                   an IPC event recorded after it, a shared-memory flag; the responder sees
                   the flag, makes its stream wait on the event, copies the bytes back into
                   the initiator's buffer, synchronises its stream and answers with a flag.
  flag-pingpong    the shared-memory flags alone, no GPU (the signalling of host-pingpong)
  barrier          one crossing of the tool's shared-memory barrier by the two workers

Device variants are timed inside the initiator's kernel with %globaltimer over `rounds`
round trips, after an untimed handshake round that proves both kernels run (so neither
launch overhead nor launch skew is in the figure). Both kernels must be resident at once:
on one GPU without MPS their contexts are time-sliced, and every hop waits for the other
context's time slice (~2 ms): a real result, reported as such. So the number of round
trips adapts: a calibration launch of 10 round trips, then as many as fit in about
0.1 s (10 to 1000). Every wait in a kernel is bounded: after the spin timeout (5 s, at
most half of --timeout) or past the sample's deadline it records why and exits, and the
host raises an error that names the round and the silent side; a kernel can never hang.

Each sample uses a new payload pattern; the payload regions are cleared before it and
both sides verify, after it, what they received (a stale byte or round number fails).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Iterator

import numpy as np

from gpuipc_bench import cuda
from gpuipc_bench.errors import BenchError, UsageError, VerificationError
from gpuipc_bench.faults import corrupt_requested
from gpuipc_bench.pair import PairWorker
from gpuipc_bench.results import new_row
from gpuipc_bench.scenario import Scenario, WorkerSpec
from gpuipc_bench.sizes import format_size

INITIATOR, RESPONDER, IDLE = "initiator", "responder", "idle"
PROTOCOLS = ("device-pingpong", "device-ll")
DEFAULT_SIZES = (0, 4, 64, 1024, 4096)
LATENCY_MAX_BYTES = 1 << 20

FLAG_OFFSET = 0
PAYLOAD_OFFSET = 256
ALIGN = 256

CALIBRATION_ROUNDS = 10
MIN_ROUNDS, MAX_ROUNDS = 10, 1000
HOST_MAX_ROUNDS = 200
TARGET_SAMPLE_S = 0.1
SPIN_TIMEOUT_S = 5.0
MAX_DEADLINE_S = 30.0
CROSSINGS = 1000

# Handle-table slots.
MEM_HANDLE, EVENT_HANDLE = 0, 1
# Mailbox slots.
ROUNDS, PING, PONG, FLAG_PING, FLAG_PONG = 0, 1, 2, 3, 4
SLOTS = 5


def rounds_for(round_trip_s: float, target_s: float = TARGET_SAMPLE_S,
               lo: int = MIN_ROUNDS, hi: int = MAX_ROUNDS) -> int:
    """Round trips per sample: as many as fit in target_s, between lo and hi."""
    if not round_trip_s > 0:  # also NaN
        return hi
    return max(lo, min(hi, int(target_s / round_trip_s)))


def spin_limits(config) -> tuple[float, float]:
    """(spin timeout, sample deadline) in seconds for the kernels' waits. The deadline stays under
    half of --timeout, so a slow sample is reported by the kernel before the launcher calls it hung.
    RunConfig.extra may carry 'spin_timeout' (tests use a short one)."""
    deadline = min(MAX_DEADLINE_S, config.timeout / 2)
    timeout = float(dict(config.extra).get("spin_timeout", SPIN_TIMEOUT_S))
    if timeout <= 0:
        raise UsageError(f"spin_timeout must be positive (got {timeout:g})")
    return min(timeout, deadline), deadline


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the flag, the payload and the LL words sit in each worker's exported buffer."""

    max_bytes: int

    @property
    def payload_cap(self) -> int:
        return max(ALIGN, -(-self.max_bytes // ALIGN) * ALIGN)

    @property
    def ll_offset(self) -> int:
        return PAYLOAD_OFFSET + self.payload_cap

    @property
    def ll_cap(self) -> int:
        return max(ALIGN, -(-cuda.ll_words(self.max_bytes) * 8 // ALIGN) * ALIGN)

    @property
    def total(self) -> int:
        return self.ll_offset + self.ll_cap


def path_for(devices) -> str:
    return "ipc" if len(set(devices)) == 1 else "peer"


class DevicePingPong:
    """Device-initiated ping-pong between two workers through each other's IPC-mapped buffer.

    Every worker of the scenario makes one, with role INITIATOR, RESPONDER or IDLE; all of
    them call the same methods in the same order, so that they cross the same barriers (an
    idle worker does no CUDA work, and needs no GPU).

        pp = DevicePingPong(ctx, role, peer, gpu, ...); pp.setup()
        yield from pp.measure("device-ll", 64, warmup, iterations)   # rows: initiator only
        pp.close(); ctx.sync(); gpu.close()     # importers close before exporters free
    """

    def __init__(self, ctx, role: str, peer: int | None, gpu: "cuda.Gpu | None", *, max_bytes: int,
                 fields: dict, path: str, rounds_slot: int = ROUNDS, handle_slot: int = MEM_HANDLE):
        if role not in (INITIATOR, RESPONDER, IDLE):
            raise ValueError(f"role must be initiator, responder or idle, not {role!r}")
        if role != IDLE and (gpu is None or peer is None):
            raise ValueError("an initiator or responder needs a Gpu and a peer")
        self.ctx, self.seg, self.role, self.peer, self.gpu = ctx, ctx.segment, role, peer, gpu
        self.layout = Layout(max_bytes)
        self.fields, self.path = dict(fields), path
        self.rounds_slot, self.handle_slot = rounds_slot, handle_slot
        self.timeout_s, self.deadline_s = spin_limits(ctx.config)
        self.corrupt = corrupt_requested()
        self.device = gpu.device if gpu is not None else None
        self.peer_device = ctx.specs[peer].device if peer is not None else None
        self.seq = 0  # round numbers used so far (both sides count in step)
        self.samples = 0
        self.kernels = self.buffer = self.mapped = self.src = self.result = None

    @property
    def active(self) -> bool:
        return self.role != IDLE

    @property
    def initiator(self) -> bool:
        return self.role == INITIATOR

    # ---------------------------------------------------------------- setup, teardown

    def setup(self) -> None:
        """Allocate and export this side's buffer, then map the other's. Crosses 2 barriers."""
        ctx, seg, layout = self.ctx, self.seg, self.layout
        if self.active:
            gpu = self.gpu
            self.kernels = gpu.adopt(cuda.PingPongKernels(self.device))
            self.buffer = gpu.alloc(layout.total)
            cuda.memset(self.buffer.ptr, 0, layout.total, gpu.stream, self.device)
            self.result = gpu.alloc(cuda.PINGPONG_RESULT_BYTES)
            if self.initiator:
                self.src = gpu.alloc(layout.payload_cap)
            gpu.synchronize()
            seg.put_handle(ctx.rank, self.handle_slot, self.buffer.export())
        ctx.sync()  # handles published
        if self.active:
            handle = seg.get_handle(self.peer, self.handle_slot)
            self.mapped = self.gpu.adopt(cuda.MappedBuffer(handle, layout.total, self.device))
        ctx.sync()  # both mapped

    def close(self) -> None:
        """Close the mapping of the other's buffer (the caller then crosses a barrier before freeing)."""
        if self.mapped is not None:
            mapped, self.mapped = self.mapped, None
            self.gpu.release(mapped)

    # addresses
    def mine(self, offset: int) -> int:
        return self.buffer.ptr + offset

    def theirs(self, offset: int) -> int:
        return self.mapped.ptr + offset

    # ---------------------------------------------------------------- measuring

    def measure(self, protocol: str, nbytes: int, warmup: int, iterations: int) -> Iterator[dict]:
        """Calibrate the round trips, then warmup + iterations samples; rows from the initiator."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
        if nbytes > self.layout.max_bytes:
            raise ValueError(f"{nbytes} bytes do not fit the {self.layout.max_bytes}-byte payload region")
        self.ctx.phase("warmup", nbytes, 0)
        calibration = self.sample(protocol, nbytes, CALIBRATION_ROUNDS)
        if self.initiator:
            self.seg.store(self.rounds_slot, rounds_for(calibration.round_trip))
        self.ctx.sync()
        rounds = self.seg.load(self.rounds_slot)
        for i in range(warmup + iterations):
            self.ctx.phase("warmup" if i < warmup else "latency", nbytes, i)
            result = self.sample(protocol, nbytes, rounds)
            if self.initiator and i >= warmup:
                yield new_row(**self.fields, path=self.path, variant=protocol, metric="latency",
                              src=self.device, dst=self.peer_device, bytes=nbytes, iteration=i - warmup,
                              batch=rounds, seconds=result.round_trip / 2, verified=True, ceiling="")

    def sample(self, protocol: str, nbytes: int, rounds: int) -> "cuda.PingPongResult | None":
        """One launch of `rounds` timed round trips (after the handshake) on both sides, checked
        and verified. Crosses 2 barriers. The initiator gets the result; the others None."""
        self.samples += 1
        seed = cuda.seed_for(0x1A7E0000 + self.samples)
        first = self.seq + 1
        self.seq += rounds + 1
        if self.active:
            self._prepare(protocol, nbytes, seed)
        self.ctx.sync()  # both sides cleared; go
        result = None
        if self.active:
            self.launch(protocol, nbytes, first, rounds)
            result = self._finish(protocol, nbytes, first, rounds)
            self._verify(protocol, nbytes, seed, first + rounds)
        self.ctx.sync()  # both verified
        return result if self.initiator else None

    def _prepare(self, protocol: str, nbytes: int, seed: int) -> None:
        gpu, layout = self.gpu, self.layout
        if self.initiator:
            gpu.fill(self.src.ptr, nbytes, seed)
        if protocol == "device-ll":
            cuda.memset(self.mine(layout.ll_offset), 0, layout.ll_cap, gpu.stream, self.device)
        else:
            cuda.memset(self.mine(PAYLOAD_OFFSET), 0, layout.payload_cap, gpu.stream, self.device)
        gpu.synchronize()

    def launch(self, protocol: str, nbytes: int, first: int, rounds: int) -> None:
        """Enqueue this side's kernel (a test overrides it to make a side that never answers)."""
        common = dict(first=first, rounds=rounds, initiator=self.initiator, timeout_s=self.timeout_s,
                      deadline_s=self.deadline_s, result=self.result.ptr)
        src = self.src.ptr if self.initiator else 0
        if protocol == "device-ll":
            ll = self.layout.ll_offset
            self.kernels.launch_ll(self.gpu.stream, my_ll=self.mine(ll), peer_ll=self.theirs(ll), src=src,
                                   nbytes=nbytes, **common)
        else:
            self.kernels.launch(self.gpu.stream, my_flag=self.mine(FLAG_OFFSET), peer_flag=self.theirs(FLAG_OFFSET),
                                my_payload=self.mine(PAYLOAD_OFFSET), peer_payload=self.theirs(PAYLOAD_OFFSET),
                                src=src, nbytes=nbytes, **common)

    def _finish(self, protocol: str, nbytes: int, first: int, rounds: int) -> "cuda.PingPongResult":
        self.gpu.synchronize()
        result = self.kernels.result(self.result.ptr, self.gpu.stream)
        if result.status != cuda.PP_OK:
            raise BenchError(self.failure_text(result, protocol, nbytes, first, rounds))
        return result

    def failure_text(self, result, protocol: str, nbytes: int, first: int, rounds: int) -> str:
        other = f"worker {self.peer} (GPU {self.peer_device})"
        what = f"{protocol} at {format_size(nbytes)} on GPU {self.device}"
        seen = result.seen >> 32 if protocol == "device-ll" else result.seen
        expected = first + result.round
        step = "the handshake (round 0)" if result.round == 0 else f"round {result.round} of {rounds}"
        if result.status == cuda.PP_NO_ANSWER:
            return (f"device ping-pong {what}: {other} did not answer {step} within the "
                    f"{self.timeout_s:g} s spin timeout (flag at {seen}, waiting for {expected}); "
                    "the kernel gave up, the sample is void")
        if result.status == cuda.PP_DEADLINE:
            return (f"device ping-pong {what}: the sample passed its {self.deadline_s:g} s deadline at {step} "
                    f"(round trips too slow for the {rounds} asked); the kernel gave up")
        return f"device ping-pong {what}: the kernel reported status {result.status}"

    def _verify(self, protocol: str, nbytes: int, seed: int, last_round: int) -> None:
        gpu, layout = self.gpu, self.layout
        if protocol != "device-ll":
            gpu.verify(self.mine(PAYLOAD_OFFSET), nbytes, seed, self.path, protocol, corrupt=self.corrupt)
            return
        nwords = cuda.ll_words(nbytes)
        words = cuda.read_bytes(self.mine(layout.ll_offset), 8 * nwords, gpu.stream, self.device).view("<u8")
        rounds = (words >> np.uint64(32)).astype(np.uint64)
        stale = np.flatnonzero(rounds != np.uint64(last_round & 0xFFFFFFFF))
        if stale.size:
            k = int(stale[0])
            raise BenchError(f"verification failed on path {self.path}/{protocol} at size {nbytes} B: "
                             f"LL word {k} carries round {int(rounds[k])}, expected {last_round & 0xFFFFFFFF}")
        got = (words & np.uint64(0xFFFFFFFF)).astype("<u4").view(np.uint8)[:nbytes].copy()
        if self.corrupt and nbytes:
            got[nbytes // 2] ^= 0xFF
        want = cuda.pattern_bytes(nbytes, seed)
        bad = np.flatnonzero(got != want)
        if bad.size:
            offset = int(bad[0])
            raise VerificationError(self.path, protocol, nbytes, offset, int(want[offset]), int(got[offset]))


class LatencyScenario(Scenario):
    name = "latency"
    summary = ("latency floor: kernels ping-ponging through IPC-mapped flags vs host-driven "
               "copy+event+flag, shared-memory flags and the barrier")
    gpus_needed = 1
    min_workers = max_workers = default_workers = 2

    def default_sizes(self):
        return DEFAULT_SIZES

    def workers(self, config, machine):
        devices = list(config.devices) if config.devices else [0]
        if len(devices) > 2:
            raise UsageError(f"--devices {','.join(map(str, devices))}: the latency scenario takes one GPU "
                             "(both workers on it) or two (one worker on each)")
        a, b = devices[0], devices[-1]
        if a != b and machine is not None and machine.gpu_count > max(a, b) and (a, b) not in machine.peer_access:
            raise UsageError(f"--devices {a},{b}: GPUs {a} and {b} have no peer access, so their kernels "
                             "cannot store into each other's memory")
        return [WorkerSpec(0, "producer", a), WorkerSpec(1, "consumer", b)]

    def mailbox_slots(self, config, specs):
        return SLOTS

    def progress_total(self, config, specs):
        return (len(latency_sizes(config, self.default_sizes())) + 1) * len(specs)

    def run(self, ctx):
        return LatencyWorker(ctx, latency_sizes(ctx.config, self.default_sizes())).run()


def latency_sizes(config, default) -> tuple[int, ...]:
    """The payload sizes the latency scenario measures: the sweep, up to 1 MiB."""
    return tuple(sorted({s for s in config.sizes_for(default) if s <= LATENCY_MAX_BYTES}))


class LatencyWorker(PairWorker):
    pingpong_class = DevicePingPong

    def __init__(self, ctx, sizes):
        super().__init__(ctx, sizes)
        self.sizes = sizes  # payloads up to 1 MiB, 0 B (flags alone) included
        self.initiator = ctx.rank == 0
        self.peer = 1 - ctx.rank
        self.devices = (self.pdev, self.cdev)
        self.path = path_for(self.devices)
        self.fields = {**self.fields, "scenario": "latency"}
        self.pp: DevicePingPong | None = None
        self.event = self.peer_event = None
        self.host_rounds = 0
        self.host_samples = 0
        self.flag_rounds = 0

    def setup(self) -> Iterator[dict]:
        # The ping-pong's mapping of the other's memory is closed before teardown's barrier.
        self.pp = self._import(self.pingpong_class(
            self.ctx, INITIATOR if self.initiator else RESPONDER, self.peer, self.gpu,
            max_bytes=max(self.sizes, default=0), fields=self.fields, path=self.path))
        self.pp.setup()
        self.setup_event()
        yield from self.barrier_rows()
        yield from self.flag_rows()
        self.ctx.progress()

    def measure(self, nbytes: int) -> Iterator[dict]:
        for protocol in PROTOCOLS:
            if protocol == "device-ll" and nbytes == 0:
                continue
            yield from self.pp.measure(protocol, nbytes, self.config.warmup, self.config.iterations)
        if nbytes > 0:
            yield from self.host_pingpong(nbytes)

    # ---------------------------------------------------------------- no GPU: barrier, flags

    def barrier_rows(self) -> Iterator[dict]:
        """One crossing of the shared-memory barrier: seconds per crossing (both workers cross)."""
        ctx, warmup = self.ctx, self.config.warmup
        for i in range(warmup + self.config.iterations):
            ctx.phase("latency", 0, i)
            ctx.sync()
            t0 = time.perf_counter_ns()
            for _ in range(CROSSINGS):
                ctx.sync()
            seconds = (time.perf_counter_ns() - t0) / 1e9 / CROSSINGS
            if self.initiator and i >= warmup:
                yield self._row(path=self.path, variant="barrier", metric="latency", src="host", dst="host",
                                bytes=0, iteration=i - warmup, batch=CROSSINGS, seconds=seconds, verified=None,
                                sharing="none")

    def flag_rows(self) -> Iterator[dict]:
        """Ping-pong of two shared-memory words (no GPU): one-way = round trip / 2."""
        ctx, seg, warmup = self.ctx, self.seg, self.config.warmup
        words, ping, pong = seg.words, seg.mailbox_index(FLAG_PING), seg.mailbox_index(FLAG_PONG)
        timeout = self.config.timeout
        for i in range(warmup + self.config.iterations):
            ctx.phase("latency", 0, i)
            first, last = self.flag_rounds + 1, self.flag_rounds + CROSSINGS
            self.flag_rounds = last
            ctx.sync()
            t0 = time.perf_counter_ns()
            for k in range(first, last + 1):
                if self.initiator:
                    words[ping] = k
                    if words[pong] < k:
                        seg.wait_until(FLAG_PONG, k, timeout, waiting_for=[self.peer])
                else:
                    if words[ping] < k:
                        seg.wait_until(FLAG_PING, k, timeout, waiting_for=[self.peer])
                    words[pong] = k
            seconds = (time.perf_counter_ns() - t0) / 1e9 / CROSSINGS / 2
            if self.initiator and i >= warmup:
                yield self._row(path=self.path, variant="flag-pingpong", metric="latency", src="host", dst="host",
                                bytes=0, iteration=i - warmup, batch=CROSSINGS, seconds=seconds, verified=True,
                                sharing="none")

    # ---------------------------------------------------------------- host-driven copy + event + flag

    def setup_event(self) -> None:
        """The initiator's interprocess event ("my copy into your buffer is queued before this")."""
        ctx, gpu = self.ctx, self.gpu
        if self.initiator:
            self.event = gpu.adopt(cuda.IpcEvent.create(self.device))
            self.seg.put_handle(ctx.rank, EVENT_HANDLE, self.event.export())
        ctx.sync()
        if not self.initiator:
            self.peer_event = self._import(cuda.IpcEvent.open(self.seg.get_handle(self.peer, EVENT_HANDLE), self.device))
        ctx.sync()

    def host_pingpong(self, nbytes: int) -> Iterator[dict]:
        ctx, warmup = self.ctx, self.config.warmup
        ctx.phase("warmup", nbytes, 0)
        seconds = self.host_sample(nbytes, CALIBRATION_ROUNDS)
        if self.initiator:
            self.seg.store(ROUNDS, rounds_for(2 * seconds, hi=HOST_MAX_ROUNDS))
        ctx.sync()
        rounds = self.seg.load(ROUNDS)
        for i in range(warmup + self.config.iterations):
            ctx.phase("warmup" if i < warmup else "latency", nbytes, i)
            seconds = self.host_sample(nbytes, rounds)
            if self.initiator and i >= warmup:
                yield self._row(path=self.path, variant="host-pingpong", metric="latency", src=self.devices[0],
                                dst=self.devices[1], bytes=nbytes, iteration=i - warmup, batch=rounds,
                                seconds=seconds, verified=True, ceiling="")

    def host_sample(self, nbytes: int, rounds: int) -> float:
        """`rounds` host-driven round trips; one-way seconds (initiator; 0 for the responder)."""
        gpu, seg, pp, timeout = self.gpu, self.seg, self.pp, self.config.timeout
        words, ping, pong = seg.words, seg.mailbox_index(PING), seg.mailbox_index(PONG)
        self.host_samples += 1
        seed = cuda.seed_for(0x40570000 + self.host_samples)
        if self.initiator:
            gpu.fill(pp.src.ptr, nbytes, seed)
        cuda.memset(pp.mine(PAYLOAD_OFFSET), 0, pp.layout.payload_cap, gpu.stream, self.device)
        gpu.synchronize()
        first, last = self.host_rounds + 1, self.host_rounds + rounds
        self.host_rounds = last
        stream = gpu.stream
        self.ctx.sync()
        seconds = 0.0
        if self.initiator:
            send = gpu.memcpy_launcher(pp.theirs(PAYLOAD_OFFSET), pp.src.ptr, nbytes)
            t0 = time.perf_counter_ns()
            for k in range(first, last + 1):
                send()
                self.event.record(stream)
                words[ping] = k
                if words[pong] < k:
                    seg.wait_until(PONG, k, timeout, waiting_for=[self.peer])
            seconds = (time.perf_counter_ns() - t0) / 1e9 / rounds / 2
        else:
            answer = gpu.memcpy_launcher(pp.theirs(PAYLOAD_OFFSET), pp.mine(PAYLOAD_OFFSET), nbytes)
            for k in range(first, last + 1):
                if words[ping] < k:
                    seg.wait_until(PING, k, timeout, waiting_for=[self.peer])
                self.peer_event.wait(stream)
                answer()
                stream.synchronize()
                words[pong] = k
        gpu.synchronize()
        gpu.verify(pp.mine(PAYLOAD_OFFSET), nbytes, seed, self.path, "host-pingpong", corrupt=self.corrupt)
        self.ctx.sync()
        return seconds
