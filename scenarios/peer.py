"""peer: two GPUs. Peer copies inside one process, with P2P off and on, and across processes.

The producer sits on the first GPU of --devices (default 0), the consumer on the
second (default 1). Before anything enables peer access in its process, the
consumer measures cudaMemcpyPeerAsync from the producer's GPU to its own with
P2P off (the driver stages the bytes through host memory): variant 'p2p-off'.
Then, as the ipc scenario does across two GPUs: the consumer opens the
producer's IPC handle (which enables peer access), pulls with the copy engine
('ce') and a kernel ('sm'), pushes ('push'), and measures the in-process peer
copy with P2P on as the ceiling ('peer@0>1'); cudaDeviceEnablePeerAccess is a
setup row.
"""

from __future__ import annotations

from gpuipc_bench import cuda
from gpuipc_bench.errors import UsageError
from gpuipc_bench.scenario import WorkerSpec
from gpuipc_bench.scenarios.ipc import CONSUMER, PRODUCER, IpcScenario, IpcWorker


class PeerScenario(IpcScenario):
    name = "peer"
    summary = "two GPUs: peer copies in one process (P2P on and off) and across processes through IPC"
    gpus_needed = 2

    def waive_reason(self, machine):
        reason = super().waive_reason(machine)
        if reason is None and (0, 1) not in machine.peer_access:
            reason = "GPUs 0 and 1 cannot access each other's memory (no peer access between them)"
        return reason

    def workers(self, config, machine):
        devices = list(config.devices) if config.devices else [0, 1]
        if len(devices) != 2:
            raise UsageError(f"--devices {','.join(map(str, devices))}: the peer scenario needs two GPUs "
                             "(e.g. --devices 0,1)")
        return [WorkerSpec(PRODUCER, "producer", devices[0]), WorkerSpec(CONSUMER, "consumer", devices[1])]

    def run(self, ctx):
        return PeerWorker(ctx, self.default_sizes()).run()


class PeerWorker(IpcWorker):
    path = "peer"

    def setup(self):
        if not self.producer:
            yield from self.p2p_off()
        yield from super().setup()

    def p2p_off(self):
        """In-process peer copies before peer access exists in this process (it cannot be
        undone cleanly once an IPC mapping enabled it)."""
        key = f"peer@{self.pdev}>{self.cdev}"
        off = cuda.Ceilings(self.gpu, self.max_bytes, peer_copy="memcpy_peer")
        for nbytes in self.sizes:
            for row in off.rows(key, nbytes, self.config.warmup, self.config.iterations,
                                on_sample=lambda i: self.ctx.phase("sample", nbytes, i), **self.fields):
                yield {**row, "path": "peer", "variant": "p2p-off", "ceiling": key}
