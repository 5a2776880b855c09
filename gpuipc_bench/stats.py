"""Statistics over the results table. Pure functions: frames in, frames and data out.

Median first, spread always: every summary row carries p5/p95, IQR and CV next to
the median, and the warnings about unstable figures are data (StabilityWarning),
rendered after the tables by the report.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from gpuipc_bench.results import METRICS, PATHS

GROUP_KEYS: tuple[str, ...] = (
    "scenario", "path", "variant", "metric", "src", "dst", "bytes", "workers", "sharing", "ceiling",
)

SUMMARY_COLUMNS: tuple[str, ...] = GROUP_KEYS + (
    "samples", "median_s", "p5_s", "p95_s", "iqr_s", "cv",
    "median_gbps", "p5_gbps", "p95_gbps", "verified", "ceiling_gbps", "fraction_of_ceiling",
)

# Thresholds of the stability warnings.
MAX_CV = 0.10
MIN_SAMPLES = 5
MAX_FIRST_SAMPLE_RATIO = 1.5


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (GROUP_KEYS) group of samples: samples, median_s, p5_s, p95_s, iqr_s,
    cv (sample std / mean of seconds), median/p5/p95 of bandwidth_gbps, verified (all
    True; NA when no sample says), ceiling_gbps (median bandwidth of the 'ceiling'
    rows whose variant is this row's `ceiling`, at the same bytes) and
    fraction_of_ceiling (median_gbps / ceiling_gbps).

    Percentiles are numpy's default (linear interpolation). Rows are ordered by path
    (in PATHS order, unknown paths after), variant (in order of first appearance),
    metric, bytes, then the other keys.
    """
    if df.empty:
        return _empty_summary()

    records = []
    for key, group in df.groupby(list(GROUP_KEYS), sort=False, dropna=False):
        seconds = group["seconds"].to_numpy(dtype=float)
        gbps = group["bandwidth_gbps"].to_numpy(dtype=float)
        s5, s25, s50, s75, s95 = _percentiles(seconds, (5, 25, 50, 75, 95))
        g5, g50, g95 = _percentiles(gbps, (5, 50, 95))
        finite = seconds[~np.isnan(seconds)]
        mean = finite.mean() if len(finite) else math.nan
        std = finite.std(ddof=1) if len(finite) > 1 else math.nan
        records.append(
            dict(
                zip(GROUP_KEYS, key),
                samples=len(group),
                median_s=s50, p5_s=s5, p95_s=s95, iqr_s=s75 - s25,
                cv=std / mean if mean and not math.isnan(mean) else math.nan,
                median_gbps=g50, p5_gbps=g5, p95_gbps=g95,
                verified=_all_verified(group["verified"]),
            )
        )
    summary = pd.DataFrame.from_records(records)
    summary["verified"] = summary["verified"].astype("boolean")

    ceilings = _ceiling_medians(df)
    summary["ceiling_gbps"] = [
        ceilings.get((c, b), math.nan) if c else math.nan
        for c, b in zip(summary["ceiling"], summary["bytes"])
    ]
    summary["fraction_of_ceiling"] = summary["median_gbps"] / summary["ceiling_gbps"]
    return _order(summary, df)[list(SUMMARY_COLUMNS)].reset_index(drop=True)


def _percentiles(values: np.ndarray, qs: tuple[float, ...]) -> list[float]:
    values = values[~np.isnan(values)]
    if not len(values):
        return [math.nan] * len(qs)
    return [float(v) for v in np.percentile(values, qs)]


def _all_verified(flags: pd.Series):
    known = flags.dropna()
    if known.empty:
        return pd.NA
    return bool(known.astype(bool).all())


def _ceiling_medians(df: pd.DataFrame) -> dict[tuple[str, int], float]:
    rows = df[(df["path"] == "ceiling") & (df["metric"] == "bandwidth")]
    medians = rows.groupby(["variant", "bytes"])["bandwidth_gbps"].median()
    return {(str(v), int(b)): float(g) for (v, b), g in medians.items()}


def _order(summary: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    known_paths = {p: i for i, p in enumerate(PATHS)}
    other_paths = sorted(set(summary["path"]) - set(known_paths))
    path_rank = {**known_paths, **{p: len(PATHS) + i for i, p in enumerate(other_paths)}}
    variant_rank = {v: i for i, v in enumerate(pd.unique(df["variant"]))}
    metric_rank = {m: i for i, m in enumerate(METRICS)}
    keyed = summary.assign(
        _p=summary["path"].map(path_rank),
        _v=summary["variant"].map(variant_rank),
        _m=summary["metric"].map(metric_rank).fillna(len(METRICS)),
    )
    keyed = keyed.sort_values(
        ["_p", "_v", "_m", "bytes", "src", "dst", "workers", "sharing", "scenario", "ceiling"],
        kind="stable",
    )
    return keyed.drop(columns=["_p", "_v", "_m"])


def _empty_summary() -> pd.DataFrame:
    out = pd.DataFrame({col: pd.Series([], dtype=object) for col in SUMMARY_COLUMNS})
    ints = {"bytes": "int64", "workers": "int64", "samples": "int64"}
    floats = {c: "float64" for c in SUMMARY_COLUMNS[len(GROUP_KEYS):] if c not in ("samples", "verified")}
    return out.astype({**ints, **floats, "verified": "boolean"})


# --------------------------------------------------------------------------- warnings


@dataclasses.dataclass(frozen=True)
class StabilityWarning:
    """A figure that may not be trustworthy, with what to do about it."""

    scenario: str
    path: str
    variant: str
    bytes: int
    message: str
    hint: str
    metric: str = "bandwidth"
    src: str = ""
    dst: str = ""


def stability_warnings(df: pd.DataFrame, summary: pd.DataFrame | None = None) -> list[StabilityWarning]:
    """Warnings, in summary order, for bandwidth and latency groups:

    - CV of seconds above 10%: 'unstable: CV 14%'
    - fewer than 5 samples: 'only 3 samples'
    - the first sample (lowest iteration) more than 1.5x slower than the median of
      the rest (needs 3 samples or more): 'first sample 2.1x slower than the rest'

    Setup rows are left out: one-shot, cold operations are neither repeated nor warmed.
    """
    if summary is None:
        summary = summarize(df)
    if summary.empty:
        return []
    groups = {
        key: group for key, group in df.groupby(list(GROUP_KEYS), sort=False, dropna=False)
    }
    out: list[StabilityWarning] = []
    for row in summary.itertuples(index=False):
        if row.metric == "setup":
            continue

        def warn(message: str, hint: str) -> None:
            out.append(StabilityWarning(
                row.scenario, row.path, row.variant, int(row.bytes), message, hint,
                metric=row.metric, src=row.src, dst=row.dst,
            ))

        if not math.isnan(row.cv) and row.cv > MAX_CV:
            warn(f"unstable: CV {row.cv:.0%}", "try more --iterations or a quieter machine")
        if row.samples < MIN_SAMPLES:
            noun = "sample" if row.samples == 1 else "samples"
            warn(f"only {row.samples} {noun}", "try --iterations 20")
        group = groups.get(tuple(getattr(row, k) for k in GROUP_KEYS))
        if group is not None and len(group) >= 3:
            ordered = group.sort_values("iteration", kind="stable")["seconds"].to_numpy(dtype=float)
            first, rest = ordered[0], np.median(ordered[1:])
            if rest > 0 and first > MAX_FIRST_SAMPLE_RATIO * rest:
                warn(f"first sample {first / rest:.1f}x slower than the rest", "try more --warmup")
    return out


__all__ = ["GROUP_KEYS", "SUMMARY_COLUMNS", "StabilityWarning", "stability_warnings", "summarize"]
