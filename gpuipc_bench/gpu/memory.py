"""Memory the paths move bytes between, streams, interprocess events, and rings of slots.

Device memory comes from plain cudaMalloc (exportable with cudaIpcGetMemHandle): CuPy's
pool would sub-allocate, so several arrays would share one IPC handle at offsets.

A ring is how a batch stays cache-cold and race-visible: rep r of a batch moves slot r of
a source ring into slot r of a destination ring, each slot filled with its own seed
(seed + r), and every destination slot is verified after the batch. A slot that a copy
skipped, or read before it was written, still holds another seed's bytes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import mmap
from typing import Any

import numpy as np

from gpuipc_bench.gpu.errors import cuda_call
from gpuipc_bench.gpu.visible import cuda_index

# CUDA runtime flag values (stable ABI constants; CuPy does not export them all).
EVENT_DISABLE_TIMING = 0x02
EVENT_INTERPROCESS = 0x04
HOST_REGISTER_PORTABLE = 0x01
HOST_REGISTER_MAPPED = 0x02
HOST_ALLOC_PORTABLE = 0x01
HOST_ALLOC_MAPPED = 0x02
IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x01
MEMCPY_DEFAULT = 4
IPC_HANDLE_BYTES = 64

BATCH_BYTES = 256 << 20  # a sample of a small size moves about this much ...
MAX_REPS = 128  # ... in at most this many transfers: at a call-bound size (~2 us a copy) a sample of 128
#                 lasts ~0.25 ms on the GPU, 500x the event's resolution; each is enqueued from Python
SLOT_ALIGN = 256  # ring slots start 256-byte aligned (16-byte vector copies, and apart in cache lines)


@functools.cache
def rt():
    """CuPy's CUDA runtime module (imported on first use: a process without a GPU never needs it)."""
    from cupy.cuda import runtime

    return runtime


# --------------------------------------------------------------------------- rings


def reps_for(nbytes: int, target: int = BATCH_BYTES, max_reps: int = MAX_REPS) -> int:
    """Transfers per sample: ~`target` bytes for small sizes, at most `max_reps`, 1 from `target` up."""
    return max(1, min(max_reps, target // max(1, nbytes)))


@dataclasses.dataclass(frozen=True)
class Ring:
    """`slots` slots of `nbytes` each, `stride` bytes apart, starting at offset 0 of a buffer."""

    nbytes: int
    slots: int
    stride: int

    @classmethod
    def for_size(cls, nbytes: int, reps: int | None = None) -> "Ring":
        """One slot per rep of a sample of this size (reps_for(nbytes) unless given)."""
        slots = reps if reps is not None else reps_for(nbytes)
        stride = max(SLOT_ALIGN, -(-int(nbytes) // SLOT_ALIGN) * SLOT_ALIGN)
        return cls(int(nbytes), int(slots), stride if slots > 1 else max(int(nbytes), 1))

    @property
    def bytes(self) -> int:
        """Bytes the ring spans."""
        return self.stride * (self.slots - 1) + max(self.nbytes, 1)

    def offset(self, rep: int) -> int:
        return (rep % self.slots) * self.stride

    def l2_resident(self, l2_bytes: int, sides: int = 2) -> bool:
        """Whether a batch over this ring can be served from an L2 of `l2_bytes`: `sides` rings
        (source and destination on one GPU: 2; only the device side of a copy to or from the
        host, or one GPU's side of a peer copy: 1), each slots x stride, fit in it together.
        False when the L2 size is unknown (0)."""
        return l2_resident_ring(self.nbytes, self.slots, l2_bytes, sides, self.stride)


def l2_resident_ring(nbytes: int, slots: int, l2_bytes: int, sides: int = 2, stride: int | None = None) -> bool:
    """Whether `sides` rings of `slots` slots of `nbytes` (`stride` apart; Ring.for_size's
    stride when not given) fit in an L2 of `l2_bytes` together: a batch over them could be
    served from the cache. False when the L2 size is unknown (0)."""
    if l2_bytes <= 0:
        return False
    if stride is None:
        stride = Ring.for_size(nbytes, slots).stride
    return sides * max(1, slots) * stride <= l2_bytes


@dataclasses.dataclass(frozen=True)
class L2Check:
    """The L2 flag of one group's samples, computed per sample from the transfers it timed
    (its ring has one slot per transfer, `slots` when fixed): the sampler calls it with each
    sample's batch and stores the answer in the row."""

    nbytes: int
    l2_bytes: int
    sides: int = 2
    slots: int | None = None  # a ring of this many slots whatever the batch (None: one per transfer)

    def __call__(self, batch: int) -> bool:
        return l2_resident_ring(self.nbytes, self.slots or batch, self.l2_bytes, self.sides)


def ring_capacity(sizes) -> int:
    """Bytes a buffer needs to hold the ring of every size in `sizes`."""
    return max((Ring.for_size(n).bytes for n in sizes), default=1)


# --------------------------------------------------------------------------- buffers


def device_pointer(host_ptr: int, device: int | None = None) -> int:
    """The device pointer of registered/pinned host memory (cudaPointerGetAttributes).
    On UVA systems it is the host pointer itself; CuPy has no cudaHostGetDevicePointer."""
    with cuda_call("cudaPointerGetAttributes", device):
        attrs = rt().pointerGetAttributes(host_ptr)
    return int(attrs.devicePointer) or host_ptr


class on_device:
    """`with on_device(n):` makes GPU n current for the block (and restores the previous one)."""

    def __init__(self, device: int):
        self.device = device

    def __enter__(self):
        import cupy

        with cuda_call("cudaSetDevice", self.device):
            self._ctx = cupy.cuda.Device(cuda_index(self.device))
            self._ctx.__enter__()
        return self

    def __exit__(self, *exc):
        self._ctx.__exit__(*exc)


class DeviceBuffer:
    """Device memory from plain cudaMalloc, freed explicitly."""

    def __init__(self, nbytes: int, device: int):
        self.nbytes, self.device, self.ptr = int(nbytes), device, 0
        with on_device(device), cuda_call("cudaMalloc", device, nbytes=self.nbytes):
            self.ptr = rt().malloc(max(1, self.nbytes))

    def export(self) -> bytes:
        """The 64-byte cudaIpcMemHandle of this allocation."""
        with cuda_call("cudaIpcGetMemHandle", self.device):
            return bytes(rt().ipcGetMemHandle(self.ptr))

    def close(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with on_device(self.device), cuda_call("cudaFree", self.device):
                rt().free(ptr)


class MappedBuffer:
    """Another process's cudaMalloc memory, opened from its IPC handle in this process."""

    def __init__(self, handle: bytes, nbytes: int, device: int):
        self.nbytes, self.device, self.ptr = int(nbytes), device, 0
        with cuda_call("cudaIpcOpenMemHandle", device):
            self.ptr = rt().ipcOpenMemHandle(bytes(handle)[:IPC_HANDLE_BYTES], IPC_MEM_LAZY_ENABLE_PEER_ACCESS)

    def close(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with cuda_call("cudaIpcCloseMemHandle", self.device):
                rt().ipcCloseMemHandle(ptr)


class PinnedHostBuffer:
    """Page-locked host memory, portable and mapped (cudaHostAlloc); `dptr` is its device pointer."""

    def __init__(self, nbytes: int, device: int):
        self.nbytes, self.device, self.ptr = int(nbytes), device, 0
        with cuda_call("cudaHostAlloc", device, nbytes=self.nbytes):
            self.ptr = rt().hostAlloc(max(1, self.nbytes), HOST_ALLOC_PORTABLE | HOST_ALLOC_MAPPED)
        self.dptr = device_pointer(self.ptr, device)

    def numpy(self, nbytes: int | None = None) -> np.ndarray:
        n = self.nbytes if nbytes is None else nbytes
        return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(self.ptr))

    def close(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with cuda_call("cudaFreeHost", self.device):
                rt().freeHost(ptr)


_KEPT_PINNED: dict[int, list[PinnedHostBuffer]] = {}  # bytes -> buffers given back in this process


class KeptPinnedBuffer:
    """A pinned host buffer of this process's keep (made on first need, cudaHostAlloc as
    PinnedHostBuffer): close() gives it back to the keep for the next scenario of the process,
    not to the driver, which frees it when the process ends. Pinning costs ~0.14 s per 256 MiB
    on the H200 hosts measured (the pages' first touch), and the scenarios of one process set
    (staging, mmap) each need the same ceiling buffers: made once, not once per scenario. Its
    bytes are what the last user left: a user fills what it reads before reading it, and every
    sample's seed is its scenario's own (engine.sampler), so stale bytes fail verification."""

    def __init__(self, nbytes: int, device: int):
        self.nbytes, self.device = int(nbytes), device
        kept = _KEPT_PINNED.get(self.nbytes)
        self.buffer: PinnedHostBuffer | None = kept.pop() if kept else PinnedHostBuffer(self.nbytes, device)
        self.ptr, self.dptr = self.buffer.ptr, self.buffer.dptr

    def numpy(self, nbytes: int | None = None) -> np.ndarray:
        if self.buffer is None:
            raise RuntimeError("a kept pinned buffer read after it was given back")
        return self.buffer.numpy(nbytes)

    def close(self) -> None:
        if self.buffer is not None:
            buffer, self.buffer, self.ptr, self.dptr = self.buffer, None, 0, 0
            _KEPT_PINNED.setdefault(self.nbytes, []).append(buffer)


class HostRegistration:
    """cudaHostRegister(portable|mapped) of existing host memory (an mmap, say); undone by close().
    `dptr` is the device pointer of `address`."""

    def __init__(self, address: int, nbytes: int, device: int,
                 flags: int = HOST_REGISTER_PORTABLE | HOST_REGISTER_MAPPED):
        self.address, self.nbytes, self.device, self.registered = address, nbytes, device, False
        with cuda_call("cudaHostRegister", device, nbytes=nbytes):
            rt().hostRegister(address, nbytes, flags)
        self.registered = True
        self.dptr = device_pointer(address, device)

    def close(self) -> None:
        if self.registered:
            self.registered = False
            with cuda_call("cudaHostUnregister", self.device):
                rt().hostUnregister(self.address)


def mmap_address(mm: mmap.mmap) -> tuple[int, Any]:
    """(address, keeper) of an mmap; keep `keeper` alive while the address is in use,
    and drop it before mm.close()."""
    keeper = ctypes.c_char.from_buffer(mm)
    return ctypes.addressof(keeper), keeper


MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)  # madvise(2); Python names it from 3.13


def prefault(mm: mmap.mmap, start: int = 0, length: int | None = None) -> None:
    """Touch every page of a shared mapping (or of its `length` bytes from `start`, both page-aligned),
    their bytes kept, so that a later registration or copy is not charged with allocating the pages
    of a fresh tmpfs file (first touch, timed apart by whoever asks)."""
    try:  # the kernel faults every page in, writable, in one call (Linux 5.14): 0.33 s for 512 MiB
        if length is None:  # on an H200 node, against 0.50-0.55 s a write per page
            mm.madvise(MADV_POPULATE_WRITE)
        else:
            mm.madvise(MADV_POPULATE_WRITE, start, length)
        return
    except (OSError, ValueError, AttributeError):
        pass  # an older kernel: a write per page
    view = np.frombuffer(mm, dtype=np.uint8)
    pages = view[start:None if length is None else start + length:mmap.PAGESIZE]
    pages[...] = pages.copy()  # a write per page (numpy skips an assignment of a view to itself)
    del pages, view


# --------------------------------------------------------------------------- streams, events


def new_stream(device: int):
    """A non-blocking stream on `device` (it does not synchronise with the legacy default stream)."""
    import cupy

    with cuda_call("cudaStreamCreateWithFlags", device), cupy.cuda.Device(cuda_index(device)):
        return cupy.cuda.Stream(non_blocking=True)


class IpcEvent:
    """An interprocess event (disableTiming|interprocess: it cannot time).

    Record it, then publish a sequence number, then let the other side wait(): a
    cudaStreamWaitEvent captures the most recent record at the time of the call, and
    waiting on an event that was never recorded does nothing (gpuipc_bench.engine.gpu_signal keeps
    that order).
    """

    def __init__(self, ptr: int, device: int, opened: bool):
        self.ptr, self.device, self.opened = ptr, device, opened

    @classmethod
    def create(cls, device: int) -> "IpcEvent":
        import cupy

        with cuda_call("cudaEventCreateWithFlags", device), cupy.cuda.Device(cuda_index(device)):
            ptr = rt().eventCreateWithFlags(EVENT_DISABLE_TIMING | EVENT_INTERPROCESS)
        return cls(ptr, device, opened=False)

    @classmethod
    def open(cls, handle: bytes, device: int) -> "IpcEvent":
        """Open another process's event (on the current device `device`)."""
        with cuda_call("cudaIpcOpenEventHandle", device):
            ptr = rt().ipcOpenEventHandle(bytes(handle)[:IPC_HANDLE_BYTES])
        return cls(ptr, device, opened=True)

    def export(self) -> bytes:
        with cuda_call("cudaIpcGetEventHandle", self.device):
            return bytes(rt().ipcGetEventHandle(self.ptr))

    def record(self, stream) -> None:
        with cuda_call("cudaEventRecord", self.device):
            rt().eventRecord(self.ptr, stream.ptr)

    def wait(self, stream) -> None:
        """Make `stream` wait for the most recent record of this event."""
        with cuda_call("cudaStreamWaitEvent", self.device):
            rt().streamWaitEvent(stream.ptr, self.ptr, 0)

    def close(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with cuda_call("cudaEventDestroy", self.device):
                rt().eventDestroy(ptr)


# --------------------------------------------------------------------------- small reads and writes


def read(ptr: int, nbytes: int, stream, device: int) -> np.ndarray:
    """`nbytes` of device (or mapped) memory as uint8, after everything queued on `stream`."""
    host = np.zeros(max(0, nbytes), dtype=np.uint8)
    if nbytes > 0:
        with cuda_call("cudaMemcpyAsync", device):
            rt().memcpyAsync(host.ctypes.data, ptr, nbytes, MEMCPY_DEFAULT, stream.ptr)
            stream.synchronize()
    return host


def write(ptr: int, data: np.ndarray, stream, device: int) -> None:
    """Copy `data` (uint8) to device (or mapped) memory at `ptr`, in stream order, and wait."""
    data = np.ascontiguousarray(data, dtype=np.uint8)
    if data.size:
        with cuda_call("cudaMemcpyAsync", device):
            rt().memcpyAsync(ptr, data.ctypes.data, data.size, MEMCPY_DEFAULT, stream.ptr)
            stream.synchronize()


def read_words(ptr: int, count: int, stream, device: int) -> np.ndarray:
    """`count` uint64 words of device (or mapped) memory, after everything queued on `stream`."""
    return read(ptr, 8 * count, stream, device).view("<u8")


def memset(ptr: int, value: int, nbytes: int, stream, device: int) -> None:
    """cudaMemsetAsync on `stream`."""
    if nbytes > 0:
        with cuda_call("cudaMemsetAsync", device):
            rt().memsetAsync(ptr, value, nbytes, stream.ptr)
