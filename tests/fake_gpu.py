"""A stand-in for the CUDA layer with real bytes, for CPU tests of the scenarios' protocols.

"Device memory" is a MAP_SHARED arena mapped before the workers fork, so every worker sees
it at the same address and an IPC handle is just the address. Every operation runs when it
is enqueued (there is no GPU to run it later): a copy moves its bytes then and there. That
keeps what the tests want to see: the host-side ordering of the two workers' enqueues
(signals, mailbox counters) decides whether a consumer's copy finds the producer's bytes,
so a protocol that skips a wait copies stale or unmarked bytes, and the real per-slot
verification (numpy twin of the kernels) catches it. Times are made up (1 us a transfer).

install(monkeypatch) puts the fakes where the scenarios and the harness look them up.
"""

from __future__ import annotations

import ctypes
import mmap
import multiprocessing
import time

import numpy as np

from gpuipc_bench.errors import VerificationError
from gpuipc_bench.gpu import kernels as real_kernels
from gpuipc_bench.gpu.memory import Ring
from gpuipc_bench.gpu.timing import warmup_ops
from gpuipc_bench.patterns import expected_byte, pattern_bytes

ARENA_BYTES = 512 << 20
_arena = mmap.mmap(-1, ARENA_BYTES, flags=mmap.MAP_SHARED)
_base = ctypes.addressof(ctypes.c_char.from_buffer(_arena))
_next = multiprocessing.get_context("fork").Value("q", 0)  # bump allocator shared by the workers
SECONDS_PER_TRANSFER = 1e-6
L2_BYTES = 1 << 20  # small, so that a test-sized ring can leave it
FAKE_FREE_BYTES, FAKE_TOTAL_BYTES = 16 << 20, 1 << 20  # cudaMemGetInfo: the handles study caps sizes at 256 KiB


# ---- MIG: a worker on a MIG instance sees it alone (CUDA_VISIBLE_DEVICES=MIG-...). What one
# exports carries its instance; opening it in another instance is refused the way the driver
# refuses CUDA IPC between GPU instances: a CUDA error raised inside the real cuda_call (IPC
# memory and events, CuPy's CUDARuntimeError) or as fdmemory raises it (VMM and pool descriptors).
# The real driver's words there are not known here (no MIG machine): these stand in for them.
MIG_REFUSAL = "cudaErrorInvalidDevice: invalid device ordinal (fake driver: another MIG instance)"
MIG_FD_REFUSAL = ("CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal (fake driver: another MIG instance)")


class CUDARuntimeError(RuntimeError):
    """Named as CuPy's is, so that gpu.errors translates it as it would the real one."""


def instance_tag() -> bytes:
    """16 bytes naming the MIG instance this process sees; zeros on a whole GPU."""
    import hashlib
    import os

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return hashlib.sha256(visible.encode()).digest()[:16] if visible.startswith("MIG-") else bytes(16)


def _other_instance(tag: bytes) -> bool:
    mine = instance_tag()
    return any(tag) and any(mine) and bytes(tag) != mine


def refuse_ipc_across_instances(tag: bytes, call: str, device) -> None:
    from gpuipc_bench.gpu.errors import cuda_call

    if _other_instance(tag):
        with cuda_call(call, device):
            raise CUDARuntimeError(MIG_REFUSAL)


def refuse_fd_across_instances(tag: bytes, call: str, device) -> None:
    from gpuipc_bench.gpu.errors import CudaError

    if _other_instance(tag):
        raise CudaError(MIG_FD_REFUSAL[0], call, device, MIG_FD_REFUSAL[1])


def _alloc(nbytes: int) -> int:
    size = -(-max(1, int(nbytes)) // 256) * 256
    with _next.get_lock():
        offset = _next.value
        if offset + size > ARENA_BYTES:
            _next.value = 0  # reset for the next run; this one asked for too much
            raise MemoryError(f"the fake GPU arena has no room for {size} more bytes (test sizes too large)")
        _next.value = offset + size
    return _base + offset


def view(ptr: int, nbytes: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_uint8 * max(1, nbytes)).from_address(ptr))[:nbytes]


def fill(ptr: int, ring: Ring, seed: int, count: int | None = None, poison_tag: bool = False) -> None:
    for slot in range(ring.slots if count is None else count):
        data = pattern_bytes(ring.nbytes, (seed + slot) & 0xFFFFFFFF)
        if poison_tag:
            data[:16] ^= 0xFF
        view(ptr + slot * ring.stride, ring.nbytes)[:] = data


class FakeBuffer:
    def __init__(self, nbytes=0, device=0, *args, **kwargs):
        self.nbytes, self.device = nbytes, device
        self.ptr = self.dptr = _alloc(nbytes)

    def export(self):
        return (self.ptr.to_bytes(8, "little") + instance_tag()).ljust(64, b"\0")

    def numpy(self, nbytes=None):
        return view(self.ptr, self.nbytes if nbytes is None else nbytes)

    def close(self):
        self.ptr = 0


class FakeMapped:
    def __init__(self, handle, nbytes, device):
        refuse_ipc_across_instances(bytes(handle)[8:24], "cudaIpcOpenMemHandle", device)
        self.ptr = int.from_bytes(bytes(handle)[:8], "little")
        self.nbytes, self.device = nbytes, device

    def close(self):
        self.ptr = 0


class FakeRegistration:
    def __init__(self, address, nbytes, device, flags=0):
        self.address, self.nbytes, self.dptr = address, nbytes, address

    def close(self):
        pass


class FakeStream:
    ptr = 0

    def synchronize(self):
        pass


class FakeEvent:
    @classmethod
    def create(cls, device):
        return cls()

    @classmethod
    def open(cls, handle, device):
        refuse_ipc_across_instances(bytes(handle)[1:17], "cudaIpcOpenEventHandle", device)
        return cls()

    def export(self):
        return (b"e" + instance_tag()).ljust(64, b"e")

    def record(self, stream):
        pass

    def wait(self, stream):
        pass

    def close(self):
        pass


class FakeMarks:
    def __init__(self, reps=1):
        self.reps = reps
        self.start_ns = self.end_ns = 0

    def seconds(self):
        return SECONDS_PER_TRANSFER * self.reps

    def stamped(self):
        return self.start_ns, self.end_ns


class FakeGate:
    def __init__(self):
        self.generation = 0

    def close(self):
        pass


class FakeKernels:
    """The copy.cu kernels: a mark writes the slot's true first bytes."""

    def __init__(self, device):
        self.device = device

    def mark_launcher(self, nbytes, stream):
        def mark(ptr, seed):
            n = min(nbytes, 16)
            view(ptr, n)[:] = pattern_bytes(n, seed & 0xFFFFFFFF)

        return mark


class FakeGpu:
    l2_bytes = L2_BYTES

    def __init__(self, device, shared_gate=None):
        self.device = device
        self.stream = FakeStream()
        self.kernels = FakeKernels(device)
        self.gate = FakeGate()
        self.shared_gate = FakeGate() if shared_gate is not None else None
        self.owned = []

    def alloc(self, nbytes):
        return self.adopt(FakeBuffer(nbytes, self.device))

    pinned = alloc

    def adopt(self, resource):
        self.owned.append(resource)
        return resource

    def release(self, resource):
        if resource in self.owned:
            self.owned.remove(resource)
        resource.close()

    def fill(self, ptr, ring, seed, count=None, poison_tag=False):
        fill(ptr, ring, seed, count, poison_tag)

    def memcpy(self, dst, src, nbytes):
        ctypes.memmove(dst, src, nbytes)

    def copy_launcher(self, nbytes, engine="ce"):
        return lambda dst, src: ctypes.memmove(dst, src, nbytes)

    def synchronize(self):
        pass

    def marks(self, stamps=None):
        return FakeMarks()

    def time_batch(self, enqueue, reps, *, warm=None, shared=False, marks=None, before_release=None, ops_per_rep=1,
                   transfer_bytes=None):
        marks = marks or FakeMarks()
        marks.reps = reps
        if warm is not None:
            for _ in range(warmup_ops(transfer_bytes)):
                warm()
        for r in range(reps):
            enqueue(r)
        if before_release is not None:
            before_release()
        # stamped on the fake GPU's one clock as its gate opens: every worker's batch starts at 0, as on
        # a GPU the gate starts them together (host scheduling never falls on a batch of few transfers)
        marks.start_ns = 0
        marks.end_ns = int(SECONDS_PER_TRANSFER * reps * 1e9)
        return marks

    def verify(self, ptr, ring, seed, path, variant, count=None, xor_mask=0, corrupt=False):
        count = ring.slots if count is None else count
        if corrupt and ring.nbytes:
            view(ptr + (count - 1) * ring.stride + ring.nbytes // 2, 1)[0] ^= 0xFF
        for slot in range(count):
            s = (seed + slot) & 0xFFFFFFFF
            got = view(ptr + slot * ring.stride, ring.nbytes)
            bad = np.flatnonzero(got != pattern_bytes(ring.nbytes, s, xor_mask=xor_mask))
            if bad.size:
                k = int(bad[0])
                raise VerificationError(path, variant, ring.nbytes, k, expected_byte(k, s, xor_mask), int(got[k]),
                                        slot=slot if ring.slots > 1 else None)
        return True

    def close(self):
        for item in reversed(self.owned):
            item.close()
        self.owned = []


class FakeCeilings:
    reserved: list = []  # (key, capacity) of every reserve(), in every instance (a test clears it)

    def __init__(self, gpu, capacity, host_rings=2):
        self.gpu, self.capacity = gpu, capacity

    def reserve(self, key):
        FakeCeilings.reserved.append((key, self.capacity))

    def bandwidth(self, key, nbytes, seed, reps=None, window=None):
        if window is not None:  # the lane reading ends with the copies, before the verification (gpu.ceilings)
            window.end()
        return SECONDS_PER_TRANSFER, reps or 1

    def latency(self, key, nbytes, seed, reps=100):
        return 5e-6

    def l2_resident(self, key, nbytes, reps=None):
        return Ring.for_size(nbytes, reps).l2_resident(L2_BYTES)


class FakePingPongKernels:
    def __init__(self, device):
        self.device, self.last = device, None

    def launch(self, stream, **kw):
        self.last = kw

    launch_ll = launch

    def result(self, result, stream):
        rounds = self.last["rounds"]
        return real_kernels.PingPongResult(status=real_kernels.PP_OK, round=0, t_start=1000,
                                           t_end=1000 + rounds * 1000, seen=0, rounds=rounds)

    def close(self):
        pass


class _nothing:
    def __init__(self, *a, **k):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _time_setup(call, device=None):
    t0 = time.perf_counter()
    return call(), time.perf_counter() - t0


class _AddressFd:
    """A real file descriptor (memfd) whose contents name an arena address: what the fakes of
    the fd-sharing paths export, so the real descriptor channel carries real descriptors."""

    @staticmethod
    def make(ptr: int) -> int:
        import os

        fd = os.memfd_create("fake-gpu-handle")
        os.write(fd, ptr.to_bytes(8, "little") + instance_tag())
        return fd

    @staticmethod
    def read(fd: int, call: str = "cuMemImportFromShareableHandle", device=0) -> int:
        import os

        refuse_fd_across_instances(os.pread(fd, 16, 8), call, device)
        return int.from_bytes(os.pread(fd, 8, 0), "little")


class FakeVmmMemory:
    def __init__(self, ptr, size, device):
        self.handle, self.size, self.device, self.ptr = ptr, size, device, 0

    @classmethod
    def create(cls, size, device):
        return cls(_alloc(size), size, device)

    @classmethod
    def import_fd(cls, fd, size, device):
        return cls(_AddressFd.read(fd, "cuMemImportFromShareableHandle", device), size, device)

    def export_fd(self):
        return _AddressFd.make(self.handle)

    def map(self):
        self.ptr = self.handle
        return self.ptr

    def close(self):
        self.ptr, self.handle = 0, None


class FakePoolPointer:
    def __init__(self, ptr, nbytes, device):
        self.ptr, self.nbytes, self.device = ptr, nbytes, device

    def export(self):
        return self.ptr.to_bytes(8, "little").ljust(64, b"\0")

    def close(self):
        self.ptr = 0


class FakeMemPool:
    def __init__(self, device, imported):
        self.device, self.imported, self.pool = device, imported, object()

    @classmethod
    def create(cls, device, host=False):
        return cls(device, False)

    @classmethod
    def import_fd(cls, fd, device):
        assert _AddressFd.read(fd, "cuMemPoolImportFromShareableHandle", device) == 0x9001, "not a pool's descriptor"
        return cls(device, True)

    def export_fd(self):
        return _AddressFd.make(0x9001)

    def allocate(self, nbytes):
        assert not self.imported, "an imported pool cannot allocate"
        return FakePoolPointer(_alloc(nbytes), nbytes, self.device)

    def import_pointer(self, data, nbytes):
        assert self.imported
        return FakePoolPointer(int.from_bytes(bytes(data)[:8], "little"), nbytes, self.device)

    def close(self):
        self.pool = None


def install(monkeypatch) -> None:
    """Put the fakes where the harness and the scenarios look them up (before forking workers).
    Device ping-pongs move no bytes here, so their verification is switched off."""
    _next.value = 0  # a new run: the arena is all free again (the last run's workers are gone)
    from gpuipc_bench.engine import pair, pingpong, gpu_signal as signal
    from gpuipc_bench.gpu import ceilings, memory, timing
    from gpuipc_bench.gpu import fdmemory
    from gpuipc_bench.scenarios import handles, ipc, latency, mempool, peer, sharing, staging, vmm

    patches = [
        (pair, "Gpu", FakeGpu), (pair, "Ceilings", FakeCeilings),
        (timing, "time_setup", _time_setup), (signal, "IpcEvent", FakeEvent),
        (ipc, "DeviceBuffer", FakeBuffer), (ipc, "IpcEvent", FakeEvent), (ipc, "MappedBuffer", FakeMapped),
        (ipc, "time_setup", _time_setup),
        (pair, "enable_peer_access", lambda device, peer: 1e-3),
        (staging, "HostRegistration", FakeRegistration),
        (ceilings, "Ceilings", FakeCeilings), (peer, "on_device", _nothing),
        (pingpong, "MappedBuffer", FakeMapped), (pingpong, "memset", lambda *a, **k: None),
        (latency, "IpcEvent", FakeEvent), (latency, "memset", lambda *a, **k: None),
        (sharing, "Gpu", FakeGpu), (sharing, "Ceilings", FakeCeilings), (memory, "on_device", _nothing),
        (vmm, "VmmMemory", FakeVmmMemory), (vmm, "vmm_size", lambda nbytes, device: -(-nbytes // 4096) * 4096),
        (vmm, "time_setup", _time_setup), (fdmemory, "fabric_refusal", lambda device: "CUDA_ERROR_NOT_PERMITTED"),
        (mempool, "MemPool", FakeMemPool), (mempool, "time_setup", _time_setup),
        (handles, "MemPool", FakeMemPool), (handles, "time_setup", _time_setup),
        (handles, "DeviceBuffer", FakeBuffer), (handles, "MappedBuffer", FakeMapped),
        (handles, "free_and_total", lambda device: (FAKE_FREE_BYTES, FAKE_TOTAL_BYTES)),
    ]
    for module, name, value in patches:
        monkeypatch.setattr(module, name, value)
    monkeypatch.setattr(pingpong.k, "PingPongKernels", FakePingPongKernels)
    monkeypatch.setattr(pingpong.DevicePingPong, "_verify", lambda self, *a: None)
