"""peer: two GPUs. Peer copies inside one process, with P2P off and on, and across processes.

The producer sits on the first GPU of --devices (default 0), the consumer on the
second (default 1). Before anything enables peer access in its process, the
consumer measures cudaMemcpyPeerAsync from the producer's GPU to its own with
P2P off (the driver stages the bytes through host memory): variant 'p2p-off'.
Staged copies can block the calling thread, so they cannot queue behind a gate,
and part of the work runs outside the stream's order: they are host-timed from
the first call to a synchronisation of both GPUs, so at small sizes the figure
includes the launch overhead (an upper bound on the time).
Then, as the ipc scenario does across two GPUs: the consumer opens the
producer's IPC handle (which enables peer access), pulls with the copy engine
('ce') and a kernel ('sm'), pushes ('push'), and measures the in-process peer
copy with P2P on as the ceiling ('peer@0>1'); cudaDeviceEnablePeerAccess is a
setup row.
"""

from __future__ import annotations

import time

from gpuipc_bench import cuda
from gpuipc_bench.errors import BenchError, UsageError
from gpuipc_bench.scenario import WorkerSpec
from gpuipc_bench.pair import CONSUMER, PRODUCER
from gpuipc_bench.scenarios.ipc import IpcScenario, IpcWorker
from gpuipc_bench.sizes import format_size

P2P_OFF_MAX_REPS = 32


class PeerWorker(IpcWorker):
    path = "peer"

    def setup(self):
        if not self.producer:
            yield from self.p2p_off()
        yield from super().setup()

    def _sync_both(self):
        from cupy.cuda import runtime

        for device in (self.pdev, self.cdev):
            with cuda.cuda_call("cudaDeviceSynchronize", device):
                runtime.setDevice(device)
                runtime.deviceSynchronize()
        runtime.setDevice(self.device)

    def _host_timed(self, enqueue, reps):
        self._sync_both()
        t0 = time.perf_counter()
        for _ in range(reps):
            enqueue()
        self._sync_both()
        return (time.perf_counter() - t0) / reps

    def p2p_off(self):
        """In-process peer copies before peer access exists in this process (an IPC mapping of
        the other GPU's memory enables it, and it stays on)."""
        key = f"peer@{self.pdev}>{self.cdev}"
        off = cuda.Ceilings(self.gpu, self.max_bytes, peer_copy="memcpy_peer")
        warmup = self.config.warmup
        for nbytes in self.sizes:
            reps = min(cuda.reps_for(nbytes), P2P_OFF_MAX_REPS)
            for i in range(warmup + self.config.iterations):
                self.ctx.phase("warmup" if i < warmup else "sample", nbytes, i)
                seed = off.prepare(key, nbytes)
                seconds = self._host_timed(off.enqueuer(key, nbytes), reps)
                if not off.check(key, nbytes, seed):
                    raise BenchError(f"peer/p2p-off copied wrong bytes at size {format_size(nbytes)}")
                if i >= warmup:
                    yield self._row(path="peer", variant="p2p-off", metric="bandwidth", src=self.pdev,
                                    dst=self.cdev, bytes=nbytes, iteration=i - warmup, batch=reps,
                                    seconds=seconds, verified=True, ceiling=key)


class PeerScenario(IpcScenario):
    name = "peer"
    summary = "two GPUs: peer copies in one process (P2P on and off) and across processes through IPC"
    gpus_needed = 2
    worker_class = PeerWorker

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
