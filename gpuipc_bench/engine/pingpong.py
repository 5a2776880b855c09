"""Device-initiated ping-pong between two workers through each other's IPC-mapped buffer
(kernels in gpu/pingpong.cu), used by the latency and sharing scenarios.

Each active worker cudaMallocs one buffer, exports it and maps the other's:

    offset 0      flag (uint32): the last round number the other side sent
    offset 256    payload region (flag-and-fence protocol, host ping-pong)
    after it      LL region: one 8-byte word per 4 payload bytes

Protocols ('variant' of the rows, metric latency, one-way = round trip / 2):
  device-pingpong  the initiator's block stores the payload into the responder's buffer,
                   __threadfence_system(), stores the round number into its flag; the
                   responder's kernel spins on its flag, answers with the payload XORed with
                   the round number, fences, stores the initiator's flag. 0 bytes: flags alone.
  device-ll        NCCL's LL protocol: each 8-byte word carries 4 payload bytes and the round
                   number in one store, no fence; the responder answers each word, XORed.

Timed inside the initiator's kernel with %globaltimer over `rounds` round trips, after an
untimed handshake round (neither launch overhead nor launch skew is in the figure). Every
wait in a kernel is bounded (spin timeout, sample deadline): a kernel can never hang.
After each sample both sides verify: the responder holds the initiator's payload, the
initiator the payload XORed with the last round number (so an answer that is only an echo
of stale bytes, or the initiator's own bytes, fails).
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

import numpy as np

from gpuipc_bench.errors import BenchError, UsageError
from gpuipc_bench.gpu import kernels as k
from gpuipc_bench.gpu.memory import MappedBuffer, Ring, memset, read
from gpuipc_bench.patterns import check
from gpuipc_bench.engine.sampler import Counts, Sample
from gpuipc_bench.hooks.profiling import mark

INITIATOR, RESPONDER, IDLE = "initiator", "responder", "idle"
PROTOCOLS = ("device-pingpong", "device-ll")
FLAG_OFFSET = 0
PAYLOAD_OFFSET = 256
ALIGN = 256

CALIBRATION_ROUNDS = 10
MIN_ROUNDS, MAX_ROUNDS = 10, 1000
TARGET_SAMPLE_S = 0.02
SPIN_TIMEOUT_S = 5.0
MAX_DEADLINE_S = 30.0
# A calibration round trip longer than this means the two kernels take turns on the GPU
# (time-sliced contexts): every figure is then the driver's time slice, whatever the payload.
TIME_SLICED_ROUND_TRIP_S = 100e-6
TIME_SLICED_COUNTS = Counts(warmup=0, min_samples=3, max_samples=3)
TIME_SLICED_SIZES = (0, 4096)
# Time-sliced, a round trip takes two time slices (~4 ms on an H200): a sample of TARGET_SAMPLE_S holds 5,
# not MIN_ROUNDS (10 made each sample 40 ms), and once a pair is known to take turns a group's calibration
# needs only a few (~0.3 s of every run's 0.64 s of time-sliced latency on one H200).
TIME_SLICED_MIN_ROUNDS = 5
TIME_SLICED_CALIBRATION_ROUNDS = 3


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
        return max(ALIGN, -(-k.ll_words(self.max_bytes) * 8 // ALIGN) * ALIGN)

    @property
    def total(self) -> int:
        return self.ll_offset + self.ll_cap


class DevicePingPong:
    """Every worker of a scenario makes one, with role INITIATOR, RESPONDER or IDLE; all call the
    same methods in the same order, so that they cross the same barriers (an idle worker does no
    CUDA work, and needs no GPU). The slot and handle names are `name`-prefixed.

        pp = DevicePingPong(ctx, role, peer, gpu, sampler, max_bytes=..., path="ipc")
        pp.declare(); ...; ctx.lock_names(); pp.setup()
        yield from pp.measure("device-ll", 64)     # rows: initiator only
        pp.close(); ctx.sync(); gpu.close()      # importers close before exporters free
    """

    def __init__(self, ctx, role: str, peer: int | None, gpu, sampler, *, max_bytes: int, path: str,
                 name: str = "pp"):
        if role not in (INITIATOR, RESPONDER, IDLE):
            raise ValueError(f"role must be initiator, responder or idle, not {role!r}")
        if role != IDLE and (gpu is None or peer is None):
            raise ValueError("an initiator or responder needs a Gpu and a peer")
        self.ctx, self.role, self.peer, self.gpu, self.sampler = ctx, role, peer, gpu, sampler
        self.layout = Layout(max_bytes)
        self.path, self.name = path, name
        self.timeout_s, self.deadline_s = spin_limits(ctx.config)
        self.device = gpu.device if gpu is not None else None
        self.peer_device = ctx.specs[peer].device if peer is not None else None
        self.seq = 0  # round numbers used so far (both sides count in step)
        self.time_sliced: bool | None = None  # learnt from the first calibration
        self.kernels = self.buffer = self.mapped = self.src = self.result = None

    @property
    def active(self) -> bool:
        return self.role != IDLE

    @property
    def initiator(self) -> bool:
        return self.role == INITIATOR

    def declare(self) -> None:
        self.ctx.declare(f"{self.name}.rounds", f"{self.name}.slow")
        self.ctx.handle_slot(f"{self.name}.buffer")

    # ---------------------------------------------------------------- setup, teardown

    def setup(self) -> None:
        """Allocate and export this side's buffer, then map the other's. Crosses 2 barriers."""
        ctx, layout = self.ctx, self.layout
        if self.active:
            gpu = self.gpu
            self.kernels = gpu.adopt(k.PingPongKernels(self.device))
            self.buffer = gpu.alloc(layout.total)
            memset(self.buffer.ptr, 0, layout.total, gpu.stream, self.device)
            self.result = gpu.alloc(k.PINGPONG_RESULT_BYTES)
            if self.initiator:
                self.src = gpu.alloc(layout.payload_cap)
            gpu.synchronize()
            ctx.publish(f"{self.name}.buffer", self.buffer.export())
        ctx.sync()  # handles published
        if self.active:
            handle = ctx.receive(self.peer, f"{self.name}.buffer")
            self.mapped = self.gpu.adopt(MappedBuffer(handle, layout.total, self.device))
        ctx.sync()  # both mapped

    def close(self) -> None:
        """Close the mapping of the other's buffer (the caller then crosses a barrier before freeing)."""
        if self.mapped is not None:
            mapped, self.mapped = self.mapped, None
            self.gpu.release(mapped)

    def mine(self, offset: int) -> int:
        return self.buffer.ptr + offset

    def theirs(self, offset: int) -> int:
        return self.mapped.ptr + offset

    # ---------------------------------------------------------------- measuring

    def skip(self, nbytes: int) -> bool:
        """On time-sliced contexts only a few payloads are worth measuring (all give the time slice)."""
        return bool(self.time_sliced) and nbytes not in TIME_SLICED_SIZES

    def measure(self, protocol: str, nbytes: int, fields: dict | None = None) -> Iterator[dict]:
        """Calibrate the round trips, then samples until the median is known; rows from the initiator."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, not {protocol!r}")
        if nbytes > self.layout.max_bytes:
            raise ValueError(f"{nbytes} bytes do not fit the {self.layout.max_bytes}-byte payload region")
        ctx = self.ctx
        ctx.phase("warmup", nbytes, 0)
        calibration = self.sample(protocol, nbytes, TIME_SLICED_CALIBRATION_ROUNDS if self.time_sliced else
                                  CALIBRATION_ROUNDS, seed=0x1A7E0000 + self.seq)
        if self.initiator:
            slow = calibration.round_trip > TIME_SLICED_ROUND_TRIP_S
            ctx.store(f"{self.name}.rounds", rounds_for(calibration.round_trip,
                                                         lo=TIME_SLICED_MIN_ROUNDS if slow else MIN_ROUNDS))
            ctx.store(f"{self.name}.slow", 1 + slow)
        ctx.sync()
        rounds = ctx.load(f"{self.name}.rounds")
        if self.time_sliced is None:
            self.time_sliced = ctx.load(f"{self.name}.slow") == 2
        counts = TIME_SLICED_COUNTS if self.time_sliced else None
        group = dict(path=self.path, variant=protocol, measure="pingpong", metric="latency", src=self.device,
                     dst=self.peer_device, bytes=nbytes, ceiling="", **(fields or {}))

        def take(trial) -> Sample | None:
            result = self.sample(protocol, nbytes, rounds, trial.seed)
            return Sample(result.round_trip / 2, rounds) if self.initiator else None

        yield from self.sampler.run(group, take, timer=self.initiator, reps=rounds, calibrate=False,
                                    phase="latency", counts=counts)

    def sample(self, protocol: str, nbytes: int, rounds: int, seed: int) -> "k.PingPongResult | None":
        """One launch of `rounds` timed round trips (after the handshake) on both sides, checked
        and verified. Crosses 2 barriers. The initiator gets the result; the others None."""
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
            mark("pingpong sm", protocol, nbytes, "initiator" if self.initiator else "responder", result.sm,
                 result.round_trip)  # (where each side's block ran: the trace's, GPUIPC_BENCH_TRACE)
        self.ctx.sync()  # both verified
        return result if self.initiator else None

    def _prepare(self, protocol: str, nbytes: int, seed: int) -> None:
        gpu, layout = self.gpu, self.layout
        if self.initiator:
            gpu.fill(self.src.ptr, Ring.for_size(nbytes, 1), seed)
        if protocol == "device-ll":
            memset(self.mine(layout.ll_offset), 0, layout.ll_cap, gpu.stream, self.device)
        else:
            memset(self.mine(PAYLOAD_OFFSET), 0, layout.payload_cap, gpu.stream, self.device)
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

    def _finish(self, protocol: str, nbytes: int, first: int, rounds: int) -> "k.PingPongResult":
        self.gpu.synchronize()
        result = self.kernels.result(self.result.ptr, self.gpu.stream)
        if result.status != k.PP_OK:
            raise BenchError(self.failure_text(result, protocol, nbytes, first, rounds))
        return result

    def failure_text(self, result, protocol: str, nbytes: int, first: int, rounds: int) -> str:
        from gpuipc_bench.sizes import format_size

        other = f"worker {self.peer} (GPU {self.peer_device})"
        what = f"{protocol} at {format_size(nbytes)} on GPU {self.device}"
        seen = result.seen >> 32 if protocol == "device-ll" else result.seen
        expected = first + result.round
        step = "the handshake (round 0)" if result.round == 0 else f"round {result.round} of {rounds}"
        if result.status == k.PP_NO_ANSWER:
            return (f"device ping-pong {what}: {other} did not answer {step} within the "
                    f"{self.timeout_s:g} s spin timeout (flag at {seen}, waiting for {expected}); "
                    "the kernel gave up, the sample is void")
        if result.status == k.PP_DEADLINE:
            return (f"device ping-pong {what}: the sample passed its {self.deadline_s:g} s deadline at {step} "
                    f"(round trips too slow for the {rounds} asked); the kernel gave up")
        return f"device ping-pong {what}: the kernel reported status {result.status}"

    def _verify(self, protocol: str, nbytes: int, seed: int, last_round: int) -> None:
        """The responder holds the initiator's payload; the initiator the payload XORed with the
        last round's number (the responder's answer)."""
        gpu, layout = self.gpu, self.layout
        mask = (last_round & 0xFFFFFFFF) if self.initiator else 0
        if protocol != "device-ll":
            if nbytes:
                gpu.verify(self.mine(PAYLOAD_OFFSET), Ring.for_size(nbytes, 1), seed, self.path, protocol,
                           xor_mask=mask, corrupt=self.ctx.corrupt)
            return
        nwords = k.ll_words(nbytes)
        words = read(self.mine(layout.ll_offset), 8 * nwords, gpu.stream, self.device).view("<u8")
        rounds = (words >> np.uint64(32)).astype(np.uint64)
        stale = np.flatnonzero(rounds != np.uint64(last_round & 0xFFFFFFFF))
        if stale.size:
            i = int(stale[0])
            raise BenchError(f"verification failed on path {self.path}/{protocol} at size {nbytes} B: "
                             f"LL word {i} carries round {int(rounds[i])}, expected {last_round & 0xFFFFFFFF}")
        got = (words & np.uint64(0xFFFFFFFF)).astype("<u4").view(np.uint8)[:nbytes].copy()
        if self.ctx.corrupt and nbytes:
            got[nbytes // 2] ^= 0xFF
        check(got, seed, self.path, protocol, nbytes, xor_mask=mask)
