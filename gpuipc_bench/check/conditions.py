"""What else was going on: the state of each GPU right after the measurement, from NVML
(no CUDA context in this process). Each finding is a likely cause a failing figure names:

    GPU 0 busy (2 other processes: 1234, 5678)      compute processes that are not this check's
    GPU 0 clock throttled (HW slowdown, power cap)  NVML's clock event reasons, idle and
                                                    application-clock settings left out
    PCIe link of GPU 0 at Gen3 x8 (max Gen5 x16)    trained below its maximum (width always;
                                                    generation only while the GPU is busy)
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from gpuipc_bench.machine.nvml import handles_by_bus_id, normalise_bus_id

# nvmlClocksEventReasons bits that mean the GPU was held back (not idle, not a user setting).
THROTTLE_BITS = {
    0x4: "software power cap",
    0x8: "HW slowdown",
    0x20: "software thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
    0x100: "display clock setting",
}


def gpu_conditions(bus_ids: dict[str, str], ours: Iterable[int] = ()) -> dict[str, list[str]]:
    """CUDA index -> its findings. `bus_ids`: CUDA index -> PCI bus id (the machine's facts);
    `ours`: process ids of this check (its workers). {} without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        handles = handles_by_bus_id(pynvml)
        found: dict[str, list[str]] = {}
        for index, bus_id in bus_ids.items():
            handle = handles.get(normalise_bus_id(bus_id))
            if handle is not None:
                found[index] = describe(index, _read(pynvml, handle), set(ours) | {os.getpid()})
        return found
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _read(pynvml, handle) -> dict[str, Any]:
    def call(name, *args):
        fn = getattr(pynvml, name, None)
        try:
            return fn(handle, *args) if fn else None
        except pynvml.NVMLError:
            return None

    processes = call("nvmlDeviceGetComputeRunningProcesses") or []
    reasons = call("nvmlDeviceGetCurrentClocksEventReasons")
    if reasons is None:
        reasons = call("nvmlDeviceGetCurrentClocksThrottleReasons")
    return {"pids": [p.pid for p in processes], "reasons": reasons or 0,
            "gen": call("nvmlDeviceGetCurrPcieLinkGeneration"), "width": call("nvmlDeviceGetCurrPcieLinkWidth"),
            "max_gen": call("nvmlDeviceGetMaxPcieLinkGeneration"), "max_width": call("nvmlDeviceGetMaxPcieLinkWidth")}


def describe(index: str, state: dict[str, Any], ours: set[int]) -> list[str]:
    """The findings of one GPU's state (a dict as _read makes it; tests give their own)."""
    found = []
    others = [p for p in state.get("pids", []) if p not in ours]
    if others:
        shown = ", ".join(str(p) for p in others[:4]) + (", ..." if len(others) > 4 else "")
        found.append(f"GPU {index} busy ({len(others)} other process{'es' if len(others) > 1 else ''}: {shown})")
    held = [text for bit, text in THROTTLE_BITS.items() if state.get("reasons", 0) & bit]
    if held:
        found.append(f"GPU {index} clock throttled ({', '.join(held)})")
    gen, width, max_gen, max_width = (state.get(k) for k in ("gen", "width", "max_gen", "max_width"))
    if width and max_width and width < max_width or (gen and max_gen and gen < max_gen and state.get("loaded")):
        found.append(f"PCIe link of GPU {index} at Gen{gen} x{width} (max Gen{max_gen} x{max_width})")
    return found
