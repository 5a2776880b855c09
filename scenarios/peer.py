"""peer: two GPUs. The ipc scenario's paths across them, next to a copy with P2P off.

The producer sits on the first GPU of --devices (default 0), the consumer on the second
(default 1). Before anything enables peer access in its process, the consumer measures
cudaMemcpyPeerAsync from the producer's GPU to its own with P2P off (the driver stages
the bytes through host memory): variant 'p2p-off', a single-process reference, never a
verdict candidate. Staged copies can block the calling thread, so they cannot queue
behind a gate: they are host-timed from the first call to a synchronisation of both GPUs
(an upper bound on the time at small sizes). Then everything the ipc scenario does,
across the two GPUs: pull (copy engine, kernel), push, stream and handoff, against the
in-process peer ceilings (peer@A>B, peer-sm@A>B); cudaDeviceEnablePeerAccess is a setup row.

Both directions at once ('bidir', stream): each worker pushes a batch from its own source ring
into the other's ring (copy engine), as KV-cache exchange and all-to-all traffic do. The
consumer's events span both: its start lets the producer's first copy go ('bidir.go'), its
end waits for the producer's last ('bidir.done'). A sample's transfers are the copies of both
directions, so its GB/s is the total of the two (nvbandwidth's bidirectional figure); its
bound is the sum of the two one-way ceilings, peer@A>B + peer@B>A. A reference, not a
candidate: it answers what the pair does under two-way traffic, not how to move one message.

The health form (`check --preset health`; IpcScenario.health, set on a copy by check.node.health_form,
ipc's health form across the pair, scenarios/ipc.py): what the check's health figures judge and what
proves the path, nothing else. The copy engine's pull only: its stream at the run's largest size with the
peer@A>B ceiling (the figures peer-ce and peer), its hand-off at the other sizes (4 KiB: the path's
signals and verification across the two processes), the set-up rows once. No P2P-off pass, no bidir,
no kernel copy or push, no ping-pong, no peer-sm ceiling. With no P2P-off pass nothing needs peer
access off when the processes start: the pair may run anywhere in a persistent process set (forked
ahead of its run), and disjoint pairs of an all-NVLink node at once (harness.rounds). The full form
runs in the pair's persistent set too, as the first path of a fresh one (PeerScenario.first_in_set).
"""

from __future__ import annotations

import time
from typing import Iterator

from gpuipc_bench.errors import UsageError
from gpuipc_bench.gpu.errors import cuda_call
from gpuipc_bench.gpu.memory import Ring, on_device, reps_for, rt
from gpuipc_bench.gpu.visible import cuda_index
from gpuipc_bench.engine.pair import CONSUMER, PRODUCER
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.engine.sampler import Sample
from gpuipc_bench.engine.scenario import WorkerSpec, gpu_cpus
from gpuipc_bench.scenarios.ipc import REPLY, IpcScenario, IpcWorker
from gpuipc_bench.engine.gpu_signal import Signal

P2P_OFF_MAX_REPS = 32


class PeerWorker(IpcWorker):
    path = "peer"

    def setup(self):
        if not self.producer and not self.health:
            yield from self.p2p_off()
        yield from super().setup()

    def more_signals(self) -> tuple:
        if self.health:
            return ()
        self.bidir_go = Signal(self.ctx, "bidir.go", CONSUMER, PRODUCER, depth=1)
        self.bidir_done = Signal(self.ctx, "bidir.done", PRODUCER, CONSUMER, depth=1)
        self.bidir_src = self.gpu.alloc(self.ring_bytes())
        return self.bidir_go, self.bidir_done

    def measure(self, nbytes: int) -> Iterator[dict]:
        yield from super().measure(nbytes)  # the health form: ipc's (IpcWorker.health_measure)
        if self.health:
            return
        reps = reps_for(nbytes)
        group = self.group("bidir", "stream", nbytes, self.pdev, self.cdev, "", reps)
        yield from self.sampler.run(group, lambda trial: self.bidir_sample(nbytes, trial), timer=not self.producer,
                                    reps=reps)

    def bidir_sample(self, nbytes: int, trial) -> Sample | None:
        """Both workers push `trial.reps` copies into the other's ring at once; each checks what
        it received (the producer's bytes have the pattern of seed, the consumer's of seed ^ REPLY)."""
        gpu, ring = self.gpu, Ring.for_size(nbytes, trial.reps)
        mine, theirs = (trial.seed, trial.seed ^ REPLY) if self.producer else (trial.seed ^ REPLY, trial.seed)
        src, dst = self.bidir_src.ptr, self.mapped.ptr
        gpu.fill(src, ring, mine)
        gpu.synchronize()
        self.ctx.sync()  # both sources filled, nothing in flight
        copy, last = gpu.copy_launcher(nbytes), trial.reps - 1

        def op(r: int) -> None:
            if r == 0:
                (self.bidir_go.receive if self.producer else self.bidir_go.send)(gpu.stream)
            copy(dst + ring.offset(r), src + ring.offset(r))
            if r == last:
                (self.bidir_done.send if self.producer else self.bidir_done.receive)(gpu.stream)

        marks = gpu.time_batch(op, trial.reps, warm=lambda: copy(self.scratch.ptr, src), shared=True,
                               before_release=self.ctx.sync, ops_per_rep=2, transfer_bytes=nbytes)
        self.ctx.sync()  # both directions have landed
        gpu.verify(self.ring_buf.ptr, ring, theirs, self.path, "bidir", corrupt=self.ctx.corrupt)
        if self.producer:
            return None
        return Sample(marks.seconds() / (2 * trial.reps), 2 * trial.reps)

    def p2p_off(self) -> Iterator[dict]:
        """In-process copies GPU pdev -> cdev before peer access exists in this process (an IPC
        mapping of the other GPU's memory enables it, and it stays on)."""
        src_gpu = self.meter().gpu_for(self.pdev)
        with on_device(self.pdev):
            src = src_gpu.alloc(self.ring_bytes())
        dst = self.gpu.alloc(self.ring_bytes())
        for nbytes in self.sizes:
            reps = min(reps_for(nbytes), P2P_OFF_MAX_REPS)

            def take(trial) -> Sample:
                ring = Ring.for_size(nbytes, trial.reps)
                with on_device(self.pdev):
                    src_gpu.fill(src.ptr, ring, trial.seed)
                    src_gpu.synchronize()
                seconds = self.host_timed(lambda r: self.copy_peer(dst.ptr + ring.offset(r), src.ptr + ring.offset(r),
                                                                   nbytes), trial.reps)
                self.gpu.verify(dst.ptr, ring, trial.seed, self.path, "p2p-off")
                return Sample(seconds, trial.reps)

            group = self.group("p2p-off", "stream", nbytes, self.pdev, self.cdev, f"peer@{self.pdev}>{self.cdev}", reps)
            yield from self.sampler.run(group, take, timer=True, solo=True, reps=reps)

    def copy_peer(self, dst: int, src: int, nbytes: int) -> None:
        with cuda_call("cudaMemcpyPeerAsync", self.cdev):
            rt().memcpyPeerAsync(dst, cuda_index(self.cdev), src, cuda_index(self.pdev), nbytes, self.gpu.stream.ptr)

    def sync_both(self) -> None:
        for device in (self.pdev, self.cdev):
            with on_device(device), cuda_call("cudaDeviceSynchronize", device):
                rt().deviceSynchronize()

    def host_timed(self, enqueue, reps: int) -> float:
        self.sync_both()
        t0 = time.perf_counter()
        for r in range(reps):
            enqueue(r)
        self.sync_both()
        return (time.perf_counter() - t0) / reps


class PeerScenario(IpcScenario):
    name = "peer"

    persistent_workers = True

    @property
    def first_in_set(self) -> bool:
        """Whether it must be the first scenario its process set runs (harness.pool.WorkerSets.run forks
        a fresh set where another ran before it; harness.plan.shuffle_paths puts it first): the full
        form measures its P2P-off copies first, and peer access must start off in its processes (a
        path before it turns it on). It then leaves peer access on for the set's next paths, as their
        own set-up would. Its processes were its own before: on two H200s their start took 0.6 s of a
        plain run (results/h200x2-oneset-trace.txt)."""
        return not self.health

    @property
    def cost_key(self) -> str:
        """Its costs in the plan's estimate (harness.estimate.COSTS): the health form is ipc's run
        across the pair (a part of it: the copy engine's pull, the set-up rows once)."""
        return "ipc" if self.health else self.name

    summary = "two GPUs: the ipc paths across them, and a copy with P2P off in one process"
    gpus_needed = 2
    worker_class = PeerWorker
    paths = (PathInfo("peer", colour="#9467bd", setup=("ipc_open_cold", "peer_enable"),
                      references=("p2p-off", "bidir")),)

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
        return [WorkerSpec(PRODUCER, "producer", devices[0], gpu_cpus(machine, devices[0])),
                WorkerSpec(CONSUMER, "consumer", devices[1], gpu_cpus(machine, devices[1]))]
