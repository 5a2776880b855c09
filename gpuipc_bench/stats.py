"""Statistics over the results table. Pure functions: frames in, frames and data out.

Median first, spread always: every summary row carries p5/p95, IQR and CV next to
the median, and the warnings about unstable figures are data (StabilityWarning),
rendered after the tables by the report.

On top of the summary, as data for the report to word:
- verdicts: on each link, the fastest path/variant per band of sizes (LinkVerdict, Band);
- break_even: where a path with a setup cost (IPC open, host registration, peer
  enable) beats staging, the cost paid once per N transfers or with every transfer;
- compare: ratios of the medians of several runs against the first.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

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


# --------------------------------------------------------------------------- verdicts

# Two figures within this fraction of each other are a tie: the winner of a size band
# is the one that stays within it of the fastest for the most consecutive sizes.
TIE = 0.05

# Variants that move bytes without the path's setup (peer 'p2p-off' is an in-process
# copy with peer access off: no IPC mapping, no peer enable), so they neither pay the
# setup cost nor count for the path in the break-even.
NO_SETUP_VARIANTS = frozenset({"p2p-off"})

# The one-time operations a path pays before its first transfer, as setup-row
# variants. Staging's own buffer registration is a one-time cost too, left out: the
# break-even compares against staging with its buffer already registered.
SETUP_COSTS: dict[str, tuple[str, ...]] = {
    "ipc": ("ipc_open_cold",),
    "mmap": ("host_register",),
    "peer": ("ipc_open_cold", "peer_enable"),
}
BASELINE_PATH = "staging"
AMORTISE_OVER = 1000


def is_gpu(device: str) -> bool:
    return str(device).isdigit()


def link_rank(src: str, dst: str) -> tuple:
    """Sort key of a link: GPU→GPU first, then host→GPU, GPU→host, host→host."""
    kind = (not is_gpu(src)) * 1 + (not is_gpu(dst)) * 2  # 0 GPU→GPU, 1 host→GPU, 2 GPU→host, 3 host→host
    return (kind, int(src) if is_gpu(src) else -1, int(dst) if is_gpu(dst) else -1, str(src), str(dst))


def label(path: str, variant: str) -> str:
    return f"{path}/{variant}"


def _transfer_times(summary: pd.DataFrame) -> pd.DataFrame:
    """The bandwidth figures that can win: not ceilings, bytes right (or unchecked),
    a finite median; one row per (label, src, dst, bytes), the fastest if a label was
    measured twice (e.g. with different worker counts)."""
    rows = summary[
        (summary["metric"] == "bandwidth")
        & (summary["path"] != "ceiling")
        & (summary["verified"] != False)  # noqa: E712 (nullable boolean: NA stays)
        & np.isfinite(summary["median_s"].astype(float))
        & (summary["bytes"] > 0)
    ]
    rows = rows.assign(label=[label(p, v) for p, v in zip(rows["path"], rows["variant"])])
    rows = rows.sort_values("median_s", kind="stable").drop_duplicates(["label", "src", "dst", "bytes"], keep="first")
    return rows.sort_index()  # back in summary order


@dataclasses.dataclass(frozen=True)
class Band:
    """Consecutive sizes of one link where one path/variant is the fastest (within TIE),
    with how much slower the other paths are on that link (margin_min..margin_max
    times the winner's time, size by size)."""

    lo_bytes: int
    hi_bytes: int
    winner: str  # 'ipc/ce'
    winner_gbps: float  # its median GB/s at hi_bytes
    winner_lo_s: float = math.nan  # its median seconds per transfer at lo_bytes
    tied: tuple[str, ...] = ()  # within TIE of the fastest at every size of the band
    runner_up: str | None = None  # at hi_bytes, the fastest variant of another path (None: no other path)
    runner_up_gbps: float = math.nan
    margin_min: float = math.nan  # over the band, the other paths' best time / the winner's time: least ...
    margin_max: float = math.nan  # ... and most
    sizes: int = 1  # measured sizes in the band


@dataclasses.dataclass(frozen=True)
class LinkVerdict:
    """The fastest path/variant per size band on one link (src → dst)."""

    src: str
    dst: str
    candidates: tuple[str, ...]  # every path/variant measured on the link
    bands: tuple[Band, ...]


def verdicts(summary: pd.DataFrame, tie: float = TIE) -> list[LinkVerdict]:
    """For each link, the fastest path/variant (ceilings excluded, failed verification
    excluded) per band of consecutive sizes, comparing median seconds per transfer at
    the same size. A figure within `tie` of the fastest counts as fastest too; a band
    goes on while its winner stays within `tie`, and a new band starts with the
    candidate that stays within it for the most sizes. Links in link_rank order."""
    times = _transfer_times(summary)
    out = []
    for (src, dst), part in times.groupby(["src", "dst"], sort=False):
        table = part.pivot(index="bytes", columns="label", values="median_s").sort_index()
        gbps = part.pivot(index="bytes", columns="label", values="median_gbps").sort_index()
        labels = list(pd.unique(part["label"]))  # summary order
        table = table[labels]
        out.append(LinkVerdict(str(src), str(dst), tuple(labels), tuple(_bands(table, gbps, tie))))
    return sorted(out, key=lambda v: link_rank(v.src, v.dst))


def _bands(table: pd.DataFrame, gbps: pd.DataFrame, tie: float) -> list[Band]:
    sizes = list(table.index)
    best = table.min(axis=1, skipna=True)
    close = table.le(best * (1 + tie), axis=0) & table.notna()  # bool: within tie at that size
    bands, i = [], 0
    while i < len(sizes):
        candidates = [lab for lab in table.columns if close.iloc[i][lab]]

        def run_length(lab: str) -> int:
            n = 0
            while i + n < len(sizes) and close.iloc[i + n][lab]:
                n += 1
            return n

        def closeness(lab: str) -> float:  # mean log-ratio to the fastest over the run: lower is closer
            n = run_length(lab)
            return float(np.mean(np.log(table.iloc[i:i + n][lab] / best.iloc[i:i + n])))

        winner = max(candidates, key=lambda lab: (run_length(lab), -closeness(lab)))
        n = run_length(winner)
        span = close.iloc[i:i + n]
        tied = tuple(lab for lab in table.columns if lab != winner and bool(span[lab].all()))
        lo, hi = sizes[i], sizes[i + n - 1]
        # The next best *path* (another path's fastest variant), size by size over the band.
        path_of = {lab: lab.split("/", 1)[0] for lab in table.columns}
        others = [lab for lab in table.columns if path_of[lab] != path_of[winner]]
        span_t = table.iloc[i:i + n]
        runner, margins = None, []
        if others:
            other_best = span_t[others].min(axis=1, skipna=True)
            margins = [float(m) for m in (other_best / span_t[winner]).dropna()]
            at_hi = span_t.loc[hi, others].dropna()
            runner = at_hi.idxmin() if len(at_hi) else None
        bands.append(Band(
            lo_bytes=int(lo), hi_bytes=int(hi), winner=winner, winner_gbps=float(gbps.loc[hi, winner]),
            winner_lo_s=float(table.loc[lo, winner]), tied=tied, runner_up=runner,
            runner_up_gbps=float(gbps.loc[hi, runner]) if runner is not None else math.nan,
            margin_min=min(margins) if margins else math.nan, margin_max=max(margins) if margins else math.nan,
            sizes=n,
        ))
        i += n
    return bands


# --------------------------------------------------------------------------- break-even


@dataclasses.dataclass(frozen=True)
class Crossing:
    """Where a path with a setup cost beats the baseline, over the sizes both measured.

    from_bytes: the break-even, the smallest size from which it wins at every larger
    size compared (None: it loses at the largest size, so there is none);
    last_loss: the largest size below from_bytes where it loses (None: it wins from
    the smallest size compared); wins: every run of consecutive sizes where it wins,
    as (first, last) pairs, which also shows wins below the largest size."""

    from_bytes: int | None
    last_loss: int | None
    wins: tuple[tuple[int, int], ...] = ()

    @property
    def never(self) -> bool:
        return not self.wins


@dataclasses.dataclass(frozen=True)
class BreakEven:
    """A path with a setup cost against the baseline path (staging), both at their best
    variant at each size, with the setup paid once per `amortise_over` transfers and
    paid with every transfer."""

    path: str
    src: str
    dst: str
    variants: tuple[str, ...]  # the path's variants taken into account
    setup: tuple[str, ...]  # the setup operations counted
    setup_s: float  # their total median seconds (at the largest size compared, if it depends on size)
    setup_min_s: float  # ... at the smallest size compared (the same as setup_s unless size_dependent)
    size_dependent: bool  # the cost was measured per size (host_register): each size pays its own
    baseline_src: str
    baseline_dst: str
    amortise_over: int
    amortised: Crossing
    per_transfer: Crossing
    sizes: tuple[int, ...]  # sizes compared
    composed: bool = False  # mmap: one transfer = its GPU→host half + its host→GPU half


def break_even(summary: pd.DataFrame, amortise_over: int = AMORTISE_OVER,
               costs: dict[str, tuple[str, ...]] | None = None) -> list[BreakEven]:
    """For each path in SETUP_COSTS measured in the run: the size above which it beats
    staging (best staging variant at each size, on the same link, or else on another
    GPU→GPU link) once its setup is paid, (a) once per `amortise_over` transfers and
    (b) with every transfer: setup/N + t_path(size) < t_staging(size).

    mmap is measured in halves (GPU→host and host→GPU); one mmap transfer is taken
    as the best GPU→host half plus the best host→GPU half at that size (the time of
    the signal between them not counted)."""
    if amortise_over < 1:
        raise ValueError("amortise_over must be at least 1")
    costs = SETUP_COSTS if costs is None else costs
    times = _transfer_times(summary)
    baseline = times[times["path"] == BASELINE_PATH]
    setup = summary[summary["metric"] == "setup"]
    out: list[BreakEven] = []
    if baseline.empty:
        return out
    for path, ops in costs.items():
        rows = times[(times["path"] == path) & ~times["variant"].isin(NO_SETUP_VARIANTS)]
        if rows.empty:
            continue
        for (src, dst), best, variants, composed in _path_links(rows):
            base_link = _baseline_link(baseline, src, dst)
            if base_link is None:
                continue
            base = baseline[(baseline["src"] == base_link[0]) & (baseline["dst"] == base_link[1])]
            base_best = base.groupby("bytes")["median_s"].min()
            sizes = sorted(set(best.index) & set(base_best.index))
            if not sizes:
                continue
            cost = {s: _setup_seconds(setup, path, ops, src, dst, s) for s in sizes}
            if all(math.isnan(c) for c in cost.values()):
                continue
            cost = {s: (0.0 if math.isnan(c) else c) for s, c in cost.items()}
            present = tuple(op for op in ops if _setup_rows(setup, path, op, src, dst) is not None)
            sized = any(_setup_rows(setup, path, op, src, dst) is not None
                        and _setup_rows(setup, path, op, src, dst)["bytes"].nunique() > 1 for op in present)

            def crossing(n: int) -> Crossing:
                wins = [cost[s] / n + best[s] < base_best[s] for s in sizes]
                return _crossing(sizes, wins)

            out.append(BreakEven(
                path=path, src=str(src), dst=str(dst), variants=variants, setup=present,
                setup_s=cost[sizes[-1]], setup_min_s=cost[sizes[0]], size_dependent=sized,
                baseline_src=str(base_link[0]), baseline_dst=str(base_link[1]),
                amortise_over=amortise_over, amortised=crossing(amortise_over), per_transfer=crossing(1),
                sizes=tuple(int(s) for s in sizes), composed=composed,
            ))
    return out


def _path_links(rows: pd.DataFrame):
    """(link, best seconds per size, variants, composed) for each link of one path; a
    path measured only in halves (GPU→host and host→GPU: mmap) gives one composed
    GPU→GPU link per pair of halves."""
    full = rows[rows["src"].map(is_gpu) & rows["dst"].map(is_gpu)]
    for (src, dst), part in full.groupby(["src", "dst"], sort=False):
        yield (src, dst), part.groupby("bytes")["median_s"].min(), tuple(pd.unique(part["variant"])), False
    if not full.empty:
        return
    down = rows[rows["src"].map(is_gpu) & (rows["dst"] == "host")]
    up = rows[(rows["src"] == "host") & rows["dst"].map(is_gpu)]
    for src in pd.unique(down["src"]):
        d = down[down["src"] == src]
        for dst in pd.unique(up["dst"]):
            u = up[up["dst"] == dst]
            total = (d.groupby("bytes")["median_s"].min() + u.groupby("bytes")["median_s"].min()).dropna()
            variants = tuple(pd.unique(d["variant"])) + tuple(pd.unique(u["variant"]))
            yield (src, dst), total, variants, True


def _baseline_link(baseline: pd.DataFrame, src: str, dst: str):
    links = list(dict.fromkeys(zip(baseline["src"], baseline["dst"])))
    if (src, dst) in links:
        return (src, dst)
    gpu_links = sorted((l for l in links if is_gpu(l[0]) and is_gpu(l[1])), key=lambda l: link_rank(*l))
    return gpu_links[0] if gpu_links else None


def _setup_rows(setup: pd.DataFrame, path: str, op: str, src: str, dst: str) -> pd.DataFrame | None:
    """The setup rows of `op` on `path` that belong to the link src→dst: the same
    direction, else the same pair of devices, else the same destination, else any."""
    rows = setup[(setup["path"] == path) & (setup["variant"] == op)]
    if rows.empty:
        return None
    for mask in (
        (rows["src"] == src) & (rows["dst"] == dst),
        (rows["src"] == dst) & (rows["dst"] == src),
        rows["dst"] == dst,
    ):
        if mask.any():
            return rows[mask]
    return rows


def _setup_seconds(setup: pd.DataFrame, path: str, ops: Sequence[str], src: str, dst: str, nbytes: int) -> float:
    """Total median seconds of the path's setup ops for a transfer of `nbytes`: an op
    measured at several sizes costs what it cost at this size (or the next larger
    size measured, or the largest); an op measured once costs that. NaN: none found."""
    total, found = 0.0, False
    for op in ops:
        rows = _setup_rows(setup, path, op, src, dst)
        if rows is None:
            continue
        found = True
        if rows["bytes"].nunique() > 1:
            at = rows[rows["bytes"] == nbytes]
            if at.empty:
                larger = rows[rows["bytes"] > nbytes]
                at = larger[larger["bytes"] == larger["bytes"].min()] if len(larger) else \
                    rows[rows["bytes"] == rows["bytes"].max()]
            total += float(at["median_s"].max())
        else:
            total += float(rows["median_s"].max())
    return total if found else math.nan


def _crossing(sizes: Sequence[int], wins: Sequence[bool]) -> Crossing:
    runs: list[tuple[int, int]] = []
    start = None
    for i, (size, won) in enumerate(zip(sizes, wins)):
        if won and start is None:
            start = i
        if start is not None and (not won or i == len(sizes) - 1):
            end = i if won else i - 1
            runs.append((int(sizes[start]), int(sizes[end])))
            start = None
    if not wins or not wins[-1]:
        return Crossing(None, None, tuple(runs))
    k = len(wins) - 1
    while k > 0 and wins[k - 1]:
        k -= 1
    return Crossing(int(sizes[k]), int(sizes[k - 1]) if k > 0 else None, tuple(runs))


# --------------------------------------------------------------------------- comparing runs

COMPARE_KEYS: tuple[str, ...] = ("scenario", "path", "variant", "metric", "src", "dst", "bytes", "workers")


def compare(summaries: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Ratios of medians between runs: every run after the first against the first,
    matched on COMPARE_KEYS (sharing and ceiling may differ between machines).

    Columns: COMPARE_KEYS, run (1, 2, ... the index of the other run), base_gbps,
    other_gbps, base_s, other_s, ratio. ratio is other/base of median GB/s for
    bandwidth rows (above 1: the other run is faster) and of median seconds for
    latency and setup rows (below 1: the other run is faster). Rows measured in only
    one of the two runs are kept with NaN on the missing side."""
    keys = list(COMPARE_KEYS)
    value_cols = ["median_s", "median_gbps"]
    if len(summaries) < 2:
        raise ValueError("compare needs two summaries or more")
    base = summaries[0][keys + value_cols].drop_duplicates(keys)
    parts = []
    for k, other in enumerate(summaries[1:], start=1):
        merged = base.merge(other[keys + value_cols].drop_duplicates(keys), on=keys, how="outer",
                            suffixes=("_base", "_other"), sort=False)
        merged.insert(len(keys), "run", k)
        parts.append(merged)
    out = pd.concat(parts, ignore_index=True).rename(columns={
        "median_s_base": "base_s", "median_s_other": "other_s",
        "median_gbps_base": "base_gbps", "median_gbps_other": "other_gbps",
    })
    bandwidth = out["metric"] == "bandwidth"
    out["ratio"] = np.where(bandwidth, out["other_gbps"] / out["base_gbps"], out["other_s"] / out["base_s"])
    out = _order_like(out, summaries)
    return out[keys + ["run", "base_gbps", "other_gbps", "base_s", "other_s", "ratio"]].reset_index(drop=True)


def _order_like(out: pd.DataFrame, summaries: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Rows in the order of the first run's summary, then the others' rows it lacks."""
    order: dict[tuple, int] = {}
    for summary in summaries:
        for key in summary[list(COMPARE_KEYS)].itertuples(index=False, name=None):
            order.setdefault(tuple(key), len(order))
    ranks = [order.get(tuple(k), len(order)) for k in out[list(COMPARE_KEYS)].itertuples(index=False, name=None)]
    return out.assign(_r=ranks).sort_values(["run", "_r"], kind="stable").drop(columns="_r")


__all__ = [
    "AMORTISE_OVER", "Band", "BreakEven", "COMPARE_KEYS", "Crossing", "GROUP_KEYS", "LinkVerdict",
    "SETUP_COSTS", "SUMMARY_COLUMNS", "StabilityWarning", "TIE", "break_even", "compare",
    "stability_warnings", "summarize", "verdicts",
]
