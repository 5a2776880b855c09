"""Mechanism classes: figures that are one copy reached through different APIs.

Figures of one size (one link, sharing mode and measure) join one class when they are
bounded by the same ceiling (its key without '/producer' or '/consumer'), each at
SAME_COPY_FRACTION of it or more, and *same* (stats.compare) against the class's fastest
member. Where the ceiling's time per transfer is below twice its per-call floor
(summary.call_bound), "% of the ceiling" says nothing: the mechanism each path/variant
declares (mechanisms.py) takes its place. A figure that is neither (below 90% of its
ceiling, no ceiling, a GPU-signalled hand-off) is a class of its own. Figures that differ never merge:
push and pull stay apart where they differ. A figure of the same mechanism that the samples
cannot tell from the fastest (undecided) is kept in its class, and the decision says it is
undecided (verdict.Decision.close): never a tie said where none was shown, and never one
API of a copy split from the others by the noise of one size.

The choice in a class: the lowest set-up cost (the median of the path's set-up rows), then
the fewest dependencies (no torch, NVSHMEM or NCCL), then the order the paths are declared in.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
import numpy as np

from gpuipc_bench.analysis import stats
from gpuipc_bench.analysis.conditions import ceiling_base
from gpuipc_bench.analysis.mechanisms import mechanism

@dataclasses.dataclass(frozen=True)
class Figure:
    """One candidate at one size: its label, summary row and samples."""

    label: str
    row: object
    samples: np.ndarray

    @property
    def median_s(self) -> float:
        return float(self.row.median_s)


SAME_COPY_FRACTION = 0.9  # a figure this close to its ceiling is the ceiling's copy, with little else in it


@dataclasses.dataclass(frozen=True)
class MechanismClass:
    """Figures of one mechanism, fastest first (`anchor`: the fastest)."""

    name: str
    members: tuple[Figure, ...]

    @property
    def anchor(self) -> Figure:
        return self.members[0]


def grouping_key(row) -> tuple | None:
    """What a figure may share a class by: its declared mechanism where its ceiling is
    call-bound at its size, its ceiling where it reaches SAME_COPY_FRACTION of it, else
    nothing (a class of its own)."""
    declared = mechanism(row.path, row.variant)
    if declared.gpu_signalled:
        return None
    if bool(getattr(row, "call_bound", False)):
        return ("mechanism", declared.name)
    fraction = float(row.fraction_of_ceiling)
    if row.ceiling and fraction >= SAME_COPY_FRACTION:  # NaN: no ceiling, no claim
        return ("ceiling", ceiling_base(row.ceiling))
    return None


def form(figures: Sequence[Figure], compare: Callable[[Figure, Figure], stats.Comparison]) -> list[MechanismClass]:
    """The classes of one size's figures (sorted fastest first), fastest class first."""
    left = sorted(figures, key=lambda f: f.median_s)
    out: list[MechanismClass] = []
    while left:
        anchor = left.pop(0)
        key = grouping_key(anchor.row)
        members = [anchor]
        if key is not None:
            members += [f for f in left if grouping_key(f.row) == key
                        and compare(anchor, f).outcome in (stats.SAME, stats.UNDECIDED)]
            left = [f for f in left if f not in members]
        out.append(MechanismClass(class_name(members), tuple(members)))
    return out


def class_name(members: Sequence[Figure]) -> str:
    """The mechanism most members declare (the fastest's among equals); a class of one
    undeclared figure is named by its label."""
    names = [mechanism(f.row.path, f.row.variant).name for f in members]
    counts = Counter(names)
    return max(counts, key=lambda n: (counts[n], -names.index(n)))


def needs(f: Figure) -> int:
    """How many dependencies beyond CUDA reaching f needs (torch, NVSHMEM, NCCL)."""
    return needs_of(f.label)


def needs_of(label: str) -> int:
    path, _, variant = label.partition("/")
    return len(mechanism(path, variant).needs)


def choose(cls: MechanismClass, setup_cost: Callable[[Figure], float],
           order: Callable[[str], tuple]) -> tuple[Figure, str]:
    """(the member to use, why): the lowest set-up cost, then the fewest dependencies, then
    the declared order. `setup_cost`: a member's median set-up seconds (NaN: none measured);
    `order`: a label's place among the declared paths."""
    members = {f.label: f for f in cls.members}
    costs = {f.label: setup_cost(f) for f in cls.members}
    label, why = choose_label(list(members), costs.__getitem__, order)
    return members[label], why


def choose_label(labels: Sequence[str], setup_cost: Callable[[str], float],
                 order: Callable[[str], tuple]) -> tuple[str, str]:
    """choose() over path/variant labels (a band's members, model.bands)."""
    labels = list(dict.fromkeys(labels))
    if len(labels) == 1:
        return labels[0], "fastest"

    def cost(label: str) -> float:
        c = setup_cost(label)
        return c if math.isfinite(c) else math.inf

    best = min(labels, key=lambda x: (cost(x), needs_of(x), order(x)))
    path = best.partition("/")[0]
    others = [x for x in labels if x.partition("/")[0] != path]
    if math.isfinite(cost(best)) and others and all(cost(best) < cost(x) for x in others):
        return best, "cheapest set-up"
    cheapest = [x for x in labels if cost(x) == cost(best)]
    if needs_of(best) < max(needs_of(x) for x in cheapest):
        return best, "fewest dependencies"
    return best, "declared first"
