"""vmm: GPU memory shared as a POSIX file descriptor through the virtual memory management API.

How NCCL and PyTorch's expandable segments share memory between processes. Each worker
makes its ring with cuMemCreate (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), maps it, exports
it with cuMemExportToShareableHandle and sends the fd to the other worker over a Unix socket
(SCM_RIGHTS, gpuipc_bench.ipc.fdpass); the other imports it (cuMemImportFromShareableHandle),
reserves an address range, maps it and sets its GPU's access. From there on the transfers
are exactly the ipc scenario's (pull ce/sm and push; stream and handoff; the ping-pong;
every slot verified): the same memory, reached through another kind of handle, so at large
sizes the figures should match ipc's.

Set-up rows, 6 each on fresh allocations of the ring's size: vmm_create (cuMemCreate),
vmm_export (to an fd), vmm_import (from the received fd), vmm_map (reserve + map + set
access) and vmm_unmap_release (unmap, free the range, release the handle), each on the side
that does it. The fabric handle (CU_MEM_HANDLE_TYPE_FABRIC, what multi-node NVLink uses) is
probed once: where the driver refuses it (it needs an IMEX channel) the run's notes say so
in the driver's words.
"""

from __future__ import annotations

import os
from typing import Iterator

from gpuipc_bench.ipc.fdpass import channel_for
from gpuipc_bench.gpu import fdmemory
from gpuipc_bench.gpu.fdmemory import VmmMemory, vmm_size
from gpuipc_bench.gpu.timing import time_setup
from gpuipc_bench.engine.pair import PRODUCER, PairScenario
from gpuipc_bench.paths import PathInfo

from gpuipc_bench.scenarios.ipc import IpcWorker


class FdSharingWorker(IpcWorker):
    """An ipc worker whose handles travel as file descriptors over a Unix socket."""

    def setup(self) -> Iterator[dict]:
        self.open_channel()
        yield from super().setup()

    def open_channel(self) -> None:
        # Every worker binds its socket before the first barrier, so no send finds it missing.
        self.channel = self.gpu.adopt(channel_for(self.ctx))
        self.ctx.sync()

    def send_fd(self, name: str, fd: int) -> None:
        """Send `fd` to the other worker and close ours."""
        try:
            self.channel.send(self.other, name, fd)
        finally:
            os.close(fd)


class VmmWorker(FdSharingWorker):
    path = "vmm"

    def share_ring(self, capacity: int):
        memory = self.gpu.adopt(VmmMemory.create(vmm_size(capacity, self.device), self.device))
        memory.map()
        self.send_fd("ring", memory.export_fd())
        return memory

    def open_ring(self, capacity: int):
        fd = self.channel.receive(self.other, "ring")
        try:
            memory = VmmMemory.import_fd(fd, vmm_size(capacity, self.device), self.device)
        finally:
            os.close(fd)
        try:
            memory.map()
        except BaseException:
            memory.close()
            raise
        return memory

    def setup(self) -> Iterator[dict]:
        if self.producer:
            refusal = fdmemory.fabric_refusal(self.device)
            self.ctx.note("fabric_handle", f"waived: {refusal}" if refusal else "permitted (not measured)")
        yield from super().setup()

    def setup_costs(self, n: int) -> Iterator[dict]:
        """Create and export (producer); import, map and unmap+release (consumer); fresh each time."""
        ctx, size = self.ctx, vmm_size(n, self.device)
        src, dst = self.pdev, self.cdev
        for i in range(self.sampler.setup_repeats):
            ctx.phase("setup", size, i)
            if self.producer:
                memory, seconds = time_setup(lambda: VmmMemory.create(size, self.device), self.device)
                yield self.setup_row("vmm_create", seconds, i, size, src, dst)
                fd, seconds = time_setup(memory.export_fd, self.device)
                yield self.setup_row("vmm_export", seconds, i, size, src, dst)
                self.send_fd("setup", fd)
            ctx.sync()
            if not self.producer:
                fd = self.channel.receive(PRODUCER, "setup")
                try:
                    imported, seconds = time_setup(lambda: VmmMemory.import_fd(fd, size, self.device), self.device)
                finally:
                    os.close(fd)
                yield self.setup_row("vmm_import", seconds, i, size, src, dst)
                _, seconds = time_setup(imported.map, self.device)
                yield self.setup_row("vmm_map", seconds, i, size, src, dst)
                _, seconds = time_setup(imported.close, self.device)
                yield self.setup_row("vmm_unmap_release", seconds, i, size, src, dst)
            ctx.sync()  # released by the importer before the exporter's
            if self.producer:
                memory.close()


class FdScenario(PairScenario):
    """A pair scenario whose handles need the driver calls of cuda-bindings."""

    def waive_reason(self, machine):
        return super().waive_reason(machine) or fdmemory.missing_reason()


class VmmScenario(FdScenario):
    name = "vmm"
    summary = "VMM: the producer's cuMemCreate memory shared as a POSIX fd (pull ce/sm, push)"
    worker_class = VmmWorker
    paths = (PathInfo("vmm", colour="#17becf", setup=("vmm_import", "vmm_map")),)
