"""The numbers over a results table: summary, stability warnings, comparison of runs.

Pure functions, frames in, frames and data out; nothing here words or lays out (that is
report/). `analyse` computes everything a report shows of one run, once.

The summary has one row per condition (CONDITION_KEYS: everything that identifies how
a figure was taken) with the median, its distribution-free 95% confidence interval
(robust.median_ci, order statistics: no assumption about the distribution), the spread
as MAD / median, a bimodality flag, the median GB/s with its interval, the fraction of
the ceiling measured in the same scenario and sharing mode, and why a group is unstable
('' when it is not). GB/s is bytes / seconds, so the GB/s median and interval are the
time's, inverted: the two columns always agree.

Warnings are data (StabilityWarning: a cause and the figure it concerns); report/wording.py
words each cause once.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from gpuipc_bench import robust
from gpuipc_bench.paths import PathInfo, from_metadata, path_order
from gpuipc_bench.results import METRICS

if TYPE_CHECKING:
    from gpuipc_bench.verdict import BreakEven, Ranking

# Everything that identifies a condition: two rows that differ in any of these are two figures.
CONDITION_KEYS: tuple[str, ...] = (
    "scenario", "path", "variant", "measure", "metric", "src", "dst", "bytes", "workers", "sharing", "ceiling",
    "l2_resident",
)

SUMMARY_COLUMNS: tuple[str, ...] = CONDITION_KEYS + (
    "samples", "median_s", "ci_lo_s", "ci_hi_s", "mad_rel", "bimodal",
    "median_gbps", "ci_lo_gbps", "ci_hi_gbps", "verified", "ceiling_gbps", "fraction_of_ceiling", "unstable",
)

# A group is unstable (never ranked, and warned about) with fewer samples than this ...
MIN_SAMPLES = 5
# ... or when its median's 95% interval reaches further than this from the median ...
MAX_INTERVAL = 0.05
# ... or when it is bimodal (robust.bimodal).
MAX_FIRST_SAMPLE_RATIO = 1.5  # the first sample this much slower than the rest: warm-up missing
ABOVE_CEILING = 1.05  # a figure this far above its ceiling is a cache effect or a timing error

# The sharing scenario names the rows of all N workers together '<transfer>-aggregate'; their
# bytes are N x the message, and no ceiling bounds what N processes move together (one
# process's copy at N x the message is not it): they get none.
AGGREGATE_SUFFIX = "-aggregate"
# A scenario of that name measures only ceilings: its rows bound every scenario's figures
# that name them when the scenario measured none itself.
CEILING_SCENARIO = "ceiling"

# Why a group is unstable, in the order they are checked (report/wording.py words them).
FEW_SAMPLES, BIMODAL, WIDE_INTERVAL = "few-samples", "bimodal", "wide-interval"


def condition(row) -> tuple:
    """The CONDITION_KEYS values of a summary row (a namedtuple or a Series), as a dict key."""
    get = row.get if hasattr(row, "get") else lambda k: getattr(row, k)
    return tuple(_key_value(get(k)) for k in CONDITION_KEYS)


def _key_value(value):
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def is_gpu(device: str) -> bool:
    return str(device).isdigit()


def link_rank(src: str, dst: str) -> tuple:
    """Sort key of a link: GPU -> GPU first, then host -> GPU, GPU -> host, host -> host."""
    kind = (not is_gpu(src)) * 1 + (not is_gpu(dst)) * 2
    return (kind, int(src) if is_gpu(src) else -1, int(dst) if is_gpu(dst) else -1, str(src), str(dst))


# --------------------------------------------------------------------------- summary


def samples_by_condition(df: pd.DataFrame) -> dict[tuple, np.ndarray]:
    """Each condition's seconds, in iteration order."""
    out = {}
    if df.empty:
        return out
    ordered = df.sort_values("iteration", kind="stable")
    for key, group in ordered.groupby(list(CONDITION_KEYS), sort=False, dropna=False):
        out[tuple(_key_value(k) for k in key)] = group["seconds"].to_numpy(dtype=float)
    return out


def summarize(df: pd.DataFrame, samples: Mapping[tuple, np.ndarray] | None = None,
              paths: Mapping[str, PathInfo] | None = None) -> pd.DataFrame:
    """One row per condition, with the columns of SUMMARY_COLUMNS (see the module's docstring).

    ci_lo/ci_hi are NaN below 6 samples (no order-statistic interval reaches 95% there).
    verified: every sample True (NA when no sample says). ceiling_gbps: the median GB/s of the
    ceiling rows named in `ceiling`, at the same size, measured in the same scenario and
    sharing mode (else in the ceiling-only scenario); never pooled across scenarios; none
    for the aggregates of N processes; a two-hop ceiling is 1 / (1/a + 1/b) for hops in
    sequence ('a+b') and the slower hop for hops that may overlap ('a|b').
    Rows come in path order (declared paths first), then variant (first appearance), metric,
    measure, bytes and the other keys."""
    if df.empty:
        return _empty_summary()
    samples = samples_by_condition(df) if samples is None else samples
    groups = df.groupby(list(CONDITION_KEYS), sort=False, dropna=False)
    verified = groups["verified"].agg(_all_verified)
    records = []
    for key, flag in verified.items():
        key = tuple(_key_value(k) for k in key)
        record = dict(zip(CONDITION_KEYS, key))
        record.update(_figures(samples[key], record["bytes"], record["metric"] == "bandwidth"))
        record["verified"] = flag
        records.append(record)
    summary = pd.DataFrame.from_records(records, columns=[c for c in SUMMARY_COLUMNS
                                                          if c not in ("ceiling_gbps", "fraction_of_ceiling")])
    summary["verified"] = summary["verified"].astype("boolean")
    summary["l2_resident"] = summary["l2_resident"].astype("boolean")
    summary["bimodal"] = summary["bimodal"].astype(bool)

    ceilings = _ceiling_medians(df)
    summary["ceiling_gbps"] = [
        _ceiling_for(ceilings, r.scenario, r.sharing, r.ceiling, int(r.bytes))
        if r.ceiling and not str(r.variant).endswith(AGGREGATE_SUFFIX) else math.nan
        for r in summary.itertuples(index=False)
    ]
    summary["fraction_of_ceiling"] = summary["median_gbps"] / summary["ceiling_gbps"]
    paths = paths if paths is not None else from_metadata({})
    return _order(summary, df, paths)[list(SUMMARY_COLUMNS)].reset_index(drop=True)


def _figures(seconds: np.ndarray, nbytes: int, bandwidth: bool) -> dict:
    values = seconds[np.isfinite(seconds)]
    lo, median, hi = robust.median_ci(values)
    n = len(seconds)
    out = {"samples": n, "median_s": median, "ci_lo_s": lo, "ci_hi_s": hi,
           "mad_rel": robust.mad(values) / median if median else math.nan, "bimodal": robust.bimodal(values)}
    out["median_gbps"], out["ci_lo_gbps"], out["ci_hi_gbps"] = (
        (_gbps(nbytes, median), _gbps(nbytes, hi), _gbps(nbytes, lo)) if bandwidth else (math.nan,) * 3)
    out["unstable"] = _unstable(n, out["bimodal"], interval_halfwidth(lo, median, hi, values))
    return out


def _gbps(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds and math.isfinite(seconds) and seconds > 0 else math.nan


def interval_halfwidth(lo: float, median: float, hi: float, values: Sequence[float] = ()) -> float:
    """How far the median's interval reaches from it, as a fraction of it. Below 6 samples
    (no 95% interval) the range of the samples stands in for it; NaN with one sample."""
    if math.isnan(lo) or math.isnan(hi):
        finite = [v for v in values if math.isfinite(v)]
        if len(finite) < 2:
            return math.nan
        lo, hi = min(finite), max(finite)
    if not median or math.isnan(median):
        return math.nan
    return max(median - lo, hi - median) / abs(median)


def _unstable(n: int, bimodal: bool, halfwidth: float) -> str:
    """Why a group cannot be ranked: the reasons, comma-separated; '' when it can."""
    reasons = []
    if n < MIN_SAMPLES:
        reasons.append(FEW_SAMPLES)
    if bimodal:
        reasons.append(BIMODAL)
    if not math.isnan(halfwidth) and halfwidth > MAX_INTERVAL:
        reasons.append(WIDE_INTERVAL)
    return ",".join(reasons)


def _is_false(flag) -> bool:
    """A nullable boolean that is known and False."""
    return flag is not None and flag is not pd.NA and not bool(flag)


def _all_verified(flags: pd.Series):
    known = flags.dropna()
    if known.empty:
        return pd.NA
    return bool(known.astype(bool).all())


def _ceiling_medians(df: pd.DataFrame) -> dict[tuple, float]:
    rows = df[(df["path"] == "ceiling") & (df["metric"] == "bandwidth")]
    medians = rows.groupby(["scenario", "sharing", "variant", "bytes"])["seconds"].median()
    return {(str(sc), str(sh), str(v), int(b)): _gbps(int(b), float(s)) for (sc, sh, v, b), s in medians.items()}


def _ceiling_for(ceilings: dict[tuple, float], scenario: str, sharing: str, variant: str, nbytes: int) -> float:
    """The ceiling `variant` at `nbytes`. Two hops (device to host, host to device): 'a+b' when
    they run in sequence (one whole message in flight), bounded by 1 / (1/a + 1/b); 'a|b' when
    they may overlap (chunks, or several messages in flight), bounded by the slower hop."""
    for joint in ("+", "|"):
        if joint in variant:
            a, b = (_ceiling_for(ceilings, scenario, sharing, part, nbytes) for part in variant.split(joint))
            if math.isnan(a) or math.isnan(b):
                return math.nan
            return 1 / (1 / a + 1 / b) if joint == "+" else min(a, b)
    found = ceilings.get((scenario, sharing, variant, nbytes))
    if found is not None:
        return found
    own = [k for k in ceilings if k[0] == scenario and k[1] == sharing and k[2] == variant]
    if own:
        return math.nan  # the scenario measured this ceiling, just not at this size
    alone = [g for (sc, _, v, b), g in ceilings.items() if sc == CEILING_SCENARIO and v == variant and b == nbytes]
    return alone[0] if len(alone) == 1 else math.nan


def _order(summary: pd.DataFrame, df: pd.DataFrame, paths: Mapping[str, PathInfo]) -> pd.DataFrame:
    path_rank = {p: i for i, p in enumerate(path_order(paths, summary["path"]))}
    variant_rank = {v: i for i, v in enumerate(pd.unique(df["variant"]))}
    metric_rank = {m: i for i, m in enumerate(METRICS)}
    keyed = summary.assign(
        _p=summary["path"].map(path_rank),
        _v=summary["variant"].map(variant_rank),
        _m=summary["metric"].map(metric_rank).fillna(len(METRICS)),
    )
    keyed = keyed.sort_values(
        ["_p", "_v", "_m", "measure", "bytes", "src", "dst", "workers", "sharing", "scenario", "ceiling"],
        kind="stable",
    )
    return keyed.drop(columns=["_p", "_v", "_m"])


def _empty_summary() -> pd.DataFrame:
    out = pd.DataFrame({col: pd.Series([], dtype=object) for col in SUMMARY_COLUMNS})
    ints = {"bytes": "int64", "workers": "int64", "samples": "int64"}
    floats = {c: "float64" for c in SUMMARY_COLUMNS[len(CONDITION_KEYS):]
              if c not in ("samples", "verified", "bimodal", "unstable")}
    return out.astype({**ints, **floats, "verified": "boolean", "l2_resident": "boolean", "bimodal": bool,
                       "unstable": str})


# --------------------------------------------------------------------------- warnings

# Causes of a warning (report/wording.py words each one once).
SLOW_FIRST_SAMPLE = "slow-first-sample"
FAILED_VERIFICATION = "failed-verification"
ABOVE_ITS_CEILING = "above-ceiling"
WARNING_CAUSES = (FAILED_VERIFICATION, ABOVE_ITS_CEILING, BIMODAL, WIDE_INTERVAL, FEW_SAMPLES, SLOW_FIRST_SAMPLE)


@dataclasses.dataclass(frozen=True)
class StabilityWarning:
    """A figure that may not be trustworthy: why (`cause`, one of WARNING_CAUSES), which figure,
    and the number behind it (`value`: the interval's half-width, the sample count, the
    first sample's ratio to the rest, the fraction of the ceiling; NaN where none)."""

    cause: str
    scenario: str
    path: str
    variant: str
    bytes: int
    metric: str = "bandwidth"
    measure: str = ""
    src: str = ""
    dst: str = ""
    workers: int = 2
    sharing: str = ""
    value: float = math.nan


def stability_warnings(summary: pd.DataFrame, samples: Mapping[tuple, np.ndarray]) -> list[StabilityWarning]:
    """The warnings of a run, by cause (in WARNING_CAUSES order), then in summary order:
    failed verification, above the ceiling, bimodal, wide interval (the median's 95%
    interval beyond +-MAX_INTERVAL: a robust measure, one stray sample does not move it),
    fewer than MIN_SAMPLES samples (setup rows too: they drive the break-even), and a first
    sample more than MAX_FIRST_SAMPLE_RATIO x slower than the median of the rest."""
    found: dict[str, list[StabilityWarning]] = {cause: [] for cause in WARNING_CAUSES}
    def warn(cause: str, row, value: float = math.nan) -> None:
        found[cause].append(StabilityWarning(
            cause, row.scenario, row.path, row.variant, int(row.bytes), metric=row.metric, measure=row.measure,
            src=row.src, dst=row.dst, workers=int(row.workers), sharing=row.sharing, value=float(value)))

    for row in summary.itertuples(index=False):
        if _is_false(row.verified):
            warn(FAILED_VERIFICATION, row)
        if row.fraction_of_ceiling > ABOVE_CEILING:
            warn(ABOVE_ITS_CEILING, row, row.fraction_of_ceiling)
        reasons = row.unstable.split(",") if row.unstable else []
        values = samples.get(condition(row), np.array([]))
        if BIMODAL in reasons:
            warn(BIMODAL, row)
        if WIDE_INTERVAL in reasons:
            warn(WIDE_INTERVAL, row, interval_halfwidth(row.ci_lo_s, row.median_s, row.ci_hi_s, values))
        if FEW_SAMPLES in reasons:
            warn(FEW_SAMPLES, row, row.samples)
        if row.metric != "setup" and len(values) >= 3:
            first, rest = values[0], float(np.median(values[1:]))
            if rest > 0 and first > MAX_FIRST_SAMPLE_RATIO * rest:
                warn(SLOW_FIRST_SAMPLE, row, first / rest)
    return [w for cause in WARNING_CAUSES for w in found[cause]]


# --------------------------------------------------------------------------- comparing runs

# A figure of one run matches a figure of another when all of these agree (l2_resident is
# left out: it depends on the GPU's cache, and comparing machines is what this is for).
COMPARE_KEYS: tuple[str, ...] = tuple(k for k in CONDITION_KEYS if k != "l2_resident")


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


# --------------------------------------------------------------------------- one run, analysed once


@dataclasses.dataclass
class RunAnalysis:
    """Everything a report shows of one run, computed once."""

    frame: pd.DataFrame
    meta: dict[str, str]
    paths: dict[str, PathInfo]
    schema: int
    summary: pd.DataFrame
    samples: dict[tuple, np.ndarray]
    warnings: list[StabilityWarning]
    rankings: list[Ranking]
    break_even: list[BreakEven]
    min_effect: float
    amortise_over: int


def analyse(df: pd.DataFrame, meta: Mapping[str, str], min_effect: float | None = None,
            amortise_over: int | None = None) -> RunAnalysis:
    """Summary, warnings, verdict and break-even of one run (see verdict.py)."""
    from gpuipc_bench import verdict

    min_effect = verdict.MIN_EFFECT if min_effect is None else min_effect
    amortise_over = verdict.AMORTISE_OVER if amortise_over is None else amortise_over
    paths = from_metadata(meta)
    try:
        schema = int(str(meta.get("schema_version", "")).strip())
    except ValueError:
        schema = 0
    samples = samples_by_condition(df)
    summary = summarize(df, samples, paths)
    mixed = schema < 2  # schema 1 told neither the measure nor the roles: rank the old way, and say so
    return RunAnalysis(
        frame=df, meta=dict(meta), paths=paths, schema=schema, summary=summary, samples=samples,
        warnings=stability_warnings(summary, samples),
        rankings=verdict.rankings(summary, samples, paths, min_effect=min_effect, mixed_measures=mixed),
        break_even=verdict.break_even(summary, paths, samples, amortise_over=amortise_over, mixed_measures=mixed),
        min_effect=min_effect, amortise_over=amortise_over,
    )


__all__ = [
    "ABOVE_CEILING",
    "COMPARE_KEYS",
    "CONDITION_KEYS",
    "MAX_INTERVAL",
    "MIN_SAMPLES",
    "SUMMARY_COLUMNS",
    "WARNING_CAUSES",
    "RunAnalysis",
    "StabilityWarning",
    "analyse",
    "compare",
    "condition",
    "interval_halfwidth",
    "is_gpu",
    "link_rank",
    "samples_by_condition",
    "stability_warnings",
    "summarize",
]
