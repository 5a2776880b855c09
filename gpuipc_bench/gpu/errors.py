"""CUDA errors as BenchErrors: one line naming the CUDA error, the call and the GPU."""

from __future__ import annotations

from gpuipc_bench.errors import BenchError, NoGpuError
from gpuipc_bench.sizes import format_size

_NO_GPU_ERRORS = ("cudaErrorNoDevice", "cudaErrorInsufficientDriver", "CUDA_ERROR_NO_DEVICE")
_OOM_ERRORS = ("cudaErrorMemoryAllocation", "CUDA_ERROR_OUT_OF_MEMORY")
# Exception classes of CuPy (and the libraries scenarios add) that carry a CUDA error.
CUDA_EXCEPTIONS = ("CUDARuntimeError", "CUDADriverError", "NVRTCError", "CompileException", "OutOfMemoryError")


class CudaError(BenchError):
    """A CUDA call failed in a worker: '<cudaErrorName> in <call> on GPU <n>'."""

    def __init__(self, name: str, call: str, device: int | None, detail: str = ""):
        self.name, self.call, self.device = name, call, device
        where = f" on GPU {device}" if device is not None else ""
        super().__init__(f"{name} in {call}{where}" + (f" ({detail})" if detail else ""))


def error_name(exc: BaseException) -> str:
    """'cudaErrorInvalidValue' from CuPy's 'cudaErrorInvalidValue: invalid argument'."""
    head = str(exc).split(":", 1)[0].strip()
    return head if head and " " not in head else type(exc).__name__


def oom_message(nbytes: int, device: int | None) -> str:
    """'cannot allocate 1 GiB on GPU 0: 0.4 GiB free of 79.1 GiB'."""
    where = f" on GPU {device}" if device is not None else ""
    text = f"cannot allocate {format_size(nbytes)}{where}"
    try:
        from cupy.cuda import runtime

        free, total = runtime.memGetInfo()
        text += f": {free / (1 << 30):.1f} GiB free of {total / (1 << 30):.1f} GiB"
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
    return CudaError(name, call, device, description(exc, name))


def description(exc: BaseException, name: str) -> str:
    """The driver's words after the error's name ('invalid device ordinal' from CuPy's
    'cudaErrorInvalidDevice: invalid device ordinal'), '' when it gave none."""
    head, sep, rest = str(exc).partition(":")
    return rest.strip().splitlines()[0] if sep and head.strip() == name and rest.strip() else ""


def is_cuda_exception(exc: BaseException, extra: tuple[str, ...] = ()) -> bool:
    return type(exc).__name__ in CUDA_EXCEPTIONS + extra or isinstance(exc, MemoryError)


class cuda_call:  # noqa: N801 - used as a function: `with cuda_call("cudaMemcpyAsync", device): ...`
    """Turn a CUDA error raised inside the block into a BenchError naming the call and the GPU.

    with cuda_call("cudaIpcOpenMemHandle", device=0): ...
    -> CudaError('cudaErrorInvalidValue in cudaIpcOpenMemHandle on GPU 0 (invalid argument)')
    Out of memory, with `nbytes` given: 'cannot allocate 1 GiB on GPU 0: 0.4 GiB free of 79.1 GiB'.
    `errors` names more exception classes to translate (a library's, e.g. 'NcclError').

    A class, not a generator context manager: a batch enters one for each of its up to 256
    operations, and this costs a fraction of a microsecond where contextlib's cost a few.
    """

    __slots__ = ("call", "device", "nbytes", "errors")

    def __init__(self, call: str, device: int | None = None, nbytes: int | None = None,
                 errors: tuple[str, ...] = ()):
        self.call, self.device, self.nbytes, self.errors = call, device, nbytes, errors

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, traceback) -> None:  # never swallows: raises its translation, or lets exc go
        if isinstance(exc, Exception) and not isinstance(exc, BenchError) and is_cuda_exception(exc, self.errors):
            raise translate(exc, self.call, self.device, self.nbytes) from exc
