"""GPU-ordered hand-over between two workers: one direction, a ring of interprocess events.

The sender's stream records event k % depth after its part of transfer k; the receiver's
stream waits for it (cudaStreamWaitEvent) before its part. Both sides enqueue ahead of the
GPU (behind a gate), so the host keeps the two enqueues in step through two mailbox
counters, because a wait captures the most recent record at the time of the call:

    sender:   before recording k >= depth, wait until the receiver has enqueued its wait
              for k - depth (`<name>.taken`); record; publish k + 1 (`<name>.sent`)
    receiver: wait until `<name>.sent` > k; enqueue the wait; publish `<name>.taken` = k + 1

Nothing here waits on the GPU: the counters only order the enqueues.
"""

from __future__ import annotations

from gpuipc_bench.gpu.memory import IpcEvent

DEPTH = 2


class Signal:
    def __init__(self, ctx, name: str, sender: int, receiver: int, depth: int = DEPTH):
        self.ctx, self.name, self.depth = ctx, name, depth
        self.sender, self.receiver = sender, receiver
        self.sent = f"{name}.sent"
        self.taken = f"{name}.taken"
        for slot in (self.sent, self.taken):
            ctx.slot(slot)  # every worker names the slots in the same order
        self.handles = [f"{name}.{i}" for i in range(depth)]
        for handle in self.handles:
            ctx.handle_slot(handle)
        self.events: list[IpcEvent] = []
        self.count = 0  # transfers signalled so far, in step on both sides

    @property
    def sending(self) -> bool:
        return self.ctx.rank == self.sender

    def create(self, gpu) -> None:
        """Sender: make and publish the events (before a barrier; the receiver opens them after)."""
        if self.sending:
            self.events = [gpu.adopt(IpcEvent.create(gpu.device)) for _ in range(self.depth)]
            for handle, event in zip(self.handles, self.events):
                self.ctx.publish(handle, event.export())

    def open(self, gpu, imports: list) -> None:
        """Receiver: open the sender's events (after the barrier); they go on `imports`, closed first."""
        if self.ctx.rank == self.receiver:
            for handle in self.handles:
                event = gpu.adopt(IpcEvent.open(self.ctx.receive(self.sender, handle), gpu.device))
                imports.append(event)
                self.events.append(event)

    def send(self, stream) -> None:
        k = self.count
        if k >= self.depth:
            self.ctx.wait(self.taken, k - self.depth + 1, what=f"the '{self.name}' signal to be taken")
        self.events[k % self.depth].record(stream)
        self.count = k + 1
        self.ctx.store(self.sent, self.count)

    def receive(self, stream) -> None:
        k = self.count
        self.ctx.wait(self.sent, k + 1, what=f"the '{self.name}' signal")
        self.events[k % self.depth].wait(stream)
        self.count = k + 1
        self.ctx.store(self.taken, self.count)
