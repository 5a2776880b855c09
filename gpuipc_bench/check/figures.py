"""The headline figures of a check, taken from a run's rows (one node's).

A figure is one number per GPU, GPU pair or host: the median of its samples at one size
(GB/s, higher is better; or µs, lower is better), with the median of its ceiling's samples
from the same run where it has one (a path's figure is judged against its own ceiling too,
so that a slow host link does not blame the path).

    h2d, d2h, d2d      copy-engine ceilings of every GPU (pinned host memory; device-local), 256 MiB
    ipc-ce             CUDA IPC, a second process on the same GPU pulls with the copy engine, stream,
                       256 MiB, on every GPU
    ipc-handoff-4k     the same path, 4 KiB handed over one transfer at a time (µs per transfer, time-sliced)
    peer               copy-engine peer copy between two GPUs in one process (the pair's ceiling), 256 MiB
    peer-ce            the peer path across two processes, stream, 256 MiB
    host-memcpy        one CPU process's memcpy, 16 MiB (the host path's ceiling)
    host-handoff       two CPU processes hand 16 MiB over through shared memory
    host-pingpong-4k   CPU processes' ping-pong through shared memory, one way, 4 KiB (µs)
    barrier            the tool's shared-memory barrier crossing (µs)
    nixl-read          (NIXL installed) NIXL over UCX, the consumer READs from the producer's GPU memory on
                       the same GPU, stream, 256 MiB; with the transport UCX reported
    nixl-host-read     (NIXL installed, no GPU) the same from host memory to host memory, 16 MiB
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from typing import Any, Mapping

from gpuipc_bench.analysis.lanes import expected_lane, figure_lanes, lane_of
from gpuipc_bench.hooks import plant

FLEET_GAP = 0.10  # the floor of a fleet's spread, a fraction of its median

GB, US = "GB/s", "µs"
BIG = 256 << 20  # the GPU paths' bandwidth size
HOST_BIG = 16 << 20  # the host path's (its default sweep ends there)
SMALL = 4 << 10
UNSHARED = ("time-sliced", "exclusive", "none")  # the rows of a check (no MPS daemon of its own)


@dataclasses.dataclass(frozen=True)
class Spec:
    name: str
    path: str
    variant: str  # a regular expression; its groups name the GPU(s)
    measure: str
    metric: str
    size: int | None  # None: every size (barrier)
    unit: str = GB
    scenario: str = ""  # the scenario that measures it (a re-measure runs it again)
    same_gpu: bool = False  # rows with src == dst only
    unshared: bool = False  # rows of the time-sliced (or exclusive) mode only
    every_gpu: bool = False  # measured on every GPU of the node: one missing on any GPU fails


    @property
    def higher_better(self) -> bool:
        return self.unit == GB


SPECS: tuple[Spec, ...] = (
    Spec("h2d", "ceiling", r"h2d@(\d+)", "stream", "bandwidth", BIG, scenario="staging", every_gpu=True),
    Spec("d2h", "ceiling", r"d2h@(\d+)", "stream", "bandwidth", BIG, scenario="staging", every_gpu=True),
    Spec("d2d", "ceiling", r"d2d@(\d+)", "stream", "bandwidth", BIG, scenario="ipc", every_gpu=True),
    Spec("ipc-ce", "ipc", "ce", "stream", "bandwidth", BIG, scenario="ipc", same_gpu=True, unshared=True,
         every_gpu=True),
    Spec("ipc-handoff-4k", "ipc", "ce", "handoff", "bandwidth", SMALL, US, "ipc", same_gpu=True, unshared=True),
    Spec("peer", "ceiling", r"peer@(\d+)>(\d+)", "stream", "bandwidth", BIG, scenario="peer"),
    Spec("peer-ce", "peer", "ce", "stream", "bandwidth", BIG, scenario="peer"),
    Spec("host-memcpy", "ceiling", "memcpy@host", "stream", "bandwidth", HOST_BIG, scenario="host"),
    Spec("host-handoff", "host", "shared-buffer", "handoff", "bandwidth", HOST_BIG, scenario="host"),
    Spec("host-pingpong-4k", "host", "pingpong", "pingpong", "latency", SMALL, US, "host"),
    Spec("barrier", "barrier", "shm", "", "latency", None, US, "barrier"),
    Spec("nixl-read", "nixl", "read", "stream", "bandwidth", BIG, scenario="nixl-read", same_gpu=True, unshared=True),
    Spec("nixl-host-read", "nixl", "read", "stream", "bandwidth", HOST_BIG, scenario="nixl-host-read"),
)
BY_NAME = {spec.name: spec for spec in SPECS}
# The figures of the host's CPUs alone (no GPU in them). On a shared or virtual host they move by up
# to 2.2x from run to run with where the processes and their pages land (ten healthy runs on H200
# VMs: one node's host-memcpy 6.1-13.8 GB/s, its barrier 0.75-1.57 us; results/check-ten-healthy-
# runs.txt), so a CPU figure fails only beyond CPU_FACTOR times worse than its band or the fleet's
# median, and warns between.
CPU_SCENARIOS = ("host", "barrier", "nixl-host-read")
CPU_FACTOR = 3.0


def cpu_warning_only(figure: "Figure", reference: float | None) -> bool:
    """Whether a figure that misses `reference` (its band's edge, or the fleet's median) only warns:
    a CPU figure within CPU_FACTOR times worse than it."""
    spec = BY_NAME.get(figure.name)
    if spec is None or spec.scenario not in CPU_SCENARIOS or not reference or not figure.value:
        return False
    worse = reference / figure.value if figure.higher_better else figure.value / reference
    return worse <= CPU_FACTOR
# What each figure's bytes are, in a wrong lane's words ("peer copy went over PCIe, not NVLink")
WHAT = {"h2d": "host-to-GPU copy", "d2h": "GPU-to-host copy", "d2d": "device copy", "ipc-ce": "IPC copy",
        "ipc-handoff-4k": "IPC hand-off", "peer": "peer copy in one process", "peer-ce": "peer copy",
        "nixl-read": "NIXL read"}


@dataclasses.dataclass(frozen=True)
class Figure:
    name: str
    gpus: str  # '0', '0>1' or 'host'
    value: float
    unit: str
    ceiling: float | None = None  # the median of its ceiling's samples in the same run
    samples: int = 0
    transport: str = ""  # what the library reported it used (NIXL's UCX), '' for the tool's own paths
    # the lane NVML's byte counters saw its bytes take (analysis/lanes.py), and the one it should
    # take on this node ('' where the rows carry no lane, or the node's facts do not say)
    lane: str = ""
    lane_expected: str = ""

    @property
    def higher_better(self) -> bool:
        return self.unit == GB

    def text(self, value: float | None = None) -> str:
        return format_value(self.value if value is None else value, self.unit)


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3g} {unit}" if abs(value) < 100 else f"{value:.0f} {unit}"


def figures_of(frame, node: str = "", attempt: int = 0, facts: Mapping[str, str] | None = None) -> list[Figure]:
    """Every headline figure the rows hold (one node's rows), planted faults applied (tests only);
    `facts`: the node's (its links say which lane a figure between two GPUs should take)."""
    if frame is None or len(frame) == 0:
        return []
    lanes = figure_lanes(frame)
    out = []
    for spec in SPECS:
        for figure in _take(spec, frame, lanes, facts or {}):
            fixed = plant.fixed_value(node, figure.name, gpus=figure.gpus)
            if fixed is not None:
                figure = dataclasses.replace(figure, value=fixed)
            factor = plant.figure_factor(node, figure.name, attempt, gpus=figure.gpus)
            if factor != 1.0:
                value = figure.value * factor if figure.higher_better else figure.value / factor
                figure = dataclasses.replace(figure, value=value)
            out.append(figure)
    return out


def _take(spec: Spec, frame, lanes: Mapping[tuple, str], facts: Mapping[str, str]) -> list[Figure]:
    rows = frame[(frame["path"] == spec.path) & (frame["measure"] == spec.measure)
                 & (frame["metric"] == spec.metric)]
    if spec.size is not None:
        rows = rows[rows["bytes"] == spec.size]
    if spec.unshared:
        rows = rows[rows["sharing"].isin(UNSHARED)]
    if spec.same_gpu:
        rows = rows[rows["src"] == rows["dst"]]
    rows = rows[rows["verified"].fillna(True).astype(bool)]
    pattern = re.compile(spec.variant + "$")
    found = []
    for (variant, src, dst), group in rows.groupby(["variant", "src", "dst"], sort=True):
        match = pattern.match(str(variant))
        if not match:
            continue
        gpus = ">".join(match.groups()) if match.groups() else _gpus(str(src), str(dst))
        ceiling = _ceiling(frame, group) if spec.unit == GB else None  # a latency has no GB/s bound
        said = ", ".join(dict.fromkeys(str(t) for t in group["transport"] if str(t) not in ("", "nan"))) \
            if "transport" in group.columns else ""
        figure = (spec.path, str(variant), spec.measure, str(src), str(dst))
        lane = lane_of([lanes.get((*figure, str(sharing), int(nbytes)), "")
                        for sharing, nbytes in set(zip(group["sharing"], group["bytes"]))])
        expected = expected_lane(spec.path, str(variant), str(src), str(dst), facts) if lane else ""
        found.append(Figure(spec.name, gpus, _value(spec, group), spec.unit, ceiling, int(len(group)), said, lane,
                            expected))
    return found


def _gpus(src: str, dst: str) -> str:
    if src == "host" and dst == "host":
        return "host"
    return src if src == dst else f"{src}>{dst}"


def _value(spec: Spec, group) -> float:
    if spec.unit == GB:
        return float(group["bandwidth_gbps"].median())
    return float(group["seconds"].median() * 1e6)


def _ceiling(frame, group) -> float | None:
    names = [c for c in group["ceiling"].unique() if c]
    if not names:
        return None
    size = int(group["bytes"].iloc[0])
    rows = frame[(frame["path"] == "ceiling") & (frame["variant"] == names[0]) & (frame["bytes"] == size)]
    if rows.empty:
        return None
    return float(rows["bandwidth_gbps"].median())


def scenarios_for(names: list[str]) -> list[str]:
    """The scenarios that measure these figures (a re-measure runs only them)."""
    return list(dict.fromkeys(BY_NAME[n].scenario for n in names if n in BY_NAME))


def as_dict(figure: Figure) -> dict[str, Any]:
    return dataclasses.asdict(figure)


def outside(x: float, xs: list[float], floor: float = FLEET_GAP) -> bool:
    """Megatron-LM's straggler rule (gpu_sniff_test.py): x is more than max(MAD, floor x median)
    away from the median of xs, the median absolute deviation being the spread."""
    median = statistics.median(xs)
    mad = statistics.median(abs(v - median) for v in xs)
    return abs(x - median) > max(mad, floor * abs(median))
