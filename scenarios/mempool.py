"""mempool: a stream-ordered memory pool shared between processes (cudaMallocAsync's IPC).

Each worker creates a pool with a shareable handle type (cuMemPoolCreate, POSIX fd), exports
the pool once (cuMemPoolExportToShareableHandle; the fd goes to the other worker over a Unix
socket, gpuipc_bench.ipc.fdpass), allocates its ring from it (cuMemAllocFromPoolAsync) and
exports that allocation as 64 bytes (cuMemPoolExportPointer, through the segment's handle
table). The other worker imports the pool, gives its GPU access (cuMemPoolSetAccess) and
imports the pointer (cuMemPoolImportPointer). The transfers are then the ipc scenario's
(pull ce/sm and push; stream and handoff; the ping-pong; every slot verified).

Set-up rows, 6 each on fresh pools of the ring's size: pool_create, pool_alloc (the first
allocation, which grows the pool), pool_export and ptr_export (exporter); pool_import (fd
to pool, access set), ptr_import_first (the first pointer from a newly imported pool),
ptr_import (a second pointer from the same pool: what each further buffer costs) and
ptr_free (the importer's free of an imported pointer).

hostpool (a scenario of its own, path 'hostpool'): the staging path's host ring, taken from a
pool of pinned host memory (location CU_MEM_LOCATION_TYPE_HOST) that the producer creates and
exports like the device pool; both workers give their GPU access to it (cuMemPoolSetAccess:
a host pool's memory is not device-accessible until asked, in the creating process too).
Transfers as staging's pinned variant ('host-pool': D2H into slot r, H2D out of it; stream
and handoff), against the same two-hop ceilings. Set-up rows: host_pool_create,
host_pool_import, host_ptr_import.
"""

from __future__ import annotations

import os
from typing import Iterator

from gpuipc_bench.gpu.fdmemory import MemPool, PoolPointer
from gpuipc_bench.gpu.timing import host_scratch_bytes, time_setup
from gpuipc_bench.engine.exchange import max_transfers
from gpuipc_bench.ipc.fdpass import channel_for
from gpuipc_bench.gpu.memory import reps_for
from gpuipc_bench.engine.pair import MEASURES, PRODUCER
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.scenarios.staging import StagingScenario, StagingWorker
from gpuipc_bench.scenarios.vmm import FdScenario, FdSharingWorker


class ImportedAllocation:
    """Another worker's pool allocation in this process: the imported pointer and its pool."""

    def __init__(self, pool: MemPool, pointer: PoolPointer):
        self.pool, self.pointer, self.ptr = pool, pointer, pointer.ptr

    @classmethod
    def open(cls, fd: int, data: bytes, nbytes: int, device: int) -> "ImportedAllocation":
        pool = MemPool.import_fd(fd, device)
        try:
            return cls(pool, pool.import_pointer(data, nbytes))
        except BaseException:
            pool.close()
            raise

    def close(self) -> None:
        try:
            self.pointer.close()  # imported pointers are freed before their pool goes
        finally:
            self.pool.close()


class MempoolWorker(FdSharingWorker):
    path = "mempool"

    def share_ring(self, capacity: int):
        pool = self.gpu.adopt(MemPool.create(self.device))
        ring = self.gpu.adopt(pool.allocate(capacity))  # adopted after its pool: freed before it
        self.send_fd("pool", pool.export_fd())
        self.ctx.publish("ring", ring.export())
        return ring

    def open_ring(self, capacity: int):
        fd = self.channel.receive(self.other, "pool")
        try:
            return ImportedAllocation.open(fd, self.ctx.receive(self.other, "ring"), capacity, self.device)
        finally:
            os.close(fd)

    def receive_pool(self, name: str):
        """(the pool the other worker sent as `name`, imported here; the seconds the import took)."""
        fd = self.channel.receive(self.other, name)
        try:
            return time_setup(lambda: MemPool.import_fd(fd, self.device), self.device)
        finally:
            os.close(fd)

    def setup_costs(self, n: int) -> Iterator[dict]:
        """Pool and pointer export (producer), import and free (consumer), on fresh pools whose
        allocations are `n` bytes."""
        ctx, device = self.ctx, self.device
        src, dst = self.pdev, self.cdev
        for i in range(self.sampler.setup_repeats):
            ctx.phase("setup", n, i)
            if self.producer:
                pool, seconds = time_setup(lambda: MemPool.create(device), device)
                yield self.setup_row("pool_create", seconds, i, n, src, dst)
                first, seconds = time_setup(lambda: pool.allocate(n), device)
                yield self.setup_row("pool_alloc", seconds, i, n, src, dst)
                second = pool.allocate(n)
                fd, seconds = time_setup(pool.export_fd, device)
                yield self.setup_row("pool_export", seconds, i, n, src, dst)
                data, seconds = time_setup(first.export, device)
                yield self.setup_row("ptr_export", seconds, i, n, src, dst)
                self.send_fd("setup", fd)
                ctx.publish("setup.first", data)
                ctx.publish("setup.second", second.export())
            ctx.sync()
            if not self.producer:
                imported, seconds = self.receive_pool("setup")
                yield self.setup_row("pool_import", seconds, i, n, src, dst)
                pointers = []
                for name, variant in (("setup.first", "ptr_import_first"), ("setup.second", "ptr_import")):
                    data = ctx.receive(PRODUCER, name)
                    pointer, seconds = time_setup(lambda: imported.import_pointer(data, n), device)
                    pointers.append(pointer)
                    yield self.setup_row(variant, seconds, i, n, src, dst)
                _, seconds = time_setup(pointers[0].close, device)
                yield self.setup_row("ptr_free", seconds, i, n, src, dst)
                pointers[1].close()
                imported.close()
            ctx.sync()  # the importer is done before the exporter frees
            if self.producer:
                second.close()
                first.close()
                pool.close()


class MempoolScenario(FdScenario):
    name = "mempool"
    summary = "memory pool IPC: the producer's cudaMallocAsync pool exported as an fd, pointers imported"
    worker_class = MempoolWorker
    paths = (PathInfo("mempool", colour="#bcbd22", setup=("pool_import", "ptr_import_first")),)


class HostPoolWorker(StagingWorker):
    """staging's GPU-ordered transfers through a host ring allocated from a shared host pool."""

    path = "hostpool"

    def share_host_ring(self):
        ctx, gpu, device = self.ctx, self.gpu, self.device
        channel = gpu.adopt(channel_for(ctx))
        ctx.declare("host.ptr")
        ctx.sync()  # every channel bound
        nbytes = self.ring_bytes() + host_scratch_bytes(self.sizes)  # the ring, then the warm-ups' scratch
        if self.producer:
            pool, seconds = time_setup(lambda: MemPool.create(device, host=True), device)
            gpu.adopt(pool)
            yield self.setup_row("host_pool_create", seconds, 0, nbytes, "host", device)
            ring = gpu.adopt(pool.allocate(nbytes))
            fd = pool.export_fd()
            try:
                channel.send(self.other, "host-pool", fd)
            finally:
                os.close(fd)
            ctx.publish("host.ptr", ring.export())
            self.host = ring.ptr
        ctx.sync()
        if not self.producer:
            fd = channel.receive(PRODUCER, "host-pool")
            try:
                pool, seconds = time_setup(lambda: MemPool.import_fd(fd, device), device)
            finally:
                os.close(fd)
            yield self.setup_row("host_pool_import", seconds, 0, nbytes, "host", device)
            pointer, seconds = time_setup(lambda: pool.import_pointer(ctx.receive(PRODUCER, "host.ptr"), nbytes),
                                          device)
            yield self.setup_row("host_ptr_import", seconds, 0, nbytes, "host", device)
            self.imported(ImportedAllocation(pool, pointer))
            self.host = pointer.ptr
        ctx.sync()

    def measure(self, nbytes):
        groups = []
        for measure in MEASURES:
            handoff = measure == "handoff"
            reps = min(reps_for(nbytes), max_transfers(1, handoff))
            group = self.group("host-pool", measure, nbytes, self.pdev, self.cdev,
                               self.two_hops("host-pool", measure), reps)
            take = lambda trial, h=handoff: self.gpu_ordered("host-pool", nbytes, nbytes, 1, h, trial)  # noqa: E731
            groups.append(self.sampler.run(group, take, timer=not self.producer, reps=reps))
        yield from self.sampler.interleave(groups, nbytes)
        yield from self.in_turn(lambda: self.ceiling_rows(
            f"d2h@{self.pdev}" if self.producer else f"h2d@{self.cdev}", nbytes))


class HostPoolScenario(FdScenario):
    name = "hostpool"
    through_host = True
    summary = "a pinned host memory pool shared as an fd, the staging buffer of D2H then H2D"
    worker_class = HostPoolWorker
    # After it, the consumer's process cannot map a VMM allocation: cuMemSetAccess returns
    # CUDA_ERROR_ALREADY_MAPPED (an H100, driver 580.159.04; vmm after mempool, or before hostpool,
    # is fine). So it runs last among the paths of its process set.
    last_in_set = True
    paths = (PathInfo("hostpool", colour="#8c564b", setup=("host_pool_import", "host_ptr_import")),)

    def memory_needed(self, config, specs):
        return StagingScenario.memory_needed(self, config, specs)

    def host_bytes(self, config):
        return StagingScenario.host_bytes(self, config)
