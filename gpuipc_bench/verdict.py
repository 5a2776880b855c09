"""The verdict: which path is fastest at which size, and from which size a setup cost pays off.

Candidates (`candidates`) are the bandwidth figures of paths between the same two processes:
role transfer or baseline (paths.py), not a single-process reference variant (peer
'p2p-off'), two workers, bytes verified. Aggregates of N processes, CPU references and
ceilings never compete. They are compared within one link (src -> dst), one sharing mode
and one measure (`handoff`: the time per transfer a program pays, what decides small
sizes; `stream`: pipelined throughput); a schema-1 file knew no measures and is ranked
with them mixed (`mixed_measures`), which the report says.

At each size the figure with the fastest median leads; another figure is tied with it
unless a Mann-Whitney U test on the two sets of samples says they differ (two-sided
p < ALPHA, as benchstat and Google Benchmark's compare.py decide) *and* the medians are
at least `min_effect` apart. Two figures that are the same copy are tied as well when they
sit within `min_effect` of each other as fractions of their own ceilings (`same_copy`):
up to a few MiB a copy's time is mostly a fixed cost per copy that differs by up to 9%
between processes (gpu/ceilings.py), so a gap their ceilings show too is not the paths'.
A group that is unstable (analysis: too few samples, bimodal, a wide interval) is not
ranked; the verdict names it and says why. Adjacent sizes merge into one band while some
figure stays among the leaders (the fastest, or tied with it) at every size, so a band's
winner is the fastest median at each of its sizes or statistically tied with it.

Break-even: a path with a setup cost against the baseline path (staging) on the same
link, sharing mode and measure: setup / N + t_path(size) < t_baseline(size), with the
setup paid once per N transfers and with every transfer, on the medians and on the ends
of their intervals ("between X and Y" when they disagree).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from gpuipc_bench import robust
from gpuipc_bench.analysis import ABOVE_CEILING, condition, is_gpu, link_rank
from gpuipc_bench.paths import PathInfo

MIN_EFFECT = 0.02  # medians closer than this are a tie, however significant
SAME_COPY_FRACTION = 0.9  # a figure this close to its ceiling is the ceiling's copy, with little else in it
ALPHA = 0.05  # the U test's two-sided significance level
AMORTISE_OVER = 1000
MIXED = "mixed"  # the measure of a ranking over a schema-1 file
MEASURE_ORDER = ("handoff", "stream", MIXED)


def label(path: str, variant: str) -> str:
    return f"{path}/{variant}"


# --------------------------------------------------------------------------- the U test


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test of a against b: exact (the distribution
    of U counted) when there are no ties and each side has at most EXACT_MAX samples, else
    the normal approximation with the tie correction and a continuity correction.
    1.0 when either side is empty or every value is the same."""
    a = [float(x) for x in a if math.isfinite(x)]
    b = [float(x) for x in b if math.isfinite(x)]
    m, n = len(a), len(b)
    if not m or not n:
        return 1.0
    ranks = _midranks(a + b)
    u = sum(ranks[:m]) - m * (m + 1) / 2
    ties = _tie_sizes(a + b)
    if not any(t > 1 for t in ties) and max(m, n) <= EXACT_MAX:
        counts = _u_counts(m, n)
        total = sum(counts)
        k = round(u)
        below = sum(counts[: k + 1]) / total
        above = sum(counts[k:]) / total
        return min(1.0, 2 * min(below, above))
    big = m + n
    variance = m * n / 12 * ((big + 1) - sum(t ** 3 - t for t in ties) / (big * (big - 1)))
    if variance <= 0:
        return 1.0
    z = max(0.0, abs(u - m * n / 2) - 0.5) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))


EXACT_MAX = 25


def _midranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _tie_sizes(values: list[float]) -> list[int]:
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return list(counts.values())


@functools.cache
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings of m x's and n y's give U = 0, 1, ..., m*n
    (U: the pairs with the x above the y). c(m, n, u) = c(m-1, n, u-n) + c(m, n-1, u)."""
    if m == 0 or n == 0:
        return (1,)
    without_x, without_y = _u_counts(m - 1, n), _u_counts(m, n - 1)
    out = [0] * (m * n + 1)
    for u, c in enumerate(without_x):
        out[u + n] += c
    for u, c in enumerate(without_y):
        out[u] += c
    return tuple(out)


def differ(a: Sequence[float], b: Sequence[float], min_effect: float = MIN_EFFECT, alpha: float = ALPHA) -> bool:
    """Whether two sets of samples differ: the U test says so and the medians are at least
    `min_effect` apart (relative to the smaller). Otherwise they are a tie."""
    ma, mb = robust.median(a), robust.median(b)
    if not (ma > 0 and mb > 0):
        return False
    if max(ma, mb) / min(ma, mb) - 1 < min_effect:
        return False
    return mann_whitney_p(a, b) < alpha


def same_copy(a, b, min_effect: float = MIN_EFFECT) -> bool:
    """Whether summary rows a and b are one copy that differs only as their processes do:
    bounded by the same ceiling (its key up to '/producer' or '/consumer', one hop), each at
    SAME_COPY_FRACTION of it or more, and their fractions of it within `min_effect`."""
    ka, kb = (str(r.ceiling).partition("/")[0] for r in (a, b))
    if not ka or ka != kb or "+" in ka or "|" in ka:
        return False
    fa, fb = float(a.fraction_of_ceiling), float(b.fraction_of_ceiling)
    if not (fa >= SAME_COPY_FRACTION and fb >= SAME_COPY_FRACTION):  # NaN: no ceiling, no claim
        return False
    return max(fa, fb) / min(fa, fb) - 1 < min_effect


# --------------------------------------------------------------------------- candidates


def candidates(summary: pd.DataFrame, paths: Mapping[str, PathInfo]) -> pd.DataFrame:
    """The summary rows that may be ranked: bandwidth figures of transfer or baseline paths,
    not a reference variant, two workers, verification not failed, a finite median."""
    def ranked(path: str, variant: str) -> bool:
        info = paths.get(path)
        return info is not None and info.ranked and variant not in info.references

    if summary.empty:
        return summary
    keep = (
        (summary["metric"] == "bandwidth")
        & (summary["workers"] == 2)
        & (summary["verified"] != False)  # noqa: E712 - nullable boolean: NA (unchecked) stays
        & np.isfinite(summary["median_s"].astype(float))
        & (summary["bytes"] > 0)
        & np.array([ranked(p, v) for p, v in zip(summary["path"], summary["variant"])], dtype=bool)
    )
    rows = summary[keep]
    return rows.assign(label=[label(p, v) for p, v in zip(rows["path"], rows["variant"])])


# --------------------------------------------------------------------------- rankings


@dataclasses.dataclass(frozen=True)
class SizeResult:
    """One size of a ranking: the fastest median, the leaders (it and what is tied with it,
    fastest first), the ranked figures' medians (seconds), and what was not ranked, why."""

    bytes: int
    fastest: str | None
    leaders: tuple[str, ...]
    medians: dict[str, float]
    unranked: tuple[tuple[str, str], ...] = ()  # (label, reasons)
    l2_resident: bool | None = None
    faster_unranked: bool = False  # a figure left unranked had a faster median than the fastest ranked


@dataclasses.dataclass(frozen=True)
class Band:
    """Consecutive sizes of a ranking with one winner: the fastest median at each size, or
    statistically tied with the fastest (winner None: nothing could be ranked there)."""

    lo_bytes: int
    hi_bytes: int
    sizes: tuple[int, ...]
    winner: str | None
    tied: tuple[str, ...] = ()  # tied with the fastest at every size of the band
    tied_at: tuple[tuple[str, tuple[int, ...]], ...] = ()  # tied at some sizes only
    winner_s: tuple[float, float, float] = (math.nan,) * 3  # (lo, median, hi) seconds at lo_bytes
    winner_gbps: tuple[float, float, float] = (math.nan,) * 3  # (lo, median, hi) GB/s at hi_bytes
    runner_up: str | None = None  # the fastest figure of another path that is not tied
    margin_min: float = math.nan  # its median / the fastest median, over the band: least ...
    margin_max: float = math.nan  # ... and most (always above 1)
    unranked: tuple[tuple[str, str, tuple[int, ...]], ...] = ()  # (label, reasons, sizes)
    l2_sizes: tuple[int, ...] = ()  # sizes whose buffers could stay in L2
    over_ceiling: tuple[int, ...] = ()  # sizes where the winner is above its ceiling (a cache or timing effect)
    faster_unranked: tuple[int, ...] = ()  # sizes where a figure left unranked had a faster median
    alone: bool = False  # no other figure was ranked at any of its sizes


@dataclasses.dataclass(frozen=True)
class Ranking:
    """The bands of one link, sharing mode and measure."""

    src: str
    dst: str
    sharing: str
    measure: str  # handoff | stream | mixed
    candidates: tuple[str, ...]
    bands: tuple[Band, ...]
    sizes: tuple[SizeResult, ...] = ()

    @property
    def compared(self) -> bool:
        """Whether there was anything to compare: two figures or more."""
        return len(self.candidates) > 1


def rankings(summary: pd.DataFrame, samples: Mapping[tuple, np.ndarray], paths: Mapping[str, PathInfo],
             min_effect: float = MIN_EFFECT, alpha: float = ALPHA, mixed_measures: bool = False) -> list[Ranking]:
    """The ranking of every link, sharing mode and measure (see the module's docstring),
    links in link_rank order, then sharing, then handoff before stream."""
    rows = candidates(summary, paths)
    if rows.empty:
        return []
    keys = ["src", "dst", "sharing"] + ([] if mixed_measures else ["measure"])
    out = []
    for key, part in rows.groupby(keys, sort=False):
        src, dst, sharing = key[:3]
        measure = MIXED if mixed_measures else key[3]
        labels = tuple(dict.fromkeys(part["label"]))
        figures = {}  # (label, bytes) -> row; the first in summary order if a label was measured twice
        for row in part.itertuples(index=False):
            figures.setdefault((row.label, int(row.bytes)), row)
        sizes = sorted({b for _, b in figures})
        results = [_size_result(size, [r for (lab, b), r in figures.items() if b == size], samples, min_effect, alpha)
                   for size in sizes]
        bands = tuple(_bands(results, figures, labels))
        out.append(Ranking(str(src), str(dst), str(sharing), measure, labels, bands, tuple(results)))
    return sorted(out, key=lambda r: (link_rank(r.src, r.dst), r.sharing, MEASURE_ORDER.index(r.measure)
                                      if r.measure in MEASURE_ORDER else len(MEASURE_ORDER)))


def _size_result(size: int, rows: list, samples: Mapping[tuple, np.ndarray], min_effect: float,
                 alpha: float) -> SizeResult:
    ranked = sorted((r for r in rows if not r.unstable), key=lambda r: r.median_s)
    unranked = tuple((r.label, r.unstable) for r in rows if r.unstable)
    if not ranked:
        return SizeResult(size, None, (), {}, unranked, None)
    fastest = ranked[0]
    best = samples.get(condition(fastest), ())
    leaders = [r for r in ranked if r is fastest or same_copy(r, fastest, min_effect)
               or not differ(samples.get(condition(r), ()), best, min_effect, alpha)]
    # A cache figure where a leader's buffers could stay in L2 (None: the file does not say).
    flags = [bool(r.l2_resident) for r in leaders if r.l2_resident is not pd.NA and r.l2_resident is not None]
    medians = {r.label: float(r.median_s) for r in ranked}
    faster = any(r.unstable and r.median_s < fastest.median_s for r in rows)
    return SizeResult(size, fastest.label, tuple(r.label for r in leaders), medians,
                      unranked, any(flags) if flags else None, faster)


def _bands(results: list[SizeResult], figures: dict, labels: tuple[str, ...]) -> Iterable[Band]:
    i = 0
    while i < len(results):
        if results[i].fastest is None:
            j = i
            while j < len(results) and results[j].fastest is None:
                j += 1
            span = results[i:j]
            yield Band(span[0].bytes, span[-1].bytes, tuple(s.bytes for s in span), None,
                       unranked=_unranked(span), l2_sizes=tuple(s.bytes for s in span if s.l2_resident))
            i = j
            continue
        common = set(results[i].leaders)
        j = i + 1
        while j < len(results) and results[j].fastest is not None and common & set(results[j].leaders):
            common &= set(results[j].leaders)
            j += 1
        yield _band(results[i:j], common, figures, labels)
        i = j


def _band(span: list[SizeResult], common: set[str], figures: dict, labels: tuple[str, ...]) -> Band:
    def score(lab: str) -> tuple:
        fastest_at = sum(s.fastest == lab for s in span)
        closeness = sum(math.log(s.medians[lab] / s.medians[s.fastest]) for s in span)
        return (-fastest_at, closeness, labels.index(lab))

    winner = min(common, key=score)
    order = {lab: i for i, lab in enumerate(labels)}
    tied = tuple(sorted(common - {winner}, key=order.get))
    sometimes: dict[str, list[int]] = {}
    for s in span:
        for lab in s.leaders:
            if lab not in common:
                sometimes.setdefault(lab, []).append(s.bytes)
    lo, hi = span[0].bytes, span[-1].bytes
    first, last = figures[(winner, lo)], figures[(winner, hi)]

    runner, margins = _runner_up(span, winner)
    return Band(
        lo_bytes=lo, hi_bytes=hi, sizes=tuple(s.bytes for s in span), winner=winner, tied=tied,
        tied_at=tuple((lab, tuple(sizes)) for lab, sizes in sorted(sometimes.items(), key=lambda kv: order[kv[0]])),
        winner_s=(float(first.ci_lo_s), float(first.median_s), float(first.ci_hi_s)),
        winner_gbps=(float(last.ci_lo_gbps), float(last.median_gbps), float(last.ci_hi_gbps)),
        runner_up=runner, margin_min=min(margins) if margins else math.nan,
        margin_max=max(margins) if margins else math.nan,
        unranked=_unranked(span), l2_sizes=tuple(s.bytes for s in span if s.l2_resident),
        over_ceiling=tuple(s.bytes for s in span if figures[(winner, s.bytes)].fraction_of_ceiling > ABOVE_CEILING),
        faster_unranked=tuple(s.bytes for s in span if s.faster_unranked),
        alone=all(len(s.medians) == 1 for s in span),
    )


def _runner_up(span: list[SizeResult], winner: str) -> tuple[str | None, list[float]]:
    """The next figure that is not tied, preferably of another path than the winner's: its
    name (at the band's largest size where there is one) and, size by size, its median over
    the fastest median (above 1 by construction: it is slower than the fastest, significantly)."""
    path = winner.split("/", 1)[0]
    for other_path_only in (True, False):
        runner, margins = None, []
        for s in span:
            others = [lab for lab in s.medians if lab not in s.leaders
                      and (lab.split("/", 1)[0] != path or not other_path_only)]
            if others:
                best = min(others, key=s.medians.get)
                runner = best
                margins.append(s.medians[best] / s.medians[s.fastest])
        if margins:
            return runner, margins
    return None, []


def _unranked(span: list[SizeResult]) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    found: dict[tuple[str, str], list[int]] = {}
    for s in span:
        for lab, reasons in s.unranked:
            found.setdefault((lab, reasons), []).append(s.bytes)
    return tuple((lab, reasons, tuple(sizes)) for (lab, reasons), sizes in found.items())


# --------------------------------------------------------------------------- break-even


@dataclasses.dataclass(frozen=True)
class Crossing:
    """Where a path with a setup cost beats the baseline, over the sizes both measured.

    from_bytes: the break-even on the medians, the smallest size from which it wins at every
    larger size compared (None: it loses at the largest size); last_loss: the largest size
    below from_bytes where it loses (None: it wins from the smallest size compared); wins:
    every run of consecutive sizes where it wins, as (first, last). earliest / latest: the
    break-even with every figure at the end of its interval that favours the path / the
    baseline (equal to from_bytes when the intervals do not matter; latest None: it may
    never pay off)."""

    from_bytes: int | None
    last_loss: int | None
    wins: tuple[tuple[int, int], ...] = ()
    earliest: int | None = None
    latest: int | None = None

    @property
    def never(self) -> bool:
        return not self.wins

    @property
    def uncertain(self) -> bool:
        return self.earliest != self.latest


@dataclasses.dataclass(frozen=True)
class BreakEven:
    """A path with a setup cost against the baseline on one link, sharing mode and measure,
    each side at its fastest ranked variant at each size, with the setup paid once per
    `amortise_over` transfers and with every transfer."""

    path: str
    src: str
    dst: str
    sharing: str
    measure: str
    baseline: str
    variants: tuple[str, ...]  # the path's variants taken into account
    setup: tuple[str, ...]  # the setup operations counted
    setup_s: float  # their total median seconds (at the largest size compared, if it depends on size)
    setup_lo_s: float  # ... the low end of its interval
    setup_hi_s: float  # ... the high end
    setup_min_s: float  # the total median at the smallest size compared
    setup_samples: int  # the fewest samples behind one of the costs
    size_dependent: bool  # a cost was measured per size (host_register): each size pays its own
    amortise_over: int
    amortised: Crossing
    per_transfer: Crossing
    sizes: tuple[int, ...]  # sizes compared
    composed: bool = False  # one transfer = a GPU -> host half + a host -> GPU half (mmap)


def break_even(summary: pd.DataFrame, paths: Mapping[str, PathInfo], samples: Mapping[tuple, np.ndarray] | None = None,
               amortise_over: int = AMORTISE_OVER, mixed_measures: bool = False) -> list[BreakEven]:
    """For each path with setup operations: where it beats the baseline path once its setup
    is paid, on each link where both were measured (the same src, dst and sharing mode; a
    path measured only in halves, GPU -> host and host -> GPU, as their sum). The measure is
    `handoff` where both sides have it, else `stream` (mixed for schema 1). A setup cost
    counts only if measured on the link's own devices (see _path_links)."""
    if amortise_over < 1:
        raise ValueError("amortise_over must be at least 1")
    samples = samples or {}
    baseline = next((p.name for p in paths.values() if p.role == "baseline"), None)
    rows = candidates(summary, paths)
    if baseline is None or rows.empty:
        return []
    rows = rows[rows["unstable"] == ""]
    setup = summary[summary["metric"] == "setup"]
    base_rows = rows[rows["path"] == baseline]
    out: list[BreakEven] = []
    for info in paths.values():
        if not info.setup or info.name == baseline or not info.ranked:
            continue
        for link, halves, part, composed in _path_links(rows[rows["path"] == info.name]):
            for sharing in pd.unique(part["sharing"]):
                item = _break_even_on(info, link, halves, part[part["sharing"] == sharing], composed,
                                      base_rows[(base_rows["src"] == link[0]) & (base_rows["dst"] == link[1])
                                                & (base_rows["sharing"] == sharing)],
                                      setup, samples, amortise_over, mixed_measures, baseline)
                if item is not None:
                    out.append(item)
    return out


def _path_links(rows: pd.DataFrame):
    """(link, the links its setup may be measured on, rows, composed) for each link of a path.
    A setup cost belongs to a link when it was measured between its two devices (either
    direction), or between one of them and the host (a host buffer registered by one of the
    two processes); never on another device."""
    def own(*devices) -> set[tuple[str, str]]:
        ends = set(devices) | {"host"}
        return {(a, b) for a in ends for b in ends if a in devices or b in devices}

    gpu_src, gpu_dst = _gpu(rows["src"]), _gpu(rows["dst"])
    full = rows[gpu_src & gpu_dst]
    for (src, dst), part in full.groupby(["src", "dst"], sort=False):
        yield (src, dst), own(src, dst), part, False
    if not full.empty:
        return
    down = rows[gpu_src & (rows["dst"] == "host").to_numpy()]
    up = rows[(rows["src"] == "host").to_numpy() & gpu_dst]
    for src in pd.unique(down["src"]):
        for dst in pd.unique(up["dst"]):
            part = pd.concat([down[down["src"] == src], up[up["dst"] == dst]])
            yield (src, dst), own(src, dst), part, True


def _gpu(devices: pd.Series) -> np.ndarray:
    return np.array([is_gpu(d) for d in devices], dtype=bool)


def _best_by_size(part: pd.DataFrame, composed: bool) -> dict[int, tuple[float, float, float]]:
    """(lo, median, hi) seconds of the fastest variant at each size; a composed path adds its
    fastest GPU -> host half to its fastest host -> GPU half."""
    def fastest(rows: pd.DataFrame) -> dict[int, tuple[float, float, float]]:
        best = {}
        for row in rows.sort_values("median_s", kind="stable").itertuples(index=False):
            lo = row.ci_lo_s if math.isfinite(row.ci_lo_s) else row.median_s
            hi = row.ci_hi_s if math.isfinite(row.ci_hi_s) else row.median_s
            best.setdefault(int(row.bytes), (float(lo), float(row.median_s), float(hi)))
        return best

    if not composed:
        return fastest(part)
    down, up = fastest(part[part["dst"] == "host"]), fastest(part[part["src"] == "host"])
    return {s: tuple(d + u for d, u in zip(down[s], up[s])) for s in sorted(set(down) & set(up))}


def _break_even_on(info: PathInfo, link, halves, part: pd.DataFrame, composed: bool, base: pd.DataFrame,
                   setup: pd.DataFrame, samples, amortise_over: int, mixed: bool, baseline: str) -> BreakEven | None:
    if base.empty or part.empty:
        return None
    if mixed:
        measure = MIXED
    else:
        shared = [m for m in ("handoff", "stream") if (part["measure"] == m).any() and (base["measure"] == m).any()]
        if not shared:
            return None
        measure = shared[0]
        part, base = part[part["measure"] == measure], base[base["measure"] == measure]
    path_t, base_t = _best_by_size(part, composed), _best_by_size(base, False)
    sizes = sorted(set(path_t) & set(base_t))
    ops = setup[(setup["path"] == info.name) & setup["variant"].isin(info.setup)
                & np.array([(s, d) in halves for s, d in zip(setup["src"], setup["dst"])], dtype=bool)]
    if not sizes or ops.empty:
        return None
    if (ops["sharing"] == part["sharing"].iloc[0]).any():
        ops = ops[ops["sharing"] == part["sharing"].iloc[0]]
    cost = {s: _setup_cost(ops, info.setup, s, samples) for s in sizes}

    def crossing(n: int) -> Crossing:
        median = [cost[s][1] / n + path_t[s][1] < base_t[s][1] for s in sizes]
        favourable = [cost[s][0] / n + path_t[s][0] < base_t[s][2] for s in sizes]
        unfavourable = [cost[s][2] / n + path_t[s][2] < base_t[s][0] for s in sizes]
        c = _crossing(sizes, median)
        return dataclasses.replace(c, earliest=_crossing(sizes, favourable).from_bytes,
                                   latest=_crossing(sizes, unfavourable).from_bytes)

    present = tuple(op for op in info.setup if (ops["variant"] == op).any())
    return BreakEven(
        path=info.name, src=str(link[0]), dst=str(link[1]), sharing=str(part["sharing"].iloc[0]), measure=measure,
        baseline=baseline, variants=tuple(pd.unique(part["variant"])), setup=present,
        setup_s=cost[sizes[-1]][1], setup_lo_s=cost[sizes[-1]][0], setup_hi_s=cost[sizes[-1]][2],
        setup_min_s=cost[sizes[0]][1], setup_samples=int(ops["samples"].min()),
        size_dependent=any(ops.loc[ops["variant"] == op, "bytes"].nunique() > 1 for op in present),
        amortise_over=amortise_over, amortised=crossing(amortise_over), per_transfer=crossing(1),
        sizes=tuple(int(s) for s in sizes), composed=composed,
    )


def _setup_cost(ops: pd.DataFrame, names: Sequence[str], nbytes: int, samples) -> tuple[float, float, float]:
    """(lo, median, hi) total seconds of the setup operations paid before a transfer of
    `nbytes`. An operation measured at several sizes costs what it cost at this size (or the
    next larger size measured, or the largest); one measured once costs that. Intervals: the
    median's 95% interval, or the range of the samples below 6 of them."""
    total = [0.0, 0.0, 0.0]
    for op in names:
        rows = ops[ops["variant"] == op]
        if rows.empty:
            continue
        if rows["bytes"].nunique() > 1:
            at = rows[rows["bytes"] == nbytes]
            if at.empty:
                larger = rows[rows["bytes"] > nbytes]
                at = larger[larger["bytes"] == larger["bytes"].min()] if len(larger) else \
                    rows[rows["bytes"] == rows["bytes"].max()]
            rows = at
        row = rows.sort_values("median_s", kind="stable").iloc[-1]  # the dearest if several
        lo, hi = row["ci_lo_s"], row["ci_hi_s"]
        values = samples.get(condition(row), ())
        if not (math.isfinite(lo) and math.isfinite(hi)):
            finite = [v for v in values if math.isfinite(v)]
            lo, hi = (min(finite), max(finite)) if finite else (row["median_s"], row["median_s"])
        for k, v in enumerate((lo, row["median_s"], hi)):
            total[k] += float(v)
    return total[0], total[1], total[2]


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
    from_bytes = int(sizes[k])
    return Crossing(from_bytes, int(sizes[k - 1]) if k > 0 else None, tuple(runs), from_bytes, from_bytes)


__all__ = [
    "ALPHA",
    "AMORTISE_OVER",
    "MIN_EFFECT",
    "MIXED",
    "Band",
    "BreakEven",
    "Crossing",
    "Ranking",
    "SizeResult",
    "break_even",
    "candidates",
    "differ",
    "label",
    "mann_whitney_p",
    "rankings",
]
