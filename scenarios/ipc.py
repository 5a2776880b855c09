"""ipc: CUDA IPC mapping. A second process maps the producer's cudaMalloc memory and copies.

Each worker cudaMallocs one ring buffer and exports its cudaIpcMemHandle; the other maps it
once. Both sit on the first GPU of --devices unless it names two (then the consumer sits on
the second). Variants: the consumer pulls from the producer's memory with the copy engine
('ce') or a kernel ('sm'), or pushes into it ('push', copy engine). Measures:

  stream   the producer fills its ring and signals once (an interprocess event); the
           consumer's gated batch copies slot r to slot r, back to back
  handoff  one transfer in flight (gpuipc_bench.engine.exchange): the producer marks slot r (a
           one-thread kernel writes its first bytes, which the fill left wrong), signals; the
           consumer waits for the signal, copies slot r, signals back; the producer marks
           slot r + 1 after that. Push: the consumer copies, signals, the producer signals back.

The receiving side verifies every slot after each sample (a copy that ran before its mark
fails). Set-up rows, 6 each on fresh allocations: cudaIpcGetMemHandle, the first
cudaIpcOpenMemHandle, cudaIpcCloseMemHandle, and the event handle's export and open.

Latency ('ce-pingpong', host-driven, at 4 B, 4 KiB, 64 KiB and 1 MiB of the sweep): the
producer copies its payload into the consumer's buffer, synchronises and raises a mailbox
flag; the consumer answers with its own payload (another seed) into the producer's buffer.
Each side verifies the other's bytes. One-way = round trip / 2. On one GPU without MPS
every hop pays a switch between the two processes' contexts: the real cost of alternating
GPU work between two processes there.

Ceilings, measured by the consumer alone: d2d@GPU and d2d-sm@GPU (peer@A>B, peer-sm@A>B
when the workers sit on two GPUs), and one copy + synchronize for the ping-pong.

The health form (`check --preset health`; IpcScenario.health, set on a copy by check.node.health_form):
what the check's health figures judge and what proves the path, nothing else. The copy engine's pull
only: its stream at the run's largest size with its ceiling (d2d@GPU: the figures ipc-ce and d2d;
peer@A>B across two GPUs), its hand-off at the other sizes (4 KiB: ipc-handoff-4k, the path's signals
and verification across the two processes), the set-up rows once. No kernel copy or push, no
ping-pong, no d2d-sm ceiling.
"""

from __future__ import annotations

import time
from typing import Iterator

from gpuipc_bench.engine.exchange import Exchange, max_transfers
from gpuipc_bench.gpu.memory import DeviceBuffer, IpcEvent, MappedBuffer, Ring, reps_for
from gpuipc_bench.gpu.timing import time_setup
from gpuipc_bench.engine.pair import CONSUMER, MEASURES, PRODUCER, PairScenario, PairWorker
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.engine.sampler import Group, Sample
from gpuipc_bench.engine.gpu_signal import Signal

VARIANTS = ("ce", "sm", "push")
PINGPONG_SIZES = (4, 4 << 10, 64 << 10, 1 << 20)
PINGPONG_ROUNDS = 200  # before calibration to about 5 ms a sample
PINGPONG_FIRST_ROUNDS = 20  # the first warm-up's (time-sliced, a round trip pays two context switches)
REPLY = 0x5A5A5A5A  # the consumer answers with the pattern of seed ^ REPLY


class IpcWorker(PairWorker):
    path = "ipc"
    peer_access_at = "setup"  # after the set-up rows of the first IPC open (which enables it lazily)

    # ------------------------------------------------------------------ setup

    def setup(self) -> Iterator[dict]:
        ctx, gpu = self.ctx, self.gpu
        ctx.declare("push.checked", "ping", "pong")
        rows = list(self.setup_costs(self.ring_bytes()))
        if not self.same_gpu and not self.producer:
            rows += list(self.peer_enable_rows())
        capacity = self.ring_bytes()
        # Producer: the ring the consumer pulls from and pushes into. Consumer: its own ring
        # (pull destination, push source), which the producer maps for the ping-pong.
        self.ring_buf = self.share_ring(capacity)
        self.scratch = gpu.alloc(max(self.sizes) + 256)  # where warm-up operations land
        self.ready = Signal(ctx, "ready", PRODUCER, CONSUMER)
        self.pushed = Signal(ctx, "pushed", CONSUMER, PRODUCER)
        self.pull = Exchange(ctx, "pull", PRODUCER, CONSUMER, self.same_gpu)
        self.push = Exchange(ctx, "push", CONSUMER, PRODUCER, self.same_gpu)
        parts = (self.ready, self.pushed, self.pull, self.push) + self.more_signals()
        for part in parts:
            part.create(gpu)
        ctx.sync()  # handles published
        self.mapped = self.imported(self.open_ring(capacity))
        for part in parts:
            part.open(gpu, self.imports)
        ctx.sync()  # everything open
        yield from rows

    def more_signals(self) -> tuple:
        """Signals a subclass adds (made in step on both workers, created and opened with ipc's)."""
        return ()

    def share_ring(self, capacity: int):
        """Allocate this worker's ring (anything with .ptr and close()) and export it to the
        other worker. The other opens it after the next barrier (open_ring)."""
        ring = self.gpu.alloc(capacity)
        self.ctx.publish("ring", ring.export())
        return ring

    def open_ring(self, capacity: int):
        """Map the other worker's ring into this process (anything with .ptr and close())."""
        return MappedBuffer(self.ctx.receive(self.other, "ring"), capacity, self.device)

    def setup_repeats(self) -> int:
        """How many times each set-up operation is timed: the sampler's count (the health form: once)."""
        return 1 if self.health else self.sampler.setup_repeats

    def setup_costs(self, n: int) -> Iterator[dict]:
        """Export (producer) and first open, close, event open (consumer), each on fresh objects
        of `n` bytes, setup_repeats() times."""
        ctx = self.ctx
        src, dst = self.pdev, self.cdev
        for i in range(self.setup_repeats()):
            ctx.phase("setup", n, i)
            if self.producer:
                buf = DeviceBuffer(n, self.device)
                event = IpcEvent.create(self.device)
                handle, seconds = time_setup(buf.export, self.device)
                yield self.setup_row("ipc_export", seconds, i, n, src, dst)
                event_handle, seconds = time_setup(event.export, self.device)
                yield self.setup_row("ipc_event_export", seconds, i, 0, src, dst)
                ctx.publish("setup.mem", handle)
                ctx.publish("setup.event", event_handle)
            ctx.sync()
            if not self.producer:
                mapped, seconds = time_setup(
                    lambda: MappedBuffer(ctx.receive(PRODUCER, "setup.mem"), n, self.device), self.device)
                yield self.setup_row("ipc_open_cold", seconds, i, n, src, dst)
                _, seconds = time_setup(mapped.close, self.device)
                yield self.setup_row("ipc_close", seconds, i, n, src, dst)
                event, seconds = time_setup(
                    lambda: IpcEvent.open(ctx.receive(PRODUCER, "setup.event"), self.device), self.device)
                yield self.setup_row("ipc_event_open", seconds, i, 0, src, dst)
                event.close()
            ctx.sync()  # closed before freed
            if self.producer:
                event.close()
                buf.close()

    # ------------------------------------------------------------------ measuring

    def measure(self, nbytes: int) -> Iterator[dict]:
        if self.health:
            yield from self.health_measure(nbytes)
            return
        yield from self.sampler.interleave([self.bandwidth(v, m, nbytes) for v in VARIANTS for m in MEASURES], nbytes)
        yield from self.in_turn(lambda: self.ceiling_samples(nbytes))
        if nbytes in PINGPONG_SIZES:
            yield from self.pingpong(nbytes)

    def health_measure(self, nbytes: int) -> Iterator[dict]:
        """The health form's groups at `nbytes`: the copy engine's stream and its ceiling (d2d@GPU, or
        peer@A>B across two GPUs; measured by the consumer alone) at the largest size, its hand-off at
        the others."""
        if nbytes != max(self.sizes):
            yield from self.sampler.interleave([self.bandwidth("ce", "handoff", nbytes)], nbytes)
            return
        yield from self.sampler.interleave([self.bandwidth("ce", "stream", nbytes)], nbytes)
        key = self.ceiling_for("ce")
        yield from self.in_turn(lambda: iter(()) if self.producer else self.ceiling_rows(key, nbytes))

    def ceiling_for(self, variant: str) -> str:
        if self.same_gpu:
            return f"d2d-sm@{self.cdev}" if variant == "sm" else f"d2d@{self.cdev}"
        if variant == "push":
            return f"peer@{self.cdev}>{self.pdev}"
        return f"peer{'-sm' if variant == 'sm' else ''}@{self.pdev}>{self.cdev}"

    def ceiling_samples(self, nbytes: int) -> Iterator[dict]:
        if self.producer:
            return
        for key in dict.fromkeys(self.ceiling_for(v) for v in VARIANTS):
            yield from self.ceiling_rows(key, nbytes)

    def bandwidth(self, variant: str, measure: str, nbytes: int) -> Group:
        push = variant == "push"
        src, dst = (self.cdev, self.pdev) if push else (self.pdev, self.cdev)
        if measure == "stream":
            reps, timer = reps_for(nbytes), self.ctx.rank == CONSUMER
            take = self.push_stream if push else self.pull_stream
        else:
            reps = min(reps_for(nbytes), max_transfers(1, True))
            timer = self.ctx.rank == (PRODUCER if push else CONSUMER)
            take = self.push_handoff if push else self.pull_handoff
        group = self.group(variant, measure, nbytes, src, dst, self.ceiling_for(variant), reps)
        return self.sampler.run(group, lambda trial: take(variant, nbytes, trial), timer=timer, reps=reps)

    def pull_stream(self, variant, nbytes, trial) -> Sample | None:
        gpu, ring = self.gpu, Ring.for_size(nbytes, trial.reps)
        if self.producer:
            gpu.fill(self.ring_buf.ptr, ring, trial.seed)
            self.ready.send(gpu.stream)
            return None
        self.ready.receive(gpu.stream)  # the copies wait for the producer's fill
        copy = gpu.copy_launcher(nbytes, "sm" if variant == "sm" else "ce")
        mine, theirs = self.ring_buf.ptr, self.mapped.ptr
        marks = gpu.time_batch(lambda r: copy(mine + ring.offset(r), theirs + ring.offset(r)), trial.reps,
                               warm=lambda: copy(self.scratch.ptr, theirs), transfer_bytes=nbytes)
        seconds = marks.seconds() / trial.reps
        gpu.verify(mine, ring, trial.seed, self.path, variant, corrupt=self.ctx.corrupt)
        return Sample(seconds, trial.reps)

    def push_stream(self, variant, nbytes, trial) -> Sample | None:
        gpu, ring = self.gpu, Ring.for_size(nbytes, trial.reps)
        if self.producer:
            self.pushed.receive(gpu.stream)
            gpu.verify(self.ring_buf.ptr, ring, trial.seed, self.path, variant, corrupt=self.ctx.corrupt)
            self.ctx.store("push.checked", trial.seq)
            return None
        copy = gpu.copy_launcher(nbytes)
        mine, theirs = self.ring_buf.ptr, self.mapped.ptr
        gpu.fill(mine, ring, trial.seed)
        marks = gpu.time_batch(lambda r: copy(theirs + ring.offset(r), mine + ring.offset(r)), trial.reps,
                               warm=lambda: copy(self.scratch.ptr, mine), transfer_bytes=nbytes)
        seconds = marks.seconds() / trial.reps
        self.pushed.send(gpu.stream)
        self.ctx.wait("push.checked", trial.seq, what="the producer's check of the pushed bytes")
        return Sample(seconds, trial.reps)

    def pull_handoff(self, variant, nbytes, trial) -> Sample | None:
        gpu, ring = self.gpu, Ring.for_size(nbytes, trial.reps)
        mine = self.ring_buf.ptr
        if self.producer:
            gpu.fill(mine, ring, trial.seed, poison_tag=True)  # the marks inside the batch set them right
            mark = gpu.kernels.mark_launcher(nbytes, gpu.stream)
            op = lambda r, i: mark(mine + ring.offset(r), trial.seed + r)  # noqa: E731
            warm = lambda: mark(self.scratch.ptr, 0)  # noqa: E731
        else:
            copy, theirs = gpu.copy_launcher(nbytes, "sm" if variant == "sm" else "ce"), self.mapped.ptr
            op = lambda r, i: copy(mine + ring.offset(r), theirs + ring.offset(r))  # noqa: E731
            warm = lambda: copy(self.scratch.ptr, theirs)  # noqa: E731
        seconds = self.pull.run(gpu, trial.reps, 1, op, handoff=True, warm=warm, transfer_bytes=nbytes)
        if self.producer:
            return None
        gpu.verify(mine, ring, trial.seed, self.path, variant, corrupt=self.ctx.corrupt)
        return Sample(seconds, trial.reps)

    def push_handoff(self, variant, nbytes, trial) -> Sample | None:
        gpu, ring = self.gpu, Ring.for_size(nbytes, trial.reps)
        mine = self.ring_buf.ptr
        op = warm = None
        if not self.producer:
            copy, theirs = gpu.copy_launcher(nbytes), self.mapped.ptr
            gpu.fill(mine, ring, trial.seed)
            op = lambda r, i: copy(theirs + ring.offset(r), mine + ring.offset(r))  # noqa: E731
            warm = lambda: copy(self.scratch.ptr, mine)  # noqa: E731
        seconds = self.push.run(gpu, trial.reps, 1, op, handoff=True, warm=warm, transfer_bytes=nbytes)
        if not self.producer:
            return None
        gpu.verify(mine, ring, trial.seed, self.path, variant, corrupt=self.ctx.corrupt)
        return Sample(seconds, trial.reps)

    # ------------------------------------------------------------------ latency

    def pingpong(self, nbytes: int) -> Iterator[dict]:
        group = dict(path=self.path, variant="ce-pingpong", measure="pingpong", metric="latency", src=self.pdev,
                     dst=self.cdev, bytes=nbytes, ceiling=f"d2d@{self.cdev}" if self.same_gpu else
                     f"peer@{self.pdev}>{self.cdev}")
        yield from self.sampler.run(group, lambda trial: self.pingpong_sample(nbytes, trial),
                                    timer=self.producer, reps=PINGPONG_ROUNDS, min_reps=10, phase="latency",
                                    first_reps=PINGPONG_FIRST_ROUNDS)
        if not self.producer:
            yield from self.latency_ceiling(group["ceiling"], nbytes)
        self.ctx.sync()

    def pingpong_sample(self, nbytes: int, trial) -> Sample | None:
        """`trial.reps` round trips: each side copies its own payload into the other's ring slot 0."""
        ctx, gpu, seg = self.ctx, self.gpu, self.ctx.segment
        one = Ring.for_size(nbytes, 1)
        mine, theirs = self.ring_buf.ptr, self.mapped.ptr
        payload = self.scratch.ptr
        seed = trial.seed if self.producer else trial.seed ^ REPLY
        gpu.fill(payload, one, seed)
        gpu.synchronize()
        copy = gpu.copy_launcher(nbytes)
        stream = gpu.stream
        first = ctx.load("pong") + 1 if self.producer else ctx.load("ping") + 1
        ctx.sync()
        ping, pong = seg.mailbox_index(ctx.slot("ping")), seg.mailbox_index(ctx.slot("pong"))
        words = seg.words
        t0 = time.perf_counter()
        for k in range(first, first + trial.reps):
            if self.producer:
                copy(theirs, payload)
                stream.synchronize()
                words[ping] = k
                if words[pong] < k:
                    ctx.spin("pong", k)
            else:
                if words[ping] < k:
                    ctx.spin("ping", k)
                copy(theirs, payload)
                stream.synchronize()
                words[pong] = k
        seconds = (time.perf_counter() - t0) / trial.reps / 2
        # Each side holds the other's payload: the producer the answer, the consumer the question.
        other_seed = trial.seed ^ REPLY if self.producer else trial.seed
        gpu.verify(mine, one, other_seed, self.path, "ce-pingpong", corrupt=self.ctx.corrupt)
        ctx.sync()
        return Sample(seconds, trial.reps) if self.producer else None

    def latency_ceiling(self, key: str, nbytes: int) -> Iterator[dict]:
        """One copy + synchronize in one process: what a host-driven hop cannot beat. Once per
        process, size and sharing mode, as the bandwidth ceilings (ceiling_rows): ipc, vmm and
        mempool run in one persistent process set, and each measured it again (3 x 36 samples
        of the same copy a mode)."""
        from gpuipc_bench.gpu.ceilings import parse_ceiling

        once = f"{key} latency"  # its entry among this process's measured ceilings (not the bandwidth's)
        if self.held_elsewhere(once, nbytes):
            return
        meter = self.meter()
        _, _, src, dst = parse_ceiling(key)
        group = dict(path="ceiling", variant=key, measure="pingpong", metric="latency", src=src, dst=dst,
                     bytes=nbytes, ceiling="")
        yield from self.sampler.run(
            group, lambda trial: Sample(meter.latency(key, nbytes, trial.seed, trial.reps), trial.reps),
            timer=True, solo=True, reps=100, min_reps=10, phase="ceiling")
        self.measured_here(once, nbytes)


class IpcScenario(PairScenario):
    name = "ipc"
    health = False  # the health form (the module's docstring); set on a copy, never on the registry's
    summary = "CUDA IPC: a second process maps the producer's cudaMalloc memory (pull ce/sm, push)"
    worker_class = IpcWorker
    paths = (PathInfo("ipc", colour="#1f77b4", setup=("ipc_open_cold",)),)
