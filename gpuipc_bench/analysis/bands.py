"""Bands: consecutive sizes of one section (a link, or the GPU pairs of one link class, in one
sharing mode and measure) told in one line, and whether a second sharing mode changes the
choice at a size.

A band splits only where the winning class changes or its choice is rejected beyond delta.
The rules (one link, GPU pairs, a second mode): docs/methods/bands.md.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

from gpuipc_bench.analysis.classes import SetupCost, choose_label, needs_of
from gpuipc_bench.analysis.mechanisms import mechanism
from gpuipc_bench.analysis.verdict import Decision


@dataclasses.dataclass(frozen=True)
class Band:
    """Consecutive sizes of a section with one choice. decisions: every pair's decision at
    those sizes that measured the choice and holds it or cannot tell it from its own (one
    per size for one link), shown with the band's choice; differ: the decisions of the pairs
    that reject the choice (they are named: among several pairs, only a difference two
    process sets both show); unmeasured: sizes bridged, where the choice, winning on both
    sides, was measured on no pair; pool: the members usable at every size of the band (the
    choice among them); why: why the choice is the one; unconfirmed: the pairs whose own
    choice is faster beyond delta in one process set only (not named: the resampling pass
    measures them again, harness.resample)."""

    decisions: tuple[Decision, ...]
    choice: str = ""
    differ: tuple[Decision, ...] = ()
    unmeasured: tuple[int, ...] = ()
    others: tuple[Decision, ...] = ()  # the pairs' that did not measure the choice and do not reject it
    pool: tuple[str, ...] = ()
    why: str = ""
    measured_to: int | None = None  # its choice was not measured above this size, where the next band starts
    unconfirmed: tuple[Decision, ...] = ()

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

    def only(self, sizes: Sequence[int]) -> Band:
        """The band at these of its sizes only."""
        keep = set(sizes)
        return dataclasses.replace(
            self, decisions=tuple(d for d in self.decisions if d.bytes in keep),
            differ=tuple(d for d in self.differ if d.bytes in keep),
            others=tuple(d for d in self.others if d.bytes in keep),
            unconfirmed=tuple(d for d in self.unconfirmed if d.bytes in keep),
            unmeasured=tuple(b for b in self.unmeasured if b in keep),
            measured_to=self.measured_to if self.measured_to in keep else None)


def _no_order(label: str) -> tuple:
    return ()


def _no_cost(label: str) -> tuple[float, float, float]:
    return (math.nan, math.nan, math.nan)


def bands(decisions: Sequence[Decision], cost: SetupCost = _no_cost,
          order: Callable[[str], tuple] = _no_order) -> list[Band]:
    """The decisions of one section as bands (see the module's docstring). `cost`: a
    path/variant's set-up (lo, median, hi) seconds; `order`: its place among the declared paths."""
    by_size: dict[int, list[Decision]] = {}
    for d in decisions:
        by_size.setdefault(d.bytes, []).append(d)
    # GPU pairs of one class: the choice is the one most pairs hold, as one process set shows;
    # a pair is named as rejecting it only where two process sets both show it
    gate = len({d.link for d in decisions}) > 1
    # sizes, members usable at all of them, class, the choice and why
    runs: list[tuple[list[int], set[str], str, str, str]] = []
    for size in sorted(by_size):
        here = by_size[size]
        choice = _choose(here, order)
        cls = _class_of(choice, here)
        usable = _usable(choice, cls, here)
        preferred, reason = choose_label(sorted(usable, key=order), cost, order)
        if len(usable) == 1:  # alone in its mechanism here: the decision's own reason (ties of others)
            reason = next((d.why for d in here if d.choice == preferred), reason)
        if runs and runs[-1][2] == cls and runs[-1][3] == preferred:
            runs[-1][0].append(size)
            runs[-1][1].intersection_update(usable)
        else:
            runs.append(([size], set(usable), cls, preferred, reason))
    out = []
    for sizes, pool, _, pick, why in runs:
        agree: list[Decision] = []
        differ: list[Decision] = []
        others: list[Decision] = []
        once: list[Decision] = []
        for size in sizes:
            here = by_size[size]
            ref = _fastest(pick, here)
            found = []
            for d in here:
                if _rejects(d, pick, ref, gate):
                    differ.append(d)
                elif _rejects(d, pick, ref):  # in one process set only: not named
                    once.append(d)
                    others.append(d)
                elif pick in d.compared:
                    found.append(d)
                else:
                    others.append(d)
            agree += sorted((d.as_choice(pick, why) for d in found), key=lambda d: d.choice != pick)
        out.append(Band(tuple(agree), pick, tuple(differ), (), tuple(others), tuple(sorted(pool, key=order)), why,
                        unconfirmed=tuple(once)))
    return _edges(_bridge(out))


def _edges(found: list[Band]) -> list[Band]:
    """Each band whose choice was measured at none of the next band's sizes, with `measured_to`
    its largest size: the answer changes there because the path stops being measured, which
    the answer says rather than switching silently."""
    out = []
    for band, after in zip(found, found[1:] + [None]):
        if after is not None and not any(band.pick in d.compared for d in (*after.decisions, *after.differ,
                                                                           *after.others)):
            band = dataclasses.replace(band, measured_to=band.hi)
        out.append(band)
    return out


def _class_of(choice: str, decisions: Sequence[Decision]) -> str:
    """The winning class's name where `choice` is a pair's own choice."""
    found = next((d for d in decisions if d.choice == choice), None)
    return found.cls if found is not None else _mechanism(choice)


def _mechanism(label: str) -> str:
    path, _, variant = label.partition("/")
    return mechanism(path, variant).name


def _usable(choice: str, cls: str, decisions: Sequence[Decision]) -> set[str]:
    """The members of class `cls` usable at one size: not rejected by more pairs than `choice`."""
    labels = {x for d in decisions for x in d.tied if x in d.members or _mechanism(x) == cls}
    most = _rejections(choice, decisions)
    return {x for x in labels if _rejections(x, decisions) <= most} | {choice}


def _rejections(label: str, decisions: Sequence[Decision]) -> int:
    ref = _fastest(label, decisions)
    return sum(_rejects(d, label, ref) for d in decisions)


def _rejects(d: Decision, choice: str, ref: float, gate: bool = False) -> bool:
    """Whether a pair's decision rejects `choice`: its own choice is faster beyond delta, as
    its samples show where it measured `choice`, or as the medians show where it did not
    (`ref`: the median of `choice` on the pairs that measured it). With `gate` (GPU pairs of
    one class, whose links are alike), only a difference that holds in each of two process
    sets: the offset between two sets of processes is as large as the gaps one set shows
    between identical links."""
    if choice in d.compared:
        return choice not in d.tied and (not gate or choice in d.beaten_twice)
    return d.choice_s[1] * (1 + d.delta) < ref and (not gate or d.replicas >= 2)


def _support(choice: str, decisions: Sequence[Decision]) -> tuple[int, int]:
    """(how many pairs reject choice, minus how many hold it)."""
    ref = _fastest(choice, decisions)
    return sum(_rejects(d, choice, ref) for d in decisions), -sum(_holds(choice, d) for d in decisions)


def _fastest(choice: str, decisions: Sequence[Decision]) -> float:
    found = [t for t in (d.median_of(choice) for d in decisions) if math.isfinite(t)]
    return min(found) if found else math.inf


def _choose(decisions: Sequence[Decision], order: Callable[[str], tuple]) -> str:
    names = list(dict.fromkeys(d.choice for d in decisions))
    return min(names, key=lambda c: (_support(c, decisions), needs_of(c), order(c)))


def _bridge(found: list[Band]) -> list[Band]:
    out: list[Band] = []
    for band in found:
        if len(out) >= 2 and out[-2].choice == band.choice \
                and not any(band.choice in d.compared for d in out[-1].decisions + out[-1].differ + out[-1].others):
            gap, before = out.pop(), out.pop()
            pool = tuple(x for x in before.pool if x in band.pool) or (band.choice,)
            band = Band(before.decisions + band.decisions, band.choice, before.differ + band.differ,
                        tuple(sorted(before.unmeasured + gap.sizes + band.unmeasured)), before.others + band.others,
                        pool, before.why, unconfirmed=before.unconfirmed + band.unconfirmed)
        out.append(band)
    return out


def _holds(choice: str, d: Decision) -> bool:
    """Whether `choice` is as good as the choice of decision d: it, in its class or the same."""
    return choice == d.choice or (choice in d.members or choice in d.same) and choice not in d.close


def changes(main: Decision | None, other: Decision, pick: str | None = None,
            main_class: Sequence[str] = ()) -> bool:
    """Whether a decision in a second sharing mode changes the main mode's at its size (see
    the module's docstring). `other`: shown with its band's choice; `pick`: the main mode's
    choice there (its decision's by default); `main_class`: the members of its class."""
    if main is None:
        return True
    pick = pick or main.choice
    if pick == other.choice:
        return False
    ahead = other.choice_s[1] * (1 + other.delta)
    if pick in other.compared:
        return pick not in other.tied and ahead < other.median_of(pick)
    measured = [x for x in (*main_class, *main.members) if x in other.compared]
    if measured:
        return not any(x in other.tied for x in measured) and ahead < min(other.median_of(x) for x in measured)
    mine = main.median_of(pick)
    return ahead < (mine if math.isfinite(mine) else main.choice_s[1])
