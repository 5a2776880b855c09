"""Kernel launches for a batch's hot loop: the driver's cuLaunchKernel called through ctypes
with the arguments packed once per launcher.

A batch queues up to 256 operations one Python call at a time, behind the gate, before the
GPU runs any of them: the host's cost per call is not in a figure, but it is in the run's
wall time. CuPy's RawKernel call converts its arguments on every call: 9.7 us a kernel copy
with numpy scalars on an H100 host (scripts/probes/probe_enqueue.py). Here a call stores the new
argument values into their ctypes slots and calls cuLaunchKernel, the same driver call CuPy
makes (so the GPU sees the same launch): 5.1 us there, about what cudaMemcpyAsync costs
(4.6 us). CuPy's module still compiles and loads the kernels; only the launch of the
per-transfer kernels (the kernel copy, a producer's mark, NVSHMEM's device put and get)
goes through here.
"""

from __future__ import annotations

import ctypes
from typing import Sequence

from gpuipc_bench.gpu.errors import CudaError

_DRIVER: ctypes.CDLL | None = None


def driver() -> ctypes.CDLL:
    """libcuda, the library CuPy has loaded already (loaded on first use only)."""
    global _DRIVER
    if _DRIVER is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuLaunchKernel.restype = ctypes.c_int
        lib.cuGetErrorName.restype = ctypes.c_int
        _DRIVER = lib
    return _DRIVER


def error_name(code: int) -> str:
    """'CUDA_ERROR_LAUNCH_FAILED' for its CUresult."""
    name = ctypes.c_char_p()
    if driver().cuGetErrorName(int(code), ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return f"CUresult {code}"


class KernelLauncher:
    """f(*values) launches `function` (a CuPy kernel's .kernel, or anything with .ptr) on
    `stream` with the grid and block given here. The kernel's arguments have the ctypes `types`;
    those at the indices of `constants` keep the value given there, and a call gives the others
    in order (an integer too wide for its type is cut to it, as C would)."""

    def __init__(self, function, grid: Sequence[int], block: Sequence[int], types: Sequence[type],
                 stream, device: int, call: str, constants: dict[int, int] | None = None):
        grid3 = tuple(grid) + (1,) * (3 - len(grid))
        block3 = tuple(block) + (1,) * (3 - len(block))
        constants = constants or {}
        self._values = [kind(constants.get(i, 0)) for i, kind in enumerate(types)]
        self._variable = [v for i, v in enumerate(self._values) if i not in constants]
        self._params = (ctypes.c_void_p * len(self._values))(*(ctypes.addressof(v) for v in self._values))
        self._launch = driver().cuLaunchKernel
        self._args = (ctypes.c_void_p(int(getattr(function, "ptr", function))),
                      *(ctypes.c_uint(int(n)) for n in grid3), *(ctypes.c_uint(int(n)) for n in block3),
                      ctypes.c_uint(0), ctypes.c_void_p(int(getattr(stream, "ptr", stream))), self._params,
                      ctypes.c_void_p(0))
        self.device, self.call = device, call

    def __call__(self, *values) -> None:
        for slot, value in zip(self._variable, values):
            slot.value = value
        code = self._launch(*self._args)
        if code:
            raise CudaError(error_name(code), self.call, self.device)
