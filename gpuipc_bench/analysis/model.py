"""One run, analysed once: the figures, the decisions and the warnings, as data every report
renders (the terminal's summary and report, Markdown, JSON, plots) and none recomputes.

The answer (`Answer`) is the decisions arranged in sections of bands, one answer per link class
for GPU pairs. How it is built: docs/methods/answer-model.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from gpuipc_bench.analysis import stats
from gpuipc_bench.analysis.handover import Handover, handovers
from gpuipc_bench.analysis.lanes import with_lanes
from gpuipc_bench.analysis.bands import Band, bands, changes
from gpuipc_bench.analysis.breakeven import AMORTISE_OVER, BreakEven, break_even
from gpuipc_bench.analysis.conditions import is_gpu, link_rank, records, with_mps_shares
from gpuipc_bench.analysis.summary import SETUP_INTERVAL_SAMPLES, samples_by_condition, samples_by_replica, summarize
from gpuipc_bench.analysis.verdict import MEASURE_ORDER, MIXED, Decision, Figure, candidates, ceiling_times, decide, \
    set_medians
from gpuipc_bench.analysis.mechanisms import declaration_order
from gpuipc_bench.analysis.transport import Fallback, fallbacks
from gpuipc_bench.analysis.warnings import (
    FAILED_VERIFICATION, StabilityWarning, clock_warnings, lane_warnings, stability_warnings,
)
from gpuipc_bench.paths import PathInfo, from_metadata

SHARING_ORDER = ("exclusive", "time-sliced", "none", "mps", "mig")


@dataclasses.dataclass(frozen=True)
class Section:
    """The bands of one link (or one class of GPU pairs), sharing mode and measure.
    primary: the run's main sharing mode (False: only the sizes where this mode changes the
    choice are kept); links: the (src, dst) pairs in it; link_class: the NVML link of its
    GPU pairs ('' for a link within one GPU, to or from the host, or of unknown kind)."""

    links: tuple[tuple[str, str], ...]
    sharing: str
    measure: str
    bands: tuple[Band, ...]
    primary: bool = True
    link_class: str = ""

    @property
    def cross_gpu(self) -> bool:
        return any(is_gpu(s) and is_gpu(d) and s != d for s, d in self.links)

    @property
    def grouped(self) -> bool:
        return len(self.links) > 1


@dataclasses.dataclass(frozen=True)
class SetupCost:
    """A path's set-up: the sum of its declared operations' medians (lo..hi: their medians'
    intervals, or their samples' range below SETUP_INTERVAL_SAMPLES: `ranged`)."""

    path: str
    median_s: float
    lo_s: float
    hi_s: float
    samples: int
    ranged: bool
    size_dependent: bool = False
    min_s: float = math.nan  # size-dependent: the cost at the smallest size


@dataclasses.dataclass(frozen=True)
class Answer:
    decisions: tuple[Decision, ...]
    sections: tuple[Section, ...]
    setup: tuple[SetupCost, ...]
    relevant: tuple[StabilityWarning, ...]  # the warnings that could change a line
    handover: tuple[Handover, ...] = ()  # one GPU's hand-over cost per sharing mode (analysis.handover)

    @property
    def shown(self) -> list[Decision]:
        return [d for s in self.sections for b in s.bands for d in b.decisions]


@dataclasses.dataclass
class RunAnalysis:
    """Everything a report shows of one run, computed once."""

    frame: pd.DataFrame
    meta: dict[str, str]
    paths: dict[str, PathInfo]
    schema: int
    summary: pd.DataFrame
    samples: dict[tuple, np.ndarray]
    candidates: pd.DataFrame
    warnings: list[StabilityWarning]
    answer: Answer
    break_even: list[BreakEven]
    min_effect: float
    amortise_over: int
    fallbacks: list[Fallback] = dataclasses.field(default_factory=list)  # transport-fallback
    # the decisions as decided, before the answer shows each with its band's choice (the
    # resampling's query asks them what is open: harness.resample.query_of)
    decided: tuple = ()


def analyse(df: pd.DataFrame, meta: Mapping[str, str], min_effect: float | None = None,
            amortise_over: int | None = None) -> RunAnalysis:
    """Summary, warnings, decisions and break-even of one run."""
    min_effect = stats.MIN_EFFECT if min_effect is None else min_effect
    amortise_over = AMORTISE_OVER if amortise_over is None else amortise_over
    paths = from_metadata(meta)
    try:
        schema = int(str(meta.get("schema_version", "")).strip())
    except ValueError:
        schema = 0
    mixed = schema < 2  # schema 1 told neither the measure nor the roles: rank the old way, and say so
    df = with_mps_shares(df)  # 'mps:25' is a sharing mode of its own
    samples = samples_by_condition(df)
    summary = summarize(df, samples=samples, paths=paths, meta=meta)
    ranked = rows = candidates(summary, paths)
    summary["candidate"] = summary.index.isin(rows.index[rows["metric"] == "bandwidth"]) if not rows.empty \
        else False
    if mixed and not rows.empty:
        rows = rows.assign(measure=MIXED)
    setup = setup_costs(summary, paths)
    order = declared_order(summary, paths)
    decisions = with_lanes(decide_all(rows, summary, samples, paths, setup, min_effect, order,
                                      samples_by_replica(df)), df)
    decided = tuple(decisions)
    warnings = stability_warnings(summary, samples)
    warnings += clock_warnings(df, meta)
    warnings += lane_warnings(df, meta)
    arranged, decisions = arrange(decisions, meta, setup, order)
    return RunAnalysis(
        frame=df, meta=dict(meta), paths=paths, schema=schema, summary=summary, samples=samples, candidates=rows,
        warnings=warnings,
        answer=Answer(tuple(decisions), tuple(arranged), tuple(setup.values()),
                      tuple(relevant_warnings(warnings, decisions, rows)), tuple(handovers(summary))),
        break_even=break_even(summary, paths, samples, amortise_over=amortise_over, mixed_measures=mixed,
                              ranked=ranked),
        min_effect=min_effect, amortise_over=amortise_over, fallbacks=fallbacks(df, summary, meta), decided=decided,
    )


# --------------------------------------------------------------------------- decisions


def decide_all(rows: pd.DataFrame, summary: pd.DataFrame, samples: Mapping[tuple, np.ndarray],
               paths: Mapping[str, PathInfo], setup: Mapping[str, SetupCost],
               min_effect: float = stats.MIN_EFFECT, order: Callable[[str], tuple] | None = None,
               replicas: Mapping[tuple, tuple[np.ndarray, ...]] | None = None) -> list[Decision]:
    """Every decision of a run, in link, sharing, measure and size order. `replicas`: the
    samples per process set of the conditions measured by more than one (samples_by_replica)."""
    if rows.empty:
        return []
    ceilings = ceiling_times(summary)
    order = order or declared_order(summary, paths)

    cost = setup_interval(setup, paths)
    out = []
    for figures in figures_by_size(rows, samples, replicas).values():
        found = decide(figures, ceilings, cost, order, min_effect)
        if found is not None:
            out.append(found)
    return sorted(out, key=lambda d: (link_rank(d.src, d.dst), _sharing_rank(d.sharing), _measure_rank(d.measure),
                                      d.bytes))


def figures_by_size(rows: pd.DataFrame, samples: Mapping[tuple, np.ndarray],
                    replicas: Mapping[tuple, tuple[np.ndarray, ...]] | None = None) -> dict[tuple, list[Figure]]:
    """The candidates' figures of each size, by (src, dst, sharing, measure, bytes) in the order the
    rows first show them (rows with a key missing are in none): each row's samples, its samples per
    process set (`replicas`) and its median in each set (set_medians)."""
    if rows.empty:
        return {}
    group = rows.groupby(["src", "dst", "sharing", "measure", "bytes"], sort=False).ngroup().to_numpy()
    parts: list[list] = [[] for _ in range(int(group.max()) + 1)]
    for g, r in zip(group.tolist(), records(rows)):
        if g >= 0:
            parts[g].append(r)
    return {(str(part[0].src), str(part[0].dst), str(part[0].sharing), str(part[0].measure), int(part[0].bytes)):
            [Figure(r.label, r, np.asarray(samples.get(r.condition, ()), dtype=float),
                    tuple((replicas or {}).get(r.condition, ())), set_medians(r, replicas)) for r in part]
            for part in parts if part}


def setup_interval(setup: Mapping[str, SetupCost], paths: Mapping[str, PathInfo]
                   ) -> Callable[[str], tuple[float, float, float]]:
    """A label's set-up cost as (lo, median, hi) seconds: its path's measured one; nothing
    (zeros) for a declared path that declares no set-up operation (staging); NaN where a
    path's operations were not measured (unknown: it separates from nothing)."""
    def cost(label: str) -> tuple[float, float, float]:
        path = label.partition("/")[0]
        found = setup.get(path)
        if found is not None:
            return (found.lo_s, found.median_s, found.hi_s)
        info = paths.get(path)
        return (0.0, 0.0, 0.0) if info is not None and not info.setup else (math.nan,) * 3

    return cost


def declared_order(summary: pd.DataFrame, paths: Mapping[str, PathInfo]) -> Callable[[str], tuple]:
    """A path/variant's place: its path's among the declared paths, then its variant's in the
    mechanism table (mechanisms.py: ce, push, sm), then its name: the same in every run."""
    path_rank = {p: i for i, p in enumerate(paths)}

    def order(lab: str) -> tuple:
        path, _, variant = lab.partition("/")
        return (path_rank.get(path, len(path_rank)), declaration_order(path, variant), variant)

    return order


def _sharing_rank(sharing: str) -> tuple:
    """SHARING_ORDER's; a share of MPS ('mps:25') after MPS itself, the larger share first."""
    mode, _, share = sharing.partition(":")
    return (SHARING_ORDER.index(mode) if mode in SHARING_ORDER else len(SHARING_ORDER),
            -int(share) if share.isdigit() else -100, sharing)


def _measure_rank(measure: str) -> int:
    return MEASURE_ORDER.index(measure) if measure in MEASURE_ORDER else len(MEASURE_ORDER)


def setup_costs(summary: pd.DataFrame, paths: Mapping[str, PathInfo]) -> dict[str, SetupCost]:
    """Each path's set-up cost (the operations it declares), by path in declared order. An
    operation measured on several links or sizes counts at its dearest median (the largest
    size's, for one measured per size: `size_dependent`, with the smallest size's in min_s)."""
    setup = summary.loc[summary["metric"] == "setup",  # only the columns read: its cuts copy fewer
                        ["path", "variant", "bytes", "samples", "median_s", "ci_lo_s", "ci_hi_s", "min_s", "max_s"]]
    by_operation: dict[tuple, list] = {}  # (path, operation) -> its rows, both in summary order
    for r in records(setup):
        by_operation.setdefault((r.path, r.variant), []).append(r)
    out: dict[str, SetupCost] = {}
    for info in paths.values():
        ops = [rows for (path, variant), rows in by_operation.items() if path == info.name and variant in info.setup]
        if not ops:
            continue
        total = [0.0, 0.0, 0.0, 0.0]
        n, ranged, by_size = 10 ** 9, False, False
        for rows in ops:
            sizes = [r.bytes for r in rows]
            by_size |= len(set(sizes)) > 1
            row = _dearest([r for r in rows if r.bytes == max(sizes)])
            smallest = _dearest([r for r in rows if r.bytes == min(sizes)])
            few = int(row.samples) < SETUP_INTERVAL_SAMPLES or not math.isfinite(row.ci_lo_s)
            lo, hi = (row.min_s, row.max_s) if few else (row.ci_lo_s, row.ci_hi_s)
            for k, v in enumerate((lo, row.median_s, hi, smallest.median_s)):
                total[k] += float(v)
            n, ranged = min(n, int(row.samples)), ranged or few
        out[info.name] = SetupCost(info.name, total[1], total[0], total[2], n, ranged, by_size, total[3])
    return out


def _dearest(rows: Sequence[Any]) -> Any:
    """The row of the largest median, the last of equal ones; a NaN one (unmeasured) before any
    (where a stable sort on the median, NaN last, ends)."""
    found = rows[0]
    for r in rows[1:]:
        if math.isnan(r.median_s) or (not math.isnan(found.median_s) and r.median_s >= found.median_s):
            found = r
    return found


# --------------------------------------------------------------------------- sections


def sections(decisions: Sequence[Decision], meta: Mapping[str, str],
             setup: Mapping[str, SetupCost] | None = None,
             order: Callable[[str], tuple] | None = None) -> list[Section]:
    """The decisions arranged for reading (see the module's docstring and bands.py)."""
    found, _ = arrange(decisions, meta, setup, order)
    return found


def arrange(decisions: Sequence[Decision], meta: Mapping[str, str],
            setup: Mapping[str, SetupCost] | None = None,
            order: Callable[[str], tuple] | None = None) -> tuple[list[Section], list[Decision]]:
    """(the sections, the decisions each shown with its band's choice): every sharing mode of
    a link is banded whole; the main mode's bands are its sections; a second mode keeps the
    sizes where it changes the main mode's choice (bands.changes), its bands cut to them."""
    cost = setup_interval(setup or {}, from_metadata(meta))

    ordered = order or _declared
    counts: dict[tuple[str, str], dict[str, int]] = {}
    for d in decisions:
        per_link = counts.setdefault(d.link, {})
        per_link[d.sharing] = per_link.get(d.sharing, 0) + 1
    primary = {link: min(c, key=lambda s: (-c[s], _sharing_rank(s))) for link, c in counts.items()}
    groups: dict[tuple, list[Decision]] = {}
    for d in decisions:
        cls = link_class(meta, d.src, d.dst)
        groups.setdefault((cls or d.link, d.sharing, d.measure, d.sharing == primary[d.link]), []).append(d)
    banded = {key: bands(found, cost, ordered) for key, found in groups.items()}
    shown: dict[int, Decision] = {}  # id of a decision -> it with its band's choice
    chosen: dict[tuple, tuple[Decision, Band]] = {}  # the main mode's, by (src, dst, measure, bytes)
    for key, found in banded.items():
        for band in found:
            for d in band.decisions:
                shown[id(_original(d, groups[key]))] = d
            if key[3]:
                for d in (*band.decisions, *band.differ, *band.others):
                    chosen[(d.src, d.dst, d.measure, d.bytes)] = (d, band)
    out = []
    for (where, sharing, measure, main), found in banded.items():
        if not main:
            found = _changed(found, chosen)
        if not found:
            continue
        links = tuple(sorted({d.link for b in found for d in (*b.decisions, *b.differ, *b.others)},
                             key=lambda k: link_rank(*k)))
        out.append(Section(links, sharing, measure, tuple(found), main, where if isinstance(where, str) else ""))
    out.sort(key=lambda s: (s.cross_gpu, min(link_rank(a, b) for a, b in s.links), s.link_class,
                            _sharing_rank(s.sharing), not s.primary, _measure_rank(s.measure)))
    return out, [shown.get(id(d), d) for d in decisions]


def _original(shown: Decision, found: Sequence[Decision]) -> Decision:
    return next(d for d in found if (d.src, d.dst, d.bytes) == (shown.src, shown.dst, shown.bytes))


def _declared(label: str) -> tuple:
    path, _, variant = label.partition("/")
    return (declaration_order(path, variant), label)


def _changed(found: Sequence[Band], chosen: Mapping[tuple, tuple[Decision, Band]]) -> list[Band]:
    """A second mode's bands cut to the sizes where it changes the main mode's choice, split
    where a size between them does not."""
    out = []
    for band in found:
        kept: list[list[int]] = []
        for size in band.sizes:
            here = [d for d in band.decisions if d.bytes == size]
            if any(_changes(chosen.get((d.src, d.dst, d.measure, d.bytes)), d) for d in here):
                if kept and kept[-1][-1] == band.sizes[band.sizes.index(size) - 1]:
                    kept[-1].append(size)
                else:
                    kept.append([size])
        out += [band.only(run) for run in kept]
    return out


def _changes(main: tuple[Decision, Band] | None, other: Decision) -> bool:
    if main is None:
        return changes(None, other)
    d, band = main
    return changes(d, other, band.pick, band.pool)


def link_class(meta: Mapping[str, str], src: str, dst: str) -> str:
    """The NVML link between two GPUs from the header ('NV18', 'PCIe ...'); '' when unknown."""
    if not (is_gpu(src) and is_gpu(dst)) or src == dst:
        return ""
    a, b = sorted((int(src), int(dst)))
    return str(meta.get(f"link.{a}-{b}", "")).strip()


# --------------------------------------------------------------------------- warnings that matter


def relevant_warnings(warnings: Sequence[StabilityWarning], decisions: Sequence[Decision],
                      rows: pd.DataFrame) -> list[StabilityWarning]:
    """The warnings that could change a line of the answer: on a figure compared at some
    decision whose samples' range reaches the leader's range widened by delta, or a failed
    verification of a figure that could have been a candidate."""
    at = {(d.src, d.dst, d.sharing, d.bytes, d.measure): d for d in decisions}
    ranges = {}
    for r in records(rows):
        ranges[(r.path, r.variant, r.src, r.dst, r.sharing, int(r.bytes), r.condition[3])] = (r.min_s, r.max_s,
                                                                                             r.measure)
    out = []
    for w in warnings:
        found = ranges.get((w.path, w.variant, w.src, w.dst, w.sharing, int(w.bytes), w.measure))
        if found is None:
            if w.cause == FAILED_VERIFICATION and w.metric == "bandwidth":
                out.append(w)
            continue
        lo, hi, measure = found
        d = at.get((w.src, w.dst, w.sharing, int(w.bytes), measure))
        if d is None:
            continue
        lead_lo, lead_hi = d.leader_range
        if lo <= lead_hi * (1 + d.delta) and hi >= lead_lo * (1 - d.delta):
            out.append(w)
    return out
