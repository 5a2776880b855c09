"""What else was going on: the state of each GPU right after the measurement, from NVML
(no CUDA context in this process). Each finding is a likely cause a failing figure names:

    GPU 0 busy (2 other processes: 1234, 5678)      compute processes that are not this check's
    GPU 0 clock throttled (HW slowdown, power cap)  NVML's clock event reasons, idle and
                                                    application-clock settings left out
    PCIe link of GPU 0 at Gen3 x8 (max Gen5 x16)    trained below its maximum (width always;
                                                    generation only while the GPU is busy)

A GPU drops its link's generation when idle, so a link read after the measurement says
nothing of its generation: LinkWatch reads every GPU's link from NVML while the check measures
(its host copies: staging's h2d and d2h) and keeps the best generation and width each GPU
reached. It reads in a process of its own (`python -m gpuipc_bench.check.conditions`): the
check forks its workers, and a fork while a thread of the parent is inside NVML could leave
a worker's NVML (its clock readings) waiting on a lock nobody holds. A link that never
reached its maximum under a host copy is named (link_findings): a narrower width fails (a lane
or a slot lost), a lower generation warns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
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


LINK_POLL_S = 0.02  # a 256 MiB host copy lasts about 5 ms at 55 GB/s; a sample's batch, far longer


WATCH_START_S = 10.0  # the watching process's start-up (Python, pynvml, nvmlInit), and its answer at the end
IN_PROCESS = False  # True: watch in a thread of this process (tests, whose NVML is a stand-in)


class LinkWatch:
    """`with LinkWatch(bus_ids) as watch:` around a measurement; then watch.seen: CUDA index ->
    {'gen', 'width'} (the best read while it ran) and {'max_gen', 'max_width'} (what the GPU and
    the system can train to), with 'loaded': True. Empty without NVML. `nvml`: the module
    (pynvml; a stand-in from tests, read in a thread of this process as with `in_process`)."""

    def __init__(self, bus_ids: dict[str, str], poll_s: float = LINK_POLL_S, nvml: Any = None,
                 in_process: bool | None = None):
        self.bus_ids, self.poll_s, self.nvml = bus_ids, poll_s, nvml
        self.in_process = (IN_PROCESS or nvml is not None) if in_process is None else in_process
        self.seen: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen | None = None
        self._handles: dict[str, Any] = {}

    def __enter__(self) -> "LinkWatch":
        if not self.bus_ids:
            return self
        if not self.in_process:
            self._start_child()
            return self
        try:
            if self.nvml is None:
                import pynvml

                self.nvml = pynvml
            self.nvml.nvmlInit()
        except Exception:
            self.nvml = None
            return self
        handles = handles_by_bus_id(self.nvml)
        found = {i: handles.get(normalise_bus_id(b)) for i, b in self.bus_ids.items()}
        self._handles = {i: h for i, h in found.items() if h is not None}
        for index, handle in self._handles.items():
            self.seen[index] = {"max_gen": _call(self.nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
                                "max_width": _call(self.nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
                                "gen": None, "width": None, "loaded": True}
        self._read()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="gpuipc-bench check link watch")
        self._thread.start()
        return self

    def _start_child(self) -> None:
        try:
            self._child = subprocess.Popen([sys.executable, "-m", "gpuipc_bench.check.conditions",
                                            json.dumps(self.bus_ids), str(self.poll_s)],
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                           text=True)
        except OSError:
            return
        ready = threading.Timer(WATCH_START_S, self._child.kill)  # its first line: NVML read once, or nothing
        ready.start()
        try:
            self._child.stdout.readline()  # type: ignore[union-attr]
        finally:
            ready.cancel()

    def _stop_child(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        try:
            out, _ = child.communicate("", timeout=WATCH_START_S)  # stdin closed: it reads once more, answers
            self.seen = json.loads(out or "{}")
        except (subprocess.TimeoutExpired, ValueError):
            child.kill()
            child.wait()
            self.seen = {}

    def __exit__(self, *exc) -> None:
        if self._child is not None:
            self._stop_child()
            return
        if self.nvml is None or not self.in_process:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._read()
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._read()

    def _read(self) -> None:
        for index, handle in self._handles.items():
            state = self.seen[index]
            for key, name in (("gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                              ("width", "nvmlDeviceGetCurrPcieLinkWidth")):
                value = _call(self.nvml, name, handle)
                if value is not None and (state[key] is None or value > state[key]):
                    state[key] = value


def _call(nvml, name: str, handle) -> Any:
    fn = getattr(nvml, name, None)
    try:
        return fn(handle) if fn else None
    except Exception:  # NVMLError, or the call not supported on this GPU
        return None


def link_findings(seen: dict[str, dict[str, Any]]) -> dict[str, tuple[bool, str]]:
    """CUDA index -> (whether it fails, what it says) for each GPU whose link stayed below its
    maximum while watched under load: a narrower width fails, a lower generation only warns."""
    found = {}
    for index, state in seen.items():
        gen, width, max_gen, max_width = (state.get(k) for k in ("gen", "width", "max_gen", "max_width"))
        narrow = bool(width and max_width and width < max_width)
        slow = bool(gen and max_gen and gen < max_gen and state.get("loaded"))
        if narrow or slow:
            found[index] = (narrow, f"PCIe link of GPU {index} at Gen{gen} x{width} under a host copy "
                                    f"(max Gen{max_gen} x{max_width})")
    return found


def gpu_conditions(bus_ids: dict[str, str], ours: Iterable[int] = (),
                   links: dict[str, dict[str, Any]] | None = None) -> dict[str, list[str]]:
    """CUDA index -> its findings. `bus_ids`: CUDA index -> PCI bus id (the machine's facts);
    `ours`: process ids of this check (its workers); `links`: a LinkWatch's readings under load,
    in place of the link read now. {} without NVML."""
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
                state = {**_read(pynvml, handle), **(links or {}).get(index, {})}
                found[index] = describe(index, state, set(ours) | {os.getpid()})
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


def _watch_until_stdin_closes(argv: list[str]) -> None:
    """The watching process: BUS_IDS (JSON: CUDA index -> PCI bus id) and the poll interval; a
    line once NVML was read, then, when standard input closes, what it saw (JSON)."""
    with LinkWatch(json.loads(argv[0]), float(argv[1]), in_process=True) as watch:
        print("watching", flush=True)
        sys.stdin.read()
    print(json.dumps(watch.seen), flush=True)


if __name__ == "__main__":
    _watch_until_stdin_closes(sys.argv[1:])
