"""Mechanism classes: figures that are one copy reached through different APIs.

Figures of one size (one link, sharing mode and measure) may share a class when they are
bounded by the same ceiling (its key without '/producer' or '/consumer'), each at
SAME_COPY_FRACTION of it or more. Where the ceiling's time per transfer is below twice its
per-call floor (summary.call_bound), "% of the ceiling" says nothing: the mechanism each
path/variant declares (mechanisms.py) takes its place. A class is a clique: every two of its
members are shown equivalent (stats.compare: same, or within WITHIN_MAX), never a chain
through its fastest member; where the figures are bound by the call the declared mechanism
alone makes the class (their times are the cost of one enqueue through a binding, not of the
mechanism: a class is never split on them). A figure that is neither (below 90% of its ceiling, no ceiling,
a GPU-signalled hand-off) is a class of its own; figures that differ never merge (push and
pull stay apart where they differ), and a figure the samples cannot tell from a member
(undecided) starts a class of its own, which the decision names as undecided.

The API to use among equivalent figures is declared, not measured, so that noise cannot
flip it (`choose_label`): the fewest dependencies beyond CUDA (each of torch, NVSHMEM, NCCL
brings a library and, for NVSHMEM, a launcher of its own), then the cheapest set-up where
the set-up costs' intervals separate, then the order the paths and variants are declared in.
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
    """One candidate at one size: its label, summary row and samples; `replicas`: its samples per
    process set (replica 1, 2, ...) where more than one measured it, else (); `sets`: its median in
    each process set that measured it, ((scenario, replica), seconds)."""

    label: str
    row: object
    samples: np.ndarray
    replicas: tuple[np.ndarray, ...] = ()
    sets: tuple[tuple[tuple[str, int], float], ...] = ()  # its median in each process set (verdict.set_medians)

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
    """The classes of one size's figures (sorted fastest first), fastest class first: each
    unassigned figure in order of its median starts one, and a later figure of the same
    grouping key joins it when it is equivalent to every member already in it."""
    left = sorted(figures, key=lambda f: f.median_s)
    keys = {id(f): grouping_key(f.row) for f in left}  # each figure's, read once
    out: list[MechanismClass] = []
    while left:
        anchor = left.pop(0)
        key = keys[id(anchor)]
        members = [anchor]
        if key is not None:
            for f in left:
                if keys[id(f)] == key and (key[0] == "mechanism" or all(
                        equivalent(compare(m, f)) for m in members)):
                    members.append(f)
            left = [f for f in left if f not in members]
        out.append(MechanismClass(class_name(members), tuple(members)))
    return out


def one_call_bound_mechanism(a: Figure, b: Figure) -> bool:
    """Both figures bound by the call and of one declared mechanism: one class, never split."""
    key = grouping_key(a.row)
    return key is not None and key[0] == "mechanism" and key == grouping_key(b.row)


def equivalent(r: stats.Comparison) -> bool:
    """Shown the same, or within WITHIN_MAX: an equivalence bound, not a failure to tell."""
    return r.outcome in (stats.SAME, stats.WITHIN)


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


SetupCost = Callable[[str], tuple[float, float, float]]  # a label's set-up (lo, median, hi) seconds; NaN: none


def choose(cls: MechanismClass, setup_cost: SetupCost, order: Callable[[str], tuple]) -> tuple[Figure, str]:
    """(the member to use, why): choose_label over the class's members."""
    members = {f.label: f for f in cls.members}
    label, why = choose_label(list(members), setup_cost, order)
    return members[label], why


def cheaper(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    """Whether set-up a is cheaper than b with their intervals apart (a's top below b's bottom)."""
    return math.isfinite(a[2]) and math.isfinite(b[0]) and a[2] < b[0]


def choose_label(labels: Sequence[str], setup_cost: SetupCost, order: Callable[[str], tuple]) -> tuple[str, str]:
    """(the label to use, why) among labels as good as each other: the fewest dependencies,
    then none whose set-up another's beats with the intervals apart, then the declared order
    (see the module's docstring). why: 'fewest dependencies', 'cheapest set-up' or 'declared
    first' (the rule that settled it), 'fastest' for a label alone."""
    labels = list(dict.fromkeys(labels))
    if len(labels) == 1:
        return labels[0], "fastest"
    fewest = min(needs_of(x) for x in labels)
    light = [x for x in labels if needs_of(x) == fewest]
    costs = {x: setup_cost(x) for x in light}
    cheap = [x for x in light if not any(cheaper(costs[y], costs[x]) for y in light if y != x)]
    best = min(cheap, key=order)
    if len(light) == 1:
        return best, "fewest dependencies"
    if cheap == [best]:
        return best, "cheapest set-up"
    return best, "declared first"
