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

At one size (`decide`), every figure takes part with its spread (stats.compare: the
interval of the ratio decides, never a figure left out). Figures form classes (classes.py):
the same copy reached through different APIs, every two of them shown equivalent. The
mechanism comes first: the class with the fastest figure, with the classes shown the same as
it, holds the candidates; the API among them comes from the declared order (fewest
dependencies, set-up cost where the intervals separate, declared first: classes.choose_label),
and a candidate that any figure at the size beats beyond delta (its whole ratio interval) is
passed over for the next. The decision's outcome is the choice against the next class (the
first class neither shown the same nor an API of the choice's mechanism that no figure passes
over, nor, where both are bound by the call, a mechanism of the choice's family the samples cannot
tell from it: the next mechanism), its ratio measured from the choice. Each comparison's delta is at least what
the two figures' process sets measured apart of one ceiling at that size (each of the two figures'
ceilings of one link, the copy engine's or the kernel copy's, as every scenario's process set
measured it, and each scenario's producer against its consumer), and for two figures that two
process sets or more measured (replicas: the resampling pass, --replicas), at least how far their
ratio moved between those sets: an offset between processes is not taken for a difference between
paths, and figures are compared as measured, never rescaled.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from gpuipc_bench import robust
from gpuipc_bench.analysis import classes, stats
from gpuipc_bench.analysis.classes import Figure
from gpuipc_bench.analysis.conditions import ROLE_SUFFIXES, ceiling_base, column_values, conditions_of, label, records
from gpuipc_bench.analysis.mechanisms import gpu_signalled, mechanism
from gpuipc_bench.paths import PathInfo
from gpuipc_bench.results.rows import base_mode

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
    the figure with the most samples, and its `sets` column every scenario's median of it
    ((scenario, seconds) pairs: two process sets of the run measured it; else one pair), its
    `set_conditions` column each scenario's condition of it (where its replicas' samples are)."""
    def ranked(path: str, variant: str) -> bool:
        info = paths.get(path)
        return info is not None and info.ranked and variant not in info.references

    if summary.empty:
        return summary.assign(label=pd.Series([], dtype=str), condition=pd.Series([], dtype=object))
    common = ((summary["workers"] == 2) & (summary["verified"] != False)  # noqa: E712 - NA (unchecked) stays
              & np.isfinite(summary["median_s"].astype(float)) & (summary["bytes"] > 0))
    paths_and_variants = (column_values(summary["path"]), column_values(summary["variant"]))
    bandwidth = common & (summary["metric"] == "bandwidth") & np.array(
        [ranked(p, v) for p, v in zip(*paths_and_variants)], dtype=bool)
    rows = _labelled(summary[bandwidth])
    signalled = summary[common & (summary["metric"] == "latency") & np.array(
        [gpu_signalled(p, v) for p, v in zip(*paths_and_variants)], dtype=bool)]
    if not signalled.empty:
        handoff = rows[rows["measure"] == HANDOFF]
        sizes = set(zip(handoff["src"], handoff["dst"], handoff["bytes"]))
        keep = [(s, d, b) in sizes for s, d, b in zip(signalled["src"], signalled["dst"], signalled["bytes"])]
        rows = pd.concat([rows, _labelled(signalled[keep]).assign(measure=HANDOFF)])
    rows = rows.sort_values("samples", ascending=False, kind="stable")
    key = ["label", "src", "dst", "sharing", "measure", "bytes"]
    sets: dict[tuple, tuple] = {}
    where: dict[tuple, tuple] = {}
    for values, scenario, median, condition in zip(zip(*(rows[k] for k in key)), rows["scenario"], rows["median_s"],
                                                   rows["condition"]):
        sets[values] = sets.get(values, ()) + ((str(scenario), float(median)),)
        where[values] = where.get(values, ()) + ((str(scenario), condition),)
    rows = rows.drop_duplicates(key)
    rows = rows.assign(sets=[sets[values] for values in zip(*(rows[k] for k in key))],
                       set_conditions=[where[values] for values in zip(*(rows[k] for k in key))])
    return rows.sort_index()


def _labelled(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.assign(label=[label(p, v) for p, v in zip(column_values(rows["path"]), column_values(rows["variant"]))],
                       condition=conditions_of(rows))


@dataclasses.dataclass(frozen=True)
class Decision:
    """The answer at one size of one link, sharing mode and measure.

    outcome: the choice against the next class (`next`): FASTER (the whole ratio interval
    beyond 1 + delta), WITHIN (the interval reaches no further than `within` from 1, at most
    stats.WITHIN_MAX) or UNDECIDED; with no next class, SAME when something ties with the
    choice (its class's other members, `same`), UNDECIDED when only figures the samples
    cannot tell from it are left (`close`). same: the figures of the other classes shown the
    same as the choice (ties, whichever outcome); close: the APIs of its mechanism no figure
    passes over (whichever way one process set put them) and the figures after the next class
    the samples cannot tell from it; within: the equivalence bound
    (a fraction) where the outcome is SAME or WITHIN; states: the choice's samples in two
    scheduler states (stats.States: their medians and mix), None in one; replicas: the process
    sets the choice's samples come from (1: the first pass only; 2: measured again on a fresh
    set by the resampling pass, harness.resample). cls: the choice's
    class's mechanism; members: every path/variant in it (fastest first, the choice among
    them); choice: the one to use; why: the reason it is the one; next: the next class's name
    and next_members; ratio: next's median time over the choice's (of their fast states where
    both are two-state), ratio_lo..ratio_hi its Hodges-Lehmann interval (stats.compare);
    choice_s: the choice's (lo, median, hi) seconds (lo..hi: its median's interval, or its
    range below 6 samples); samples: the fewest samples of the choice and the next; separated:
    the outcome is FASTER with every sample of the choice below every sample of the next;
    delta: the effect floor of the comparison with the next class, with either figure's fall
    within its process set in it (falling; the largest used where there is none); cost: what the
    choice costs besides the transfer (a GPU-signalled hand-off's resident kernel)."""

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
    within: float = math.nan
    states: stats.States | None = None
    replicas: int = 1
    compared: tuple[str, ...] = ()  # every figure at this size
    compared_s: tuple[float, ...] = ()  # their median seconds, in the same order
    compared_ci: tuple[tuple[float, float], ...] = ()  # their medians' intervals (lo, hi), in the same order
    compared_fraction: tuple[float, ...] = ()  # their fractions of their ceilings, in the same order
    leader_range: tuple[float, float] = (math.nan, math.nan)  # the fastest member's samples, min..max
    compared_states: tuple[stats.States | None, ...] = ()  # their two states, in the same order
    # the figures some figure here beats beyond delta: one of another mechanism, or of its own in the
    # same scenario or in each of two process sets (decide's passes_over)
    beaten: tuple[str, ...] = ()
    # of those, the ones beaten in each of two process sets or more (both figures measured again by
    # the resampling pass): a difference a GPU pair's answer may name (bands._rejects)
    beaten_twice: tuple[str, ...] = ()
    lane: str = ""  # the lane the choice's bytes took, from NVML's counters (analysis/lanes.py); '': not read
    # the same decision with another label chosen (as_choice); None where it cannot be remade
    again: Callable[[str, str], Decision | None] | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def link(self) -> tuple[str, str]:
        return (self.src, self.dst)

    @property
    def tied(self) -> tuple[str, ...]:
        """Every figure not rejected here (no faster-beyond-delta outcome against it): the
        choice, its class, the classes shown the same and the figures undecided."""
        found = dict.fromkeys((self.choice, *self.members, *self.same, *self.close))
        return tuple(x for x in found if x == self.choice or x not in self.beaten)

    def as_choice(self, label: str, why: str | None = None) -> Decision:
        """This decision with `label` (a figure compared here, beaten by none beyond delta)
        as the one to use: decided again with it as the choice, so that its class, members,
        outcome, next and ratio are the ones measured from it. Itself where the label cannot
        be chosen here."""
        if label == self.choice:
            return self if why is None else dataclasses.replace(self, why=why)
        if self.again is None or label not in self.compared or label in self.beaten:
            return self
        found = self.again(label, self.why if why is None else why)
        return found if found is not None and found.choice == label else self

    def median_of(self, label: str) -> float:
        """The median seconds of a compared figure (NaN: not measured here)."""
        return self.compared_s[self.compared.index(label)] if label in self.compared[:len(self.compared_s)] \
            else math.nan


class CeilingTimes(dict):
    """ceiling_times' mapping, which also keeps its positive times by (sharing, ceiling key,
    bytes): _delta asks for them at every comparison of a decision."""

    _by_size: dict[tuple[str, str, int], list[float]] | None = None

    def by_size(self) -> dict[tuple[str, str, int], list[float]]:
        if self._by_size is None:
            found: dict[tuple[str, str, int], list[float]] = {}
            for (_, sharing, variant, nbytes), t in self.items():
                if t > 0:
                    found.setdefault((sharing, variant, nbytes), []).append(t)
            self._by_size = found
        return self._by_size


def ceiling_times(summary: pd.DataFrame) -> dict[tuple[str, str, str, int], float]:
    """(scenario, sharing, ceiling key, bytes) -> the ceiling's median seconds per transfer."""
    rows = summary[(summary["path"] == "ceiling") & (summary["metric"] == "bandwidth")]
    return CeilingTimes({(str(r.scenario), str(r.sharing), str(r.variant), int(r.bytes)): float(r.median_s)
                         for r in records(rows)})


def _key_spread(ceilings: Mapping[tuple[str, str, str, int], float], sharing: str, key: str, nbytes: int,
                own: Sequence[float]) -> float:
    """The spread (slowest over fastest, less 1) of ceiling `key` at `nbytes` over every scenario of
    `sharing` that measured it, and `own` (the figures' own ceilings' times); 0 with fewer than two."""
    if isinstance(ceilings, CeilingTimes):
        found = list(ceilings.by_size().get((sharing, key, nbytes), ()))
    else:
        found = [t for (scenario, mode, variant, size), t in ceilings.items()
                 if mode == sharing and size == nbytes and variant == key and t > 0]
    found += [t for t in own if t > 0]
    return max(found) / min(found) - 1 if len(found) >= 2 else 0.0


def _ceiling_time(ceilings: Mapping[tuple[str, str, str, int], float], row, key: str) -> float:
    found = [ceilings.get((str(row.scenario), str(row.sharing), variant, int(row.bytes)))
             for variant in (key, *(key + who for who in ROLE_SUFFIXES))]
    found = [t for t in found if t is not None]
    return found[0] if found else math.nan


def delta_for(a, b, ceilings: Mapping[tuple[str, str, str, int], float], min_effect: float = stats.MIN_EFFECT) -> float:
    """The delta of comparing summary rows a and b: max(min_effect, how far apart the two processes of
    either figure's scenario copy, the spread of their ceilings between process sets); see _delta."""
    return _delta(_Ceilinged(a, ceilings), _Ceilinged(b, ceilings), ceilings, min_effect)


class _Ceilinged:
    """What a comparison's delta reads of one figure's row, read once for its many comparisons: its
    scenario, sharing mode, size and ceiling key, the link that key names whichever engine copies
    ('d2d-sm@0' and 'd2d@0' alike; the kernel copies' 'd2h-sm@0+h2d-sm@0' and 'd2h@0+h2d@0'), its
    processes' offset (the ceiling's '/producer' against its '/consumer' time: |t_p / t_c - 1|, None
    where the scenario did not measure it in both) and its ceiling's time (NaN where none)."""

    __slots__ = ("scenario", "sharing", "bytes", "ceiling", "key", "link", "offset", "time", "sets")

    def __init__(self, row, ceilings: Mapping[tuple[str, str, str, int], float]):
        self.scenario, self.sharing, self.bytes = str(row.scenario), str(row.sharing), int(row.bytes)
        self.ceiling = bool(row.ceiling)
        self.key = ceiling_base(row.ceiling)
        self.link = self.key.replace("-sm@", "@")
        both = [ceilings.get((self.scenario, self.sharing, self.key + who, self.bytes)) for who in ROLE_SUFFIXES]
        self.offset = abs(both[0] / both[1] - 1) if all(t is not None and t > 0 for t in both) else None  # type: ignore[operator]
        self.time = _ceiling_time(ceilings, row, self.key)
        self.sets = dict(getattr(row, "sets", ()) or ())  # scenario -> its median of this figure (candidates)


def _delta(a: _Ceilinged, b: _Ceilinged, ceilings: Mapping[tuple[str, str, str, int], float],
           min_effect: float) -> float:
    """max(min_effect, the larger processes' offset of the two figures, and for two figures of
    different scenarios whose ceilings are one link, the spread of each of those ceilings at their
    size over every scenario of their sharing mode that measured it: the one spread where both
    figures copy with one engine, both compounded where one copies with the copy engine and the
    other with a kernel). The two figures' process sets are two draws of the run's; the spread of
    all of them, never less than the two's own, is the offset one process set may carry: at
    call-bound sizes a process's per-operation cost. On one H200, time-sliced at 4 B, NVSHMEM's
    device-initiated put over ipc/ce was 1.80x in one run's sets and 1.94-2.00x in another's
    (results/h200-region-1.csv.gz, h200-region-reference-3x20.csv.gz): the put's set and the copy
    engine's each moved."""
    offset = max([0.0] + [r.offset for r in (a, b) if r.offset is not None])
    spread = 0.0
    if a.scenario != b.scenario and a.ceiling and b.ceiling and a.link == b.link:
        # each figure carries its own set's offset on its own engine: where the two engines differ
        # (a copy-engine figure against a kernel's), the ratio carries both
        spread = math.prod(1 + _key_spread(ceilings, a.sharing, key, a.bytes, [r.time for r in (a, b) if r.key == key])
                           for key in {a.key, b.key}) - 1
    return max(min_effect, offset, spread, _sets_spread(a, b))


def _sets_spread(a: _Ceilinged, b: _Ceilinged) -> float:
    """How far the ratio of two figures moved between the process sets that measured both (the latency
    and sharing scenarios' kernel ping-pongs, each in its own set): slowest over fastest of each set's
    a/b, less 1; 0 where fewer than two sets measured both. A ratio of one set carries that set's draw:
    on one H200 under MPS the 4-byte flag ping-pong over the LL one moved 3.38-3.59 between the two
    scenarios' sets of one run (results/h200-leave.txt)."""
    return _spread_of_ratios(a.sets, b.sets)


def _spread_of_ratios(a: Mapping, b: Mapping) -> float:
    """Slowest over fastest, less 1, of a[k] / b[k] over the keys (process sets) both hold a positive
    figure for; 0 where fewer than two do."""
    ratios = [a[k] / b[k] for k in a.keys() & b.keys() if a[k] > 0 and b[k] > 0 and math.isfinite(a[k] / b[k])]
    return max(ratios) / min(ratios) - 1 if len(ratios) >= 2 else 0.0


def set_medians(row, replicas: Mapping[tuple, tuple] | None = None) -> tuple[tuple[tuple[str, int], float], ...]:
    """A candidate's median in each process set that measured it, ((scenario, replica), seconds): every
    scenario that timed it (candidates' `sets`: the latency and sharing scenarios both time the kernel
    ping-pongs) and, where a scenario measured it on several sets (the resampling pass, --replicas),
    each of them (`replicas`: samples_by_replica)."""
    found = []
    conditions = dict(getattr(row, "set_conditions", ()) or ())
    for scenario, median in getattr(row, "sets", ()) or ((str(row.scenario), float(row.median_s)),):
        per_set = (replicas or {}).get(conditions.get(scenario), ())
        if len(per_set) >= 2:
            found += [((scenario, r + 1), float(np.median(x))) for r, x in enumerate(per_set) if len(x)]
        else:
            found.append(((scenario, 1), float(median)))
    return tuple(found)


def _replicas_spread(a: Figure, b: Figure) -> float:
    """How far the ratio of two figures moved between the passes that measured both (replica r of
    each: the resampling pass, each pass of --replicas, whose process set measured every scenario of
    one mode that shares processes): slowest over fastest of each pass's median a over median b,
    less 1; 0 where fewer than two measured both. On one H200 the host-synced staging hand-off at
    1 MiB sat at 59.8-64.2 us in four runs' sets, 4.2-4.4x ahead of the IPC push behind it."""
    def medians(f: Figure) -> dict[int, float]:
        return {r: float(np.median(x)) for r, x in enumerate(f.replicas) if len(x)}

    return _spread_of_ratios(medians(a), medians(b))


def _sets_moved(a: Figure, b: Figure) -> float:
    """How far the ratio of two figures moved between the process sets that measured both in the
    same scenario (each scenario's that timed both, and each replica of it): slowest over fastest
    of each set's a/b, less 1; 0 where fewer than two sets measured both. The offset between
    process sets is measured there, not assumed: a ratio one set draws is that set's. On one H200
    under MPS the 4 KiB flag ping-pong over the LL one was 3.01-3.56 in the six sets (two
    scenarios, three replicas) of one -n 20 --replicas 3 run (results/h200-sets.txt)."""
    return _spread_of_ratios(dict(a.sets), dict(b.sets))


def scheduler_states(sharing: str, measure: str) -> bool:
    """Whether figures of this sharing mode and measure fall into the scheduler's states (a context
    switch in a sample or not: a time-sliced hand-off; MPS runs one context), which decide compares
    state by state (stats.state_step)."""
    return base_mode(sharing) == "time-sliced" and measure == HANDOFF


def states_step(figures: Sequence[Figure], prepared: Callable[[Figure], stats.Prepared] | None = None) -> float:
    """The step between the two scheduler states of one size's figures (stats.state_step), where they
    fall into such states (scheduler_states); 0.0 elsewhere. `prepared`: each figure's samples prepared,
    where the caller keeps them."""
    row = figures[0].row
    if not scheduler_states(str(row.sharing), str(row.measure)):
        return 0.0
    return stats.state_step([prepared(f) if prepared else stats.Prepared(f.samples) for f in figures])


def figures_delta(a: Figure, b: Figure, ceilings: Mapping[tuple[str, str, str, int], float],
                  min_effect: float = stats.MIN_EFFECT, facts: tuple[_Ceilinged, _Ceilinged] | None = None) -> float:
    """The delta decide compares two figures with: _delta of their rows (`facts`: their _Ceilinged,
    where the caller keeps them), and at least how far their ratio moved between the passes
    (_replicas_spread) and the process sets (_sets_moved) that measured both."""
    ca, cb = facts if facts is not None else (_Ceilinged(a.row, ceilings), _Ceilinged(b.row, ceilings))
    return max(_delta(ca, cb, ceilings, min_effect), _replicas_spread(a, b), _sets_moved(a, b))


def decide(figures: Sequence[Figure], ceilings: Mapping[tuple[str, str, str, int], float],
           setup_cost: classes.SetupCost, order: Callable[[str], tuple],
           min_effect: float = stats.MIN_EFFECT, prefer: str | None = None, prefer_why: str = "",
           _known: tuple[dict, dict, dict] | None = None) -> Decision | None:
    """The decision among the figures of one size (one link, sharing mode and measure); None
    with fewer than two figures (nothing compared). `setup_cost`: a label's set-up (lo,
    median, hi) seconds; `order`: its place among the declared paths; `prefer`: the label to
    choose where no figure beats it beyond delta (a band's choice: Decision.as_choice), with
    `prefer_why` as its reason."""
    if len(figures) < 2:
        return None
    figures = sorted(figures, key=lambda f: f.median_s)
    # the comparisons and each figure's prepared samples, kept for the decisions remade from this
    # one (as_choice): the same figures, compared once (keyed by the figures, which they keep alive)
    known = _known if _known is not None else ({}, {}, {})
    cache: dict[tuple[int, int], stats.Comparison] = known[0]
    prepared: dict[int, stats.Prepared] = known[1]
    facts: dict[int, _Ceilinged] = known[2]

    def ceilinged(f: Figure) -> _Ceilinged:
        found = facts.get(id(f))
        if found is None:
            found = facts[id(f)] = _Ceilinged(f.row, ceilings)
        return found

    def prep(f: Figure) -> stats.Prepared:
        found = prepared.get(id(f))
        if found is None:
            found = prepared[id(f)] = stats.Prepared(f.samples)
        return found

    step = states_step(figures, prep)

    def compare(a: Figure, b: Figure) -> stats.Comparison:
        key = (id(a), id(b))
        if key not in cache:
            delta = figures_delta(a, b, ceilings, min_effect, (ceilinged(a), ceilinged(b)))
            cache[key] = stats.compare_prepared(prep(a), prep(b), delta, step=step)
        return cache[key]

    ends = {id(f): (prep(f).part().lo, prep(f).part().hi) for f in figures}  # fastest and slowest sample

    def beats(a: Figure, b: Figure) -> bool:
        """a faster than b beyond delta; never between APIs of one declared mechanism where both
        are bound by the call (the time is the binding's enqueue cost, not the mechanism's); where
        both were measured by two process sets or more (replicas), in each of them too: a
        difference one process set shows and the other does not is the offset between them."""
        if min_effect > 1e-9 and ends[id(a)][0] > ends[id(b)][1]:
            # every sample of a slower than every sample of b: whichever of them are compared, the
            # ratio interval lies at or below 1 (within a rounding), short of 1 + delta: not compared
            return False
        found = compare(a, b)
        if found.outcome != stats.FASTER or classes.one_call_bound_mechanism(a, b):
            return False
        both = min(len(a.replicas), len(b.replicas))
        return all(stats.compare(a.replicas[r], b.replicas[r], found.delta).outcome == stats.FASTER
                   for r in range(both))

    found = classes.form(figures, compare)
    lead = found[0]
    tied = [lead] + [c for c in found[1:] if compare(lead.anchor, c.anchor).outcome == stats.SAME]
    # a class of the fastest's family (one mapping, the copy engine or a kernel: 'IPC mapping, ...')
    # that the samples cannot tell from it: which is ahead is the draw's (at a two-state size, which
    # state each group's samples fell in), so the declared order names the one to use among them
    tied += [c for c in found[1:] if c not in tied and _family(c.name) == _family(lead.name)
             and compare(lead.anchor, c.anchor).outcome in (stats.UNDECIDED, stats.WITHIN)]
    pool = [f for c in tied for f in c.members]
    by_label = {f.label: f for f in pool}
    beaten_twice = {f.label for f in figures if len(f.replicas) >= 2
                    and any(len(g.replicas) >= 2 and beats(g, f) for g in figures)}
    # what passes an API over as the one to use: a figure of another mechanism faster beyond delta; one
    # of its own mechanism faster beyond delta in the same scenario (their samples interleaved in one
    # run), or in each of two process sets. Between two scenarios' APIs of one mechanism, one run's gap
    # is within what separates their runs (the d2d ceiling at 4 B moves 11.6% between them). Where a
    # hand-off's samples fall into the scheduler's states (time-sliced), so is the gap between the side
    # that starts the copy in one scenario and the other side in another: the state a sample lands in
    # sets its time, not who queued the copy (on one H200, time-sliced at 256 MiB, mempool/push ran 3.2%
    # ahead of ipc/ce in its one set and named ipc/push in one default run of three, where the other two
    # and the 3x20 reference named ipc/ce: results/h200-oneset-b-3.csv.gz). Under MPS push and pull
    # differ repeatably (push 4-12% ahead at 16-256 MiB) and stay mechanisms apart.
    by_state = scheduler_states(str(figures[0].row.sharing), str(figures[0].row.measure))
    identity = {id(f): _either_direction(f) if by_state else _identity(f) for f in figures}

    def passes_over(g: Figure, f: Figure) -> bool:
        return (identity[id(f)] != identity[id(g)] or str(f.row.scenario) == str(g.row.scenario)
                or min(len(g.replicas), len(f.replicas)) >= 2) and beats(g, f)

    beaten = {f.label for f in figures if any(passes_over(g, f) for g in figures)}
    # the fastest class's mechanism (either direction, and for a hand-off what hands it over) reached
    # through any API: an API of it that one process set shows a few % apart from the others is still a
    # candidate (the declared order names it, not the noise)
    for f in figures:
        if f.label not in by_label and f.label not in beaten and _either_direction(f) == _either_direction(lead.anchor):
            by_label[f.label] = f
    choice, why = None, ""
    wanted = [f for f in figures if f.label == prefer and f.label not in beaten]
    if wanted:
        choice, why, by_label = wanted[0], prefer_why, {}
    while by_label:
        label, why = classes.choose_label(list(by_label), setup_cost, order)
        if label not in beaten:
            choice = by_label[label]
            break
        del by_label[label]  # beaten beyond delta by a figure at this size: never the one to use
    if choice is None:
        choice, why = lead.anchor, "fastest"
    win = next(c for c in found if choice in c.members)
    rest = [(c, compare(choice, c.anchor)) for c in found if c is not win]
    same_classes = [(c, r) for c, r in rest if r.outcome == stats.SAME]
    # APIs of the choice's mechanism the samples cannot tell from it: named, not the next class
    # APIs of the choice's mechanism in classes of their own, undecided against it or faster than it in
    # this one process set (not passing it over: passes_over): named with it, never its next class
    def kin_of(c: classes.MechanismClass, r: stats.Comparison) -> bool:
        if r.outcome in (stats.UNDECIDED, stats.WITHIN):
            # at a size bound by the call, a mechanism of the choice's family (one mapping, by the copy
            # engine or a kernel) the samples cannot tell from it differs by its binding's enqueue cost,
            # not by how it moves the bytes: named with it, never its next class
            return c.name == win.name or _identity(c.anchor) == _identity(choice) or _call_bound_family(
                c.anchor, choice)
        # one of the choice's mechanism, faster or slower than the choice in its one process set, that the
        # choice does not pass over (in the same scenario, or in each of two process sets): the offset
        # between sets, not the next. Another mechanism passing it over does not make it one: on one H200
        # under MPS at 256 MiB, mempool/ce ran 6.8% behind ipc/ce in its one set, passed over by the push
        # figures, and was named the next class at 1.068x where the 3x20 reference put the two at
        # 0.962-1.043 (results/h200-oneset-b-1.csv.gz)
        return _identity(c.anchor) == _identity(choice) and (r.outcome == stats.SLOWER or (
            r.outcome == stats.FASTER and not passes_over(choice, c.anchor)))

    kin = [(c, r) for c, r in rest if kin_of(c, r)]
    named = {id(c) for c, _ in same_classes + kin}
    # where the call binds, a mechanism of the choice's family that the samples do tell from it is a
    # binding apart, not a mechanism: its gap is one enqueue through CuPy's memcpy against a packed
    # cuLaunchKernel, and it moves from one process set to the next (on one H200 under MPS at 4 B, a
    # kernel copy over ipc/ce was 1.119x in one default run and 1.040-1.089 over the three sets of the
    # same call's 3x20 reference: results/h200-oneset-b-1.csv.gz). Neither the next class nor undecided:
    # the next class is the next mechanism (the figure itself is in the report's tables)
    apart = {id(c) for c, r in rest if r.outcome in (stats.FASTER, stats.SLOWER)
             and _call_bound_family(c.anchor, choice)}
    after = [(c, r) for c, r in rest if id(c) not in named | apart]
    nxt, vs = after[0] if after else (None, None)
    close = tuple(f.label for c, _ in kin for f in c.members)
    close += tuple(f.label for c, r in after[1:] if r.outcome in (stats.UNDECIDED, stats.WITHIN, stats.SLOWER)
                   for f in c.members)
    same = tuple(f.label for c, _ in same_classes for f in c.members)
    span = ratio_span(vs, choice, nxt.anchor, step) if vs is not None and nxt is not None else (math.nan, math.nan)
    reach = max(span[1], 1 / span[0]) - 1 if span[0] > 0 and math.isfinite(span[1]) else math.nan
    # the ratio to the next class claims no more than its two figures fell within a process set (falling)
    next_delta = max([vs.delta, *(falling(f) for f in (choice, nxt.anchor) if prep(f).two is None)]) \
        if vs is not None and nxt is not None else None
    if vs is not None:
        outcome = vs.outcome if vs.outcome in (stats.FASTER, stats.WITHIN) else stats.UNDECIDED
        if outcome == stats.FASTER and not span[0] >= 1 + next_delta or outcome == stats.WITHIN:
            # faster only where the interval spanning each process set's lies beyond 1 + delta
            outcome = stats.WITHIN if reach <= stats.WITHIN_MAX else stats.UNDECIDED
    else:
        outcome = stats.UNDECIDED if close or apart else stats.SAME  # nothing told apart is the same
    ties = [compare(choice, f) for f in win.members if f is not choice] + [r for _, r in same_classes]
    within = reach if outcome == stats.WITHIN and vs is not None else \
        max([r.within for r in ties if math.isfinite(r.within)], default=math.nan) if outcome == stats.SAME \
        else math.nan
    nbytes = int(choice.row.bytes)
    row = choice.row
    lo, median, hi = prep(choice).interval
    found_states = tuple(_two(prep(f)) for f in figures)
    return Decision(
        src=str(row.src), dst=str(row.dst), sharing=str(row.sharing), measure=str(row.measure), bytes=nbytes,
        outcome=outcome, cls=win.name, members=tuple(f.label for f in win.members), choice=choice.label, why=why,
        next=nxt.name if nxt else None, next_members=tuple(f.label for f in nxt.members) if nxt else (),
        ratio=vs.ratio if vs else math.nan,
        ratio_lo=span[0], ratio_hi=span[1],
        choice_s=(lo, median, hi), choice_gbps=nbytes / median / 1e9 if median > 0 else math.nan,
        fraction_of_ceiling=float(row.fraction_of_ceiling), ceiling=str(row.ceiling or ""),
        call_bound=bool(row.call_bound), l2_resident=None if pd.isna(row.l2_resident) else bool(row.l2_resident),
        samples=min(len(f.samples) for f in (choice, *((nxt.anchor,) if nxt else ()))),
        compared=tuple(f.label for f in figures), compared_s=tuple(f.median_s for f in figures),
        compared_ci=tuple(_ends_of(prep(f)) for f in figures),
        compared_fraction=tuple(float(f.row.fraction_of_ceiling) for f in figures),
        separated=bool(vs and vs.separated and outcome == stats.FASTER),
        delta=next_delta if next_delta is not None else max([r.delta for _, r in rest] or [min_effect]),
        same=same, close=close, cost=mechanism(row.path, row.variant).cost, within=within,
        states=found_states[figures.index(choice)], compared_states=found_states,
        leader_range=(float(np.nanmin(lead.anchor.samples)), float(np.nanmax(lead.anchor.samples))),
        beaten=tuple(sorted(beaten)), replicas=max(1, len(choice.replicas)),
        beaten_twice=tuple(sorted(beaten_twice)),
        again=lambda label, why: decide(figures, ceilings, setup_cost, order, min_effect, label, why, known))


FALLING = 0.03  # engine.sampler.DRIFT: a figure whose samples fell further than this is still warming up


def falling(f: Figure) -> float:
    """How far a figure's samples fell within a process set where they were still falling beyond
    FALLING: the median of the earlier half over the later half's, less 1, the largest of its sets
    (6 samples a set at least; an odd count's middle sample in neither half); 0 where none fell so.
    The ratio of a figure to the next class carries it in its delta, as a warm-up still going (the
    sampler takes such a group to --max-samples: engine.sampler.drifting). Not for a figure whose
    samples sit in two scheduler states, whose halves differ by the states' mix (the caller's rule).
    On one H200 the time-sliced pageable hand-off at 64 KiB ran 72, 68, 60, 64 then ~60 us, the
    next class of the host-synced one, and its ratio lay outside the 3x20 reference's interval widened
    by delta in 10 of 45 default runs; over the fifteen committed triples this delta took the
    runner-up misses from 38 to 33 and the triples meeting every part of issue 33's bar from 3 to 5,
    and 9 of their 1,305 decisions from faster to undecided, 5 of them the MPS 256 MiB hand-off
    whose API flips between runs (results/h200-triples-reread.txt, h200-pageable-warmup.txt)."""
    fell = [early / late - 1 for early, late in filter(None, map(robust.halves, f.replicas or (f.samples,)))
            if late > 0]
    return max([x for x in fell if x > FALLING], default=0.0)


def ratio_span(found: stats.Comparison, a: Figure, b: Figure, step: float = 0.0) -> tuple[float, float]:
    """The ratio interval of b over a to report: found's (their pooled samples'), and where both were
    measured by two process sets or more (replicas), widened to span each set's interval too. A
    decision claims b slower only where each set shows it (decide's `beats`), and the sets' offset
    is part of where the ratio lies: the pooled samples of three sets of 20 put the MPS hand-off's
    mempool/ce over ipc/push at 256 MiB in [1.038, 1.056] on one H200, its three sets in [1.074,
    1.097], [1.034, 1.078] and [1.039, 1.064] (results/h200-region-reference-3x20.csv.gz)."""
    lo, hi = found.ratio_lo, found.ratio_hi
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return lo, hi
    for x, y in zip(a.replicas, b.replicas):
        one = stats.compare_prepared(stats.Prepared(x), stats.Prepared(y), found.delta, step=step)
        if math.isfinite(one.ratio_lo) and math.isfinite(one.ratio_hi):
            lo, hi = min(lo, one.ratio_lo), max(hi, one.ratio_hi)
    return lo, hi


def _family(name: str) -> str:
    """A mechanism's family: its name before the comma ('IPC mapping, kernel copy': 'IPC mapping'),
    the whole name where it has none."""
    return name.partition(",")[0]


def _identity(f: Figure) -> tuple[str, str, str]:
    """What a figure's API reaches: its declared mechanism and, for a hand-off, who starts the copy
    (push or pull: one message's latency differs with it, and repeatably; messages queued back to
    back keep one engine busy whichever side queued them) and what hands the message over (torch's
    queue: on one H100 under MPS torch/caching's hand-off at 64 MiB took 1.86x ipc/ce's, the same
    copy signalled through the tool's own event)."""
    found = mechanism(str(f.row.path), str(f.row.variant))
    if str(f.row.measure) == "handoff":
        return (found.name, found.direction, found.handover)
    return (found.name, "", "")


def _call_bound_family(a: Figure, b: Figure) -> bool:
    """Both figures bound by the call, their declared mechanisms of one family ('IPC mapping, copy
    engine' and 'IPC mapping, kernel copy'). Their gap there is the enqueue cost of each binding (CuPy's
    memcpy against a packed cuLaunchKernel), and it moves from one process set to the next: on one H200,
    time-sliced at 4 B, a kernel copy over ipc/ce spanned 1.014-1.075 across the two sets of one default
    run and 1.064-1.076 in another's (results/h200-oneset-b-2.csv.gz, -1)."""
    def family(f: Figure) -> str:
        return _family(mechanism(str(f.row.path), str(f.row.variant)).name)

    return bool(a.row.call_bound) and bool(b.row.call_bound) and family(a) == family(b)


def _either_direction(f: Figure) -> tuple[str, str]:
    """_identity less who starts the copy: the mechanism and what hands the message over."""
    name, _, handover = _identity(f)
    return name, handover


def _two(samples: stats.Prepared) -> stats.States | None:
    return samples.two[0] if samples.two is not None else None


def _ends_of(samples: stats.Prepared) -> tuple[float, float]:
    lo, _, hi = samples.interval
    return (lo, hi)

