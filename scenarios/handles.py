"""handles: what sharing one allocation costs against its size, for every handle-based path.

Users report opens that grow with the allocation: rapidsai/rapidsmpf#206 (cuIpcOpenMemHandle
turned an 8-GPU all-to-all from 7 s into 112 s with an 85% RMM pool on H100s) and
pytorch/pytorch#161481 (_new_shared_cuda taking hundreds of ms). This study times, on fresh
allocations from 1 MiB up to a quarter of the GPU's memory (larger sizes are skipped with a
note), the set-up steps of each path exactly as the path's own scenario does:

  ipc      ipc_export, ipc_open_cold, ipc_close (and the event handle's, which do not grow)
  vmm      vmm_create, vmm_export, vmm_import, vmm_map, vmm_unmap_release
  mempool  pool_create, pool_alloc, pool_export, ptr_export, pool_import, ptr_import_first,
           ptr_import, ptr_free

and then the allocator's case: a 1 MiB buffer carved out of memory that holds most of the GPU
(POOL_FRACTION of what is free), as RMM's and PyTorch's pools hand out:

  ipc_open_suballoc   cudaIpcOpenMemHandle of a buffer inside one big cudaMalloc (the handle
                      maps the whole allocation)
  pool_import_full    importing a pool that holds that much (grown in 4 GiB allocations, then
                      freed: it keeps them), then
  ptr_import_full     the buffer's pointer from it

Pool allocations over 4 GiB are not measured: on driver 580.159.04 importing the pointer of
one 8 GiB or 16 GiB allocation killed the importing process (SIGSEGV), which the run notes.

Rows are setup rows of the paths themselves (path ipc, vmm, mempool; bytes = the allocation's
size), so the break-even of a run that also measured the transfers uses the cost at each
size. Not part of the default run (it allocates up to a quarter of the GPU): `-s handles`.
"""

from __future__ import annotations

from typing import Iterator

from gpuipc_bench.gpu.fdmemory import MemPool
from gpuipc_bench.gpu.memory import DeviceBuffer, MappedBuffer
from gpuipc_bench.gpu.timing import time_setup
from gpuipc_bench.engine.pair import PRODUCER
from gpuipc_bench.engine.sampler import SETUP_REPEATS
from gpuipc_bench.scenarios.ipc import IpcWorker
from gpuipc_bench.scenarios.mempool import MempoolWorker
from gpuipc_bench.scenarios.vmm import FdScenario, VmmWorker
from gpuipc_bench.sizes import format_size

MiB, GiB = 1 << 20, 1 << 30
SIZES = tuple(MiB * 4 ** k for k in range(8))  # 1 MiB .. 16 GiB
QUICK_SIZES = (MiB, 64 * MiB, GiB)
THOROUGH_SIZES = tuple(MiB * 4 ** k for k in range(9))  # .. 64 GiB, where a quarter of the GPU allows
POOL_FRACTION = 0.85  # RMM's pool in rapidsmpf#206
BUFFER = MiB  # the buffer handed out of the big allocation
# cuMemPoolImportPointer of one allocation of 8 GiB or more killed the importing process with
# SIGSEGV on an H100 (driver 580.159.04, cuda-bindings 13.3.1), while six 4 GiB allocations of
# one 24 GiB pool imported fine: pool allocations are measured up to this size, and the big
# pool is grown in chunks of it.
POOL_MAX_ALLOCATION = 4 * GiB


def free_and_total(device: int) -> tuple[int, int]:
    from cupy.cuda import runtime

    from gpuipc_bench.gpu.errors import cuda_call
    from gpuipc_bench.gpu.memory import on_device

    with on_device(device), cuda_call("cudaMemGetInfo", device):
        free, total = runtime.memGetInfo()
    return int(free), int(total)


class HandlesWorker(MempoolWorker):
    path = "ipc"  # set to each path in turn (setup_row names it)

    def setup(self) -> Iterator[dict]:
        self.open_channel()
        # Name every slot the paths' set-up steps use now: new names are refused after setup.
        for name in ("setup.mem", "setup.event", "setup.first", "setup.second", "full.ptr"):
            self.ctx.handle_slot(name)
        self.ctx.declare("full.bytes")
        _, total = free_and_total(self.device)
        self.cap = total // 4
        skipped = [n for n in self.sizes if n > self.cap]
        if skipped and self.producer:
            self.ctx.note("skipped", f"{', '.join(format_size(n) for n in skipped)}: more than a quarter of "
                                     f"GPU {self.device}'s {format_size(total)}")
        unsafe = [n for n in self.sizes if POOL_MAX_ALLOCATION < n <= self.cap]
        if unsafe and self.producer:
            self.ctx.note("mempool_skipped", f"{', '.join(format_size(n) for n in unsafe)}: importing a pool "
                                             f"pointer of 8 GiB or more crashed the importer (SIGSEGV) on "
                                             f"driver 580.159.04; pool allocations stop at 4 GiB")
        self.ctx.sync()
        return iter(())

    def measure(self, nbytes: int) -> Iterator[dict]:
        if nbytes <= self.cap:
            for path, costs in (("ipc", IpcWorker.setup_costs), ("vmm", VmmWorker.setup_costs),
                                ("mempool", MempoolWorker.setup_costs)):
                if path == "mempool" and nbytes > POOL_MAX_ALLOCATION:
                    continue
                self.path = path
                yield from costs(self, nbytes)
        if nbytes == self.sizes[-1]:
            yield from self.inside_most_of_the_gpu()

    def inside_most_of_the_gpu(self) -> Iterator[dict]:
        """A 1 MiB buffer out of an allocation (legacy IPC) or a pool (mempool) holding
        POOL_FRACTION of the GPU's free memory, opened by the other process."""
        ctx, device, src, dst = self.ctx, self.device, self.pdev, self.cdev
        big = 0
        if self.producer:
            big = int(free_and_total(device)[0] * POOL_FRACTION) // MiB * MiB
            ctx.store("full.bytes", big)
        ctx.sync()
        big = ctx.load("full.bytes")
        ctx.phase("setup", big)
        for i in range(SETUP_REPEATS):
            self.path = "ipc"
            if self.producer:
                block = DeviceBuffer(big, device)
                # the buffer at offset 0 of the block: its handle opens the whole block
                ctx.publish("full.ptr", block.export())
            ctx.sync()
            if not self.producer:
                mapped, seconds = time_setup(lambda: MappedBuffer(ctx.receive(PRODUCER, "full.ptr"), BUFFER, device),
                                             device)
                yield self.setup_row("ipc_open_suballoc", seconds, i, big, src, dst)
                mapped.close()
            ctx.sync()
            if self.producer:
                block.close()
        for i in range(SETUP_REPEATS):
            self.path = "mempool"
            if self.producer:
                pool = MemPool.create(device)
                # The pool grows to `big` and keeps it (release threshold: all), in chunks an
                # importer survives (POOL_MAX_ALLOCATION).
                chunks = [pool.allocate(min(POOL_MAX_ALLOCATION, big - k)) for k in range(0, big, POOL_MAX_ALLOCATION)]
                for chunk in chunks:
                    chunk.close()
                buffer = pool.allocate(BUFFER)
                self.send_fd("full", pool.export_fd())
                ctx.publish("full.ptr", buffer.export())
            ctx.sync()
            if not self.producer:
                imported, seconds = self.receive_pool("full")
                yield self.setup_row("pool_import_full", seconds, i, big, src, dst)
                pointer, seconds = time_setup(
                    lambda: imported.import_pointer(ctx.receive(PRODUCER, "full.ptr"), BUFFER), device)
                yield self.setup_row("ptr_import_full", seconds, i, big, src, dst)
                pointer.close()
                imported.close()
            ctx.sync()
            if self.producer:
                buffer.close()
                pool.close()


class HandlesScenario(FdScenario):
    persistent_workers = False  # fills the GPU to 85%: no other context of the run beside it
    name = "handles"
    summary = "set-up cost against allocation size (1 MiB to 1/4 of the GPU) for ipc, vmm, mempool"
    worker_class = HandlesWorker
    in_default_run = False

    def default_sizes(self, preset: str = "") -> tuple[int, ...]:
        return {"quick": QUICK_SIZES, "thorough": THOROUGH_SIZES}.get(preset, SIZES)

    def memory_needed(self, config, specs) -> tuple[int, int]:
        # The least it measures: two allocations of the smallest size. Larger sizes adapt to the
        # GPU: over a quarter of its memory they are skipped, and the big block takes 85% of free.
        return 0, 2 * min(self.sizes(config))

