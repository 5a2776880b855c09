"""mmap: a MAP_SHARED region under /dev/shm, registered with cudaHostRegister in both workers.

The parent creates the file (mode 0600, exclusive, unlinked as soon as it is mapped) and the
forked workers inherit the mapping; each registers it (portable | mapped), so it is pinned
for both and has a device address in both. A transfer r goes from the producer's device ring
slot r into region slot r, then into the consumer's device ring slot r:

  zero-copy   both hops by kernels that load and store host memory directly over the bus
              (no copy engine): the producer's kernel stores into the region, the consumer's
              kernel loads from it
  dma         both hops by the copy engine (cudaMemcpyAsync), as staging/pinned does through
              anonymous shared memory

Measured like staging's GPU-ordered variants (stream and handoff, gpuipc_bench.engine.exchange), and
verified slot by slot by the consumer. Set-up rows: the first touch of the region's pages
(once), then cudaHostRegister and cudaHostUnregister of the whole region, 6 times each.
Ceilings: the producer's d2h@GPU and d2h-sm@GPU, the consumer's h2d@GPU and h2d-sm@GPU.
"""

from __future__ import annotations

import mmap
import os
import secrets
from dataclasses import dataclass

from gpuipc_bench.errors import BenchError
from gpuipc_bench.gpu.memory import reps_for, ring_capacity
from gpuipc_bench.gpu.timing import SharedGatePage, host_scratch_bytes
from gpuipc_bench.engine.pair import MEASURES, PairScenario
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.scenarios.staging import StagingWorker
from gpuipc_bench.engine.exchange import max_transfers
from gpuipc_bench.ipc.segment import PREFIX, shm_dir
from gpuipc_bench.ipc.shared import SharedPages
from gpuipc_bench.sizes import format_size

VARIANTS = {"zero-copy": "sm", "dma": "ce"}  # variant: the engine of both hops


@dataclass
class _Shared:
    gate: SharedGatePage
    region: mmap.mmap

    def close(self):
        self.gate.close()
        try:
            self.region.close()
        except BufferError:
            pass


def shared_region(nbytes: int) -> mmap.mmap:
    """A MAP_SHARED file mapping under /dev/shm that no exit path can leave behind:
    created exclusively (never a planted file or link), mode 0600, unlinked once mapped."""
    folder = shm_dir()
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    if free < nbytes:  # a too-small tmpfs would kill the workers with SIGBUS when they touch it
        raise BenchError(f"the mmap region needs {format_size(nbytes)} in {folder}, which has "
                         f"{format_size(free)} free; give a smaller --sizes or a larger {folder}")
    path = os.path.join(folder, f"{PREFIX}mmap-{secrets.token_hex(8)}")
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        raise BenchError(f"cannot create the shared region {path}: {e.strerror}") from None
    try:
        os.unlink(path)
        try:
            os.posix_fallocate(fd, 0, nbytes)  # ENOSPC now, not SIGBUS at first touch
        except OSError as e:
            raise BenchError(f"cannot reserve {format_size(nbytes)} for the mmap region in {folder}: "
                             f"{e.strerror}; give a smaller --sizes") from None
        region = SharedPages(nbytes, os.dup(fd))  # keeps a descriptor: other ranks map it too
    except OSError as e:
        raise BenchError(f"cannot map {format_size(nbytes)} of shared memory at {path}: {e.strerror}") from None
    finally:
        os.close(fd)
    return region


class MmapWorker(StagingWorker):
    path = "mmap"
    kernel_host_copies = True  # zero-copy's kernels load and store host memory: their PCIe overheads proven too
    event_variants = tuple(VARIANTS)  # both hand off through CUDA IPC events

    def host_region(self) -> mmap.mmap:
        return self.ctx.shared.region

    def measure(self, nbytes):
        groups = []
        for variant, engine in VARIANTS.items() if not self.events_refused else ():
            for measure in MEASURES:
                handoff = measure == "handoff"
                reps = min(reps_for(nbytes), max_transfers(1, handoff))
                group = self.group(variant, measure, nbytes, self.pdev, self.cdev,
                                   self.two_hops(variant, measure, "-sm" if engine == "sm" else ""), reps)
                take = lambda trial, e=engine, v=variant, h=handoff: self.gpu_ordered(  # noqa: E731
                    v, nbytes, nbytes, 1, h, trial, e)
                groups.append(self.sampler.run(group, take, timer=not self.producer, reps=reps))
        yield from self.sampler.interleave(groups, nbytes)
        yield from self.in_turn(lambda: self.my_ceilings(nbytes))

    def my_ceilings(self, nbytes):
        for sm in ("", "-sm"):
            key = f"d2h{sm}@{self.pdev}" if self.producer else f"h2d{sm}@{self.cdev}"
            yield from self.ceiling_rows(key, nbytes)


class MmapScenario(PairScenario):
    name = "mmap"
    through_host = True
    summary = "a /dev/shm MAP_SHARED region pinned with cudaHostRegister: zero-copy kernels and DMA through it"
    worker_class = MmapWorker
    paths = (PathInfo("mmap", colour="#2ca02c", setup=("host_register",)),)

    def region_bytes(self, config) -> int:
        sizes = self.sizes(config)
        return ring_capacity(sizes) + host_scratch_bytes(sizes)

    def memory_needed(self, config, specs):
        ring = ring_capacity(self.sizes(config))
        per_gpu = max(sum(1 for s in specs if s.device == d) for d in {s.device for s in specs})
        return self.region_bytes(config) + 2 * ring, per_gpu * (2 * ring + max(self.sizes(config)))

    def prepare(self, config, specs):
        gate = SharedGatePage()
        try:
            return _Shared(gate, shared_region(self.region_bytes(config)))
        except BaseException:
            gate.close()
            raise

    def release(self, shared):
        if shared is not None:
            shared.close()


