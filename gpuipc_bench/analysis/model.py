"""One run, analysed once: the figures, the decisions and the warnings, as data every report
renders (the terminal's summary and report, Markdown, JSON, plots) and none recomputes.

The answer (`Answer`) is the decisions (verdict.decide: per link, sharing mode, measure and
size) arranged for reading: sections of bands, a band being consecutive sizes with one
choice. A second sharing mode of a link (the mode with the most decisions on it first)
keeps only the sizes where it changes the choice. Warnings that could change a line of the
answer (the figure's range reaches the leader's samples' range +- delta) are `relevant`;
the rest are for the full report.

One answer per link class. GPU pairs (src != dst) of one link class (the header's NVML
link, `link.A-B`: NV18, PIX, PXB, PHB, NODE, SYS...) form one section per sharing mode and
measure. Figures of different pairs are never pooled into one comparison: each pair decides
on its own samples first (verdict.decide), then the class's choice at a size is, among the
pairs' own choices, the one the fewest pairs reject, then the one the most pairs hold,
then the cheapest to set up, then the fastest. A pair *holds* a choice that is its own, in
its winning class or shown the same; it *rejects* one its own choice beats beyond delta (by
its samples where it measured it; by the medians, against the choice's fastest median on
the pairs that did, where it did not: the pairs of one class are taken to be alike, which
the spread shown tests). So where every pair agrees, or is the same or undecided, the class
answer is their choice; otherwise it is the majority's, and the pairs that reject it are
named with their own choice and how much slower the class's is there (Band.differ). A pair
that did not measure the choice and does not reject it is neither (the line says which
pairs the figure is from). A band is bridged over sizes where its choice, winning on both
sides, was measured on no pair, and says so (Band.unmeasured).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from gpuipc_bench.analysis import stats
from gpuipc_bench.analysis.breakeven import AMORTISE_OVER, BreakEven, break_even
from gpuipc_bench.analysis.conditions import is_gpu, link_rank
from gpuipc_bench.analysis.summary import SETUP_INTERVAL_SAMPLES, samples_by_condition, summarize
from gpuipc_bench.analysis.verdict import MEASURE_ORDER, MIXED, Decision, Figure, candidates, ceiling_times, decide
from gpuipc_bench.analysis.warnings import FAILED_VERIFICATION, StabilityWarning, stability_warnings
from gpuipc_bench.paths import PathInfo, from_metadata

SHARING_ORDER = ("exclusive", "time-sliced", "none", "mps", "mig")


@dataclasses.dataclass(frozen=True)
class Band:
    """Consecutive sizes of a section with one choice. decisions: every pair's decision at
    those sizes that measured the choice and holds it or cannot tell it from its own (one
    per size for one link); differ: the decisions of the pairs that reject the choice
    (model.bands; they are named); unmeasured: sizes bridged, where the choice, winning on both
    sides, was measured on no pair."""

    decisions: tuple[Decision, ...]
    choice: str = ""
    differ: tuple[Decision, ...] = ()
    unmeasured: tuple[int, ...] = ()
    others: tuple[Decision, ...] = ()  # the pairs' that did not measure the choice and do not reject it

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(sorted({d.bytes for d in self.decisions}))

    @property
    def lo(self) -> int:
        return self.sizes[0]

    @property
    def hi(self) -> int:
        return self.sizes[-1]

    @property
    def pick(self) -> str:
        """The one to use over the band."""
        return self.choice or self.decisions[0].choice

    @property
    def first(self) -> Decision:
        """A decision whose choice is the band's (the first one)."""
        return next((d for d in self.decisions if d.choice == self.pick), self.decisions[0])

    def at(self, nbytes: int) -> list[Decision]:
        return [d for d in self.decisions if d.bytes == nbytes]


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
    summary = summarize(df, paths=paths, meta=meta)
    samples = samples_by_condition(df)
    rows = candidates(summary, paths)
    summary["candidate"] = summary.index.isin(rows.index[rows["metric"] == "bandwidth"]) if not rows.empty \
        else False
    if mixed and not rows.empty:
        rows = rows.assign(measure=MIXED)
    setup = setup_costs(summary, paths)
    decisions = decide_all(rows, summary, samples, paths, setup, min_effect)
    warnings = stability_warnings(summary, samples)
    return RunAnalysis(
        frame=df, meta=dict(meta), paths=paths, schema=schema, summary=summary, samples=samples, candidates=rows,
        warnings=warnings,
        answer=Answer(tuple(decisions), tuple(sections(decisions, meta, setup)), tuple(setup.values()),
                      tuple(relevant_warnings(warnings, decisions, rows))),
        break_even=break_even(summary, paths, samples, amortise_over=amortise_over, mixed_measures=mixed),
        min_effect=min_effect, amortise_over=amortise_over,
    )


# --------------------------------------------------------------------------- decisions


def decide_all(rows: pd.DataFrame, summary: pd.DataFrame, samples: Mapping[tuple, np.ndarray],
               paths: Mapping[str, PathInfo], setup: Mapping[str, SetupCost],
               min_effect: float = stats.MIN_EFFECT) -> list[Decision]:
    """Every decision of a run, in link, sharing, measure and size order."""
    if rows.empty:
        return []
    ceilings = ceiling_times(summary)
    path_rank = {p: i for i, p in enumerate(paths)}
    variant_rank = {v: i for i, v in enumerate(pd.unique(summary["variant"]))}

    def order(lab: str) -> tuple:
        path, _, variant = lab.partition("/")
        return (path_rank.get(path, len(path_rank)), variant_rank.get(variant, len(variant_rank)))

    def cost(path: str, nbytes: int) -> float:
        found = setup.get(path)
        return found.median_s if found is not None else math.nan

    out = []
    for _, part in rows.groupby(["src", "dst", "sharing", "measure", "bytes"], sort=False):
        figures = [Figure(r.label, r, np.asarray(samples.get(r.condition, ()), dtype=float))
                   for r in part.itertuples(index=False)]
        found = decide(figures, ceilings, cost, order, min_effect)
        if found is not None:
            out.append(found)
    return sorted(out, key=lambda d: (link_rank(d.src, d.dst), _sharing_rank(d.sharing), _measure_rank(d.measure),
                                      d.bytes))


def _sharing_rank(sharing: str) -> tuple:
    return (SHARING_ORDER.index(sharing) if sharing in SHARING_ORDER else len(SHARING_ORDER), sharing)


def _measure_rank(measure: str) -> int:
    return MEASURE_ORDER.index(measure) if measure in MEASURE_ORDER else len(MEASURE_ORDER)


def setup_costs(summary: pd.DataFrame, paths: Mapping[str, PathInfo]) -> dict[str, SetupCost]:
    """Each path's set-up cost (the operations it declares), by path in declared order. An
    operation measured on several links or sizes counts at its dearest median (the largest
    size's, for one measured per size: `size_dependent`, with the smallest size's in min_s)."""
    setup = summary[summary["metric"] == "setup"]
    out: dict[str, SetupCost] = {}
    for info in paths.values():
        ops = setup[(setup["path"] == info.name) & setup["variant"].isin(info.setup)]
        if ops.empty:
            continue
        total = [0.0, 0.0, 0.0, 0.0]
        n, ranged, by_size = 10 ** 9, False, False
        for _, rows in ops.groupby("variant", sort=False):
            by_size |= rows["bytes"].nunique() > 1
            largest = rows[rows["bytes"] == rows["bytes"].max()]
            row = largest.sort_values("median_s", kind="stable").iloc[-1]
            smallest = rows[rows["bytes"] == rows["bytes"].min()].sort_values("median_s", kind="stable").iloc[-1]
            few = int(row["samples"]) < SETUP_INTERVAL_SAMPLES or not math.isfinite(row["ci_lo_s"])
            lo, hi = (row["min_s"], row["max_s"]) if few else (row["ci_lo_s"], row["ci_hi_s"])
            for k, v in enumerate((lo, row["median_s"], hi, smallest["median_s"])):
                total[k] += float(v)
            n, ranged = min(n, int(row["samples"])), ranged or few
        out[info.name] = SetupCost(info.name, total[1], total[0], total[2], n, ranged, by_size, total[3])
    return out


# --------------------------------------------------------------------------- sections


def sections(decisions: Sequence[Decision], meta: Mapping[str, str],
             setup: Mapping[str, SetupCost] | None = None) -> list[Section]:
    """The decisions arranged for reading (see the module's docstring)."""
    def cost(lab: str) -> float:
        found = (setup or {}).get(lab.partition("/")[0])
        return found.median_s if found is not None and math.isfinite(found.median_s) else math.inf

    counts: dict[tuple[str, str], dict[str, int]] = {}
    for d in decisions:
        per_link = counts.setdefault(d.link, {})
        per_link[d.sharing] = per_link.get(d.sharing, 0) + 1
    primary = {link: min(c, key=lambda s: (-c[s], _sharing_rank(s))) for link, c in counts.items()}
    chosen = {(d.src, d.dst, d.measure, d.bytes): d for d in decisions if d.sharing == primary[d.link]}
    groups: dict[tuple, list[Decision]] = {}
    for d in decisions:
        main = d.sharing == primary[d.link]
        if not main and not changes(chosen.get((d.src, d.dst, d.measure, d.bytes)), d):
            continue
        cls = link_class(meta, d.src, d.dst)
        groups.setdefault((cls or d.link, d.sharing, d.measure, main), []).append(d)
    out = []
    for (where, sharing, measure, main), found in groups.items():
        links = tuple(sorted({d.link for d in found}, key=lambda k: link_rank(*k)))
        out.append(Section(links, sharing, measure, tuple(bands(found, cost)), main,
                           where if isinstance(where, str) else ""))
    return sorted(out, key=lambda s: (s.cross_gpu, min(link_rank(a, b) for a, b in s.links), s.link_class,
                                      _sharing_rank(s.sharing), not s.primary, _measure_rank(s.measure)))


def changes(main: Decision | None, other: Decision) -> bool:
    """Whether a decision in a second sharing mode changes the main mode's at its size: the
    main mode decided nothing there; or the other mode chose otherwise, having compared the
    main mode's choice too, or with a choice faster (by more than delta) than the main
    mode's (a path measured in one mode only does not change a choice by being alone)."""
    if main is None:
        return True
    if _holds(main.choice, other) or other.choice == main.choice:
        return False
    return main.choice in other.compared or other.choice_s[1] * (1 + other.delta) < main.choice_s[1]


def bands(decisions: Sequence[Decision], cost=lambda label: math.inf) -> list[Band]:
    """The decisions of one section (one link, or the GPU pairs of one link class) as bands of
    consecutive sizes with one choice.

    At each size the candidates are the pairs' own choices; the class's is the one the
    fewest pairs reject (a pair rejects a candidate when its own choice is faster beyond
    delta: shown by its samples where it measured the candidate, by the medians where it
    did not), then the one the most pairs hold (their choice, in their winning class or
    shown the same), then the cheapest to set up, then the fastest figure; for one link,
    the link's own choice. A pair that did not measure the choice and does not reject it
    is in neither list (the figure says which pairs it is from). A size joins the band
    before it when the band's choice is as well supported there and costs no more to set up
    (never when it is only undecided against a pair's choice). Pairs that reject the choice
    are the band's `differ`. A band is bridged over sizes where its choice wins
    on both sides and no pair measured it (`unmeasured`). `cost`: a path/variant's set-up
    seconds."""
    by_size: dict[int, list[Decision]] = {}
    for d in decisions:
        by_size.setdefault(d.bytes, []).append(d)
    out: list[Band] = []
    for size in sorted(by_size):
        here = by_size[size]
        prev = out[-1].choice if out else None
        choice = _choose(here, cost, prev)
        ref = _fastest(choice, here)
        agree = sorted((d for d in here if choice in d.compared and not _rejects(d, choice, ref)),
                       key=lambda d: d.choice != choice)
        differ = tuple(d for d in here if _rejects(d, choice, ref))
        others = tuple(d for d in here if choice not in d.compared and not _rejects(d, choice, ref))
        if out and prev == choice:
            last = out[-1]
            out[-1] = dataclasses.replace(last, decisions=last.decisions + tuple(agree), differ=last.differ + differ,
                                          others=last.others + others)
        else:
            out.append(Band(tuple(agree), choice, differ, (), others))
    return _bridge(out)


def _rejects(d: Decision, choice: str, ref: float) -> bool:
    """Whether a pair's decision rejects `choice`: its own choice is faster beyond delta, as
    its samples show where it measured `choice`, or as the medians show where it did not
    (`ref`: the median of `choice` on the pairs that measured it)."""
    if choice in d.compared:
        return not _holds(choice, d) and choice not in d.close
    return d.choice_s[1] * (1 + d.delta) < ref


def _support(choice: str, decisions: Sequence[Decision]) -> tuple[int, int]:
    """(how many pairs reject choice, minus how many hold it)."""
    ref = _fastest(choice, decisions)
    return sum(_rejects(d, choice, ref) for d in decisions), -sum(_holds(choice, d) for d in decisions)


def _fastest(choice: str, decisions: Sequence[Decision]) -> float:
    found = [t for t in (d.median_of(choice) for d in decisions) if math.isfinite(t)]
    return min(found) if found else math.inf


def _choose(decisions: Sequence[Decision], cost, prev: str | None) -> str:
    names = list(dict.fromkeys(d.choice for d in decisions))
    best = min(names, key=lambda c: (_support(c, decisions), cost(c), _fastest(c, decisions)))
    if prev is not None and prev != best and any(prev in d.compared for d in decisions) \
            and _support(prev, decisions) == _support(best, decisions) and cost(prev) <= cost(best):
        return prev
    return best


def _bridge(found: list[Band]) -> list[Band]:
    out: list[Band] = []
    for band in found:
        if len(out) >= 2 and out[-2].choice == band.choice \
                and not any(band.choice in d.compared for d in out[-1].decisions + out[-1].differ + out[-1].others):
            gap, before = out.pop(), out.pop()
            band = Band(before.decisions + band.decisions, band.choice, before.differ + band.differ,
                        tuple(sorted(before.unmeasured + gap.sizes + band.unmeasured)), before.others + band.others)
        out.append(band)
    return out


def _holds(choice: str, d: Decision) -> bool:
    """Whether `choice` is as good as the choice of decision d: it, in its class or the same."""
    return choice == d.choice or (choice in d.members or choice in d.same) and choice not in d.close


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
    for r in rows.itertuples(index=False):
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
