"""One worker's GPU: the device made current, a non-blocking stream, the kernels, a gate,
and everything allocated through it (released by close(), last made first)."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

from gpuipc_bench.errors import VerificationError
from gpuipc_bench.gpu.errors import cuda_call, error_name, translate
from gpuipc_bench.gpu.kernels import Kernels
from gpuipc_bench.gpu.memory import (
    MEMCPY_DEFAULT, DeviceBuffer, KeptPinnedBuffer, PinnedHostBuffer, Ring, new_stream, on_device, read, rt, write,
)
from gpuipc_bench.gpu.visible import cuda_index
from gpuipc_bench.gpu.timing import Gate, Marks, SharedGate, SharedGatePage, time_batch
from gpuipc_bench.patterns import expected_byte
from gpuipc_bench.hooks.profiling import mark

_PEER_ALREADY_ENABLED = "cudaErrorPeerAccessAlreadyEnabled"
_WARMING = [False]  # a warm-up sample is being taken (warming()): verify() only waits for the stream


@contextlib.contextmanager
def warming(on: bool = True):
    """While the sampler takes a warm-up sample (`on`): its figure calibrates the transfers per sample
    and is no result, so Gpu.verify does not check its bytes (a check of a ring in host memory reads it
    over PCIe: ~5 ms a sample at 128 MiB). Every timed sample is checked as before."""
    _WARMING[0] = on
    try:
        yield
    finally:
        _WARMING[0] = False


def use_device(device: int) -> None:
    import cupy

    with cuda_call("cudaSetDevice", device):
        cupy.cuda.Device(cuda_index(device)).use()


class Gpu:
    """with Gpu(0) as gpu:
        src = gpu.alloc(ring.bytes); gpu.fill(src.ptr, ring, seed)
        marks = gpu.time_batch(lambda r: copy(dst + ring.offset(r), src + ring.offset(r)), reps)
        gpu.verify(dst.ptr, ring, seed, "ipc", "ce")
    """

    def __init__(self, device: int, shared_gate: SharedGatePage | None = None):
        self.device = device
        self._owned: list[Any] = []
        use_device(device)
        self.stream = new_stream(device)
        self.kernels = Kernels(device)
        self.l2_bytes = self.kernels.l2_bytes
        self.gate = Gate(self.kernels)
        self.shared_gate = SharedGate(self.kernels, shared_gate) if shared_gate is not None else None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # memory
    def alloc(self, nbytes: int) -> DeviceBuffer:
        return self.adopt(DeviceBuffer(nbytes, self.device))

    def pinned(self, nbytes: int) -> PinnedHostBuffer:
        return self.adopt(PinnedHostBuffer(nbytes, self.device))

    def kept_pinned(self, nbytes: int) -> KeptPinnedBuffer:
        """A pinned host buffer from this process's keep (memory.KeptPinnedBuffer), given back at close()."""
        return self.adopt(KeptPinnedBuffer(nbytes, self.device))

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
    def fill(self, ptr: int, ring: Ring, seed: int, count: int | None = None, poison_tag: bool = False) -> None:
        self.kernels.fill_ring(ptr, ring, seed, self.stream, count, poison_tag)

    def memcpy(self, dst: int, src: int, nbytes: int) -> None:
        with cuda_call("cudaMemcpyAsync", self.device):
            rt().memcpyAsync(dst, src, nbytes, MEMCPY_DEFAULT, self.stream.ptr)

    def copy_launcher(self, nbytes: int, engine: str = "ce") -> Callable[[int, int], None]:
        """f(dst, src) enqueuing one copy of nbytes on this GPU's stream: the copy engine
        (cudaMemcpyAsync) or a kernel ('sm')."""
        if engine == "sm":
            return self.kernels.copy_launcher(nbytes, self.stream)
        fn, stream, device = rt().memcpyAsync, self.stream.ptr, self.device

        def launch(dst: int, src: int) -> None:
            with cuda_call("cudaMemcpyAsync", device):
                fn(dst, src, nbytes, MEMCPY_DEFAULT, stream)

        return launch

    def peer_copy_launcher(self, nbytes: int, src_device: int) -> Callable[[int, int], None]:
        """f(dst, src) enqueuing cudaMemcpyPeerAsync of nbytes from src on GPU src_device into dst on
        this GPU: for memory this process maps in another GPU's context (an IPC mapping torch opened
        on the producer's GPU), where cudaMemcpyAsync's default direction is refused (invalid value)."""
        fn, stream, device = rt().memcpyPeerAsync, self.stream.ptr, self.device
        here, there = cuda_index(device), cuda_index(src_device)

        def launch(dst: int, src: int) -> None:
            with cuda_call("cudaMemcpyPeerAsync", device):
                fn(dst, here, src, there, nbytes, stream)

        return launch

    def synchronize(self) -> None:
        with cuda_call("cudaStreamSynchronize", self.device):
            self.stream.synchronize()

    def marks(self, stamps: int | None = None) -> Marks:
        return Marks(self.kernels, self.stream, stamps)

    def time_batch(self, enqueue: Callable[[int], None], reps: int, *, warm: Callable[[], None] | None = None,
                   shared: bool = False, marks: Marks | None = None,
                   before_release: Callable[[], None] | None = None, ops_per_rep: int = 1,
                   transfer_bytes: int | None = None) -> Marks:
        gate = self.shared_gate if shared else self.gate
        if gate is None:
            raise ValueError("this Gpu was made without a shared gate page")
        return time_batch(self.stream, gate, enqueue, reps, warm=warm, marks=marks,
                          before_release=before_release, ops_per_rep=ops_per_rep, transfer_bytes=transfer_bytes)

    def verify(self, ptr: int, ring: Ring, seed: int, path: str, variant: str, count: int | None = None,
               xor_mask: int = 0, corrupt: bool = False) -> bool:
        """Check `count` slots of the ring at ptr (slot i: the pattern of seed + i, XORed with
        xor_mask); VerificationError naming the slot and offset of the first bad byte.
        corrupt=True flips one byte of the last slot first (the test hook GPUIPC_BENCH_FAULT=corrupt)."""
        if _WARMING[0]:
            self.synchronize()  # what the check's own synchronisation gave the caller
            return True
        count = ring.slots if count is None else count
        mark("verify")
        if corrupt and ring.nbytes > 0:
            at = ptr + (count - 1) * ring.stride + ring.nbytes // 2
            write(at, read(at, 1, self.stream, self.device) ^ 0xFF, self.stream, self.device)
        bad = self.kernels.mismatch(ptr, ring, seed, self.stream, count, xor_mask)
        if bad is not None:
            slot, offset = bad
            got = int(read(ptr + slot * ring.stride + offset, 1, self.stream, self.device)[0])
            want = expected_byte(offset, (seed + slot) & 0xFFFFFFFF, xor_mask)
            raise VerificationError(path, variant, ring.nbytes, offset, want, got,
                                    slot=slot if ring.slots > 1 else None)
        mark("verified")
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


# (device, peer) pairs this process has enabled (or found enabled) with enable_peer_access: where a
# copy between two GPUs may go over their link, not through host memory (gpuipc_bench.engine.lanes)
PEER_ON: set[tuple[int, int]] = set()


def enable_peer_access(device: int, peer: int) -> float | None:
    """Let `device` reach `peer`'s memory (cudaDeviceEnablePeerAccess from `device`'s context).
    Seconds it took, or None when already enabled or not possible between these GPUs."""
    with on_device(device):
        with cuda_call("cudaDeviceCanAccessPeer", device):
            if not rt().deviceCanAccessPeer(cuda_index(device), cuda_index(peer)):
                return None
            rt().deviceSynchronize()  # the context exists before the clock starts
        t0 = time.perf_counter()
        try:
            rt().deviceEnablePeerAccess(cuda_index(peer))
        except Exception as exc:  # noqa: BLE001
            if error_name(exc) == _PEER_ALREADY_ENABLED:
                PEER_ON.add((device, peer))
                return None
            raise translate(exc, "cudaDeviceEnablePeerAccess", device) from exc
        seconds = time.perf_counter() - t0
        PEER_ON.add((device, peer))
        return seconds


def disable_peer_access(device: int, peer: int) -> None:
    with on_device(device), cuda_call("cudaDeviceDisablePeerAccess", device):
        rt().deviceDisablePeerAccess(cuda_index(peer))
    PEER_ON.discard((device, peer))
