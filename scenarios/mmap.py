"""mmap: a MAP_SHARED region under /dev/shm, registered with cudaHostRegister in both workers.

The parent creates the file (mode 0600, exclusive, unlinked as soon as it is
mapped) and the forked workers inherit the mapping; each registers it
(portable | mapped), so it is pinned for both and has a device address in both.
Per sample:

  d2h              producer: DMA of its device buffer into the region (copy engine)
  h2d              consumer: DMA of the region into its device buffer, after the
                   producer's interprocess event says the region is filled
  zero-copy-read   consumer: a kernel reads the region directly over PCIe
  zero-copy-write  producer: a kernel writes the region directly; the consumer
                   checks the bytes in place with a kernel

Each is timed in the worker that does it (gated batches, CUDA events); the bytes
cross the processes through the region and are verified by the other side.
Setup rows time cudaHostRegister / cudaHostUnregister of the region at each size.
"""

from __future__ import annotations

import mmap
import os
import secrets
from dataclasses import dataclass

from gpuipc_bench import cuda
from gpuipc_bench.errors import BenchError
from gpuipc_bench.pair import PRODUCER, PairScenario, PairWorker
from gpuipc_bench.segment import PREFIX, _shm_dir
from gpuipc_bench.sizes import format_size

FILLED = 0  # handle slot of the producer's "region filled" event

# Mailbox slots.
READY, CONSUMED, WRITTEN, CHECKED = 0, 1, 2, 3


@dataclass
class _Region:
    mm: mmap.mmap
    name: str

    def close(self):
        try:
            self.mm.close()
        except BufferError:
            pass


def shared_region(nbytes: int) -> _Region:
    """A MAP_SHARED file mapping under /dev/shm that no exit path can leave behind:
    created exclusively (never a planted file or link), mode 0600, unlinked once mapped."""
    folder = _shm_dir()
    free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
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
        os.ftruncate(fd, nbytes)
        mm = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as e:
        raise BenchError(f"cannot map {nbytes} bytes of shared memory at {path}: {e.strerror} "
                         "(is /dev/shm large enough?)") from None
    finally:
        os.close(fd)
    return _Region(mm, path)


class _MmapWorker(PairWorker):
    path = "mmap"

    def measure(self, nbytes):
        yield from self.samples(nbytes)
        yield from self.ceilings(nbytes)

    def setup(self):
        gpu, seg = self.gpu, self.seg
        region = self.ctx.shared.mm
        self.addr, self._keeper = cuda.mmap_address(region)
        rows = []
        if not self.producer:  # registration cost per size, before the region is registered for good
            for nbytes in self.sizes:
                registration, seconds = cuda.time_setup(
                    lambda: cuda.HostRegistration(self.addr, nbytes, self.device), self.device)
                rows.append(self._setup_row("host_register", seconds, nbytes=nbytes, src="host",
                                            dst=self.device))
                _, seconds = cuda.time_setup(registration.close, self.device)
                rows.append(self._setup_row("host_unregister", seconds, nbytes=nbytes, src="host",
                                            dst=self.device))
        self.ctx.sync()
        registration = gpu.adopt(cuda.HostRegistration(self.addr, len(region), self.device))
        self.region = registration.dptr
        self.buffer = gpu.alloc(self.max_bytes)
        if self.producer:
            self.filled = gpu.adopt(cuda.IpcEvent.create(self.device))
            seg.put_handle(PRODUCER, FILLED, self.filled.export())
        self.ctx.sync()
        if not self.producer:
            self.filled = self._import(cuda.IpcEvent.open(seg.get_handle(PRODUCER, FILLED), self.device))
        self.ceilings_ = cuda.Ceilings(gpu, self.max_bytes)
        self.ctx.sync()
        yield from rows

    def samples(self, nbytes):
        gpu, seg, timeout = self.gpu, self.seg, self.timeout
        warmup = self.config.warmup
        reps = cuda.reps_for(nbytes)
        gate = lambda enqueue: gpu.time_batch(enqueue, reps)  # noqa: E731 - one worker's own gate
        row = dict(bytes=nbytes, batch=reps, metric="bandwidth", path="mmap")
        self.ctx.sync()
        for i in range(warmup + self.config.iterations):
            self.ctx.phase("warmup" if i < warmup else "sample", nbytes, i)
            keep = i >= warmup
            row["iteration"] = max(0, i - warmup)
            self.seq += 1
            seed, seed_write = cuda.seed_for(2 * self.seq), cuda.seed_for(2 * self.seq + 1)
            rows = []
            if self.producer:
                # DMA into the region, then publish it.
                gpu.fill(self.buffer.ptr, nbytes, seed)
                d2h = gate(gpu.memcpy_launcher(self.region, self.buffer.ptr, nbytes))
                self.filled.record(gpu.stream)
                seg.store(READY, self.seq)
                # Kernel stores into the region once the consumer has read it.
                seg.wait_until(CONSUMED, self.seq, timeout, waiting_for=self.other)
                gpu.fill(self.buffer.ptr, nbytes, seed_write)
                write = gate(gpu.kernels.copy_launcher(self.region, self.buffer.ptr, nbytes, gpu.stream))
                self.filled.record(gpu.stream)
                seg.store(WRITTEN, self.seq)
                seg.wait_until(CHECKED, self.seq, timeout, waiting_for=self.other)
                rows = [self._row(variant="d2h", src=self.pdev, dst="host", seconds=d2h, verified=True,
                                  ceiling=f"d2h@{self.pdev}", **row),
                        self._row(variant="zero-copy-write", src=self.pdev, dst="host", seconds=write,
                                  verified=True, ceiling=f"d2h@{self.pdev}", **row)]
            else:
                seg.wait_until(READY, self.seq, timeout, waiting_for=self.other)
                self.filled.wait(gpu.stream)
                h2d = gate(gpu.memcpy_launcher(self.buffer.ptr, self.region, nbytes))
                ok = gpu.verify(self.buffer.ptr, nbytes, seed, "mmap", "h2d", corrupt=self.corrupt)
                gpu.fill(self.buffer.ptr, nbytes, seed ^ 0xFFFFFFFF)  # so stale bytes cannot pass
                read = gate(gpu.kernels.copy_launcher(self.buffer.ptr, self.region, nbytes, gpu.stream))
                ok_read = gpu.verify(self.buffer.ptr, nbytes, seed, "mmap", "zero-copy-read")
                seg.store(CONSUMED, self.seq)
                seg.wait_until(WRITTEN, self.seq, timeout, waiting_for=self.other)
                self.filled.wait(gpu.stream)
                gpu.verify(self.region, nbytes, seed_write, "mmap", "zero-copy-write")
                seg.store(CHECKED, self.seq)
                rows = [self._row(variant="h2d", src="host", dst=self.cdev, seconds=h2d, verified=ok,
                                  ceiling=f"h2d@{self.cdev}", **row),
                        self._row(variant="zero-copy-read", src="host", dst=self.cdev, seconds=read,
                                  verified=ok_read, ceiling=f"h2d@{self.cdev}", **row)]
            if keep:
                yield from rows

    def ceilings(self, nbytes):
        """The producer's D2H and the consumer's H2D ceilings, in turn."""
        key = f"d2h@{self.pdev}" if self.producer else f"h2d@{self.cdev}"
        yield from self._in_turn(lambda: self._ceiling_rows(self.ceilings_, key, nbytes))


class MmapScenario(PairScenario):
    name = "mmap"
    summary = "a /dev/shm MAP_SHARED region pinned with cudaHostRegister: DMA in/out and zero-copy kernels"
    worker_class = _MmapWorker

    def mailbox_slots(self, config, specs):
        return 4

    def prepare(self, config, specs):
        return shared_region(max(config.sizes_for(self.default_sizes())))

    def release(self, shared):
        if shared is not None:
            shared.close()
