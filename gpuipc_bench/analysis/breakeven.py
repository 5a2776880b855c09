"""Break-even: from which size a path with a setup cost beats the baseline path (staging).

A path with a setup cost against the baseline on the same link, sharing mode and measure:
setup / N + t_path(size) < t_baseline(size), with the setup paid once per N transfers and
with every transfer, on the medians and on the ends of their intervals ("between X and Y"
when they disagree). Every figure counts, whatever its spread: its interval carries it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from gpuipc_bench.analysis.conditions import CONDITION_KEYS, condition, is_gpu, records
from gpuipc_bench.analysis.verdict import MIXED, candidates
from gpuipc_bench.paths import PathInfo

AMORTISE_OVER = 1000
# The columns the break-even reads of the candidates and of the setup operations.
_FIGURE_COLUMNS = ("path", "variant", "metric", "measure", "src", "dst", "sharing", "bytes", "median_s", "ci_lo_s",
                   "ci_hi_s")
_SETUP_COLUMNS = tuple(dict.fromkeys(CONDITION_KEYS + ("median_s", "ci_lo_s", "ci_hi_s", "samples")))

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
               amortise_over: int = AMORTISE_OVER, mixed_measures: bool = False,
               ranked: pd.DataFrame | None = None) -> list[BreakEven]:
    """For each path with setup operations: where it beats the baseline path once its setup
    is paid, on each link where both were measured (the same src, dst and sharing mode; a
    path measured only in halves, GPU -> host and host -> GPU, as their sum). The measure is
    `handoff` where both sides have it, else `stream` (mixed for schema 1). A setup cost
    counts only if measured on the link's own devices (see _path_links). `ranked`: the
    summary's candidates (verdict.candidates), found here when not given."""
    if amortise_over < 1:
        raise ValueError("amortise_over must be at least 1")
    samples = samples or {}
    baseline = next((p.name for p in paths.values() if p.role == "baseline"), None)
    rows = candidates(summary, paths) if ranked is None else ranked
    if not rows.empty:
        rows = rows[rows["metric"] == "bandwidth"]
    if baseline is None or rows.empty:
        return []
    # the rows read once (only the columns read), then cut in plain Python: a pandas cut costs
    # a copy of every column
    figures = records(rows[list(_FIGURE_COLUMNS)])
    setup = records(summary.loc[summary["metric"] == "setup", list(_SETUP_COLUMNS)])
    base_rows = [r for r in figures if r.path == baseline]
    out: list[BreakEven] = []
    for info in paths.values():
        if not info.setup or info.name == baseline or not info.ranked:
            continue
        for link, halves, part, composed in _path_links([r for r in figures if r.path == info.name]):
            for sharing in dict.fromkeys(r.sharing for r in part):
                item = _break_even_on(info, link, halves, [r for r in part if _same(r.sharing, sharing)], composed,
                                      [r for r in base_rows if _same(r.src, link[0]) and _same(r.dst, link[1])
                                       and _same(r.sharing, sharing)],
                                      setup, samples, amortise_over, mixed_measures, baseline)
                if item is not None:
                    out.append(item)
    return out


def _same(a, b) -> bool:
    """a == b as a pandas comparison says it: never for a missing value."""
    return a is not None and b is not None and a == b


def _path_links(rows: list):
    """(link, the links its setup may be measured on, rows, composed) for each link of a path
    (rows: records, in the summary's order). A setup cost belongs to a link when it was
    measured between its two devices (either direction), or between one of them and the host
    (a host buffer registered by one of the two processes); never on another device."""
    def own(*devices) -> set[tuple[str, str]]:
        ends = set(devices) | {"host"}
        return {(a, b) for a in ends for b in ends if a in devices or b in devices}

    full: dict[tuple, list] = {}
    for r in rows:
        if is_gpu(r.src) and is_gpu(r.dst):
            full.setdefault((r.src, r.dst), []).append(r)
    for (src, dst), part in full.items():
        yield (src, dst), own(src, dst), part, False
    if full:
        return
    down = [r for r in rows if is_gpu(r.src) and _same(r.dst, "host")]
    up = [r for r in rows if _same(r.src, "host") and is_gpu(r.dst)]
    for src in dict.fromkeys(r.src for r in down):
        for dst in dict.fromkeys(r.dst for r in up):
            part = [r for r in down if _same(r.src, src)] + [r for r in up if _same(r.dst, dst)]
            yield (src, dst), own(src, dst), part, True


def _best_by_size(part: list, composed: bool) -> dict[int, tuple[float, float, float]]:
    """(lo, median, hi) seconds of the fastest variant at each size; a composed path adds its
    fastest GPU -> host half to its fastest host -> GPU half."""
    def fastest(rows: list) -> dict[int, tuple[float, float, float]]:
        best: dict[int, tuple[float, float, float]] = {}
        # by median, stable, NaN last (as sort_values)
        for row in sorted(rows, key=lambda r: (math.isnan(r.median_s), 0.0 if math.isnan(r.median_s) else r.median_s)):
            lo = row.ci_lo_s if math.isfinite(row.ci_lo_s) else row.median_s
            hi = row.ci_hi_s if math.isfinite(row.ci_hi_s) else row.median_s
            best.setdefault(int(row.bytes), (float(lo), float(row.median_s), float(hi)))
        return best

    if not composed:
        return fastest(part)
    down = fastest([r for r in part if _same(r.dst, "host")])
    up = fastest([r for r in part if _same(r.src, "host")])
    return {s: tuple(d + u for d, u in zip(down[s], up[s])) for s in sorted(set(down) & set(up))}


def _break_even_on(info: PathInfo, link, halves, part: list, composed: bool, base: list,
                   setup: list, samples, amortise_over: int, mixed: bool, baseline: str) -> BreakEven | None:
    if not base or not part:
        return None
    if mixed:
        measure = MIXED
    else:
        shared = [m for m in ("handoff", "stream") if any(_same(r.measure, m) for r in part)
                  and any(_same(r.measure, m) for r in base)]
        if not shared:
            return None
        measure = shared[0]
        part, base = [r for r in part if _same(r.measure, measure)], [r for r in base if _same(r.measure, measure)]
    path_t, base_t = _best_by_size(part, composed), _best_by_size(base, False)
    sizes = sorted(set(path_t) & set(base_t))
    ops = [r for r in setup if _same(r.path, info.name) and r.variant in info.setup and (r.src, r.dst) in halves]
    if not sizes or not ops:
        return None
    sharing = part[0].sharing
    if any(_same(r.sharing, sharing) for r in ops):
        ops = [r for r in ops if _same(r.sharing, sharing)]
    by_op = _ops_by_name(ops, info.setup)
    cost = {s: _setup_cost(by_op, s, samples) for s in sizes}

    def crossing(n: int) -> Crossing:
        median = [cost[s][1] / n + path_t[s][1] < base_t[s][1] for s in sizes]
        favourable = [cost[s][0] / n + path_t[s][0] < base_t[s][2] for s in sizes]
        unfavourable = [cost[s][2] / n + path_t[s][2] < base_t[s][0] for s in sizes]
        c = _crossing(sizes, median)
        return dataclasses.replace(c, earliest=_crossing(sizes, favourable).from_bytes,
                                   latest=_crossing(sizes, unfavourable).from_bytes)

    present = tuple(op for op in info.setup if any(_same(r.variant, op) for r in ops))
    return BreakEven(
        path=info.name, src=str(link[0]), dst=str(link[1]), sharing=str(sharing), measure=measure,
        baseline=baseline, variants=tuple(dict.fromkeys(r.variant for r in part)), setup=present,
        setup_s=cost[sizes[-1]][1], setup_lo_s=cost[sizes[-1]][0], setup_hi_s=cost[sizes[-1]][2],
        setup_min_s=cost[sizes[0]][1], setup_samples=int(min(r.samples for r in ops)),
        size_dependent=any(len({r.bytes for r in ops if _same(r.variant, op)}) > 1 for op in present),
        amortise_over=amortise_over, amortised=crossing(amortise_over), per_transfer=crossing(1),
        sizes=tuple(int(s) for s in sizes), composed=composed,
    )


def _ops_by_name(rows: Sequence, names: Sequence[str]) -> list[tuple[list, bool]]:
    """Each setup operation's rows (records, in the summary's order) and whether it was
    measured at several sizes, in the order of `names` (the operations measured)."""
    out = []
    for op in names:
        mine = [r for r in rows if r.variant == op]
        if mine:
            out.append((mine, len({int(r.bytes) for r in mine}) > 1))
    return out


def _setup_cost(by_op: Sequence[tuple[list, bool]], nbytes: int, samples) -> tuple[float, float, float]:
    """(lo, median, hi) total seconds of the setup operations paid before a transfer of
    `nbytes` (by_op: _ops_by_name). An operation measured at several sizes costs what it cost
    at this size (or the next larger size measured, or the largest); one measured once costs
    that. Intervals: the median's 95% interval, or the range of the samples below 6 of them."""
    total = [0.0, 0.0, 0.0]
    for rows, sized in by_op:
        if sized:
            at = [r for r in rows if int(r.bytes) == nbytes]
            if not at:
                larger = [int(r.bytes) for r in rows if int(r.bytes) > nbytes]
                size = min(larger) if larger else max(int(r.bytes) for r in rows)
                at = [r for r in rows if int(r.bytes) == size]
            rows = at
        row = _dearest(rows)
        lo, hi = row.ci_lo_s, row.ci_hi_s
        values = samples.get(condition(row), ())
        if not (math.isfinite(lo) and math.isfinite(hi)):
            finite = [v for v in values if math.isfinite(v)]
            lo, hi = (min(finite), max(finite)) if finite else (row.median_s, row.median_s)
        for k, v in enumerate((lo, row.median_s, hi)):
            total[k] += float(v)
    return total[0], total[1], total[2]


def _dearest(rows: Sequence):
    """The row with the largest median, the last of equals (a NaN median: the last of those),
    as the last row of the rows sorted by median (stable, NaN last)."""
    nan = [r for r in rows if math.isnan(r.median_s)]
    if nan:
        return nan[-1]
    best = rows[0]
    for r in rows[1:]:
        if r.median_s >= best.median_s:
            best = r
    return best


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
