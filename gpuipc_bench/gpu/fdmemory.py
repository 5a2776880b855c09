"""GPU memory shared through POSIX file descriptors: VMM allocations and memory pools.

What NCCL, PyTorch's expandable segments and cudaMallocAsync pools use instead of the
legacy cudaIpcGetMemHandle. CuPy has none of these driver calls, so they go through
cuda-bindings' `driver` module (a small wheel of the `cuda12`/`cuda13` extras), on the
primary context that CuPy's runtime calls make current (every call runs inside
`on_device`).

  VMM   cuMemCreate(POSIX_FILE_DESCRIPTOR) -> cuMemExportToShareableHandle -> fd
        importer: cuMemImportFromShareableHandle(fd) -> cuMemAddressReserve ->
        cuMemMap -> cuMemSetAccess; undone by cuMemUnmap, cuMemAddressFree, cuMemRelease.
  pool  cuMemPoolCreate(handleTypes=POSIX_FILE_DESCRIPTOR) -> cuMemPoolExportToShareableHandle
        -> fd, once; each allocation (cuMemAllocFromPoolAsync) -> cuMemPoolExportPointer ->
        64 bytes; importer: cuMemPoolImportFromShareableHandle(fd) + cuMemPoolSetAccess,
        then cuMemPoolImportPointer per allocation; the importer frees its imported
        pointers before the exporter frees the allocation.

Every call's CUresult becomes a one-line CudaError naming the call and the GPU.
"""

from __future__ import annotations

from typing import Any

from gpuipc_bench.errors import BenchError, NoGpuError
from gpuipc_bench.gpu.errors import CudaError, oom_message
from gpuipc_bench.gpu.memory import on_device
from gpuipc_bench.gpu.visible import cuda_index

INSTALL_HINT = "pip install -e '.[cuda12]' (or '.[cuda13]')"
_NO_GPU = ("CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_NOT_INITIALIZED", "CUDA_ERROR_INSUFFICIENT_DRIVER")
POOL_POINTER_BYTES = 64  # CUmemPoolPtrExportData


def missing_reason() -> str | None:
    """Why the driver calls cannot be made from Python here (no CUDA call), or None."""
    try:
        from cuda.bindings import driver  # noqa: F401
    except ImportError:
        return f"needs cuda-bindings for the driver's VMM and pool calls: {INSTALL_HINT}"
    return None


def drv() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError:
        raise BenchError(f"needs cuda-bindings: {INSTALL_HINT}") from None
    return driver


def call(name: str, fn, *args, device: int | None = None, nbytes: int | None = None) -> Any:
    """Run a cuda-bindings driver call; its values, or a BenchError naming the call."""
    try:
        result = fn(*args)
    except Exception as exc:  # noqa: BLE001 - no driver library, or a bad argument
        if type(exc).__name__ == "DynamicLibNotFoundError":
            raise NoGpuError(f"no CUDA driver library ({name} on GPU {device})") from None
        raise CudaError(type(exc).__name__, name, device, str(exc).splitlines()[0] if str(exc) else "") from exc
    err, values = result[0], result[1:]
    if int(err) != 0:
        text = err.name if hasattr(err, "name") else str(err)
        if text == "CUDA_ERROR_OUT_OF_MEMORY" and nbytes is not None:
            raise BenchError(oom_message(nbytes, device))
        if text in _NO_GPU:
            raise NoGpuError(str(CudaError(text, name, device)))
        raise CudaError(text, name, device, _describe(err))
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def _describe(err) -> str:
    try:
        result = drv().cuGetErrorString(err)
        return result[1].decode() if int(result[0]) == 0 and result[1] else ""
    except Exception:  # noqa: BLE001 - only a detail of the message
        return ""


def _posix_fd() -> Any:
    return drv().CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR


def _device_location(location, device: int) -> None:
    location.type = drv().CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    location.id = cuda_index(device)


def _access(device: int) -> Any:
    d = drv()
    desc = d.CUmemAccessDesc()
    _device_location(desc.location, device)
    desc.flags = d.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    return desc


def _allocation_prop(device: int, handle_type) -> Any:
    d = drv()
    prop = d.CUmemAllocationProp()
    prop.type = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    _device_location(prop.location, device)
    prop.requestedHandleTypes = handle_type
    return prop


def vmm_size(nbytes: int, device: int) -> int:
    """`nbytes` rounded up to the allocation granularity (both sides compute the same)."""
    d = drv()
    with on_device(device):
        grain = int(call("cuMemGetAllocationGranularity", d.cuMemGetAllocationGranularity,
                         _allocation_prop(device, _posix_fd()),
                         d.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM, device=device))
    return max(grain, -(-int(nbytes) // grain) * grain)


def fabric_refusal(device: int) -> str | None:
    """Why this GPU refuses a CU_MEM_HANDLE_TYPE_FABRIC allocation (the handle multi-node
    NVLink uses; it needs an IMEX channel), in the driver's words; None if it allows one."""
    d = drv()
    handle_type = d.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_FABRIC
    with on_device(device):
        try:
            size = vmm_size(1, device)
            handle = call("cuMemCreate", d.cuMemCreate, size, _allocation_prop(device, handle_type), 0,
                          device=device)
        except CudaError as exc:
            return str(exc)
        call("cuMemRelease", d.cuMemRelease, handle, device=device)
    return None


def host_numa_node(device: int) -> int:
    """The host NUMA node nearest `device` (0 where the driver does not say)."""
    d = drv()
    with on_device(device):
        try:
            node = int(call("cuDeviceGetAttribute", d.cuDeviceGetAttribute,
                            d.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, cuda_index(device), device=device))
        except (CudaError, AttributeError):
            return 0
    return max(node, 0)


class VmmMemory:
    """A cuMemCreate'd physical allocation (made here, or imported from another process's fd),
    mapped into this process's address space by map()."""

    def __init__(self, handle, size: int, device: int):
        self.handle, self.size, self.device = handle, size, device
        self.ptr = 0

    @classmethod
    def create(cls, size: int, device: int) -> "VmmMemory":
        """`size` must be a multiple of the granularity (vmm_size)."""
        d = drv()
        with on_device(device):
            handle = call("cuMemCreate", d.cuMemCreate, size, _allocation_prop(device, _posix_fd()), 0,
                          device=device, nbytes=size)
        return cls(handle, size, device)

    @classmethod
    def import_fd(cls, fd: int, size: int, device: int) -> "VmmMemory":
        """Import the allocation behind another process's fd (the caller closes the fd)."""
        d = drv()
        with on_device(device):
            handle = call("cuMemImportFromShareableHandle", d.cuMemImportFromShareableHandle, fd, _posix_fd(),
                          device=device)
        return cls(handle, size, device)

    def export_fd(self) -> int:
        """A new POSIX fd for this allocation (the caller closes it once sent)."""
        with on_device(self.device):
            return int(call("cuMemExportToShareableHandle", drv().cuMemExportToShareableHandle, self.handle,
                            _posix_fd(), 0, device=self.device))

    def map(self) -> int:
        """Reserve an address range, map the allocation there and give this GPU read-write access."""
        d = drv()
        with on_device(self.device):
            ptr = call("cuMemAddressReserve", d.cuMemAddressReserve, self.size, 0, 0, 0, device=self.device)
            try:
                call("cuMemMap", d.cuMemMap, ptr, self.size, 0, self.handle, 0, device=self.device)
                try:
                    call("cuMemSetAccess", d.cuMemSetAccess, ptr, self.size, [_access(self.device)], 1,
                         device=self.device)
                except BaseException:
                    d.cuMemUnmap(ptr, self.size)
                    raise
            except BaseException:
                d.cuMemAddressFree(ptr, self.size)
                raise
        self.ptr = int(ptr)
        return self.ptr

    def unmap(self) -> None:
        if self.ptr:
            d = drv()
            ptr, self.ptr = self.ptr, 0
            with on_device(self.device):
                call("cuMemUnmap", d.cuMemUnmap, ptr, self.size, device=self.device)
                call("cuMemAddressFree", d.cuMemAddressFree, ptr, self.size, device=self.device)

    def close(self) -> None:
        try:
            self.unmap()
        finally:
            if self.handle is not None:
                handle, self.handle = self.handle, None
                with on_device(self.device):
                    call("cuMemRelease", drv().cuMemRelease, handle, device=self.device)


class MemPool:
    """A stream-ordered memory pool exportable as a POSIX fd, or one imported from such an fd."""

    def __init__(self, pool, device: int, imported: bool):
        self.pool, self.device, self.imported = pool, device, imported

    @classmethod
    def create(cls, device: int, host: bool = False) -> "MemPool":
        """A pool on `device` (or of pinned host memory that `device` reaches, with `host`) that
        keeps freed memory (release threshold: everything), as an allocator's pool does."""
        d = drv()
        props = d.CUmemPoolProps()
        props.allocType = d.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        props.handleTypes = _posix_fd()
        if host:  # a pool of plain HOST location cannot be exported: a NUMA node's can
            props.location.type = d.CUmemLocationType.CU_MEM_LOCATION_TYPE_HOST_NUMA
            props.location.id = host_numa_node(device)
        else:
            _device_location(props.location, device)
        with on_device(device):
            pool = call("cuMemPoolCreate", d.cuMemPoolCreate, props, device=device)
            try:
                call("cuMemPoolSetAttribute", d.cuMemPoolSetAttribute, pool,
                     d.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, d.cuuint64_t(2 ** 64 - 1),
                     device=device)
                if host:  # host memory of a pool is not device-accessible until asked, here too
                    call("cuMemPoolSetAccess", d.cuMemPoolSetAccess, pool, [_access(device)], 1, device=device)
            except BaseException:
                d.cuMemPoolDestroy(pool)
                raise
        return cls(pool, device, imported=False)

    @classmethod
    def import_fd(cls, fd: int, device: int) -> "MemPool":
        """Import another process's pool and give this GPU read-write access to it (the caller
        closes the fd)."""
        d = drv()
        with on_device(device):
            pool = call("cuMemPoolImportFromShareableHandle", d.cuMemPoolImportFromShareableHandle, fd,
                        _posix_fd(), 0, device=device)
            try:
                call("cuMemPoolSetAccess", d.cuMemPoolSetAccess, pool, [_access(device)], 1, device=device)
            except BaseException:
                d.cuMemPoolDestroy(pool)
                raise
        return cls(pool, device, imported=True)

    def export_fd(self) -> int:
        with on_device(self.device):
            return int(call("cuMemPoolExportToShareableHandle", drv().cuMemPoolExportToShareableHandle, self.pool,
                            _posix_fd(), 0, device=self.device))

    def allocate(self, nbytes: int) -> "PoolPointer":
        """An allocation from this pool (made on the legacy stream and synchronised)."""
        d = drv()
        with on_device(self.device):
            ptr = call("cuMemAllocFromPoolAsync", d.cuMemAllocFromPoolAsync, max(1, nbytes), self.pool,
                       d.CUstream(0), device=self.device, nbytes=nbytes)
            call("cuStreamSynchronize", d.cuStreamSynchronize, d.CUstream(0), device=self.device)
        return PoolPointer(int(ptr), nbytes, self.device)

    def import_pointer(self, data: bytes, nbytes: int) -> "PoolPointer":
        """Another process's allocation from this (imported) pool, by its 64 export bytes."""
        d = drv()
        export = d.CUmemPoolPtrExportData()
        export.reserved = list(data[:POOL_POINTER_BYTES])
        with on_device(self.device):
            ptr = call("cuMemPoolImportPointer", d.cuMemPoolImportPointer, self.pool, export, device=self.device)
        return PoolPointer(int(ptr), nbytes, self.device)

    def close(self) -> None:
        if self.pool is not None:
            pool, self.pool = self.pool, None
            with on_device(self.device):
                call("cuMemPoolDestroy", drv().cuMemPoolDestroy, pool, device=self.device)


class PoolPointer:
    """An allocation from a pool (or one imported from another process's), freed by close()."""

    def __init__(self, ptr: int, nbytes: int, device: int):
        self.ptr, self.nbytes, self.device = ptr, nbytes, device

    def export(self) -> bytes:
        """The 64 bytes another process imports this allocation with."""
        with on_device(self.device):
            data = call("cuMemPoolExportPointer", drv().cuMemPoolExportPointer, self.ptr, device=self.device)
        return bytes(data.reserved)

    def close(self) -> None:
        if self.ptr:
            d = drv()
            ptr, self.ptr = self.ptr, 0
            with on_device(self.device):
                call("cuMemFreeAsync", d.cuMemFreeAsync, ptr, d.CUstream(0), device=self.device)
                call("cuStreamSynchronize", d.cuStreamSynchronize, d.CUstream(0), device=self.device)
