"""The SM clock of a worker's GPU, read through NVML once per sample group (the CSV's
`sm_clock_mhz`), so that a figure taken at a throttled or idle-low clock shows it.

NVML numbers GPUs its own way; the worker's CUDA device is found by its PCI bus id (a MIG
instance reads its parent GPU's clock). Any failure (no NVML, a driver without the query)
gives NaN: the clock is a fact about the run, never a reason to stop it.
"""

from __future__ import annotations

import math
from typing import Any, Callable


class SmClock:
    def __init__(self, bus_id: str, nvml: Any = None):
        self.bus_id, self.handle, self.nvml = bus_id, None, nvml
        self.failed = False

    def read(self) -> float:
        """The SM clock now, in MHz (NaN when unknown)."""
        if self.failed:
            return math.nan
        try:
            if self.handle is None:
                from gpuipc_bench.machine.nvml import handles_by_bus_id, normalise_bus_id

                if self.nvml is None:
                    import pynvml

                    self.nvml = pynvml
                self.nvml.nvmlInit()
                self.handle = handles_by_bus_id(self.nvml).get(normalise_bus_id(self.bus_id))
                if self.handle is None:
                    raise LookupError(f"no NVML device at {self.bus_id}")
            mhz = float(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
            return mhz if mhz > 0 else math.nan
        except Exception:  # noqa: BLE001 - see the module's docstring
            self.failed = True
            return math.nan


def for_cuda_device(device: int) -> Callable[[], float]:
    """A reader of CUDA device `device`'s SM clock (in a worker, after its CUDA context exists)."""
    try:
        import cupy

        from gpuipc_bench.gpu.visible import cuda_index

        bus_id = cupy.cuda.runtime.deviceGetPCIBusId(cuda_index(device))
    except Exception:  # noqa: BLE001 - no bus id: no clock
        return lambda: math.nan
    return SmClock(bus_id).read
