"""A batch of transfers between two workers, queued on both GPUs behind one shared gate and
timed from the moment both have warmed up to the latest end across the two processes.

    sender, transfer r:    [handoff and r > 0: wait 'drained' r-1]  for each unit i: send(r, i), signal 'filled'
    receiver, transfer r:  for each unit i: wait 'filled', receive(r, i)   [handoff and not last: signal 'drained' r]

`send`/`receive` enqueue a path's operation on the worker's stream (a D2H into a host
slot, a mark of an exported slot, a copy out of a mapped slot, or nothing). A transfer is
one unit, or several (chunks of a pipelined message).

  stream   the sender never waits for the receiver inside a batch (each transfer has its own
           ring slot), so the two sides overlap as far as the path lets them;
  handoff  one transfer in flight: the sender's transfer r waits until the receiver is done
           with r - 1, so each transfer pays both signals; the time per transfer a program pays
           when it hands over one message at a time.

Timing. The receiver's start gates the sender: the receiver records a 'go' signal right after
its start mark and the sender's first operation waits for it, so no timed operation of either
side runs before both have warmed up. On one GPU both workers stamp %globaltimer after their
warm-up and after their last operation (one clock for every context of a GPU): seconds =
(latest end - latest start) / transfers. On two GPUs (whose clocks are not one) the receiver's
events span all the work.

Why the latest start: the two sides' warm-ups differ (a producer's mark is a one-thread kernel,
a consumer's warm-up a whole copy). Timed from the earliest start, a batch of one 256 MiB
transfer also held the consumer's warm-up copies still running when the producer started:
an H100's IPC hand-off of 256 MiB under MPS read 482 us with two warm-up copies and 293 us
with one, against ~190 us for the copy itself.
"""

from __future__ import annotations

from typing import Callable

from gpuipc_bench.gpu.timing import QUEUE_OPS
from gpuipc_bench.engine.gpu_signal import Signal

Op = Callable[[int, int], None]  # (transfer, unit) -> enqueue on this worker's stream


def ops_per_transfer(units: int, handoff: bool) -> int:
    """Operations a side queues per transfer: an operation and a signal per unit, and the
    hand-back signal in handoff mode."""
    return 2 * units + (1 if handoff else 0)


MAX_TRANSFERS = 64  # a sample's transfers: each is enqueued in step with the other process, from Python


def max_transfers(units: int, handoff: bool) -> int:
    return max(1, min(MAX_TRANSFERS, QUEUE_OPS // ops_per_transfer(units, handoff)))


class Exchange:
    def __init__(self, ctx, name: str, sender: int, receiver: int, same_gpu: bool):
        self.ctx, self.name = ctx, name
        self.sender, self.receiver, self.same_gpu = sender, receiver, same_gpu
        self.filled = Signal(ctx, f"{name}.filled", sender, receiver)
        self.drained = Signal(ctx, f"{name}.drained", receiver, sender)
        self.go = Signal(ctx, f"{name}.go", receiver, sender, depth=1)
        self.stamp_slots = {rank: (f"{name}.t0.{rank}", f"{name}.t1.{rank}") for rank in (sender, receiver)}
        for pair in self.stamp_slots.values():
            for slot in pair:
                ctx.slot(slot)
        self.signals = [self.filled, self.drained, self.go]
        self.stamps = None

    @property
    def role(self) -> str:
        return "sender" if self.ctx.rank == self.sender else "receiver"

    def create(self, gpu) -> None:
        """Before a barrier: make and publish this side's events, and its stamp words."""
        for signal in self.signals:
            signal.create(gpu)
        if self.same_gpu:
            self.stamps = gpu.alloc(16).ptr

    def open(self, gpu, imports: list) -> None:
        """After the barrier: open the other side's events."""
        for signal in self.signals:
            signal.open(gpu, imports)

    def run(self, gpu, transfers: int, units: int, op: Op | None, handoff: bool,
            warm: Callable[[], None] | None = None, transfer_bytes: int | None = None) -> float | None:
        """Queue and run one batch of `transfers` transfers of `units` units each; this side's
        operation is op(transfer, unit) (None: only the signals); warm() is one untimed operation like
        them, `transfer_bytes` the bytes of one unit (how many warm-ups the batch queues:
        gpu.timing.warmup_ops). Returns the seconds per
        transfer on the receiver, None on the sender."""
        ctx, sending = self.ctx, self.ctx.rank == self.sender
        stream = gpu.stream

        def enqueue_sender(r: int) -> None:
            if r == 0:
                self.go.receive(stream)
            if handoff and r > 0:
                self.drained.receive(stream)
            for i in range(units):
                if op is not None:
                    op(r, i)
                self.filled.send(stream)

        def enqueue_receiver(r: int) -> None:
            if r == 0:
                self.go.send(stream)
            for i in range(units):
                self.filled.receive(stream)
                if op is not None:
                    op(r, i)
            if handoff and r < transfers - 1:
                self.drained.send(stream)

        ops = ops_per_transfer(units, handoff)
        marks = gpu.time_batch(enqueue_sender if sending else enqueue_receiver, transfers, warm=warm,
                               shared=True, marks=gpu.marks(self.stamps), before_release=ctx.sync,
                               ops_per_rep=ops, transfer_bytes=transfer_bytes)
        if not self.same_gpu:
            return None if sending else marks.seconds() / transfers
        start, end = marks.stamped()
        t0, t1 = self.stamp_slots[ctx.rank]
        ctx.store(t0, start)
        ctx.store(t1, end)
        ctx.sync()  # both stamps published
        if sending:
            return None
        starts = [ctx.load(self.stamp_slots[r][0]) for r in (self.sender, self.receiver)]
        ends = [ctx.load(self.stamp_slots[r][1]) for r in (self.sender, self.receiver)]
        return (max(ends) - max(starts)) / 1e9 / transfers
