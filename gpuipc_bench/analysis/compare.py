"""Comparing runs: the figures (ratios of medians, with the range their intervals allow) and
the decisions (what the answer chose at each size, and where that changed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import pandas as pd

from gpuipc_bench.analysis.conditions import CONDITION_KEYS

# A figure of one run matches a figure of another when all of these agree (whether it could
# stay in L2 is no key: it depends on the GPU, and comparing machines is what this is for).
COMPARE_KEYS: tuple[str, ...] = CONDITION_KEYS


def compare(summaries: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Ratios of medians between runs: every run after the first against the first, matched
    on COMPARE_KEYS (so time-sliced and MPS rows, or two worker counts, stay apart).

    Columns: COMPARE_KEYS, run (1, 2, ...: the other run's index), base_s, base_lo_s,
    base_hi_s, other_s, other_lo_s, other_hi_s, base_gbps, other_gbps, ratio, ratio_lo,
    ratio_hi. ratio is other / base of GB/s for bandwidth rows (above 1: the other run is
    faster) and of seconds for latency and setup rows (below 1: the other run is faster);
    ratio_lo..ratio_hi is the range the two medians' intervals allow (NaN without both
    intervals). Rows measured in one run only are kept with NaN on the other side."""
    if len(summaries) < 2:
        raise ValueError("compare needs two summaries or more")
    keys = list(COMPARE_KEYS)
    values = ["median_s", "ci_lo_s", "ci_hi_s", "median_gbps"]
    base = summaries[0][keys + values]
    parts = []
    for k, other in enumerate(summaries[1:], start=1):
        merged = base.merge(other[keys + values], on=keys, how="outer", suffixes=("_base", "_other"), sort=False)
        merged.insert(len(keys), "run", k)
        parts.append(merged)
    out = pd.concat(parts, ignore_index=True).rename(columns={
        "median_s_base": "base_s", "ci_lo_s_base": "base_lo_s", "ci_hi_s_base": "base_hi_s",
        "median_s_other": "other_s", "ci_lo_s_other": "other_lo_s", "ci_hi_s_other": "other_hi_s",
        "median_gbps_base": "base_gbps", "median_gbps_other": "other_gbps",
    })
    # GB/s is bytes / seconds: its ratio is the inverse ratio of the times.
    time_ratio = out["other_s"] / out["base_s"]
    bandwidth = out["metric"] == "bandwidth"
    out["ratio"] = np.where(bandwidth, 1 / time_ratio, time_ratio)
    fast, slow = out["other_lo_s"] / out["base_hi_s"], out["other_hi_s"] / out["base_lo_s"]
    out["ratio_lo"] = np.where(bandwidth, 1 / slow, fast)
    out["ratio_hi"] = np.where(bandwidth, 1 / fast, slow)
    out = _order_like(out, summaries)
    return out[keys + ["run", "base_s", "base_lo_s", "base_hi_s", "other_s", "other_lo_s", "other_hi_s",
                       "base_gbps", "other_gbps", "ratio", "ratio_lo", "ratio_hi"]].reset_index(drop=True)


def _order_like(out: pd.DataFrame, summaries: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Rows in the order of the first run's summary, then the others' rows it lacks."""
    order: dict[tuple, int] = {}
    for summary in summaries:
        for key in summary[list(COMPARE_KEYS)].itertuples(index=False, name=None):
            order.setdefault(tuple(key), len(order))
    ranks = [order.get(tuple(k), len(order)) for k in out[list(COMPARE_KEYS)].itertuples(index=False, name=None)]
    return out.assign(_r=ranks).sort_values(["run", "_r"], kind="stable").drop(columns="_r")




# --------------------------------------------------------------------------- decisions


@dataclasses.dataclass(frozen=True)
class DecisionChange:
    """A decision of run `run` against run 1 at one link, sharing mode, measure and size:
    the choice (and class) in each, None where that run made no decision there."""

    run: int
    src: str
    dst: str
    sharing: str
    measure: str
    bytes: int
    before: str | None
    after: str | None
    before_class: str | None = None
    after_class: str | None = None


def compare_decisions(decisions: Sequence[Sequence]) -> list[DecisionChange]:
    """Where the choice differs between run 1 and each other run (decisions: each run's
    verdict.Decision list), in run 1's order, then the other run's new ones."""
    def key(d) -> tuple:
        return (d.src, d.dst, d.sharing, d.measure, d.bytes)

    base = {key(d): d for d in decisions[0]}
    out = []
    for run, others in enumerate(decisions[1:], start=1):
        other = {key(d): d for d in others}
        for k in list(base) + [k for k in other if k not in base]:
            a, b = base.get(k), other.get(k)
            if (a.choice if a else None) != (b.choice if b else None):
                out.append(DecisionChange(run, *k, a.choice if a else None, b.choice if b else None,
                                          a.cls if a else None, b.cls if b else None))
    return out
