"""The decision at one size: which mechanism is fastest between two processes, which API to
use to reach it, and how sure that is.

Candidates (`candidates`) are the figures of paths between the same two processes: the
bandwidth rows of transfer and baseline paths (paths.py), not a single-process reference
variant (peer 'p2p-off'), two workers, bytes verified; and the GPU-signalled hand-offs
(mechanisms.py: a kernel ping-pong through IPC-mapped memory, NVSHMEM put with signal),
whose one-way latency is a hand-off's time per message, ranked with the hand-offs at the
sizes both measured. Aggregates of N processes, CPU references and ceilings never compete.
They are compared within one link (src -> dst), one sharing mode and one measure; a
schema-1 file knew no measures and is ranked with them mixed (MIXED).

At one size (`decide`), every figure takes part with its spread (stats.compare: faster,
same or undecided, never a figure left out). Figures form classes (classes.py): the same
copy reached through different APIs. The class with the fastest figure is the answer; its
choice is the member cheapest to set up; the next class is what it is compared against.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from gpuipc_bench.analysis import classes, stats
from gpuipc_bench.analysis.classes import Figure
from gpuipc_bench.analysis.conditions import ROLE_SUFFIXES, ceiling_base, condition, label
from gpuipc_bench.analysis.mechanisms import gpu_signalled, mechanism
from gpuipc_bench.paths import PathInfo

MIXED = "mixed"  # the measure of a ranking over a schema-1 file
MEASURE_ORDER = ("handoff", "stream", MIXED)
HANDOFF = "handoff"


def candidates(summary: pd.DataFrame, paths: Mapping[str, PathInfo]) -> pd.DataFrame:
    """The summary rows that may be ranked, with `label` and `condition` (its samples' key)
    columns: bandwidth figures of transfer
    or baseline paths (not a reference variant), two workers, verification not failed, a
    finite median; and the GPU-signalled hand-offs' latency rows as `handoff` figures, at the
    sizes a hand-off was measured on their link (in any sharing mode). A label measured twice
    at one condition (the latency and sharing scenarios both time the kernel ping-pong) keeps
    the figure with the most samples."""
    def ranked(path: str, variant: str) -> bool:
        info = paths.get(path)
        return info is not None and info.ranked and variant not in info.references

    if summary.empty:
        return summary.assign(label=pd.Series([], dtype=str), condition=pd.Series([], dtype=object))
    common = ((summary["workers"] == 2) & (summary["verified"] != False)  # noqa: E712 - NA (unchecked) stays
              & np.isfinite(summary["median_s"].astype(float)) & (summary["bytes"] > 0))
    bandwidth = common & (summary["metric"] == "bandwidth") & np.array(
        [ranked(p, v) for p, v in zip(summary["path"], summary["variant"])], dtype=bool)
    rows = _labelled(summary[bandwidth])
    signalled = summary[common & (summary["metric"] == "latency") & np.array(
        [gpu_signalled(p, v) for p, v in zip(summary["path"], summary["variant"])], dtype=bool)]
    if not signalled.empty:
        handoff = rows[rows["measure"] == HANDOFF]
        sizes = set(zip(handoff["src"], handoff["dst"], handoff["bytes"]))
        keep = [(s, d, b) in sizes for s, d, b in zip(signalled["src"], signalled["dst"], signalled["bytes"])]
        rows = pd.concat([rows, _labelled(signalled[keep]).assign(measure=HANDOFF)])
    rows = rows.sort_values("samples", ascending=False, kind="stable")
    rows = rows.drop_duplicates(["label", "src", "dst", "sharing", "measure", "bytes"])
    return rows.sort_index()


def _labelled(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.assign(label=[label(p, v) for p, v in zip(rows["path"], rows["variant"])],
                       condition=[condition(r) for r in rows.itertuples(index=False)])


@dataclasses.dataclass(frozen=True)
class Decision:
    """The answer at one size of one link, sharing mode and measure.

    outcome: FASTER when the winning class beats every other figure; SAME when some other
    figure is the same (an equivalence shown, `same` names them) and none undecided;
    UNDECIDED when the samples cannot tell some figure from the winner (`close`). cls: the
    winning class's mechanism; members: every path/variant in it (fastest first); choice:
    the one to use; why: the reason it is the one; next: the first class the winner is
    faster than (its name) and next_members; ratio: next's median time over the winning
    class's fastest member's, as they were compared (stats.compare, pair_scale): never below
    1 + delta, whichever tied member is chosen (ratio_lo..ratio_hi: what the intervals
    allow); choice_s: the choice's (lo, median, hi)
    seconds (lo..hi: its median's interval, or its range below 6 samples); samples: the
    fewest samples of the winner and the figure after it; separated: every sample of the
    winner below every sample of every other figure's class; delta: the largest effect
    floor used; cost: what the choice costs besides the transfer (a GPU-signalled
    hand-off's resident kernel)."""

    src: str
    dst: str
    sharing: str
    measure: str
    bytes: int
    outcome: str
    cls: str
    members: tuple[str, ...]
    choice: str
    why: str
    next: str | None
    next_members: tuple[str, ...]
    ratio: float
    ratio_lo: float
    ratio_hi: float
    choice_s: tuple[float, float, float]
    choice_gbps: float
    fraction_of_ceiling: float
    ceiling: str
    call_bound: bool
    l2_resident: bool | None
    samples: int
    separated: bool
    delta: float
    same: tuple[str, ...] = ()
    close: tuple[str, ...] = ()
    cost: str = ""
    compared: tuple[str, ...] = ()  # every figure at this size
    compared_s: tuple[float, ...] = ()  # their median seconds, in the same order
    compared_ci: tuple[tuple[float, float], ...] = ()  # their medians' intervals (lo, hi), in the same order
    compared_fraction: tuple[float, ...] = ()  # their fractions of their ceilings, in the same order
    leader_range: tuple[float, float] = (math.nan, math.nan)  # the fastest member's samples, min..max

    @property
    def link(self) -> tuple[str, str]:
        return (self.src, self.dst)

    @property
    def tied(self) -> tuple[str, ...]:
        """Every figure not rejected here (no faster-beyond-delta outcome against it): the
        choice, its class, the classes shown the same and the figures undecided."""
        return tuple(dict.fromkeys((self.choice, *self.members, *self.same, *self.close)))

    def as_choice(self, label: str, why: str | None = None) -> Decision:
        """This decision with `label` (a figure compared here) as the one to use: its figure,
        interval and fraction of the ceiling; its class's name where it is not in the winning
        class (a class shown the same or undecided)."""
        if label not in self.compared[:len(self.compared_s)]:
            return self
        i = self.compared.index(label)
        median = self.compared_s[i]
        lo, hi = self.compared_ci[i] if i < len(self.compared_ci) else (math.nan, math.nan)
        path, _, variant = label.partition("/")
        return dataclasses.replace(
            self, choice=label, why=self.why if why is None else why, choice_s=(lo, median, hi),
            choice_gbps=self.bytes / median / 1e9 if median > 0 else math.nan,
            fraction_of_ceiling=self.compared_fraction[i] if i < len(self.compared_fraction)
            else self.fraction_of_ceiling,
            cls=self.cls if label in self.members else mechanism(path, variant).name,
            cost=mechanism(path, variant).cost)

    def median_of(self, label: str) -> float:
        """The median seconds of a compared figure (NaN: not measured here)."""
        return self.compared_s[self.compared.index(label)] if label in self.compared[:len(self.compared_s)] \
            else math.nan


def ceiling_times(summary: pd.DataFrame) -> dict[tuple[str, str, str, int], float]:
    """(scenario, sharing, ceiling key, bytes) -> the ceiling's median seconds per transfer."""
    rows = summary[(summary["path"] == "ceiling") & (summary["metric"] == "bandwidth")]
    return {(str(r.scenario), str(r.sharing), str(r.variant), int(r.bytes)): float(r.median_s)
            for r in rows.itertuples(index=False)}


def process_offset(a, b, ceilings: Mapping[tuple[str, str, str, int], float]) -> float:
    """How far apart the two processes of a scenario copy, as the tool measured it for the
    ceiling of figure a or b at their size ('/producer' against '/consumer'): |t_p / t_c - 1|,
    the larger of the two; 0 when no scenario measured it in both."""
    found = [0.0]
    for r in (a, b):
        key = ceiling_base(r.ceiling)
        both = [ceilings.get((str(r.scenario), str(r.sharing), key + who, int(r.bytes))) for who in ROLE_SUFFIXES]
        if all(t is not None and t > 0 for t in both):
            found.append(abs(both[0] / both[1] - 1))
    return max(found)


def pair_scale(a, b, ceilings: Mapping[tuple[str, str, str, int], float]) -> float:
    """What b's times are multiplied by before they are compared with a's: figures measured by
    two scenarios (two pairs of processes) against the same ceiling, which each measured at
    their size, are compared as fractions of their own ceiling, so that the pairs' own offset
    (copies run up to 9% apart in two processes: gpu/ceilings.py) is not taken for the
    paths'. 1 otherwise."""
    if str(a.scenario) == str(b.scenario) or ceiling_base(a.ceiling) != ceiling_base(b.ceiling) or not a.ceiling:
        return 1.0
    key = ceiling_base(a.ceiling)
    ta, tb = (_ceiling_time(ceilings, r, key) for r in (a, b))
    return ta / tb if ta > 0 and tb > 0 else 1.0


def _ceiling_time(ceilings: Mapping[tuple[str, str, str, int], float], row, key: str) -> float:
    found = [ceilings.get((str(row.scenario), str(row.sharing), variant, int(row.bytes)))
             for variant in (key, *(key + who for who in ROLE_SUFFIXES))]
    found = [t for t in found if t is not None]
    return found[0] if found else math.nan


def delta_for(a, b, ceilings: Mapping[tuple[str, str, str, int], float], min_effect: float = stats.MIN_EFFECT) -> float:
    """max(min_effect, the per-process offset of the two figures' ceiling at their size)."""
    return max(min_effect, process_offset(a, b, ceilings))


def decide(figures: Sequence[Figure], ceilings: Mapping[tuple[str, str, str, int], float],
           setup_cost: Callable[[str, int], float], order: Callable[[str], tuple],
           min_effect: float = stats.MIN_EFFECT) -> Decision | None:
    """The decision among the figures of one size (one link, sharing mode and measure); None
    with fewer than two figures (nothing compared)."""
    if len(figures) < 2:
        return None
    figures = sorted(figures, key=lambda f: f.median_s)

    def compare(a: Figure, b: Figure) -> stats.Comparison:
        scale = pair_scale(a.row, b.row, ceilings)
        return stats.compare(a.samples, b.samples * scale, delta_for(a.row, b.row, ceilings, min_effect))

    found = classes.form(figures, compare)
    anchor = found[0].anchor
    against = [(c, compare(anchor, c.anchor)) for c in found[1:]]
    # The classes the samples show the same as the fastest are as good a choice as its own:
    # the one to use is the cheapest member of any of them.
    tied = [found[0]] + [c for c, r in against if r.outcome == stats.SAME]
    nbytes = int(anchor.row.bytes)
    pool = classes.MechanismClass("", tuple(f for c in tied for f in c.members))
    choice, why = classes.choose(pool, lambda f: setup_cost(f.row.path, nbytes), order)
    win = next(c for c in tied if choice in c.members)
    row = choice.row
    lo, median, hi = stats.median_interval(choice.samples)
    same = tuple(f.label for c in tied if c is not win for f in c.members)
    close = tuple(f.label for f in found[0].members[1:]
                  if f is not choice and compare(anchor, f).outcome == stats.UNDECIDED)
    # A class whose samples, taken against their own scenario's ceiling (pair_scale), rank it
    # ahead of the fastest median cannot be told from it either.
    close += tuple(f.label for c, r in against if r.outcome in (stats.UNDECIDED, stats.SLOWER) for f in c.members)
    beaten = [(c, r) for c, r in against if r.outcome == stats.FASTER]
    outcome = stats.UNDECIDED if close else stats.SAME if same or len(found) == 1 else stats.FASTER
    nxt, vs = beaten[0] if beaten else (None, None)
    return Decision(
        src=str(row.src), dst=str(row.dst), sharing=str(row.sharing), measure=str(row.measure), bytes=nbytes,
        outcome=outcome, cls=win.name, members=tuple(f.label for f in win.members), choice=choice.label, why=why,
        next=nxt.name if nxt else None, next_members=tuple(f.label for f in nxt.members) if nxt else (),
        ratio=vs.ratio if vs else math.nan,
        ratio_lo=vs.ratio_lo if vs else math.nan, ratio_hi=vs.ratio_hi if vs else math.nan,
        choice_s=(lo, median, hi), choice_gbps=nbytes / median / 1e9 if median > 0 else math.nan,
        fraction_of_ceiling=float(row.fraction_of_ceiling), ceiling=str(row.ceiling or ""),
        call_bound=bool(row.call_bound), l2_resident=None if pd.isna(row.l2_resident) else bool(row.l2_resident),
        samples=min(len(f.samples) for f in (anchor, *(c.anchor for c, _ in against[:1]))),
        compared=tuple(f.label for f in figures), compared_s=tuple(f.median_s for f in figures),
        compared_ci=tuple(_ends(f.samples) for f in figures),
        compared_fraction=tuple(float(f.row.fraction_of_ceiling) for f in figures),
        separated=bool(vs and vs.separated and not close and not same), delta=max(
            [r.delta for _, r in against] or [min_effect]),
        same=same, close=close, cost=mechanism(row.path, row.variant).cost,
        leader_range=(float(np.nanmin(anchor.samples)), float(np.nanmax(anchor.samples))))


def _ends(samples: np.ndarray) -> tuple[float, float]:
    lo, _, hi = stats.median_interval(samples)
    return (lo, hi)
