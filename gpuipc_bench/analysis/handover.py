"""The cost that decides the small-message answer on one GPU: a GPU-ordered hand-over between
two processes (the producer's work, then the consumer's copy ordered after it through an IPC
event), per sharing mode. Time-sliced, the two contexts take turns and each hand-over waits
for a context switch (~270 us on an H100); under MPS both run at once (~11 us). The figure is
the fastest such path at HANDOVER_BYTES in each mode, with its interval; shown only where a
run measured two modes or more, which is where the answer can flip."""

from __future__ import annotations

import dataclasses
import math

import pandas as pd

from gpuipc_bench.results import base_mode

HANDOVER_BYTES = 4096
GPU_ORDERED = ("ipc", "vmm", "mempool")  # hand-overs ordered on the GPU through IPC events


@dataclasses.dataclass(frozen=True)
class Handover:
    sharing: str
    label: str  # path/variant
    median_s: float
    lo_s: float  # the median's 95% interval, or the samples' range below 6 samples
    hi_s: float


def handovers(summary: pd.DataFrame) -> list[Handover]:
    """The fastest GPU-ordered hand-over at HANDOVER_BYTES per sharing mode, same-GPU links only;
    [] unless two modes or more were measured."""
    need = {"src", "dst", "measure", "bytes", "path", "metric", "sharing", "median_s"}
    if not need <= set(summary.columns):
        return []
    rows = summary[(summary["src"].astype(str) == summary["dst"].astype(str)) & (summary["measure"] == "handoff")
                   & (summary["bytes"] == HANDOVER_BYTES) & summary["path"].isin(GPU_ORDERED)
                   & (summary["metric"] == "bandwidth")]
    out = []
    for sharing, part in rows.groupby("sharing", sort=False):
        best = part.sort_values("median_s").iloc[0]
        figure = _figure(best, "")
        out.append(Handover(str(sharing), f"{best['path']}/{best['variant']}", figure.median_s, figure.lo_s,
                            figure.hi_s))
    order = {"time-sliced": 0, "mps": 1}
    out.sort(key=lambda h: order.get(h.sharing, 2))
    return out if len(out) > 1 else []


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure of a path in one mode: median seconds per transfer and its interval."""

    median_s: float
    lo_s: float
    hi_s: float


@dataclasses.dataclass(frozen=True)
class NeighbourCost:
    """What a busy neighbour costs the pair (modes/neighbour.py): the same path, variant, measure
    and size in the base mode and beside the neighbour; `measure` 'handoff' at HANDOVER_BYTES
    (the base mode's fastest GPU-ordered hand-over), 'stream' at the largest size both measured
    (the base mode's fastest stream there)."""

    mode: str  # 'time-sliced+compute'
    base: str  # 'time-sliced'
    measure: str
    label: str  # path/variant
    nbytes: int
    without: Figure
    beside: Figure

    @property
    def ratio(self) -> float:
        """Time per transfer beside the neighbour over without it."""
        return self.beside.median_s / self.without.median_s


def neighbour_costs(summary: pd.DataFrame) -> list[NeighbourCost]:
    """Per mode with a busy neighbour: its hand-off and stream cost against its base mode, on
    same-GPU links."""
    need = {"src", "dst", "measure", "bytes", "path", "variant", "metric", "sharing", "median_s"}
    if not need <= set(summary.columns) or summary.empty:
        return []
    same = summary[(summary["src"].astype(str) == summary["dst"].astype(str)) & (summary["metric"] == "bandwidth")
                   & (summary["path"] != "ceiling") & summary["median_s"].notna()]
    out = []
    for mode in dict.fromkeys(str(s) for s in same["sharing"] if base_mode(s) != str(s)):
        base = base_mode(mode)
        mine, theirs = same[same["sharing"] == mode], same[same["sharing"] == base]
        keys = ["path", "variant", "measure", "bytes", "src", "dst"]
        both = theirs.merge(mine, on=keys, suffixes=("", "_n"))
        if both.empty:
            continue
        handoff = both[(both["measure"] == "handoff") & (both["bytes"] == HANDOVER_BYTES)
                       & both["path"].isin(GPU_ORDERED)]
        stream = both[both["measure"] == "stream"]
        picks = [("handoff", handoff)]
        if not stream.empty:
            picks.append(("stream", stream[stream["bytes"] == stream["bytes"].max()]))
        for measure, rows in picks:
            if rows.empty:
                continue
            best = rows.sort_values("median_s").iloc[0]
            out.append(NeighbourCost(mode, base, measure, f"{best['path']}/{best['variant']}", int(best["bytes"]),
                                     _figure(best, ""), _figure(best, "_n")))
    return out


def _figure(row, suffix: str) -> Figure:
    """A summary row's median and its 95% interval, or the samples' range where it has none
    (`suffix`: the columns of the other side of a merge)."""
    lo, hi = float(row.get("ci_lo_s" + suffix, math.nan)), float(row.get("ci_hi_s" + suffix, math.nan))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        lo, hi = float(row.get("min_s" + suffix, math.nan)), float(row.get("max_s" + suffix, math.nan))
    return Figure(float(row["median_s" + suffix]), lo, hi)
