"""latency: the latency floor between two processes, device-initiated next to host-driven.

Two workers: the initiator on the first GPU of --devices (default 0), the responder on the
second (default: the same GPU). Variants, all metric 'latency', one-way = round trip / 2
(path 'ipc' on one GPU, 'peer' across two; 'sharing' says time-sliced, MPS or exclusive):

  device-pingpong, device-ll   kernels in both processes through IPC-mapped memory
                               (gpuipc_bench.engine.pingpong: flag + fence, or LL words)
  host-pingpong    host-driven: the initiator's cudaMemcpyAsync into the responder's buffer,
                   an IPC event recorded after it, a mailbox flag; the responder sees the flag,
                   makes its stream wait on the event, copies the bytes back, synchronises and
                   answers with a flag
  flag-pingpong    the mailbox flags alone, no GPU (the signalling of host-pingpong)
  barrier          one crossing of the tool's shared-memory barrier by the two workers

On one GPU without MPS the two kernels take turns (time-sliced contexts) and every hop waits
for the other's time slice (~2 ms): a real result, the same at every payload. When the
calibration round trip shows it (over 100 us), the device ping-pong is measured with 3
samples at 0 B and 4 KiB only.
"""

from __future__ import annotations

import time
from typing import Iterator

from gpuipc_bench.errors import UsageError
from gpuipc_bench.gpu.memory import IpcEvent, Ring, memset
from gpuipc_bench.engine.pair import PairWorker, pair_specs
from gpuipc_bench.engine.pingpong import INITIATOR, PAYLOAD_OFFSET, PROTOCOLS, RESPONDER, DevicePingPong
from gpuipc_bench.engine.sampler import Sample
from gpuipc_bench.engine.scenario import Scenario, gpu_cpus

# 0 B, then the paths' own sweep up to 4 KiB, so that a GPU-signalled hand-off is a candidate
# at every size where the host-signalled ones are measured (the answer's bands do not break)
DEFAULT_SIZES = (0, 4, 256, 4096)  # its own: the GPU-signalled hand-offs are cheap to sample
LATENCY_MAX_BYTES = 1 << 20
HOST_ROUNDS = 200
CROSSINGS = 1000


def path_for(devices) -> str:
    return "ipc" if len(set(devices)) == 1 else "peer"


class LatencyScenario(Scenario):
    name = "latency"
    summary = ("latency floor: kernels ping-ponging through IPC-mapped flags vs host-driven "
               "copy+event+flag, shared-memory flags and the barrier")
    gpus_needed = 1
    pairable = True
    sharing_modes = True
    persistent_workers = True  # its kernels, events and mappings end with it, as a pair path's do
    min_workers = max_workers = default_workers = 2

    def default_sizes(self, preset=""):
        return (0, 4096) if preset == "quick" else DEFAULT_SIZES  # quick: the paths' 4 KiB

    def sizes(self, config):
        """The payload sizes: the sweep, up to 1 MiB."""
        return tuple(s for s in super().sizes(config) if s <= LATENCY_MAX_BYTES) or (0,)

    def workers(self, config, machine):
        devices = list(config.devices) if config.devices else [0]
        if len(devices) > 2:
            raise UsageError(f"--devices {','.join(map(str, devices))}: the latency scenario takes one GPU "
                             "(both workers on it) or two (one worker on each)")
        a, b = devices[0], devices[-1]
        if a != b and machine is not None and machine.gpu_count > max(a, b) and (a, b) not in machine.peer_access:
            raise UsageError(f"--devices {a},{b}: GPUs {a} and {b} have no peer access, so their kernels "
                             "cannot store into each other's memory")
        return pair_specs(a, b, lambda device: gpu_cpus(machine, device))

    def memory_needed(self, config, specs):
        return 0, 16 << 20

    def progress_total(self, config, specs):
        return (len(self.sizes(config)) + 1) * len(specs)

    def run(self, ctx):
        return LatencyWorker(ctx, self).run()


class LatencyWorker(PairWorker):
    def __init__(self, ctx, scenario):
        super().__init__(ctx, scenario)
        self.initiator = ctx.rank == 0
        self.peer = 1 - ctx.rank
        self.path = path_for((self.pdev, self.cdev))
        self.pp: DevicePingPong | None = None
        self.event = self.peer_event = None

    def setup(self) -> Iterator[dict]:
        ctx = self.ctx
        ctx.declare("ping", "pong", "flag.ping", "flag.pong", "host.rounds")
        ctx.handle_slot("event")
        self.pp = self.imported(DevicePingPong(ctx, INITIATOR if self.initiator else RESPONDER, self.peer, self.gpu,
                                               self.sampler, max_bytes=max(self.sizes), path=self.path))
        self.pp.declare()
        self.pp.setup()
        if self.initiator:  # "my copy into your buffer is queued before this"
            self.event = self.gpu.adopt(IpcEvent.create(self.device))
            ctx.publish("event", self.event.export())
        ctx.sync()
        if not self.initiator:
            self.peer_event = self.imported(IpcEvent.open(ctx.receive(self.peer, "event"), self.device))
        ctx.sync()
        yield from self.crossing_rows("barrier", lambda k: ctx.sync())
        yield from self.crossing_rows("flag-pingpong", self.flag_round, one_way=True)
        ctx.progress()

    def measure(self, nbytes: int) -> Iterator[dict]:
        for protocol in PROTOCOLS:
            if (protocol == "device-ll" and nbytes == 0) or self.pp.skip(nbytes):
                continue
            yield from self.pp.measure(protocol, nbytes)
        if nbytes > 0:
            yield from self.host_pingpong(nbytes)

    # ---------------------------------------------------------------- no GPU: barrier, flags

    def crossing_rows(self, variant: str, cross, one_way: bool = False) -> Iterator[dict]:
        """A batch of CROSSINGS crossings (or flag round trips, halved) timed by the initiator."""
        ctx = self.ctx

        def take(trial) -> Sample | None:
            first = ctx.load("flag.pong" if self.initiator else "flag.ping") + 1
            ctx.sync()
            t0 = time.perf_counter_ns()
            for k in range(first, first + trial.reps):
                cross(k)
            seconds = (time.perf_counter_ns() - t0) / 1e9 / trial.reps / (2 if one_way else 1)
            return Sample(seconds, trial.reps, True if one_way else None) if self.initiator else None

        group = dict(path=self.path, variant=variant, measure="pingpong" if one_way else "", metric="latency",
                     src="host", dst="host", bytes=0, ceiling="", sharing="none")
        yield from self.sampler.run(group, take, timer=self.initiator, reps=CROSSINGS, calibrate=False,
                                    phase="latency")

    def flag_round(self, k: int) -> None:
        ctx = self.ctx
        if self.initiator:
            ctx.store("flag.ping", k)
            ctx.spin("flag.pong", k)
        else:
            ctx.spin("flag.ping", k)
            ctx.store("flag.pong", k)

    # ---------------------------------------------------------------- host-driven copy + event + flag

    def host_pingpong(self, nbytes: int) -> Iterator[dict]:
        group = dict(path=self.path, variant="host-pingpong", measure="pingpong", metric="latency",
                     src=self.pdev, dst=self.cdev, bytes=nbytes, ceiling="")
        yield from self.sampler.run(group, lambda trial: self.host_sample(nbytes, trial), timer=self.initiator,
                                    reps=HOST_ROUNDS, min_reps=10, phase="latency")

    def host_sample(self, nbytes: int, trial) -> Sample | None:
        """`trial.reps` host-driven round trips; the initiator's payload region is cleared first,
        so only the responder's copies can fill it."""
        ctx, gpu, pp = self.ctx, self.gpu, self.pp
        one = Ring.for_size(nbytes, 1)
        if self.initiator:
            gpu.fill(pp.src.ptr, one, trial.seed)
        memset(pp.mine(PAYLOAD_OFFSET), 0, pp.layout.payload_cap, gpu.stream, self.device)
        gpu.synchronize()
        first = (ctx.load("pong") if self.initiator else ctx.load("ping")) + 1
        stream = gpu.stream
        ctx.sync()
        seconds = 0.0
        if self.initiator:
            send = gpu.copy_launcher(nbytes)
            t0 = time.perf_counter_ns()
            for k in range(first, first + trial.reps):
                send(pp.theirs(PAYLOAD_OFFSET), pp.src.ptr)
                self.event.record(stream)
                ctx.store("ping", k)
                ctx.spin("pong", k)
            seconds = (time.perf_counter_ns() - t0) / 1e9 / trial.reps / 2
        else:
            answer = gpu.copy_launcher(nbytes)
            for k in range(first, first + trial.reps):
                ctx.spin("ping", k)
                self.peer_event.wait(stream)
                answer(pp.theirs(PAYLOAD_OFFSET), pp.mine(PAYLOAD_OFFSET))
                stream.synchronize()
                ctx.store("pong", k)
        gpu.synchronize()
        gpu.verify(pp.mine(PAYLOAD_OFFSET), one, trial.seed, self.path, "host-pingpong", corrupt=ctx.corrupt)
        ctx.sync()
        return Sample(seconds, trial.reps) if self.initiator else None
