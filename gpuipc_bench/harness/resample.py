"""The resampling pass: after the first pass over the plan, the run analyses its rows and measures
again, on a fresh process set (replica 2: pyperf's unit of variance), the groups where a decision
is open or can move (and, in the same runs, those behind a decision made on one set), most open
first, while its time allows (`run --budget`, else a default allowance of DEFAULT_RESAMPLE_S; none
for --quick). The rows it adds say `replica` 2; the analysis pools them with the first pass's
figures and names another API within a class only where the difference holds in both replicas
(analysis.verdict.decide).

    groups = open_groups(frame, meta)                     # the query: what a second set should measure
    Resampler(plan, results, reporter, clock).run(measure)  # Session's one call, after the first pass

Which decisions (`open_decisions`, `differs_once`, `one_set`, read from the analysis's decisions, never
decided again here):

  undecided  the choice against the next class cannot be told: the choice, the next class's
             fastest figure and every figure the samples cannot tell from the choice (`close`);
  can move   decided, but a figure outside the choice's pool (its class and the classes shown
             the same), or in it but beaten beyond delta by another figure in this one process
             set, that the declared order would take before the choice lies within
             1 + MOVE_WITHIN x delta of the size's leader (by its fast state where its samples
             sit in two scheduler states): another draw of states may make it the choice;
  within     the choice against the next class is within X% (an equivalence bound, not a
             difference): the choice and the next class's fastest figure;
  differs once
             a GPU pair whose own choice beats its link class's choice in one process set
             only (analysis.bands: the answer names a pair only where two sets show it): the
             class's choice and the pair's, on that pair;
  on one set decided, but its choice measured by one process set: the choice and the next class's
             fastest figure, measured again only by a run the pass makes for an open decision anyway
             (the same scenario, sharing mode and GPUs; dropped from it where the time left cannot
             hold them), so that the runner-up ratio carries the offset between two sets.

Most open first: undecided, differs once, can move, within, on one set; in each, the runs of the process
set the pass is in first (leaving a set and coming back forks another), then the widest ratio interval first. A group
is measured again once (two replicas); what is still open after its second set is left open,
said on stderr and in the header (`sampling.open`)."""

from __future__ import annotations

import dataclasses
import math
import textwrap
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpuipc_bench.defaults import resample_allowance
from gpuipc_bench.hooks.profiling import mark

MOVE_WITHIN = 2.0  # a figure within 1 + this x delta of its size's leader can move the decision
REPLICA = 2  # the resampling pass's process set
# how open a decision is (the pass takes the most open first); ONE_SET: decided, on one process set
UNDECIDED, DIFFERS, CAN_MOVE, WITHIN, ONE_SET = 4, 3, 2, 1, 0
OPENNESS = {UNDECIDED: "undecided", DIFFERS: "differs once", CAN_MOVE: "can move", WITHIN: "within",
            ONE_SET: "on one set"}


@dataclasses.dataclass(frozen=True)
class OpenDecision:
    """A decision the resampling pass would measure again: its name ('time-sliced handoff 64 MiB',
    with the link across GPUs), how open it is (UNDECIDED, DIFFERS, CAN_MOVE, WITHIN), the reach of its
    ratio interval (log of hi / lo: the widest first) and the figures (path/variant) to measure."""

    name: str
    tier: int
    reach: float
    labels: tuple[str, ...]

    @property
    def why(self) -> str:
        return OPENNESS[self.tier]


@dataclasses.dataclass(frozen=True)
class OpenGroup:
    """One group to measure again: the row fields that name it (its scenario, path, variant, measure
    as its rows say: a kernel ping-pong's 'pingpong', bytes, sharing, src, dst) and the most open
    decision it is in."""

    scenario: str
    path: str
    variant: str
    measure: str
    bytes: int
    sharing: str
    src: str
    dst: str
    decision: OpenDecision

    @property
    def run_key(self) -> tuple[str, str, str, str]:
        """Which scenario run measured it: (scenario, sharing, src, dst)."""
        return (self.scenario, self.sharing, self.src, self.dst)

    @property
    def group(self) -> tuple[str, str, str, int]:
        """Its key in RunConfig.only_groups (engine.sampler.group_key)."""
        return (self.path, self.variant, self.measure, self.bytes)


def decision_name(d) -> str:
    """'time-sliced handoff 64 MiB', with ' 0>1' for a link across GPUs."""
    from gpuipc_bench.sizes import format_size

    link = f" {d.src}>{d.dst}" if d.src != d.dst else ""
    return f"{d.sharing} {d.measure} {format_size(d.bytes)}{link}"


def open_decisions(decisions, setup_cost, order) -> list[tuple[Any, OpenDecision]]:
    """(decision, what is open) for each decision that is open or can move (see the module), most
    open first. `setup_cost` and `order`: the analysis's (analysis.model.setup_interval,
    declared_order), so that 'the declared order would take it first' is the analysis's own rule."""
    from gpuipc_bench.analysis import stats
    from gpuipc_bench.analysis.classes import choose_label

    out = []
    for d in decisions:
        reach = math.log(d.ratio_hi / d.ratio_lo) if d.ratio_lo > 0 and math.isfinite(d.ratio_hi) else math.inf
        nxt = d.next_members[:1]
        if d.outcome == stats.UNDECIDED:
            out.append((d, OpenDecision(decision_name(d), UNDECIDED, reach, (d.choice, *nxt, *d.close))))
            continue
        movers = []
        if d.compared_s:
            leader = min(d.compared_s)
            pool = {d.choice, *d.members, *d.same}
            fastest = fastest_states(d)
            for label, seconds in zip(d.compared, fastest):
                # outside the choice's pool, or in it but beaten by some figure in one process set (the
                # same as the choice, yet passed over): the declared order would take it in another draw
                if (label not in pool or label in d.beaten) and seconds <= leader * (1 + MOVE_WITHIN * d.delta) and \
                        choose_label([d.choice, label], setup_cost, order)[0] == label:
                    movers.append(label)
        if movers:
            out.append((d, OpenDecision(decision_name(d), CAN_MOVE, reach, (d.choice, *movers))))
        elif d.outcome == stats.WITHIN:
            out.append((d, OpenDecision(decision_name(d), WITHIN, reach, (d.choice, *nxt))))
    return sorted(out, key=lambda found: (-found[1].tier, -found[1].reach))


def differs_once(decisions, meta: Mapping[str, str], setup, order) -> list[tuple[Any, OpenDecision]]:
    """(decision, what is open) for each GPU pair that rejects its link class's choice in one
    process set only (analysis.bands' `unconfirmed`): its own choice and the class's, on it."""
    from gpuipc_bench.analysis.model import arrange

    sections, _ = arrange(decisions, meta, setup, order)
    out = []
    for section in sections:
        for band in section.bands:
            for d in band.unconfirmed:
                labels = tuple(dict.fromkeys(x for x in (band.pick, d.choice) if x in d.compared))
                reach = math.log(d.ratio_hi / d.ratio_lo) if d.ratio_lo > 0 and math.isfinite(d.ratio_hi) \
                    else math.inf
                out.append((d, OpenDecision(decision_name(d), DIFFERS, reach, labels or (d.choice,))))
    return out


def fastest_states(d) -> list[float]:
    """Each compared figure's seconds in the fastest state it may be drawn in: its fast state's
    median where its samples sit in two states; where they sit in one and that one is the slow
    state other figures at its size show (within 2 delta of a slow state's median: on a time-sliced
    H100, 256 MiB hand-offs at 330 or 470 us, a group's samples often all in one), its median
    less that step; else its median."""
    states = list(d.compared_states) + [None] * (len(d.compared) - len(d.compared_states))
    slow = [(st.slow_s, st.fast_s) for st in states if st is not None and st.fast_s > 0]
    out = []
    for seconds, st in zip(d.compared_s, states):
        if st is not None:
            out.append(min(seconds, st.fast_s))
            continue
        steps = [fast / slow_s for slow_s, fast in slow if abs(seconds / slow_s - 1) <= MOVE_WITHIN * d.delta]
        out.append(seconds * min(steps) if steps else seconds)
    return out


@dataclasses.dataclass
class Query:
    """One analysis of the rows so far: the open decisions and the groups behind them."""

    decisions: list[OpenDecision]
    groups: list[OpenGroup]
    total: int  # decisions made in all


def open_groups(frame, meta: Mapping[str, str], min_effect: float | None = None) -> list[OpenGroup]:
    """The groups whose decision at their size is still open or can move (see the module), from the
    rows so far as the analysis reads them (a results frame and its header), most open first; not
    those of the decisions on one set (ONE_SET), which only join a run made for these."""
    return [g for g in query(frame, meta, min_effect).groups if g.decision.tier != ONE_SET]


def query(frame, meta: Mapping[str, str], min_effect: float | None = None) -> Query:
    """open_groups with the open decisions themselves: the analysis's summary, candidates and
    decisions (analysis.model), without its warnings, bands or break-even."""
    from gpuipc_bench.analysis import stats
    from gpuipc_bench.analysis.model import decide_all, declared_order, setup_costs
    from gpuipc_bench.analysis.summary import samples_by_condition, samples_by_replica, summarize
    from gpuipc_bench.analysis.verdict import candidates
    from gpuipc_bench.paths import from_metadata

    if frame.empty:
        return Query([], [], 0)
    paths = from_metadata(meta)
    samples = samples_by_condition(frame)
    summary = summarize(frame, samples=samples, paths=paths, meta=meta)
    rows = candidates(summary, paths)
    setup = setup_costs(summary, paths)
    order = declared_order(summary, paths)
    decisions = decide_all(rows, summary, samples, paths, setup,
                           stats.MIN_EFFECT if min_effect is None else min_effect, order, samples_by_replica(frame))
    return _query(decisions, rows, setup, order, paths, meta)


def query_of(analysis) -> Query:
    """The query of a run's whole analysis (analysis.model.analyse, as the summary shows it): the run's
    end asks it of the analysis it prints, instead of analysing the rows once more."""
    from gpuipc_bench.analysis.model import declared_order, setup_costs

    if analysis.frame.empty:
        return Query([], [], 0)
    setup = setup_costs(analysis.summary, analysis.paths)
    order = declared_order(analysis.summary, analysis.paths)
    return _query(list(analysis.decided), analysis.candidates, setup, order, analysis.paths, analysis.meta)


def _query(decisions, rows, setup, order, paths, meta: Mapping[str, str]) -> Query:
    from gpuipc_bench.analysis.model import setup_interval

    found = open_decisions(decisions, setup_interval(setup, paths), order)
    found = sorted(found + differs_once(decisions, meta, setup, order), key=lambda f: (-f[1].tier, -f[1].reach))
    opened = [what for _, what in found]
    found += one_set(decisions, {id(d) for d, _ in found})
    where = {(r.label, str(r.src), str(r.dst), str(r.sharing), str(r.measure), int(r.bytes)): r.condition
             for r in rows.itertuples(index=False)}
    groups: dict[tuple, OpenGroup] = {}
    for d, what in found:
        for label in what.labels:
            condition = where.get((label, d.src, d.dst, d.sharing, d.measure, d.bytes))
            if condition is None:
                continue
            scenario, path, variant, measure = (str(v) for v in condition[:4])
            group = OpenGroup(scenario, path, variant, measure, d.bytes, d.sharing, d.src, d.dst, what)
            groups.setdefault((group.run_key, group.group), group)  # its most open decision's (found's order)
    return Query(opened, list(groups.values()), len(decisions))


def one_set(decisions, opened: set) -> list[tuple[Any, OpenDecision]]:
    """(decision, ONE_SET) for each decision not open (`opened`: their ids) whose choice stands on one
    process set: its choice and the next class's fastest figure, which a run of the pass measures
    again where it measures their scenario anyway (plan_reruns: never a run of its own), so that the
    runner-up ratio the summary prints carries the offset between two sets (verdict.ratio_span, and
    the delta of their ratio's movement). On one H200, time-sliced at 4 B, kernel copy over ipc/ce was
    1.048x in one default run's set and 1.079-1.105 in the three sets of a -n 20 --replicas 3 run
    (results/h200-far5.txt)."""
    out = []
    for d in decisions:
        if id(d) in opened or d.replicas >= 2 or not d.next_members:
            continue
        out.append((d, OpenDecision(decision_name(d), ONE_SET, 0.0, (d.choice, d.next_members[0]))))
    return out


# --------------------------------------------------------------------------- the pass


@dataclasses.dataclass
class Rerun:
    """One scenario run of the pass: the planned run's scenario (a copy measuring `sizes`), its
    workers and mode, the groups it measures, its estimated seconds and its most open decision."""

    key: tuple[str, str, str, str]
    scenario: object
    specs: list
    mode: object
    sizes: tuple[int, ...]
    groups: frozenset
    seconds: float
    first: OpenDecision
    lean: Rerun | None = None  # the same run without the groups of decisions on one set (ONE_SET), if any

    def label(self) -> str:
        from gpuipc_bench.sizes import format_size

        sizes = ", ".join(format_size(n) for n in self.sizes)
        return f"{self.key[0]} {self.key[1]} {self.key[2]}>{self.key[3]} at {sizes}"


def planned_runs(plan) -> dict[tuple, tuple]:
    """The plan's scenario runs by the rows' (scenario, sharing, src, dst) key: (scenario, specs,
    mode). A run on MIG instances is left out (its rows name the instances, not the GPU)."""
    from gpuipc_bench.engine.scenario import sharing_mode
    from gpuipc_bench.harness.plan import plan_runs

    out: dict[tuple, tuple] = {}
    for scenario, specs, mode in plan_runs(plan.runs, list(plan.modes)):
        if any(getattr(spec, "mig", "") for spec in specs):
            continue
        devices = [spec.device for spec in specs]
        ends = tuple("host" if d is None else str(d) for d in (devices[0], devices[-1]))
        one_gpu = len(set(devices)) == 1 and None not in devices
        if mode is not None:
            sharing = sharing_mode(devices, mode.name)
        else:  # a same-GPU pair outside the run's modes: whatever its processes found (matched by any)
            sharing = "*" if one_gpu else sharing_mode(devices)
        out.setdefault((scenario.name, sharing, *ends), (scenario, specs, mode))
    return out


def find_run(runs: Mapping[tuple, tuple], key: tuple) -> tuple | None:
    """The planned run whose rows carry `key` (a same-GPU run without a mode matches any sharing)."""
    from gpuipc_bench.results import base_mode

    name, sharing, src, dst = key
    return runs.get(key) or runs.get((name, base_mode(sharing), src, dst)) or runs.get((name, "*", src, dst))


def rerun_seconds(scenario, specs, mode, config, modes, groups: int, measured: int, started: set) -> float:
    """What a run of the pass should take (harness.estimate's costs): its fixed cost, its sizes' cost
    scaled to the share of the groups at them it measures again, and its start: a fresh process set
    where none of the pass holds its workers yet (`started`, updated: a set forked late in a run),
    more across two GPUs."""
    from gpuipc_bench.engine.scenario import shares_processes
    from gpuipc_bench.harness.estimate import ACROSS_GPUS, LATE_SET_START_S, PAIR_START_S, fixed_seconds, run_seconds
    from gpuipc_bench.harness.plan import second_mode_stream_sizes

    across = len({s.device for s in specs}) > 1
    whole = run_seconds(scenario, specs, mode, config, modes, second_mode_stream_sizes)
    fixed = fixed_seconds(scenario) * (ACROSS_GPUS if across else 1)
    cost = fixed + max(0.0, whole - fixed) * min(1.0, groups / max(1, measured))
    key = pass_set(specs, mode)
    shared = shares_processes(scenario)
    if not shared or key not in started:  # processes start for it: its own, or the pass's set for them
        cost += (LATE_SET_START_S if shared else 0.0) + (PAIR_START_S if across else 0.0)
        if shared:
            started.add(key)
    return cost


def in_set_first(runs: list[Rerun], current: tuple | None) -> list[Rerun]:
    """`runs` (most open first) with, among the runs as open as each other (one tier), those in the
    process set of the pass now running (`current`: pass_set) first: leaving a set and coming back
    forks another (~0.5 s; a mode left and started again), which the next open run of the same tier
    need not cost."""
    return sorted(runs, key=lambda r: (-r.first.tier, pass_set(r.specs, r.mode) != current))


def pass_set(specs, mode) -> tuple:
    """The process set of the pass a run's workers sit in: their GPUs and the sharing mode."""
    return (tuple(str(s.device) for s in specs), getattr(mode, "name", None))


def measured_groups(frame, key: tuple, sizes) -> int:
    """How many timed groups (path, variant, measure) the first pass measured at `sizes` in the
    scenario run of `key`: what a run of the pass measures a share of."""
    name, sharing, src, dst = key
    rows = frame[(frame["scenario"] == name) & (frame["sharing"] == sharing) & (frame["src"] == src)
                 & (frame["dst"] == dst) & frame["bytes"].isin(list(sizes)) & (frame["path"] != "ceiling")
                 & (frame["metric"] != "setup")]
    return int(len(rows[["path", "variant", "measure", "bytes"]].drop_duplicates()))


def plan_reruns(found: Query, frame, plan, done: set, started: set) -> list[Rerun]:
    """The runs that measure the open groups again, most open first; none for a run key in `done`
    (measured again already: two replicas) or one the plan does not hold."""
    from gpuipc_bench.harness.classes import sized

    runs = planned_runs(plan)
    by_key: dict[tuple, list[OpenGroup]] = {}
    for group in found.groups:
        if group.run_key not in done:
            by_key.setdefault(group.run_key, []).append(group)
    def rerun(key, planned, groups: list[OpenGroup]) -> Rerun:
        scenario, specs, mode = planned
        sizes = tuple(sorted({g.bytes for g in groups}))
        asked = frozenset(g.group for g in groups)
        copy = sized(scenario, sizes)
        seconds = rerun_seconds(copy, specs, mode, plan.config, list(plan.modes), len(asked),
                                measured_groups(frame, key, sizes), set(started))
        first = min((g.decision for g in groups), key=lambda d: (-d.tier, -d.reach))
        return Rerun(key, copy, specs, mode, sizes, asked, seconds, first)

    out = []
    for key, groups in by_key.items():
        planned = find_run(runs, key)
        core = [g for g in groups if g.decision.tier != ONE_SET]
        if planned is None or not core:  # a decision on one set never starts a run of its own
            continue
        whole = rerun(key, planned, groups)
        out.append(dataclasses.replace(whole, lean=rerun(key, planned, core)) if len(core) < len(groups) else whole)
    return sorted(out, key=lambda r: (-r.first.tier, -r.first.reach))


def fit(rerun: Rerun, left: float) -> Rerun | None:
    """`rerun` where its seconds fit in the `left` ones, else its lean form (without the groups of the
    decisions on one set) where that fits, else None."""
    for found in (rerun, rerun.lean):
        if found is not None and found.seconds <= left:
            return found
    return None


class Resampler:
    """The pass over one run (Session calls run() once, after the first pass and its resweeps).
    `results`: the run's ResultsFile (its frame and header); `clock`: seconds since the command
    started (session.process_seconds); `budget`: the run's --budget (None: the first pass, then
    defaults.resample_allowance: DEFAULT_RESAMPLE_S, none for --quick)."""

    def __init__(self, plan, results, reporter, clock: Callable[[], float], budget: float | None = None):
        from gpuipc_bench.harness.estimate import END_S

        self.plan, self.results, self.reporter, self.clock = plan, results, reporter, clock
        self.budget = budget
        now = clock()
        # the pass ends its last run by here: the command's budget less its end (the answer written and
        # printed), or the default allowance from now
        self.allowance = resample_allowance(plan.config.preset)
        self.deadline = budget - END_S if budget is not None else now + self.allowance
        self.done: set[tuple] = set()
        self.started: set[tuple] = set()
        self.measured: list[Rerun] = []
        self.spent = 0.0
        self.pending = False  # run() measured again: finish() reports what is left open

    def run(self, measure: Callable[..., object]) -> None:
        """Measure again, while the time allows, the most open run that fits: `measure(scenario,
        specs, mode, config, replica)` runs one (Session's), its outcome or None (its mode could
        not start). The rows are analysed again before a run that costs more than twice an
        analysis (a decision made by the runs before drops its groups); the header says the
        budget, what was measured again and what is left open."""
        import dataclasses as dc

        from gpuipc_bench.harness.supervision import WorkerLost

        results = self.results
        results.set_meta("sampling.budget", self.describe_budget())
        started = time.monotonic()
        if self.budget is None and not self.allowance:  # no pass: what is open comes from the final analysis
            self.pending = True
            return
        found, took = self.timed_query()
        runs = self.by_set(self.fitting(found))
        current = None
        while runs:
            rerun = runs.pop(0)
            self.done.add(rerun.key)
            current = self.enter(rerun)
            config = dc.replace(self.plan.config, only_groups=rerun.groups)
            outcome = measure(rerun.scenario, rerun.specs, rerun.mode, config, REPLICA)
            self.measured.append(rerun)
            if outcome is not None and isinstance(getattr(outcome, "error", None), WorkerLost):
                break
            runs = self.fitted(runs)
            # worth an analysis where the time left cannot hold every run (the rows now may have
            # decided some) and the next costs more than two analyses; where it holds them, they run
            if runs and not self.holds_all(runs) and runs[0].seconds > 2 * took:
                found, took = self.timed_query()
                runs = self.fitting(found)
            if not self.holds_all(runs):  # (where it holds them, by_set ordered them a set at a time)
                runs = in_set_first(runs, current)
        self.spent = time.monotonic() - started
        self.pending = bool(self.measured)  # what is left open: from the run's final analysis (finish)
        if not self.pending:
            self.report(found)

    def enter(self, rerun: Rerun) -> tuple:
        """The pass set `rerun` runs in (pass_set), now the current one; the sets the pass holds after
        it (`started`: what a later run's cost counts as forked): the sets of another mode leave as it
        starts (WorkerSets.end_mode_other_than), and every set before a scenario of its own processes,
        so a later run there forks again."""
        from gpuipc_bench.engine.scenario import shares_processes

        current = pass_set(rerun.specs, rerun.mode)
        if shares_processes(rerun.scenario):
            self.started = {key for key in self.started if key[1] == current[1]} | {current}
        else:
            self.started = set()
        return current

    def finish(self, analysis) -> None:
        """After a pass that measured again: what it left open, from the run's final analysis (the
        one its summary prints: analysis.model.analyse of every row), into the header and said."""
        if self.pending:
            self.pending = False
            self.report(query_of(analysis))

    def by_set(self, runs: list[Rerun]) -> list[Rerun]:
        """`runs` (most open first) where the time left holds them all: a process set's runs one
        after the other, the sets in the order of their most open run (each set is forked once,
        ~0.5 s, and a mode is not left and started again); else as they are."""
        if not self.holds_all(runs):
            return runs
        first: dict[tuple, int] = {}
        for r in runs:
            first.setdefault(pass_set(r.specs, r.mode), len(first))
        return sorted(runs, key=lambda r: first[pass_set(r.specs, r.mode)])

    def holds_all(self, runs: list[Rerun]) -> bool:
        """Whether the time left holds every one of `runs`."""
        return self.clock() + sum(r.seconds for r in runs) <= self.deadline

    def timed_query(self) -> tuple[Query, float]:
        """The open decisions of the rows so far, and the seconds the analysis took."""
        began = time.monotonic()
        found = query(self.results.frame, self.results.metadata)
        mark("resample query", len(found.groups))
        return found, time.monotonic() - began

    def fitting(self, found: Query) -> list[Rerun]:
        """The runs of the open groups not measured again yet that fit in the time left, most open first."""
        return self.fitted(plan_reruns(found, self.results.frame, self.plan, self.done, self.started))

    def fitted(self, runs: list[Rerun]) -> list[Rerun]:
        """Each of `runs` as it fits in the time left (fit), the ones that do not left out."""
        left = self.deadline - self.clock()
        return [found for found in (fit(r, left) for r in runs) if found is not None]

    def describe_budget(self) -> str:
        if self.budget is not None:
            return f"{self.budget:g} s (--budget): the first pass, then the resampling pass while time remains"
        if not self.allowance:
            return "the first pass only (--quick without --budget)"
        return f"the first pass, then at most {self.allowance:g} s of resampling (no --budget)"

    def report(self, found: Query) -> None:
        """The header's sampling.resampled, sampling.open and sampling.resample_seconds; a note
        naming the decisions left open."""
        results = self.results
        results.set_meta("sampling.resampled", "; ".join(r.label() for r in self.measured) or "none")
        results.set_meta("sampling.resample_seconds", f"{self.spent:.1f}")
        still = [d for d in found.decisions if d.tier not in (CAN_MOVE, DIFFERS) or not self.measured_all(d, found)]
        results.set_meta("sampling.open", "; ".join(f"{d.name} ({d.why})" for d in still) or "none")
        if still:
            names = ", ".join(f"{d.name} ({d.why})" for d in still)
            text = f"{len(still)} of {found.total} decisions left open: {names}"
            self.reporter.note("\n      ".join(textwrap.wrap(text, 72)))

    def measured_all(self, decision: OpenDecision, found: Query) -> bool:
        """Whether every group of a decision that can move (or of a pair that differs once) was
        measured again (then it stands on two replicas, and is not open)."""
        keys = {g.run_key for g in found.groups if g.decision == decision}
        return bool(keys) and keys <= self.done
