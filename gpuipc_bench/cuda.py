"""CUDA helpers shared by every GPU scenario: errors, buffers, kernels, the gated batch timer, IPC.

Nothing here touches CUDA at import time: CuPy is imported inside the functions,
because the parent process must never initialise CUDA (a child forked after the
parent did cannot use CUDA at all). Only forked workers call into this module.

How a bandwidth sample is timed (the nvbandwidth method):

    stream:  [gate kernel, spinning on a flag in mapped host memory]
             [start event] [copy] [copy] ... [copy] (reps of them) [end event]
    host:    enqueue all of the above, then store the flag: the gate exits and
             the copies run back to back; seconds = elapsed(start, end) / reps

so the interpreter's launch overhead (~5-10 us a call) is not in the figure,
and small sizes measure the link. The gate gives up after GATE_TIMEOUT_S and
sets an error word, so a lost release can never hang the GPU; time_batch then
raises. At most MAX_REPS operations are queued behind a gate: the launch queue
blocks at about a thousand pending operations, which would deadlock behind it.

Patterns: byte k of a buffer filled with seed s is byte (k % 4) (little-endian)
of the 32-bit word pattern_word(k // 4, s), a hash; every sample uses a new seed,
so stale data fails verification. `pattern_bytes` is the numpy twin.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import mmap
import time
from typing import Any, Callable, Iterator

import numpy as np

from gpuipc_bench.errors import BenchError, NoGpuError, VerificationError
from gpuipc_bench.sizes import format_size

# CUDA runtime flag values (stable ABI constants; CuPy does not export them all).
EVENT_DISABLE_TIMING = 0x02
EVENT_INTERPROCESS = 0x04
HOST_REGISTER_PORTABLE = 0x01
HOST_REGISTER_MAPPED = 0x02
HOST_ALLOC_PORTABLE = 0x01
HOST_ALLOC_MAPPED = 0x02
IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x01
MEMCPY_DEFAULT = 4
STREAM_NON_BLOCKING = 0x01
DEV_ATTR_MULTIPROCESSOR_COUNT = 16

GATE_TIMEOUT_S = 10.0
MAX_REPS = 256  # operations queued behind one gate (the launch queue blocks near 1000)
BATCH_BYTES = 256 << 20  # a sample of a small size moves about this much
IPC_HANDLE_BYTES = 64

_NO_GPU_ERRORS = ("cudaErrorNoDevice", "cudaErrorInsufficientDriver", "CUDA_ERROR_NO_DEVICE")
_OOM_ERRORS = ("cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY")
_PEER_ALREADY_ENABLED = "cudaErrorPeerAccessAlreadyEnabled"


def _rt():
    from cupy.cuda import runtime

    return runtime


# --------------------------------------------------------------------------- errors


class CudaError(BenchError):
    """A CUDA call failed in a worker: '<cudaErrorName> in <call> on GPU <n>'."""

    def __init__(self, name: str, call: str, device: int | None, detail: str = ""):
        self.name, self.call, self.device = name, call, device
        where = f" on GPU {device}" if device is not None else ""
        super().__init__(f"{name} in {call}{where}" + (f" ({detail})" if detail else ""))


def error_name(exc: BaseException) -> str:
    """'cudaErrorInvalidValue' from CuPy's 'cudaErrorInvalidValue: invalid argument'."""
    text = str(exc)
    head = text.split(":", 1)[0].strip()
    return head if head and " " not in head else type(exc).__name__


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"


def _free_total(device: int | None) -> tuple[int, int]:
    """(free, total) bytes of the current GPU (cudaMemGetInfo)."""
    return _rt().memGetInfo()


def oom_message(nbytes: int, device: int | None) -> str:
    """'cannot allocate 1 GiB on GPU 0: 0.4 GiB free of 79.1 GiB'."""
    where = f" on GPU {device}" if device is not None else ""
    text = f"cannot allocate {format_size(nbytes)}{where}"
    try:
        free, total = _free_total(device)
        text += f": {_gib(free)} free of {_gib(total)}"
    except Exception:  # noqa: BLE001 - the message is best effort
        pass
    return text


def translate(exc: BaseException, call: str, device: int | None, nbytes: int | None = None) -> BenchError:
    """A BenchError that says what failed, in one line."""
    if isinstance(exc, BenchError):
        return exc
    name = error_name(exc)
    if isinstance(exc, MemoryError) or name in _OOM_ERRORS:
        if nbytes is not None:
            return BenchError(oom_message(nbytes, device))
        return CudaError(name if name in _OOM_ERRORS else "out of memory", call, device)
    if name in _NO_GPU_ERRORS:
        return NoGpuError(str(CudaError(name, call, device)))
    if type(exc).__name__ == "CompileException":
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return BenchError(f"kernel compilation failed{f' on GPU {device}' if device is not None else ''}: {first}")
    return CudaError(name, call, device)


def _is_cuda_exception(exc: BaseException) -> bool:
    cls = type(exc)
    return (cls.__name__ in ("CUDARuntimeError", "CUDADriverError", "NVRTCError", "CompileException",
                             "OutOfMemoryError")
            or (isinstance(exc, MemoryError)))


@contextlib.contextmanager
def cuda_call(call: str, device: int | None = None, nbytes: int | None = None) -> Iterator[None]:
    """Turn a CUDA error raised inside the block into a BenchError naming the call and the GPU.

    with cuda_call("cudaIpcOpenMemHandle", device=0): ...
    -> BenchError('cudaErrorInvalidValue in cudaIpcOpenMemHandle on GPU 0')
    Out of memory, with `nbytes` given: 'cannot allocate 1 GiB on GPU 0: 0.4 GiB free of 79.1 GiB'.
    """
    try:
        yield
    except BenchError:
        raise
    except Exception as exc:  # noqa: BLE001 - filtered just below
        if not _is_cuda_exception(exc):
            raise
        raise translate(exc, call, device, nbytes) from exc


# --------------------------------------------------------------------------- devices


def current_device() -> int:
    return _rt().getDevice()


def use_device(device: int) -> None:
    import cupy

    with cuda_call("cudaSetDevice", device):
        cupy.cuda.Device(device).use()


def mem_info(device: int) -> tuple[int, int]:
    """(free, total) bytes of GPU `device`."""
    import cupy

    with cuda_call("cudaMemGetInfo", device), cupy.cuda.Device(device):
        return _rt().memGetInfo()


def sharing_mode(devices: list[int | None]) -> str:
    """How the workers share their GPUs: 'time-sliced' when two processes share one GPU
    (or 'mps' when an MPS daemon serves this process), 'exclusive' when each has its own."""
    from gpuipc_bench.mps import serves_this_process

    gpus = [d for d in devices if d is not None]
    if not gpus:
        return "none"
    if len(set(gpus)) == len(gpus):
        return "exclusive"
    return "mps" if serves_this_process() else "time-sliced"


def reps_for(nbytes: int, target: int = BATCH_BYTES, max_reps: int = MAX_REPS) -> int:
    """Transfers per sample: ~`target` bytes for small sizes, at most `max_reps`, 1 from `target` up."""
    return max(1, min(max_reps, target // max(1, nbytes)))


def device_pointer(host_ptr: int, device: int | None = None) -> int:
    """The device pointer of registered/pinned host memory (cudaPointerGetAttributes).
    On UVA systems it is the host pointer itself; CuPy has no cudaHostGetDevicePointer."""
    with cuda_call("cudaPointerGetAttributes", device):
        attrs = _rt().pointerGetAttributes(host_ptr)
    return int(attrs.devicePointer) or host_ptr


# --------------------------------------------------------------------------- buffers


class DeviceBuffer:
    """Device memory from plain cudaMalloc (exportable with cudaIpcGetMemHandle), freed explicitly.

    CuPy's pool would sub-allocate, so several arrays would share one IPC handle at offsets.
    """

    def __init__(self, nbytes: int, device: int):
        self.nbytes, self.device, self.ptr = int(nbytes), device, 0
        with _on_device(device), cuda_call("cudaMalloc", device, nbytes=self.nbytes):
            self.ptr = _rt().malloc(max(1, self.nbytes))

    def array(self, nbytes: int | None = None):
        """A cupy uint8 view of the first `nbytes` (the buffer stays owned by this object)."""
        return as_array(self.ptr, self.nbytes if nbytes is None else nbytes, self.device, owner=self)

    def export(self) -> bytes:
        """The 64-byte cudaIpcMemHandle of this allocation."""
        with cuda_call("cudaIpcGetMemHandle", self.device):
            return bytes(_rt().ipcGetMemHandle(self.ptr))

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with _on_device(self.device), cuda_call("cudaFree", self.device):
                _rt().free(ptr)

    close = free

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()


class MappedBuffer:
    """Another process's cudaMalloc memory, opened from its IPC handle in this process."""

    def __init__(self, handle: bytes, nbytes: int, device: int):
        self.nbytes, self.device, self.ptr = int(nbytes), device, 0
        handle = bytes(handle)[:IPC_HANDLE_BYTES]
        with cuda_call("cudaIpcOpenMemHandle", device):
            self.ptr = _rt().ipcOpenMemHandle(handle, IPC_MEM_LAZY_ENABLE_PEER_ACCESS)

    def array(self, nbytes: int | None = None):
        return as_array(self.ptr, self.nbytes if nbytes is None else nbytes, self.device, owner=self)

    def close(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with cuda_call("cudaIpcCloseMemHandle", self.device):
                _rt().ipcCloseMemHandle(ptr)

    free = close


class PinnedHostBuffer:
    """Page-locked host memory, portable and mapped (cudaHostAlloc); `dptr` is its device pointer."""

    def __init__(self, nbytes: int, device: int):
        self.nbytes, self.device, self.ptr = int(nbytes), device, 0
        with cuda_call("cudaHostAlloc", device, nbytes=self.nbytes):
            self.ptr = _rt().hostAlloc(max(1, self.nbytes), HOST_ALLOC_PORTABLE | HOST_ALLOC_MAPPED)
        self.dptr = device_pointer(self.ptr, device)

    def numpy(self, nbytes: int | None = None) -> np.ndarray:
        n = self.nbytes if nbytes is None else nbytes
        return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(self.ptr))

    def free(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with cuda_call("cudaFreeHost", self.device):
                _rt().freeHost(ptr)

    close = free


class HostRegistration:
    """cudaHostRegister(portable|mapped) of existing host memory (an mmap, say); undone by close()."""

    def __init__(self, address: int, nbytes: int, device: int,
                 flags: int = HOST_REGISTER_PORTABLE | HOST_REGISTER_MAPPED):
        self.address, self.nbytes, self.device, self.registered = address, nbytes, device, False
        with cuda_call("cudaHostRegister", device, nbytes=nbytes):
            _rt().hostRegister(address, nbytes, flags)
        self.registered = True
        self.dptr = device_pointer(address, device)

    def close(self) -> None:
        if self.registered:
            self.registered = False
            with cuda_call("cudaHostUnregister", self.device):
                _rt().hostUnregister(self.address)


def as_array(ptr: int, nbytes: int, device: int, owner: Any = None):
    """A cupy uint8 array over raw device memory that CuPy does not own."""
    import cupy

    mem = cupy.cuda.UnownedMemory(ptr, nbytes, owner, device_id=device)
    return cupy.ndarray((nbytes,), dtype=cupy.uint8, memptr=cupy.cuda.MemoryPointer(mem, 0))


def mmap_address(mm: mmap.mmap) -> tuple[int, Any]:
    """(address, keeper) of an mmap; keep `keeper` alive while the address is in use,
    and drop it before mm.close()."""
    keeper = ctypes.c_char.from_buffer(mm)
    return ctypes.addressof(keeper), keeper


# --------------------------------------------------------------------------- streams, events


def new_stream(device: int):
    """A non-blocking stream on `device` (it does not synchronise with the legacy default stream)."""
    import cupy

    with cuda_call("cudaStreamCreateWithFlags", device), cupy.cuda.Device(device):
        return cupy.cuda.Stream(non_blocking=True)


class IpcEvent:
    """An interprocess event (disableTiming|interprocess: it cannot time).

    Rules: record it, then publish a sequence number (mailbox), then let the other side
    call wait(): cudaStreamWaitEvent captures the most recent record at the time of the
    call, and waiting on an event never recorded does nothing.
    """

    def __init__(self, ptr: int, device: int, opened: bool):
        self.ptr, self.device, self.opened = ptr, device, opened

    @classmethod
    def create(cls, device: int) -> "IpcEvent":
        import cupy

        with cuda_call("cudaEventCreateWithFlags", device), cupy.cuda.Device(device):
            ptr = _rt().eventCreateWithFlags(EVENT_DISABLE_TIMING | EVENT_INTERPROCESS)
        return cls(ptr, device, opened=False)

    @classmethod
    def open(cls, handle: bytes, device: int) -> "IpcEvent":
        """Open another process's event (on the current device `device`)."""
        with cuda_call("cudaIpcOpenEventHandle", device):
            ptr = _rt().ipcOpenEventHandle(bytes(handle)[:IPC_HANDLE_BYTES])
        return cls(ptr, device, opened=True)

    def export(self) -> bytes:
        with cuda_call("cudaIpcGetEventHandle", self.device):
            return bytes(_rt().ipcGetEventHandle(self.ptr))

    def record(self, stream) -> None:
        with cuda_call("cudaEventRecord", self.device):
            _rt().eventRecord(self.ptr, stream.ptr)

    def wait(self, stream) -> None:
        """Make `stream` wait for the most recent record of this event."""
        with cuda_call("cudaStreamWaitEvent", self.device):
            _rt().streamWaitEvent(stream.ptr, self.ptr, 0)

    def synchronize(self) -> None:
        with cuda_call("cudaEventSynchronize", self.device):
            _rt().eventSynchronize(self.ptr)

    def close(self) -> None:
        if self.ptr:
            ptr, self.ptr = self.ptr, 0
            with cuda_call("cudaEventDestroy", self.device):
                _rt().eventDestroy(ptr)


# --------------------------------------------------------------------------- kernels

KERNEL_SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;

__device__ __forceinline__ u32 pattern_word(u64 w, u32 seed) {
    u32 x = ((u32)w * 0x9E3779B1u) ^ ((u32)(w >> 32) * 0x85EBCA77u) ^ (seed * 0xC2B2AE3Du) ^ 0x6A09E667u;
    x ^= x >> 16; x *= 0x7FEB352Du;
    x ^= x >> 15; x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

__device__ __forceinline__ unsigned char pattern_byte(u64 k, u32 seed) {
    return (unsigned char)(pattern_word(k >> 2, seed) >> ((k & 3) * 8));
}

__device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

extern "C" __global__ void fill_pattern(u64 ptr, u64 n, u32 seed) {
    unsigned char* p = (unsigned char*)ptr;
    u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 stride = (u64)gridDim.x * blockDim.x;
    u64 nvec = (ptr & 15) == 0 ? n / 16 : 0;
    uint4* v = (uint4*)p;
    for (u64 i = tid; i < nvec; i += stride) {
        u64 w = i * 4;
        v[i] = make_uint4(pattern_word(w, seed), pattern_word(w + 1, seed),
                          pattern_word(w + 2, seed), pattern_word(w + 3, seed));
    }
    for (u64 k = nvec * 16 + tid; k < n; k += stride) p[k] = pattern_byte(k, seed);
}

__device__ __forceinline__ void note_word(u32 got, u32 want, u64 offset, u64* out) {
    u32 diff = got ^ want;
    if (diff) atomicMin(out, offset + (u64)((__ffs(diff) - 1) >> 3));
}

extern "C" __global__ void first_mismatch(u64 ptr, u64 n, u32 seed, u64* out) {
    const unsigned char* p = (const unsigned char*)ptr;
    u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 stride = (u64)gridDim.x * blockDim.x;
    u64 nvec = (ptr & 15) == 0 ? n / 16 : 0;
    const uint4* v = (const uint4*)p;
    for (u64 i = tid; i < nvec; i += stride) {
        uint4 g = v[i];
        u64 w = i * 4;
        note_word(g.x, pattern_word(w, seed), i * 16, out);
        note_word(g.y, pattern_word(w + 1, seed), i * 16 + 4, out);
        note_word(g.z, pattern_word(w + 2, seed), i * 16 + 8, out);
        note_word(g.w, pattern_word(w + 3, seed), i * 16 + 12, out);
    }
    for (u64 k = nvec * 16 + tid; k < n; k += stride) {
        if (p[k] != pattern_byte(k, seed)) atomicMin(out, k);
    }
}

extern "C" __global__ void sm_copy(u64 dst, u64 src, u64 n) {
    u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 stride = (u64)gridDim.x * blockDim.x;
    u64 nvec = ((dst | src) & 15) == 0 ? n / 16 : 0;
    const uint4* s = (const uint4*)src;
    uint4* d = (uint4*)dst;
    u64 i = tid;
    for (; i + 3 * stride < nvec; i += 4 * stride) {
        uint4 a = s[i], b = s[i + stride], c = s[i + 2 * stride], e = s[i + 3 * stride];
        d[i] = a; d[i + stride] = b; d[i + 2 * stride] = c; d[i + 3 * stride] = e;
    }
    for (; i < nvec; i += stride) d[i] = s[i];
    const unsigned char* sb = (const unsigned char*)src;
    unsigned char* db = (unsigned char*)dst;
    for (u64 k = nvec * 16 + tid; k < n; k += stride) db[k] = sb[k];
}

// Blocks its stream until *flag reaches target (wrap-safe), or timeout_ns passes:
// then it writes target into *err and exits, so a lost release can never hang the GPU.
extern "C" __global__ void gate(u64 flag_ptr, u32 target, u64 err_ptr, u64 timeout_ns) {
    volatile u32* flag = (volatile u32*)flag_ptr;
    u64 t0 = global_ns();
    while ((int)(*flag - target) < 0) {
        if (global_ns() - t0 > timeout_ns) {
            *(volatile u32*)err_ptr = target;
            __threadfence_system();
            break;
        }
    }
}
"""

_M1, _M2, _M3 = np.uint32(0x9E3779B1), np.uint32(0x85EBCA77), np.uint32(0xC2B2AE3D)
_K0, _F1, _F2 = np.uint32(0x6A09E667), np.uint32(0x7FEB352D), np.uint32(0x846CA68B)


def pattern_words(first_word: int, count: int, seed: int) -> np.ndarray:
    """numpy twin of the kernels' pattern_word for words first_word .. first_word+count-1."""
    w = np.arange(first_word, first_word + count, dtype=np.uint64)
    lo = (w & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    hi = (w >> np.uint64(32)).astype(np.uint32)
    s = np.array([seed & 0xFFFFFFFF], dtype=np.uint32)
    x = (lo * _M1) ^ (hi * _M2) ^ (s * _M3) ^ _K0
    x ^= x >> np.uint32(16)
    x *= _F1
    x ^= x >> np.uint32(15)
    x *= _F2
    x ^= x >> np.uint32(16)
    return x


def pattern_bytes(nbytes: int, seed: int, offset: int = 0) -> np.ndarray:
    """The pattern bytes offset .. offset+nbytes-1 for `seed` (numpy twin of fill_pattern)."""
    if nbytes <= 0:
        return np.zeros(0, dtype=np.uint8)
    first = offset // 4
    last = (offset + nbytes + 3) // 4
    words = pattern_words(first, last - first, seed).astype("<u4")
    start = offset - first * 4
    return words.view(np.uint8)[start:start + nbytes].copy()


def expected_byte(offset: int, seed: int) -> int:
    return int(pattern_bytes(1, seed, offset)[0])


def seed_for(sequence: int) -> int:
    """A 32-bit pattern seed for sample `sequence` (distinct for the first 2**32 samples)."""
    return (sequence * 0x9E3779B1 + 0x243F6A88) & 0xFFFFFFFF


class Kernels:
    """The module above, compiled by NVRTC for `device` on first use."""

    THREADS = 256

    def __init__(self, device: int):
        import cupy

        self.device = device
        with cuda_call("nvrtcCompileProgram", device), cupy.cuda.Device(device):
            self.module = cupy.RawModule(code=KERNEL_SOURCE, options=("--std=c++14",))
            self._fill = self.module.get_function("fill_pattern")
            self._mismatch = self.module.get_function("first_mismatch")
            self._copy = self.module.get_function("sm_copy")
            self._gate = self.module.get_function("gate")
        with cuda_call("cudaDeviceGetAttribute", device):
            self.sms = _rt().deviceGetAttribute(DEV_ATTR_MULTIPROCESSOR_COUNT, device)
        self._result = None  # device word for first_mismatch

    def _grid(self, ptrs: tuple[int, ...], nbytes: int, per_sm: int = 8) -> int:
        aligned = all(p % 16 == 0 for p in ptrs)
        work = nbytes // 16 + nbytes % 16 if aligned else nbytes
        return max(1, min(-(-work // self.THREADS), self.sms * per_sm))

    def fill(self, ptr: int, nbytes: int, seed: int, stream) -> None:
        """Write the pattern of `seed` into nbytes at ptr (asynchronously on `stream`)."""
        if nbytes <= 0:
            return
        with cuda_call("fill_pattern launch", self.device):
            self._fill((self._grid((ptr,), nbytes),), (self.THREADS,),
                       (np.uint64(ptr), np.uint64(nbytes), np.uint32(seed & 0xFFFFFFFF)), stream=stream)

    def copy(self, dst: int, src: int, nbytes: int, stream) -> None:
        """SM copy: a grid-stride kernel with 16-byte loads/stores when both ends are aligned."""
        if nbytes <= 0:
            return
        with cuda_call("sm_copy launch", self.device):
            self._copy((self._grid((dst, src), nbytes, per_sm=4),), (512,),
                       (np.uint64(dst), np.uint64(src), np.uint64(nbytes)), stream=stream)

    def copy_launcher(self, dst: int, src: int, nbytes: int, stream) -> Callable[[], None]:
        """A zero-argument function that enqueues one SM copy (cheap to call in a batch)."""
        grid = (self._grid((dst, src), nbytes, per_sm=4),)
        args = (np.uint64(dst), np.uint64(src), np.uint64(nbytes))
        fn = self._copy

        def launch() -> None:
            fn(grid, (512,), args, stream=stream)

        return launch

    def first_mismatch(self, ptr: int, nbytes: int, seed: int, stream) -> int:
        """Offset of the first byte that differs from the pattern of `seed`, or -1. Synchronises `stream`."""
        import cupy

        if nbytes <= 0:
            return -1
        with cuda_call("first_mismatch", self.device), cupy.cuda.Device(self.device):
            if self._result is None:
                self._result = cupy.empty(1, dtype=cupy.uint64)
            _rt().memsetAsync(self._result.data.ptr, 0xFF, 8, stream.ptr)
            self._mismatch((self._grid((ptr,), nbytes),), (self.THREADS,),
                           (np.uint64(ptr), np.uint64(nbytes), np.uint32(seed & 0xFFFFFFFF), self._result),
                           stream=stream)
            host = np.empty(1, dtype=np.uint64)
            _rt().memcpyAsync(host.ctypes.data, self._result.data.ptr, 8, MEMCPY_DEFAULT, stream.ptr)
            stream.synchronize()
        value = int(host[0])
        return -1 if value >= nbytes else value

    def launch_gate(self, flag_dptr: int, target: int, err_dptr: int, stream,
                    timeout_s: float = GATE_TIMEOUT_S) -> None:
        with cuda_call("gate launch", self.device):
            self._gate((1,), (1,), (np.uint64(flag_dptr), np.uint32(target & 0xFFFFFFFF),
                                     np.uint64(err_dptr), np.uint64(int(timeout_s * 1e9))), stream=stream)

    def close(self) -> None:
        self._result = None  # back to CuPy's pool; Gpu.close() empties the pool


def read_byte(ptr: int, stream, device: int) -> int:
    """One byte of device (or mapped) memory, after everything queued on `stream`."""
    host = np.zeros(1, dtype=np.uint8)
    with cuda_call("cudaMemcpyAsync", device):
        _rt().memcpyAsync(host.ctypes.data, ptr, 1, MEMCPY_DEFAULT, stream.ptr)
        stream.synchronize()
    return int(host[0])


def flip_byte(ptr: int, stream, device: int) -> None:
    """Invert one byte in place (the GPUIPC_BENCH_FAULT=corrupt test hook)."""
    host = np.zeros(1, dtype=np.uint8)
    with cuda_call("cudaMemcpyAsync", device):
        _rt().memcpyAsync(host.ctypes.data, ptr, 1, MEMCPY_DEFAULT, stream.ptr)
        stream.synchronize()
        host ^= 0xFF
        _rt().memcpyAsync(ptr, host.ctypes.data, 1, MEMCPY_DEFAULT, stream.ptr)
        stream.synchronize()


# --------------------------------------------------------------------------- gates


class Gate:
    """A spin kernel that holds a stream until the host releases it.

    The flag and the error word live in pinned, mapped host memory of this process.
    arm(stream) enqueues the gate for the next generation; release() lets it go.
    """

    def __init__(self, kernels: Kernels, timeout_s: float = GATE_TIMEOUT_S):
        self.kernels, self.device, self.timeout_s = kernels, kernels.device, timeout_s
        self._page = PinnedHostBuffer(64, kernels.device)
        self._words = self._page.numpy(64).view(np.uint32)
        self._words[:] = 0
        self.generation = 0

    @property
    def flag_dptr(self) -> int:
        return self._page.dptr

    @property
    def err_dptr(self) -> int:
        return self._page.dptr + 4

    def _flag_store(self, value: int) -> None:
        self._words[0] = value & 0xFFFFFFFF

    def arm(self, stream) -> None:
        self.generation += 1
        self.kernels.launch_gate(self.flag_dptr, self.generation, self.err_dptr, stream, self.timeout_s)

    def release(self) -> None:
        self._flag_store(self.generation)

    def check(self) -> None:
        """Raise if a gate gave up waiting (its batch would have started early)."""
        if self._words[1]:
            generation = int(self._words[1])
            self._words[1] = 0
            raise BenchError(
                f"the timing gate on GPU {self.device} was not released within {self.timeout_s:g} s "
                f"(generation {generation}); the sample is void")

    def close(self) -> None:
        self._words = None
        self._page.free()


class SharedGatePage:
    """One page of MAP_SHARED host memory, made in the parent (scenario.prepare), inherited
    by the forked workers. Word 0 is the release generation of every worker's SharedGate."""

    SIZE = 4096

    def __init__(self):
        self.mm = mmap.mmap(-1, self.SIZE, flags=mmap.MAP_SHARED)

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            pass


class SharedGate(Gate):
    """A gate whose flag is word 0 of a SharedGatePage, registered in this worker
    (cudaHostRegister portable|mapped): one host store releases the gates of every process.

    Every worker must arm the same number of times, and cross a barrier (time_batch's
    `before_release`) between enqueueing and release(); every worker then stores the same
    generation, and the first store lets all the gates go at once.
    """

    def __init__(self, kernels: Kernels, page: SharedGatePage, timeout_s: float = GATE_TIMEOUT_S):
        super().__init__(kernels, timeout_s)
        self._shared_addr, self._keeper = mmap_address(page.mm)
        self._shared = np.frombuffer(page.mm, dtype=np.uint32, count=1)
        self._registration = HostRegistration(self._shared_addr, SharedGatePage.SIZE, kernels.device)
        self.generation = int(self._shared[0])

    @property
    def flag_dptr(self) -> int:
        return self._registration.dptr

    def _flag_store(self, value: int) -> None:
        # Every worker stores the same generation after the same barrier crossing, so
        # no store can overtake a newer one.
        self._shared[0] = value & 0xFFFFFFFF

    def close(self) -> None:
        try:
            self._registration.close()
        finally:
            self._shared = None
            self._keeper = None
            super().close()


def time_batch(stream, enqueue: Callable[[], None], reps: int, gate: Gate,
               before_release: Callable[[], None] | None = None) -> float:
    """Seconds per transfer of `reps` calls of enqueue(), queued behind `gate` and timed with events.

    The gate is always released (also when enqueue raises), so the stream never stays blocked.
    """
    import cupy

    if not 1 <= reps <= MAX_REPS:
        raise ValueError(f"reps must be 1..{MAX_REPS} (got {reps}): more would fill the launch queue")
    device = gate.device
    with cuda_call("cudaEventCreate", device):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
    released = False
    try:
        gate.arm(stream)
        with cuda_call("cudaEventRecord", device):
            start.record(stream)
        for _ in range(reps):
            enqueue()
        with cuda_call("cudaEventRecord", device):
            end.record(stream)
        if before_release is not None:
            before_release()
        gate.release()
        released = True
        with cuda_call("cudaEventSynchronize", device):
            end.synchronize()
    finally:
        if not released:
            gate.release()
            with contextlib.suppress(Exception):
                stream.synchronize()
    gate.check()
    with cuda_call("cudaEventElapsedTime", device):
        ms = cupy.cuda.get_elapsed_time(start, end)
    return ms / 1e3 / reps


def time_host(call: Callable[[], Any], reps: int = 1) -> float:
    """Host seconds per call of `call` (perf_counter), for latencies and setup costs."""
    t0 = time.perf_counter()
    for _ in range(reps):
        call()
    return (time.perf_counter() - t0) / reps


def time_setup(call: Callable[[], Any], device: int | None = None) -> tuple[Any, float]:
    """(result, seconds) of one synchronised operation: the device is idle before, and the
    clock stops after cudaDeviceSynchronize."""
    rt = _rt()
    with cuda_call("cudaDeviceSynchronize", device):
        rt.deviceSynchronize()
    t0 = time.perf_counter()
    result = call()
    with cuda_call("cudaDeviceSynchronize", device):
        rt.deviceSynchronize()
    return result, time.perf_counter() - t0


# --------------------------------------------------------------------------- one worker's GPU


class Gpu:
    """A worker's GPU: selects the device, owns a non-blocking stream, the kernels and a gate.

    with Gpu(0) as gpu:
        buf = gpu.alloc(1 << 20)
        gpu.fill(buf.ptr, n, seed); seconds = gpu.time_batch(lambda: ..., reps)
        gpu.verify(buf.ptr, n, seed, "ipc", "ce")
    close() frees what alloc()/pinned() made that is still held, and the rest.
    """

    def __init__(self, device: int, shared_gate: SharedGatePage | None = None):
        self.device = device
        self._owned: list[Any] = []
        use_device(device)
        self.stream = new_stream(device)
        self.kernels = Kernels(device)
        self.gate = Gate(self.kernels)
        self.shared_gate = SharedGate(self.kernels, shared_gate) if shared_gate is not None else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # memory
    def alloc(self, nbytes: int) -> DeviceBuffer:
        buf = DeviceBuffer(nbytes, self.device)
        self._owned.append(buf)
        return buf

    def pinned(self, nbytes: int) -> PinnedHostBuffer:
        buf = PinnedHostBuffer(nbytes, self.device)
        self._owned.append(buf)
        return buf

    def adopt(self, resource: Any) -> Any:
        """Have close() release `resource` (anything with close()) too, in reverse order."""
        self._owned.append(resource)
        return resource

    def release(self, resource: Any) -> None:
        """Release one resource now."""
        if resource in self._owned:
            self._owned.remove(resource)
        resource.close()

    # work
    def fill(self, ptr: int, nbytes: int, seed: int) -> None:
        self.kernels.fill(ptr, nbytes, seed, self.stream)

    def memcpy(self, dst: int, src: int, nbytes: int) -> None:
        with cuda_call("cudaMemcpyAsync", self.device):
            _rt().memcpyAsync(dst, src, nbytes, MEMCPY_DEFAULT, self.stream.ptr)

    def memcpy_launcher(self, dst: int, src: int, nbytes: int) -> Callable[[], None]:
        """A zero-argument function enqueueing one cudaMemcpyAsync (for time_batch)."""
        fn, stream, device = _rt().memcpyAsync, self.stream.ptr, self.device

        def launch() -> None:
            with cuda_call("cudaMemcpyAsync", device):
                fn(dst, src, nbytes, MEMCPY_DEFAULT, stream)

        return launch

    def synchronize(self) -> None:
        with cuda_call("cudaStreamSynchronize", self.device):
            self.stream.synchronize()

    def time_batch(self, enqueue: Callable[[], None], reps: int, shared: bool = False,
                   before_release: Callable[[], None] | None = None) -> float:
        gate = self.shared_gate if shared else self.gate
        if gate is None:
            raise ValueError("this Gpu was made without a shared gate page")
        return time_batch(self.stream, enqueue, reps, gate, before_release)

    def mismatch(self, ptr: int, nbytes: int, seed: int) -> int:
        return self.kernels.first_mismatch(ptr, nbytes, seed, self.stream)

    def verify(self, ptr: int, nbytes: int, seed: int, path: str, variant: str,
               corrupt: bool = False) -> bool:
        """Check nbytes at ptr against the pattern of `seed`; VerificationError on a mismatch.
        corrupt=True flips one byte first (the test hook GPUIPC_BENCH_FAULT=corrupt)."""
        if corrupt and nbytes > 0:
            flip_byte(ptr + nbytes // 2, self.stream, self.device)
        offset = self.mismatch(ptr, nbytes, seed)
        if offset >= 0:
            got = read_byte(ptr + offset, self.stream, self.device)
            raise VerificationError(path, variant, nbytes, offset, expected_byte(offset, seed), got)
        return True

    def close(self) -> None:
        """Release everything, last made first; the first error is raised after all were tried."""
        import cupy

        first: BaseException | None = None
        with contextlib.suppress(Exception):
            self.stream.synchronize()
        items = self._owned[::-1]
        self._owned = []
        for item in items + [self.shared_gate, self.gate, self.kernels]:
            if item is None:
                continue
            try:
                item.close()
            except BaseException as exc:  # noqa: BLE001 - keep releasing
                first = first or exc
        self.shared_gate = None
        with contextlib.suppress(Exception):
            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()
        if first is not None:
            raise first


# --------------------------------------------------------------------------- ceilings


def parse_ceiling(key: str) -> tuple[str, Any, Any]:
    """'d2d@0' -> ('d2d', 0, 0); 'h2d@0' -> ('h2d', 'host', 0); 'd2h@0' -> ('d2h', 0, 'host');
    'peer@0>1' -> ('peer', 0, 1). The middle and last items are the source and destination."""
    kind, _, where = key.partition("@")
    if kind == "peer":
        a, _, b = where.partition(">")
        return kind, int(a), int(b)
    device = int(where)
    if kind == "d2d":
        return kind, device, device
    if kind == "h2d":
        return kind, "host", device
    if kind == "d2h":
        return kind, device, "host"
    raise ValueError(f"unknown ceiling {key!r}")


class Ceilings:
    """What the hardware does, measured with the same gated batches as the paths:
    d2d@N (device-local copy), h2d@N / d2h@N (pinned host memory, one process), and
    peer@A>B (GPU A to GPU B in one process, peer access enabled). Buffers are made at
    `max_bytes` on first use and released with the Gpu.

    Every sample is verified: the source is filled with a new pattern, the copy checked.

    A peer ceiling is issued by the source GPU (it pushes), with cudaMemcpyAsync on the
    two UVA pointers (peer_copy='memcpy_peer': cudaMemcpyPeerAsync; the same figures).
    On two H200s (NV18), a copy issued by the destination GPU (a pull) in one process took
    ~13 us per 4 KiB (0.31 GB/s) with either call, against ~2.3 us (1.75 GB/s) when the
    source pushes, and within 1% of it from 256 MiB up; a pull through an IPC mapping in
    another process took ~2.9 us. Issued by the destination, the "ceiling" fell below the
    IPC path it is meant to bound.
    """

    def __init__(self, gpu: Gpu, max_bytes: int, peer_copy: str = "memcpy"):
        if peer_copy not in ("memcpy", "memcpy_peer"):
            raise ValueError(f"peer_copy is 'memcpy' or 'memcpy_peer', not {peer_copy!r}")
        self.gpu, self.max_bytes, self.peer_copy = gpu, int(max_bytes), peer_copy
        self._buffers: dict[str, tuple[Any, Any]] = {}
        self._others: dict[int, Gpu] = {}
        self._sequence = 0

    def gpu_for(self, device: int) -> Gpu:
        """This worker's Gpu for `device`: the main one, or one made (and owned by it) on demand."""
        if device == self.gpu.device:
            return self.gpu
        if device not in self._others:
            with _on_device(device):
                self._others[device] = self.gpu.adopt(Gpu(device))
        return self._others[device]

    def _ends(self, key: str):
        """(src buffer, dst buffer, (kind, src, dst)) for `key`, made on first use."""
        kind, src, dst = parse_ceiling(key)
        if kind != "peer" and self.gpu.device not in (src, dst):
            raise ValueError(f"ceiling {key} must be measured on its own GPU, not GPU {self.gpu.device}")
        if key not in self._buffers:
            n = self.max_bytes

            def make(where):
                if where == "host":
                    return self.gpu.pinned(n)
                owner = self.gpu_for(where)
                with _on_device(where):
                    return owner.alloc(n)

            self._buffers[key] = (make(src), make(dst))
        s, d = self._buffers[key]
        return s, d, (kind, src, dst)

    def _at(self, where) -> Gpu:
        return self.gpu if where == "host" else self.gpu_for(where)

    def issuer(self, key: str) -> Gpu:
        """The Gpu whose stream runs the copies of `key`: the source GPU for peer copies."""
        kind, src, dst = parse_ceiling(key)
        return self.gpu_for(src) if kind == "peer" else self.gpu

    def enqueuer(self, key: str, nbytes: int) -> Callable[[], None]:
        s, d, (kind, src, dst) = self._ends(key)
        issuer = self.issuer(key)
        if kind == "peer" and self.peer_copy == "memcpy_peer":
            fn, stream, device, sp, dp = _rt().memcpyPeerAsync, issuer.stream.ptr, issuer.device, s.ptr, d.ptr

            def launch() -> None:
                with cuda_call("cudaMemcpyPeerAsync", device):
                    fn(dp, dst, sp, src, nbytes, stream)

            return launch
        return issuer.memcpy_launcher(d.ptr, s.ptr, nbytes)

    def prepare(self, key: str, nbytes: int) -> int:
        """Fill the source with a new pattern; returns its seed."""
        s, _, (kind, src, dst) = self._ends(key)
        self._sequence += 1
        seed = seed_for(0x5EED0000 + self._sequence)
        filler = self._at(src)
        with _on_device(filler.device):
            filler.fill(_dptr(s), nbytes, seed)
            filler.synchronize()
        return seed

    def check(self, key: str, nbytes: int, seed: int) -> bool:
        _, d, (kind, src, dst) = self._ends(key)
        checker = self._at(dst)
        with _on_device(checker.device):
            return checker.mismatch(_dptr(d), nbytes, seed) < 0

    def bandwidth(self, key: str, nbytes: int) -> tuple[float, int, bool]:
        """(seconds per transfer, reps, verified) of one sample."""
        seed = self.prepare(key, nbytes)
        reps = reps_for(nbytes)
        issuer = self.issuer(key)
        with _on_device(issuer.device):
            seconds = issuer.time_batch(self.enqueuer(key, nbytes), reps)
        return seconds, reps, self.check(key, nbytes, seed)

    def latency(self, key: str, nbytes: int, reps: int = 100) -> tuple[float, bool]:
        """(seconds, verified): host-timed single copy + stream synchronize, mean of `reps`."""
        seed = self.prepare(key, nbytes)
        launch = self.enqueuer(key, nbytes)
        issuer = self.issuer(key)
        sync = issuer.stream.synchronize

        def one() -> None:
            launch()
            sync()

        with _on_device(issuer.device):
            one()
            seconds = time_host(one, reps)
        return seconds, self.check(key, nbytes, seed)

    def rows(self, key: str, nbytes: int, warmup: int, iterations: int,
             on_sample: Callable[[int], None] | None = None, **fields) -> Iterator[dict]:
        """Result rows of `iterations` bandwidth samples of ceiling `key` after `warmup` unreported
        ones; on_sample(i) is called before sample i (warm-ups included), e.g. to set the phase."""
        from gpuipc_bench.results import new_row

        _, src, dst = parse_ceiling(key)
        for i in range(warmup + iterations):
            if on_sample is not None:
                on_sample(i)
            seconds, reps, ok = self.bandwidth(key, nbytes)
            if not ok:
                raise BenchError(f"ceiling {key} copied wrong bytes at size {format_size(nbytes)}")
            if i >= warmup:
                yield new_row(path="ceiling", variant=key, metric="bandwidth", src=src, dst=dst,
                              bytes=nbytes, iteration=i - warmup, batch=reps, seconds=seconds,
                              verified=ok, ceiling="", **fields)

    def latency_rows(self, key: str, nbytes: int, warmup: int, iterations: int, reps: int = 100,
                     on_sample: Callable[[int], None] | None = None, **fields) -> Iterator[dict]:
        """Like rows(), for metric 'latency': one copy + stream synchronize, host-timed."""
        from gpuipc_bench.results import new_row

        _, src, dst = parse_ceiling(key)
        for i in range(warmup + iterations):
            if on_sample is not None:
                on_sample(i)
            seconds, ok = self.latency(key, nbytes, reps)
            if not ok:
                raise BenchError(f"ceiling {key} copied wrong bytes at size {format_size(nbytes)}")
            if i >= warmup:
                yield new_row(path="ceiling", variant=key, metric="latency", src=src, dst=dst,
                              bytes=nbytes, iteration=i - warmup, batch=reps, seconds=seconds,
                              verified=ok, ceiling="", **fields)


def _dptr(buf: Any) -> int:
    return getattr(buf, "dptr", buf.ptr)


@contextlib.contextmanager
def _on_device(device: int):
    import cupy

    with cuda_call("cudaSetDevice", device), cupy.cuda.Device(device):
        yield


def enable_peer_access(device: int, peer: int) -> float | None:
    """Let `device` reach `peer`'s memory (cudaDeviceEnablePeerAccess from `device`'s context).
    Seconds it took, or None when already enabled or not possible between these GPUs."""
    rt = _rt()
    with _on_device(device):
        with cuda_call("cudaDeviceCanAccessPeer", device):
            if not rt.deviceCanAccessPeer(device, peer):
                return None
            rt.deviceSynchronize()  # the context exists before the clock starts
        t0 = time.perf_counter()
        try:
            rt.deviceEnablePeerAccess(peer)
        except Exception as exc:  # noqa: BLE001
            if error_name(exc) == _PEER_ALREADY_ENABLED:
                return None
            raise translate(exc, "cudaDeviceEnablePeerAccess", device) from exc
        return time.perf_counter() - t0


def setup_row(variant: str, seconds: float, nbytes: int = 0, src: Any = "", dst: Any = "", **fields) -> dict:
    """A metric='setup' row: one timed operation (handle export/open/close, registration, ...)."""
    from gpuipc_bench.results import new_row

    return new_row(metric="setup", variant=variant, seconds=seconds, bytes=nbytes, src=src, dst=dst,
                   batch=1, verified=None, **fields)



# --------------------------------------------------------------------------- device-initiated ping-pong

PINGPONG_SOURCE = r"""
typedef unsigned long long u64;
typedef unsigned int u32;

#define PP_OK 0
#define PP_NO_ANSWER 1
#define PP_DEADLINE 2

__device__ __forceinline__ u64 pp_now() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Result words: [0] status, [1] round that failed, [2] t_start (after round 0), [3] t_end,
// [4] the flag value last seen by the failing wait, [5] rounds asked for.
__device__ __forceinline__ void pp_fail(u64* res, int* stop, int why, u32 round, u64 seen) {
    if (atomicCAS(stop, 0, why) == 0) {
        res[1] = round;
        res[4] = seen;
    }
}

// Spin until *flag reaches target (wrap-safe) - PP_OK -, the wait passes timeout_ns - PP_NO_ANSWER -,
// (the clock is read every 64 polls, off the path of a flag that arrives)
// the launch passes deadline_ns - PP_DEADLINE -, or another thread of the block gave up.
__device__ int pp_wait_ge(volatile u32* flag, u32 target, u64 t_begin, u64 timeout_ns,
                          u64 deadline_ns, volatile int* stop, u64* seen) {
    u32 v = *flag;
    if ((int)(v - target) >= 0) return PP_OK;
    u64 t0 = pp_now();
    for (u32 n = 1;; ++n) {
        v = *flag;
        if ((int)(v - target) >= 0) return PP_OK;
        if ((n & 63) == 0) {
            u64 t = pp_now();
            *seen = v;
            if (*stop) return -1;
            if (t - t0 > timeout_ns) return PP_NO_ANSWER;
            if (t - t_begin > deadline_ns) return PP_DEADLINE;
        }
    }
}

// Block-wide copy of n bytes (16-byte vectors: both ends are 16-byte aligned by layout).
// fresh: the source was written by another agent since this block last looked, so bypass L1.
__device__ __forceinline__ void pp_copy(u64 dst, u64 src, u64 n, bool fresh) {
    uint4* d = (uint4*)dst;
    const uint4* s = (const uint4*)src;
    u64 nvec = n / 16;
    for (u64 i = threadIdx.x; i < nvec; i += blockDim.x) d[i] = fresh ? __ldcv(s + i) : s[i];
    volatile const unsigned char* sb = (volatile const unsigned char*)src;
    unsigned char* db = (unsigned char*)dst;
    for (u64 k = nvec * 16 + threadIdx.x; k < n; k += blockDim.x) db[k] = sb[k];
}

// One block. The initiator copies the payload into the peer's buffer, fences (system scope),
// stores the round's number into the peer's flag, then spins on its own flag for the echo;
// the responder spins on its flag, copies the payload it received back into the initiator's
// buffer, fences and stores the initiator's flag. Round 0 is a handshake (both kernels are
// running); rounds 1..rounds are timed with globaltimer by the initiator.
extern "C" __global__ void pingpong(u64 my_flag, u64 peer_flag, u64 my_payload, u64 peer_payload,
                                    u64 src, u64 nbytes, u32 first, u32 rounds, int initiator,
                                    u64 timeout_ns, u64 deadline_ns, u64 result) {
    __shared__ int stop;
    u64* res = (u64*)result;
    volatile u32* mine = (volatile u32*)my_flag;
    volatile u32* theirs = (volatile u32*)peer_flag;
    const bool lead = threadIdx.x == 0;
    const u64 t_begin = pp_now();
    u64 t_start = t_begin, seen = 0;
    if (lead) stop = 0;
    __syncthreads();
    if (nbytes == 0) {  // the flags alone: one thread, no barrier on the path
        if (!lead) return;
        int s = PP_OK;
        u32 r = 0;
        for (; r <= rounds; ++r) {
            const u32 seq = first + r;
            if (initiator) *theirs = seq;
            s = pp_wait_ge(mine, seq, t_begin, timeout_ns, deadline_ns, &stop, &seen);
            if (s) break;
            if (!initiator) *theirs = seq;
            else if (r == 0) t_start = pp_now();
        }
        if (s > 0) {
            res[1] = r;
            res[4] = seen;
        }
        res[0] = s > 0 ? s : PP_OK;
        res[2] = t_start;
        res[3] = pp_now();
        res[5] = rounds;
        return;
    }
    for (u32 r = 0; r <= rounds; ++r) {
        const u32 seq = first + r;
        if (initiator) {
            if (nbytes) {
                pp_copy(peer_payload, src, nbytes, false);
                __threadfence_system();
            }
            __syncthreads();
            if (lead) {
                *theirs = seq;
                int s = pp_wait_ge(mine, seq, t_begin, timeout_ns, deadline_ns, &stop, &seen);
                if (s > 0) pp_fail(res, &stop, s, r, seen);
                else if (r == 0) t_start = pp_now();
            }
            __syncthreads();
            if (stop) break;
        } else {
            if (lead) {
                int s = pp_wait_ge(mine, seq, t_begin, timeout_ns, deadline_ns, &stop, &seen);
                if (s > 0) pp_fail(res, &stop, s, r, seen);
                else if (nbytes) __threadfence_system();  // acquire: the payload came before the flag
            }
            __syncthreads();
            if (stop) break;
            if (nbytes) {
                pp_copy(peer_payload, my_payload, nbytes, true);
                __threadfence_system();
            }
            __syncthreads();
            if (lead) *theirs = seq;
        }
    }
    if (lead) {
        res[0] = stop;
        res[2] = t_start;
        res[3] = pp_now();
        res[5] = rounds;
    }
}

// LL ("low latency", as NCCL's protocol of that name): every 8-byte word carries 4 payload bytes
// and the round's number, stored in one single-copy-atomic store, so no fence is needed: the
// receiver waits until every word of its part shows the round's number. The initiator sends
// its words and waits for all of them to come back (one barrier a round); each responder
// thread echoes its words as soon as each arrives.
__device__ int pp_wait_word(volatile u64* word, u32 target, u64 t_begin, u64 timeout_ns,
                            u64 deadline_ns, volatile int* stop, u64* value) {
    u64 v = *word;
    if ((u32)(v >> 32) == target) { *value = v; return PP_OK; }
    u64 t0 = pp_now();
    for (u32 n = 1;; ++n) {
        v = *word;
        if ((u32)(v >> 32) == target) { *value = v; return PP_OK; }
        if ((n & 63) == 0) {
            u64 t = pp_now();
            *value = v;
            if (*stop) return -1;
            if (t - t0 > timeout_ns) return PP_NO_ANSWER;
            if (t - t_begin > deadline_ns) return PP_DEADLINE;
        }
    }
}

extern "C" __global__ void pingpong_ll(u64 my_ll, u64 peer_ll, u64 src, u32 nwords, u32 first,
                                       u32 rounds, int initiator, u64 timeout_ns, u64 deadline_ns,
                                       u64 result) {
    __shared__ int stop;
    u64* res = (u64*)result;
    volatile u64* mine = (volatile u64*)my_ll;
    volatile u64* theirs = (volatile u64*)peer_ll;
    const u32* data = (const u32*)src;
    const bool lead = threadIdx.x == 0;
    const u64 t_begin = pp_now();
    u64 t_start = t_begin, value = 0;
    // The initiator's first word in a register: no load between an echo and the next send.
    const u32 own = (initiator && threadIdx.x < nwords) ? data[threadIdx.x] : 0;
    if (lead) stop = 0;
    __syncthreads();
    for (u32 r = 0; r <= rounds; ++r) {
        const u32 seq = first + r;
        if (initiator) {
            for (u32 i = threadIdx.x; i < nwords; i += blockDim.x)
                theirs[i] = ((u64)seq << 32) | (i == threadIdx.x ? own : data[i]);
            for (u32 i = threadIdx.x; i < nwords; i += blockDim.x) {
                int s = pp_wait_word(mine + i, seq, t_begin, timeout_ns, deadline_ns, &stop, &value);
                if (s > 0) pp_fail(res, &stop, s, r, value);
                if (s) break;
            }
            __syncthreads();
            if (stop) break;
            if (r == 0 && lead) t_start = pp_now();
        } else {
            bool quit = false;
            for (u32 i = threadIdx.x; i < nwords; i += blockDim.x) {
                int s = pp_wait_word(mine + i, seq, t_begin, timeout_ns, deadline_ns, &stop, &value);
                if (s > 0) pp_fail(res, &stop, s, r, value);
                if (s) { quit = true; break; }
                theirs[i] = value;
            }
            if (quit) break;
        }
    }
    __syncthreads();
    if (lead) {
        res[0] = stop;
        res[2] = t_start;
        res[3] = pp_now();
        res[5] = rounds;
    }
}

// globaltimer (ns, one clock for every context on this GPU) into *out, in stream order.
extern "C" __global__ void stamp(u64 out) {
    *(volatile u64*)out = pp_now();
}
"""

PP_OK, PP_NO_ANSWER, PP_DEADLINE = 0, 1, 2
PINGPONG_MAX_THREADS = 1024
PINGPONG_RESULT_BYTES = 64


def ll_words(nbytes: int) -> int:
    """8-byte LL words that carry `nbytes` of payload (4 bytes each)."""
    return -(-int(nbytes) // 4)


def pingpong_threads(nbytes: int, ll: bool = False) -> int:
    """Threads of the one ping-pong block: one per 16-byte vector (LL: per 4-byte word), whole
    warps, 32 to 1024 (a warp for a flag or a few bytes)."""
    units = ll_words(nbytes) if ll else -(-int(nbytes) // 16)
    return max(32, min(PINGPONG_MAX_THREADS, -(-units // 32) * 32))


@dataclasses.dataclass(frozen=True)
class PingPongResult:
    status: int  # PP_OK, PP_NO_ANSWER or PP_DEADLINE
    round: int  # the round that failed (0: the handshake)
    t_start: int  # globaltimer ns after the handshake
    t_end: int
    seen: int  # the flag (word) value the failing wait saw last
    rounds: int

    @property
    def seconds(self) -> float:
        """Seconds of the timed rounds (all but the handshake)."""
        return max(0, self.t_end - self.t_start) / 1e9

    @property
    def round_trip(self) -> float:
        return self.seconds / max(1, self.rounds)


class PingPongKernels:
    """The device ping-pong kernels (PINGPONG_SOURCE), compiled by NVRTC for `device`."""

    def __init__(self, device: int):
        import cupy

        self.device = device
        with cuda_call("nvrtcCompileProgram", device), cupy.cuda.Device(device):
            self.module = cupy.RawModule(code=PINGPONG_SOURCE, options=("--std=c++14",))
            self._simple = self.module.get_function("pingpong")
            self._ll = self.module.get_function("pingpong_ll")
            self._stamp = self.module.get_function("stamp")

    def launch(self, stream, *, my_flag: int, peer_flag: int, my_payload: int, peer_payload: int,
               src: int, nbytes: int, first: int, rounds: int, initiator: bool, timeout_s: float,
               deadline_s: float, result: int) -> None:
        """Enqueue the flag-and-fence ping-pong kernel (see PINGPONG_SOURCE)."""
        u64, u32 = np.uint64, np.uint32
        args = (u64(my_flag), u64(peer_flag), u64(my_payload), u64(peer_payload), u64(src), u64(nbytes),
                u32(first & 0xFFFFFFFF), u32(rounds), np.int32(1 if initiator else 0),
                u64(int(timeout_s * 1e9)), u64(int(deadline_s * 1e9)), u64(result))
        with cuda_call("pingpong launch", self.device):
            self._simple((1,), (pingpong_threads(nbytes),), args, stream=stream)

    def launch_ll(self, stream, *, my_ll: int, peer_ll: int, src: int, nbytes: int, first: int,
                  rounds: int, initiator: bool, timeout_s: float, deadline_s: float, result: int) -> None:
        """Enqueue the LL ping-pong kernel: ll_words(nbytes) words of 4 payload bytes + the round."""
        u64, u32 = np.uint64, np.uint32
        args = (u64(my_ll), u64(peer_ll), u64(src), u32(ll_words(nbytes)), u32(first & 0xFFFFFFFF),
                u32(rounds), np.int32(1 if initiator else 0), u64(int(timeout_s * 1e9)),
                u64(int(deadline_s * 1e9)), u64(result))
        with cuda_call("pingpong_ll launch", self.device):
            self._ll((1,), (pingpong_threads(nbytes, ll=True),), args, stream=stream)

    def stamp(self, out: int, stream) -> None:
        """Enqueue a write of the GPU's globaltimer (ns) into the 8 bytes at `out`."""
        with cuda_call("stamp launch", self.device):
            self._stamp((1,), (1,), (np.uint64(out),), stream=stream)

    def result(self, result: int, stream) -> PingPongResult:
        """Read a ping-pong result block (after everything queued on `stream`)."""
        words = read_words(result, 6, stream, self.device)
        return PingPongResult(status=int(words[0]), round=int(words[1]), t_start=int(words[2]),
                              t_end=int(words[3]), seen=int(words[4]), rounds=int(words[5]))

    def close(self) -> None:
        self.module = None


def read_words(ptr: int, count: int, stream, device: int) -> np.ndarray:
    """`count` uint64 words of device (or mapped) memory, after everything queued on `stream`."""
    host = np.zeros(count, dtype=np.uint64)
    with cuda_call("cudaMemcpyAsync", device):
        _rt().memcpyAsync(host.ctypes.data, ptr, 8 * count, MEMCPY_DEFAULT, stream.ptr)
        stream.synchronize()
    return host


def read_bytes(ptr: int, nbytes: int, stream, device: int) -> np.ndarray:
    """`nbytes` of device (or mapped) memory as a uint8 array, after everything queued on `stream`."""
    host = np.zeros(max(0, nbytes), dtype=np.uint8)
    if nbytes > 0:
        with cuda_call("cudaMemcpyAsync", device):
            _rt().memcpyAsync(host.ctypes.data, ptr, nbytes, MEMCPY_DEFAULT, stream.ptr)
            stream.synchronize()
    return host


def memset(ptr: int, value: int, nbytes: int, stream, device: int) -> None:
    """cudaMemsetAsync on `stream`."""
    if nbytes > 0:
        with cuda_call("cudaMemsetAsync", device):
            _rt().memsetAsync(ptr, value, nbytes, stream.ptr)
