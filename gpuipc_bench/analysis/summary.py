"""The figures of a results table: one row per condition, with its spread.

Pure functions, frames in, frames out; nothing here words or lays out (that is report/).

The summary has one row per condition (conditions.CONDITION_KEYS: everything that
identifies how a figure was taken) with the median, its distribution-free 95% confidence
interval (robust.median_ci, order statistics: no assumption about the distribution), the
spread as MAD / median, whether the samples sit in two states, the median GB/s with its
interval, the fraction of the ceiling measured in the same scenario and sharing mode, the
ceiling's per-call floor (`call_bound`: where time per transfer is below twice it, "% of
the ceiling" says nothing), whether the buffers could stay in L2 (aggregated over the
samples) and what is worth a warning (`unstable`, '' when nothing is). GB/s is bytes /
seconds, so the GB/s median and interval are the time's, inverted: the two columns always
agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from gpuipc_bench import robust
from gpuipc_bench.analysis.conditions import (
    CEILING_SCENARIO,
    CONDITION_KEYS,
    is_gpu,
    key_value,
    records,
    with_mps_shares,
)
from gpuipc_bench.paths import PathInfo, from_metadata, path_order
from gpuipc_bench.results import AGGREGATE_SUFFIX, METRICS, base_mode

SUMMARY_COLUMNS: tuple[str, ...] = CONDITION_KEYS + (
    "l2_resident", "samples", "median_s", "ci_lo_s", "ci_hi_s", "min_s", "max_s", "mad_rel", "bimodal",
    "median_gbps", "ci_lo_gbps", "ci_hi_gbps", "verified", "ceiling_gbps", "fraction_of_ceiling",
    "ceiling_peak_gbps", "call_bound", "unstable",
)

# Below this many samples no comparison can separate two figures (3 against 3: p = 0.05).
MIN_SAMPLES = 3
# The median's 95% interval reaching further than this from the median is worth a warning.
MAX_INTERVAL = 0.05
# A setup operation timed this many times has a 95% interval that is not its range.
SETUP_INTERVAL_SAMPLES = 9
# Where a transfer costs less than this many times the per-call floor of its ceiling (the
# ceiling's latency: call_floor), it is bound by the call, not the link.
CALL_BOUND = 2.0

# What is worth a warning about a figure, in the order they are checked (report/causes.py words them).
FEW_SAMPLES, BIMODAL, WIDE_INTERVAL = "few-samples", "bimodal", "wide-interval"
TWO_STATES = BIMODAL  # the samples sit in two states (robust.two_states says how far apart)


# --------------------------------------------------------------------------- summary


def samples_by_condition(df: pd.DataFrame) -> dict[tuple, np.ndarray]:
    """Each condition's seconds, in iteration order (the conditions in the order they first
    appear in that order)."""
    if df.empty:
        return {}
    df = with_mps_shares(df)
    ids, keys = condition_ids(df)
    # The rows sorted by iteration (stable), then by condition (stable): each condition's
    # samples in iteration order, as one sort of the whole frame and a split.
    by_iteration = np.argsort(df["iteration"].to_numpy(), kind="stable")
    ids = ids[by_iteration]
    seconds = df["seconds"].to_numpy(dtype=float)[by_iteration]
    first = np.unique(ids, return_index=True)[1]  # where each condition first appears, sorted
    appearance = np.argsort(first, kind="stable")  # the conditions in that order
    renumbered = np.empty_like(appearance)
    renumbered[appearance] = np.arange(len(appearance))
    ids = renumbered[ids]
    parts = np.split(seconds[np.argsort(ids, kind="stable")], np.cumsum(np.bincount(ids))[:-1])
    return {keys[c]: part for c, part in zip(appearance, parts)}


def samples_by_replica(df: pd.DataFrame) -> dict[tuple, tuple[np.ndarray, ...]]:
    """The conditions measured by more than one process set (the `replica` column: the run's
    resampling pass measures some again on a fresh set), each with its seconds per replica in
    replica order; {} for a run of one pass (a file without the column reads replica 1)."""
    if df.empty or "replica" not in df.columns or not (df["replica"].to_numpy() > 1).any():
        return {}
    # the rows of a path, variant and size that one replica measured (most of a run) hold no
    # condition measured by two: set aside before the conditions are told apart
    replicas = df.groupby(["path", "variant", "bytes"], sort=False, dropna=False)["replica"].transform("nunique")
    df = df[replicas.to_numpy() > 1]
    found: dict[tuple, dict[int, np.ndarray]] = {}
    for replica, part in df.groupby("replica", sort=True):
        for key, values in samples_by_condition(part).items():
            found.setdefault(key, {})[int(replica)] = values
    return {key: tuple(v for _, v in sorted(by.items())) for key, by in found.items() if len(by) > 1}


def condition_ids(df: pd.DataFrame) -> tuple[np.ndarray, list[tuple]]:
    """Each row's condition as a number, the conditions numbered in the order they first appear
    in the frame, and each number's CONDITION_KEYS values (plain Python values: key_value)."""
    ids = df.groupby(list(CONDITION_KEYS), sort=False, dropna=False).ngroup().to_numpy()
    first = np.unique(ids, return_index=True)[1]
    columns = [_plain(df[k].to_numpy()[first]) for k in CONDITION_KEYS]
    return ids, list(zip(*columns))


def _plain(values: np.ndarray) -> list:
    """key_value of each of a column's values: an integer or boolean column's as tolist gives them."""
    return values.tolist() if values.dtype.kind in "iub" else [key_value(v) for v in values]


def summarize(df: pd.DataFrame, samples: Mapping[tuple, np.ndarray] | None = None,
              paths: Mapping[str, PathInfo] | None = None,
              meta: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per condition, with the columns of SUMMARY_COLUMNS (see the module's docstring).

    ci_lo/ci_hi are NaN below 6 samples (no order-statistic interval reaches 95% there);
    min_s/max_s: the samples' range. verified: every sample True (NA when no sample says).
    l2_resident: most of the samples could stay in L2 (NA when no sample says; see l2_flags).
    ceiling_gbps: the median GB/s of the ceiling rows named in `ceiling`, at the same size,
    measured in the same scenario and sharing mode, else in the scenario whose rows hold this
    process's measurement of it (a persistent worker measures each ceiling once:
    `# note.<scenario>.ceilings_from.<sharing>`), else in the ceiling-only scenario; never
    pooled across scenarios; none for the aggregates of N processes; a two-hop ceiling is
    1 / (1/a + 1/b) for hops in sequence ('a+b') and the slower hop for hops that may overlap
    ('a|b'). ceiling_peak_gbps: that ceiling at its best size (the link's asymptotic
    bandwidth); call_bound: the figure's time per transfer is below CALL_BOUND x the per-call
    floor, its ceiling's latency (call_floor). Rows come in path order
    (declared paths first), then variant (first appearance), metric, measure, bytes and the
    other keys."""
    if df.empty:
        return _empty_summary()
    df = l2_flags(with_mps_shares(df), meta or {})
    samples = samples_by_condition(df) if samples is None else samples
    ids, keys = condition_ids(df)
    verified = _per_condition(ids, df["verified"], _all_verified)
    resident = _per_condition(ids, df["l2_resident"], _mostly)
    figures = []
    for key, flag, l2 in zip(keys, verified, resident):
        record = dict(zip(CONDITION_KEYS, key))
        record.update(_figures(samples[key], record["bytes"], record["metric"]))
        record["verified"] = flag
        record["l2_resident"] = l2
        figures.append(record)
    columns = [c for c in SUMMARY_COLUMNS if c not in ("ceiling_gbps", "fraction_of_ceiling", "ceiling_peak_gbps",
                                                       "call_bound")]
    summary = pd.DataFrame.from_records(figures, columns=columns)
    summary["verified"] = summary["verified"].astype("boolean")
    summary["l2_resident"] = summary["l2_resident"].astype("boolean")
    summary["bimodal"] = summary["bimodal"].astype(bool)

    ceilings = _ceiling_medians(df)
    sources = ceiling_sources(meta or {})
    summary["ceiling_gbps"] = [
        _ceiling_for(ceilings, r.scenario, r.sharing, r.ceiling, int(r.bytes), sources)
        if r.ceiling and not str(r.variant).endswith(AGGREGATE_SUFFIX) else math.nan
        for r in records(summary)
    ]
    summary["fraction_of_ceiling"] = summary["median_gbps"] / summary["ceiling_gbps"]
    _call_floor(summary, ceilings, sources)
    paths = paths if paths is not None else from_metadata({})
    return _order(summary, df, paths)[list(SUMMARY_COLUMNS)].reset_index(drop=True)


class CeilingSources(dict):
    """(scenario, sharing) -> the scenarios whose rows hold ceilings its workers measured before
    it; `modes`: (scenario, sharing) -> (the mode, the size from which) whose host-link ceilings a
    further sharing mode's run takes (engine.pair.HOST_CEILINGS_SHARED_FROM)."""

    def __init__(self, *args, modes: dict[tuple[str, str], tuple[str, int]] | None = None):
        super().__init__(*args)
        self.modes = modes or {}


def ceiling_sources(meta: Mapping[str, str]) -> CeilingSources:
    """The header's `note.<scenario>.ceilings_from.<sharing>: a,b` lines, and its
    `note.<scenario>.host_ceilings_from.<sharing>: <mode> from <bytes>` lines (CeilingSources)."""
    out, modes = {}, {}
    for key, text in meta.items():
        parts = key.split(".", 3)
        if len(parts) == 4 and parts[0] == "note" and parts[2] == "ceilings_from":
            out[(parts[1], parts[3])] = tuple(s for s in str(text).split(",") if s)
        elif len(parts) == 4 and parts[0] == "note" and parts[2] == "host_ceilings_from":
            mode, _, start = str(text).partition(" from ")
            if start.strip().isdigit():
                modes[(parts[1], parts[3])] = (mode.strip(), int(start))
    return CeilingSources(out, modes=modes)


def _call_floor(summary: pd.DataFrame, ceilings: dict[tuple, float],
                sources: Mapping[tuple[str, str], tuple[str, ...]] | None = None) -> None:
    """ceiling_peak_gbps and call_bound of every row with a ceiling (see summarize)."""
    sources = sources if sources is not None else {}
    peak, bound = [], []
    sizes_of: dict[tuple, set] = {}  # (scenario, sharing) -> the sizes its ceilings were measured at
    for (sc, sh, _, b) in ceilings:
        sizes_of.setdefault((sc, sh), set()).add(b)
    curves: dict[tuple, dict] = {}  # one curve per (scenario, sharing, ceiling), not one per row
    for r in records(summary):
        if not r.ceiling or str(r.variant).endswith(AGGREGATE_SUFFIX):
            peak.append(math.nan)
            bound.append(False)
            continue
        key = (r.scenario, r.sharing, r.ceiling)
        if key not in curves:
            def measured(sharing: str, *more: str) -> set:  # the sizes its ceilings were measured at in a mode
                return set().union(*(sizes_of.get((sc, sharing), set())
                                     for sc in (r.scenario, *more, *sources.get((r.scenario, sharing), ()))))

            sizes = measured(r.sharing, CEILING_SCENARIO)
            borrowed = getattr(sources, "modes", {}).get((r.scenario, r.sharing))
            if borrowed is not None:  # the sizes whose host-link ceilings the first mode measured
                sizes |= {b for b in measured(borrowed[0]) if b >= borrowed[1]}
            curve = {b: _ceiling_for(ceilings, r.scenario, r.sharing, r.ceiling, b, sources) for b in sorted(sizes)}
            curves[key] = {b: g for b, g in curve.items() if math.isfinite(g) and g > 0}
        curve = curves[key]
        if not curve or int(r.bytes) not in curve:
            peak.append(max(curve.values()) if curve else math.nan)
            bound.append(False)
            continue
        floor = call_floor(curve)
        peak.append(max(curve.values()))
        bound.append(bool(r.median_s < CALL_BOUND * floor))
    summary["ceiling_peak_gbps"] = peak
    summary["call_bound"] = pd.Series(bound, index=summary.index, dtype=bool)


def call_floor(curve: Mapping[int, float]) -> float:
    """A ceiling's per-call floor from its curve (bytes -> GB/s): its latency, the time at the
    smallest size measured less what moving those bytes takes at its best bandwidth. With
    small sizes measured it is the time of the smallest copy; with only large ones (a sweep
    from 16 MiB) it is what the large copies spend beyond their bytes, so a copy at 80% of
    the link is never taken for one bound by the call."""
    smallest = min(curve)
    return max(0.0, smallest / curve[smallest] / 1e9 - smallest / max(curve.values()) / 1e9)


def _figures(seconds: np.ndarray, nbytes: int, metric: str) -> dict:
    values = seconds[np.isfinite(seconds)]
    lo, median, hi, mad, states = robust.describe(values)
    n = len(seconds)
    out = {"samples": n, "median_s": median, "ci_lo_s": lo, "ci_hi_s": hi,
           "min_s": float(values.min()) if len(values) else math.nan,
           "max_s": float(values.max()) if len(values) else math.nan,
           "mad_rel": mad / median if median else math.nan, "bimodal": states is not None}
    out["median_gbps"], out["ci_lo_gbps"], out["ci_hi_gbps"] = (
        (_gbps(nbytes, median), _gbps(nbytes, hi), _gbps(nbytes, lo)) if metric == "bandwidth" else (math.nan,) * 3)
    halfwidth = interval_halfwidth(lo, median, hi, values)
    if metric == "setup" and n < SETUP_INTERVAL_SAMPLES:
        halfwidth = math.nan  # its interval is its range, which the report shows as such
    out["unstable"] = _unstable(n, out["bimodal"], halfwidth)
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
    """What is worth a warning about a figure, comma-separated ('' when nothing is). Every
    figure is ranked whatever this says: its spread goes into each comparison."""
    reasons = []
    if n < MIN_SAMPLES:
        reasons.append(FEW_SAMPLES)
    if bimodal:
        reasons.append(BIMODAL)
    if not math.isnan(halfwidth) and halfwidth > MAX_INTERVAL:
        reasons.append(WIDE_INTERVAL)
    return ",".join(reasons)


# --------------------------------------------------------------------------- the L2 flag


def l2_flags(df: pd.DataFrame, meta: Mapping[str, str]) -> pd.DataFrame:
    """The frame with each sample's l2_resident. A file of schema 3 or later stores each
    sample's own flag; an older one stored a rule since found wrong (a ring of up to twice
    the L2 per side, from the transfers before calibration), so where its header gives the
    GPU's L2 size the flag is recomputed from the sample's batch and size with
    gpu.memory.l2_resident_ring (a one-slot ring for the sharing scenario, which copies one
    message per transfer)."""
    try:
        schema = int(str(meta.get("schema_version", "")).strip())
    except ValueError:
        schema = 0
    if schema >= 3 or df.empty:
        return df
    l2 = {key.split(".")[1]: int(value) for key, value in meta.items()
          if key.startswith("gpu.") and key.endswith(".l2_bytes") and str(value).strip().isdigit()}
    if not l2:
        return df
    from gpuipc_bench.gpu.memory import l2_resident_ring

    def flag(src, dst, nbytes, batch, scenario, bandwidth):
        gpus = [str(d) for d in (src, dst) if is_gpu(d)]
        if not bandwidth or not gpus or gpus[0] not in l2:
            return pd.NA
        slots = 1 if scenario == "sharing" else int(batch)
        return l2_resident_ring(int(nbytes), slots, l2[gpus[0]], sides=_sides(src, dst))

    # Once per distinct (src, dst, bytes, batch, scenario, bandwidth or not), not once per sample.
    inputs = df[["src", "dst", "bytes", "batch", "scenario"]].assign(_bandwidth=df["metric"] == "bandwidth")
    ids = inputs.groupby(list(inputs.columns), sort=False, dropna=False).ngroup().to_numpy()
    first = np.unique(ids, return_index=True)[1]
    distinct = [flag(*row) for row in inputs.iloc[first].itertuples(index=False, name=None)]
    return df.assign(l2_resident=pd.array(distinct, dtype="boolean")[ids])


def _sides(src, dst) -> int:
    """Rings in one GPU's L2: source and destination on one GPU; one for a copy to or from
    the host or another GPU."""
    return 2 if is_gpu(src) and str(src) == str(dst) else 1


def _per_condition(ids: np.ndarray, flags: pd.Series, rule) -> list:
    """rule(known, true) of each condition's nullable flags: how many of its samples say, and
    how many of those say True; NA where none says."""
    known = flags.notna().to_numpy()
    true = flags.fillna(False).to_numpy(dtype=bool) & known
    count = int(ids.max()) + 1 if len(ids) else 0
    said = np.bincount(ids[known], minlength=count)
    said_true = np.bincount(ids[true], minlength=count)
    return [rule(int(k), int(t)) if k else pd.NA for k, t in zip(said, said_true)]


def _mostly(known: int, true: int) -> bool:
    return bool(true / known >= 0.5)  # the mean of the known flags, as Series.mean computed it


def _is_false(flag) -> bool:
    """A nullable boolean that is known and False."""
    return flag is not None and flag is not pd.NA and not bool(flag)


def _all_verified(known: int, true: int) -> bool:
    return true == known


def _ceiling_medians(df: pd.DataFrame) -> dict[tuple, float]:
    rows = df[(df["path"] == "ceiling") & (df["metric"] == "bandwidth")]
    medians = rows.groupby(["scenario", "sharing", "variant", "bytes"])["seconds"].median()
    return {(str(sc), str(sh), str(v), int(b)): _gbps(int(b), float(s)) for (sc, sh, v, b), s in medians.items()}


HOST_LINKS = ("h2d", "d2h")  # ceiling kinds of the bus between host memory and a GPU (gpu.ceilings.KINDS)


def _ceiling_for(ceilings: dict[tuple, float], scenario: str, sharing: str, variant: str, nbytes: int,
                 sources: Mapping[tuple[str, str], tuple[str, ...]] | None = None) -> float:
    """The ceiling `variant` at `nbytes`. Two hops (device to host, host to device): 'a+b' when
    they run in sequence (one whole message in flight), bounded by 1 / (1/a + 1/b); 'a|b' when
    they may overlap (chunks, or several messages in flight), bounded by the slower hop. Beside a
    busy neighbour (sharing 'mps+copy'), the ceiling its base mode measured without the neighbour:
    the link's bound (the one measured beside the neighbour moves with the neighbour)."""
    base = base_mode(sharing)
    if base != sharing:
        found = _ceiling_for(ceilings, scenario, base, variant, nbytes, sources)
        if not math.isnan(found):
            return found
    for joint in ("+", "|"):
        if joint in variant:
            a, b = (_ceiling_for(ceilings, scenario, sharing, part, nbytes, sources) for part in variant.split(joint))
            if math.isnan(a) or math.isnan(b):
                return math.nan
            return 1 / (1 / a + 1 / b) if joint == "+" else min(a, b)
    found = ceilings.get((scenario, sharing, variant, nbytes))
    if found is not None:
        return found
    for held in (sources or {}).get((scenario, sharing), ()):  # measured once by these processes, earlier
        found = ceilings.get((held, sharing, variant, nbytes))
        if found is not None:
            return found
    borrowed = getattr(sources, "modes", {}).get((scenario, sharing))
    if borrowed is not None and nbytes >= borrowed[1] and variant.partition("-")[0].partition("@")[0] in HOST_LINKS:
        # a further sharing mode's host link from this size: the first mode's (the same bus, not the mode's)
        return _ceiling_for(ceilings, scenario, borrowed[0], variant, nbytes, sources)
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
              if c not in ("samples", "verified", "bimodal", "unstable", "l2_resident", "call_bound")}
    return out.astype({**ints, **floats, "verified": "boolean", "l2_resident": "boolean", "bimodal": bool,
                       "call_bound": bool, "unstable": str})


