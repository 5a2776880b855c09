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

from gpuipc_bench.analysis.conditions import condition, is_gpu, records
from gpuipc_bench.analysis.verdict import MIXED, candidates
from gpuipc_bench.paths import PathInfo

AMORTISE_OVER = 1000

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
        median = rows["median_s"].to_numpy(dtype=float)
        ends = zip(rows["ci_lo_s"].to_numpy(dtype=float).tolist(), median.tolist(),
                   rows["ci_hi_s"].to_numpy(dtype=float).tolist(), rows["bytes"].to_numpy().tolist())
        best: dict[int, tuple[float, float, float]] = {}
        order = np.argsort(median, kind="stable").tolist()  # as sort_values: stable, NaN last
        ordered = list(ends)
        for lo, m, hi, nbytes in (ordered[i] for i in order):
            best.setdefault(int(nbytes), (lo if math.isfinite(lo) else m, m, hi if math.isfinite(hi) else m))
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
    by_op = _ops_by_name(ops, info.setup)
    cost = {s: _setup_cost(by_op, s, samples) for s in sizes}

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


def _ops_by_name(ops: pd.DataFrame, names: Sequence[str]) -> list[tuple[list, bool]]:
    """Each setup operation's rows (in the frame's order) and whether it was measured at
    several sizes, in the order of `names` (the operations measured)."""
    rows = records(ops)
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
