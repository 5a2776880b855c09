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
        lo, hi = float(best.get("ci_lo_s", math.nan)), float(best.get("ci_hi_s", math.nan))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            lo, hi = float(best.get("min_s", math.nan)), float(best.get("max_s", math.nan))
        out.append(Handover(str(sharing), f"{best['path']}/{best['variant']}", float(best["median_s"]), lo, hi))
    order = {"time-sliced": 0, "mps": 1}
    out.sort(key=lambda h: order.get(h.sharing, 2))
    return out if len(out) > 1 else []
