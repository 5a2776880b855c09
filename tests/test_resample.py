"""The resampling pass (gpuipc_bench.harness.resample): the open-decision query on crafted rows,
the replicas in the analysis (a within-class difference one process set shows and the other does
not names no other API), the pass run by the session with stand-in worker sets within its budget,
the `replica` column written and read, and --budget's bad values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from click.testing import CliRunner

from fakes import KIB, MIB, META, NV18, SAME_GPU, Heard, Named, Sets, figure, frame, pairs_run, plan_of, run_session
from gpuipc_bench.analysis import analyse
from gpuipc_bench.analysis.classes import Figure
from gpuipc_bench.analysis.verdict import decide
from gpuipc_bench.cli import cli
from gpuipc_bench.errors import BenchError, UsageError
from gpuipc_bench.harness import resample
from gpuipc_bench.harness import session as session_module
from gpuipc_bench.harness.launcher import Outcome
from gpuipc_bench.harness.plan import check_budget
from gpuipc_bench.results import ResultsFile, read_results

OPEN, DECIDED = 64 * MIB, 4 * KIB
SPREAD = [1 + 0.2 * (i / 5 - 0.5) for i in range(6)]  # +-10%: two such figures cannot be told apart


def crafted(scenario: str = "ipc", sizes=(DECIDED, OPEN)) -> list[dict]:
    """ce and push of one scenario: push twice ce's time at DECIDED, the two overlapping at OPEN."""
    rows = []
    for size in sizes:
        ce, push = (1e-5, 2e-5) if size == DECIDED else (1e-3, 1.01e-3)
        rows += figure(scenario, "ce", ce, sizes=(size,), ceiling="", scenario=scenario,
                       samples=SPREAD if size == OPEN else None)
        rows += figure(scenario, "push", push, sizes=(size,), ceiling="", scenario=scenario,
                       samples=SPREAD[::-1] if size == OPEN else None)
    return rows


def test_the_query_names_the_open_groups_and_leaves_the_decided_ones():
    found = resample.query(frame(crafted()), META)
    assert found.total == 2 and [d.why for d in found.decisions] == ["undecided"]
    assert {(g.scenario, g.path, g.variant, g.measure, g.bytes, g.sharing, g.src, g.dst) for g in found.groups
            if g.decision.tier != resample.ONE_SET} == {
        ("ipc", "ipc", "ce", "stream", OPEN, "time-sliced", "0", "0"),
        ("ipc", "ipc", "push", "stream", OPEN, "time-sliced", "0", "0")}
    # the decided size, its choice on one process set: the choice and the next class, for a run made anyway
    assert {(g.variant, g.bytes, g.decision.why) for g in found.groups if g.decision.tier == resample.ONE_SET} == {
        ("ce", DECIDED, "on one set"), ("push", DECIDED, "on one set")}
    assert resample.open_groups(frame(crafted(sizes=(DECIDED,))), META) == []


def test_a_decision_on_one_set_starts_no_run_of_its_own_and_leaves_a_run_that_cannot_hold_it():
    """Its groups join a run the pass makes for an open decision of the same scenario and mode, and are
    left out of it where the time left holds the run only without them (resample.fit)."""
    plan = plan_of((Named("ipc"), SAME_GPU))
    decided = frame(crafted(sizes=(DECIDED,)))
    found = resample.query(decided, META)
    assert found.groups and not found.decisions  # decided: nothing open, its pair on one set
    assert resample.plan_reruns(found, decided, plan, set(), set()) == []
    both = frame(crafted())
    runs = resample.plan_reruns(resample.query(both, META), both, plan, set(), set())
    assert len(runs) == 1 and runs[0].sizes == (DECIDED, OPEN) and runs[0].lean is not None
    lean = runs[0].lean
    assert lean.sizes == (OPEN,) and lean.groups == frozenset({("ipc", "ce", "stream", OPEN),
                                                               ("ipc", "push", "stream", OPEN)})
    assert lean.seconds < runs[0].seconds
    assert resample.fit(runs[0], runs[0].seconds) is runs[0]
    assert resample.fit(runs[0], (lean.seconds + runs[0].seconds) / 2) is lean
    assert resample.fit(runs[0], lean.seconds / 2) is None


def test_a_figure_in_the_slow_state_of_its_size_can_move_the_choice():
    """At 256 MiB time-sliced the hand-offs sit at ~330 or ~470 us: ce's samples all slow, push's
    fast, vmm's in both. ce and push are about one step apart, as the states put them: the analysis
    cannot tell them (undecided, ce declared first), and the pass measures both again."""
    size = 256 * MIB
    rows = (figure("ipc", "ce", 470e-6, sizes=(size,), ceiling="", measure="handoff")
            + figure("ipc", "push", 330e-6, sizes=(size,), ceiling="", measure="handoff")
            + figure("vmm", "ce", 330e-6, sizes=(size,), ceiling="", measure="handoff", n=9,
                     samples=[1, 1.001, 1.002, 1.003, 1.004, 1.005, 1.424, 1.425, 1.426]))
    found = resample.query(frame(rows), META)
    assert [(d.why, d.labels) for d in found.decisions] == [("undecided", ("ipc/ce", "ipc/push"))]


def within_class_flip(replicas: int) -> list[dict]:
    """ipc/ce and ipc/push at one size: push 4% faster in replica 1, ce 4% faster in replica 2."""
    rows = []
    for replica in range(1, replicas + 1):
        ce, push = (1.04e-3, 1e-3) if replica == 1 else (1e-3, 1.04e-3)
        for row in figure("ipc", "ce", ce, sizes=(OPEN,), ceiling="") + figure("ipc", "push", push, sizes=(OPEN,),
                                                                                ceiling=""):
            rows.append({**row, "replica": replica})
    return rows


def test_a_within_class_difference_that_flips_between_replicas_names_no_other_api():
    one = analyse(frame(within_class_flip(1)), META).answer.decisions[0]
    both = analyse(frame(within_class_flip(2)), META).answer.decisions[0]
    assert one.choice == "ipc/push" and one.replicas == 1  # one process set: push is faster
    assert both.choice == "ipc/ce" and both.why == "declared first" and both.replicas == 2


def test_beaten_needs_both_replicas():
    """a's pooled samples beat b's beyond delta, and so does replica 1; replica 2 cannot tell them:
    with the replicas b is not beaten, without them it is."""
    a = np.full(12, 1e-3) * np.linspace(0.999, 1.001, 12)
    b1, b2 = np.full(6, 1.08e-3), 1e-3 * np.linspace(1.0, 1.05, 6)
    rows = {r["variant"]: r for r in figure("ipc", "push", 1e-3, ceiling="") + figure("ipc", "ce", 1.05e-3,
                                                                                      ceiling="")}
    summary = frame(list(rows.values()))
    summary = summary.assign(median_s=summary["seconds"], fraction_of_ceiling=np.nan, call_bound=False,
                             l2_resident=None)
    records = list(summary.itertuples(index=False))

    def decided(with_replicas: bool):
        fa = Figure("ipc/push", records[0], a, (a[:6], a[6:]) if with_replicas else ())
        fb = Figure("ipc/ce", records[1], np.concatenate([b1, b2]), (b1, b2) if with_replicas else ())
        return decide([fa, fb], {}, lambda label: (np.nan,) * 3, lambda label: (label,))

    assert "ipc/ce" in decided(False).beaten and "ipc/ce" not in decided(True).beaten


# --------------------------------------------------------------------------- the pass in the session


class Resampling(Sets):
    """Each first-pass run delivers crafted() rows of its scenario; a run of the pass the rows of the
    groups it names (RunConfig.only_groups) at its sizes; the clock moves `per_run` a run."""

    def __init__(self, clock, per_run: float):
        super().__init__()
        self.clock, self.per_run = clock, per_run
        self.asked: list[tuple] = []
        self.closed = 0

    def run(self, scenario, config, specs, mode_name=None, env=None, on_row=None, **callbacks) -> Outcome:
        self.clock[0] += self.per_run
        rows = crafted(scenario.name)
        if config.only_groups is not None:
            self.asked.append((scenario.name, scenario.only_sizes, config.only_groups))
            rows = [r for r in rows if (r["path"], r["variant"], r["measure"], r["bytes"]) in config.only_groups]
        for row in rows:
            on_row(row)
        return Outcome(scenario.name, rows=len(rows))

    def close(self) -> None:
        self.closed += 1

    def leave_all(self) -> None:
        self.closed += 1


def resampled(tmp_path, monkeypatch, budget, per_run=0.5, kind=None):
    clock = [5.0]
    monkeypatch.setattr(session_module, "process_seconds", lambda: clock[0])
    plan = plan_of((Named("ipc"), SAME_GPU), (Named("vmm"), SAME_GPU))
    plan.budget = budget
    sets = (kind or Resampling)(clock, per_run)
    outcome, heard, out = run_session(tmp_path, plan, sets, Heard())
    frame_, meta = read_results(out)
    return sets, heard, frame_, meta


def test_the_pass_measures_the_open_groups_again_on_a_fresh_set_and_tags_them(tmp_path, monkeypatch):
    sets, heard, written, meta = resampled(tmp_path, monkeypatch, budget=None)
    pair = frozenset({("ipc", "ce", "stream", OPEN), ("ipc", "push", "stream", OPEN)})
    # the decided size's choice and next class (both ipc's), on one set, join ipc's run of the pass
    decided = frozenset({("ipc", "ce", "stream", DECIDED), ("ipc", "push", "stream", DECIDED)})
    assert sets.asked == [("ipc", (DECIDED, OPEN), pair | decided),
                          ("vmm", (OPEN,), frozenset((p.replace("ipc", "vmm"), *rest) for p, *rest in pair))]
    assert sets.closed == 1  # the first pass's sets leave before the pass's first run
    again = written[written["replica"] == 2]
    assert set(again[again["scenario"] == "vmm"]["bytes"]) == {OPEN} and len(again) == 36
    assert [e[1] for e in heard.events if e[0] == "started"] == ["ipc", "vmm", "ipc #2", "vmm #2"]
    assert meta["sampling.resampled"] == "ipc time-sliced 0>0 at 4 KiB, 64 MiB; vmm time-sliced 0>0 at 64 MiB"
    assert "no --budget" in meta["sampling.budget"] and "sampling.open" in meta


class WithSetup(Resampling):
    """Every run also times a set-up operation of its ring: the pass's runs set up a smaller ring."""

    def run(self, scenario, config, specs, mode_name=None, env=None, on_row=None, **callbacks) -> Outcome:
        ring = 1 << 20 if config.only_groups is not None else 1 << 28
        for i in range(3):
            on_row(dict(scenario=scenario.name, path=scenario.name, variant="open", measure="", metric="setup",
                        src="0", dst="0", bytes=ring, iteration=i, batch=1, seconds=1e-4, verified=True))
        return super().run(scenario, config, specs, mode_name, env, on_row, **callbacks)


def test_the_pass_keeps_no_set_up_rows_and_times_each_operation_once(tmp_path, monkeypatch):
    """Its runs set up a ring of the sizes they measure again: kept, their rows would read as a
    second size of the path's set-up cost (ipc 'by size' on one H200's runs)."""
    import dataclasses

    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.engine.sampler import Sampler

    sets, _, written, _ = resampled(tmp_path, monkeypatch, budget=None, kind=WithSetup)
    assert sets.asked  # the pass ran
    setup = written[written["metric"] == "setup"]
    assert set(setup["replica"]) == {1} and set(setup["bytes"]) == {1 << 28} and len(setup) == 6

    class Ctx:
        def __init__(self, config):
            self.config = config

    first = RunConfig(scenarios=("ipc",))
    assert Sampler(Ctx(first)).setup_repeats > 1
    again = dataclasses.replace(first, only_groups=frozenset({("ipc", "ce", "stream", 4)}))
    assert Sampler(Ctx(again)).setup_repeats == 1


class FailingPass(Resampling):
    """The pass's run of vmm fails in its set-up (as torch's second process set did on one H200)."""

    def run(self, scenario, config, specs, mode_name=None, env=None, on_row=None, **callbacks) -> Outcome:
        if config.only_groups is not None and scenario.name == "vmm":
            self.clock[0] += self.per_run
            return Outcome(scenario.name, rows=0, error=BenchError("vmm/ce: the allocator said no"))
        return super().run(scenario, config, specs, mode_name, env, on_row, **callbacks)


def test_a_run_of_the_pass_that_fails_leaves_the_run_complete_and_is_named(tmp_path, monkeypatch):
    clock = [5.0]
    monkeypatch.setattr(session_module, "process_seconds", lambda: clock[0])
    plan = plan_of((Named("ipc"), SAME_GPU), (Named("vmm"), SAME_GPU))
    sets = FailingPass(clock, 0.5)
    outcome, heard, out = run_session(tmp_path, plan, sets, Heard())
    _, meta = read_results(out)
    assert not outcome.failures and meta["partial"] == "false" and "failed" not in meta["status"]
    assert meta["sampling.failed"] == "vmm #2: vmm/ce: the allocator said no"
    assert ("failed", "vmm #2") in heard.events
    assert any("resampling pass's vmm #2 failed" in e[1] for e in heard.events if e[0] == "note")
    assert "ipc time-sliced 0>0 at 4 KiB, 64 MiB" in meta["sampling.resampled"]  # the other run's rows stay


def test_what_the_pass_left_open_comes_from_the_run_s_one_final_analysis(tmp_path, monkeypatch):
    """The pass queries the rows once (both runs fit its time: no analysis between them); what it
    left open is read from the analysis the summary prints, not from a query of its own, and says
    what a query of the final rows says."""
    calls = []
    real = resample.query
    monkeypatch.setattr(resample, "query", lambda *a, **k: calls.append(1) or real(*a, **k))

    class Summarised(Heard):
        shows_summary = True

        def written(self, frame_, metadata, analysis=None):
            self.analysis = analysis

    clock = [5.0]
    monkeypatch.setattr(session_module, "process_seconds", lambda: clock[0])
    plan = plan_of((Named("ipc"), SAME_GPU), (Named("vmm"), SAME_GPU))
    _, heard, out = run_session(tmp_path, plan, Resampling(clock, 0.5), Summarised())
    written, meta = read_results(out)
    assert len(calls) == 1
    assert heard.analysis is not None and heard.analysis.meta["sampling.open"] == meta["sampling.open"]
    final = real(written, meta)
    still = [d for d in final.decisions if d.why not in ("can move", "differs once")]
    assert meta["sampling.open"] == ("; ".join(f"{d.name} ({d.why})" for d in still) or "none")
    assert resample.query_of(analyse(written, meta)).decisions == final.decisions


def test_the_budget_is_respected_and_what_it_left_open_is_said(tmp_path, monkeypatch):
    """Each run takes 2 s of the fake clock: after the first pass (5 + 2 x 2 = 9 s) a budget of 11 s
    and the run's end (estimate.END_S, kept) leaves room for one run of the pass; the other decision
    stays open."""
    from gpuipc_bench.harness.estimate import END_S

    sets, heard, written, meta = resampled(tmp_path, monkeypatch, budget=11.0 + END_S, per_run=2.0)
    assert [name for name, _, _ in sets.asked] == ["ipc"]
    assert meta["sampling.budget"].startswith(f"{11.0 + END_S:g} s (--budget)")
    assert meta["sampling.open"].startswith("time-sliced stream 64 MiB (undecided)")
    notes = [e[1] for e in heard.events if e[0] == "note"]
    assert len(notes) == 1 and "decisions left open: time-sliced stream 64 MiB (undecided)" in notes[0]
    assert all(len(line) <= 74 for line in notes[0].splitlines())


def test_a_budget_spent_by_the_first_pass_measures_nothing_again(tmp_path, monkeypatch):
    sets, _, written, meta = resampled(tmp_path, monkeypatch, budget=8.0, per_run=2.0)
    assert sets.asked == [] and set(written["replica"]) == {1} and meta["sampling.resampled"] == "none"


def test_a_rerun_costs_its_share_of_the_sweep_and_a_late_set_start_once_per_set():
    """rerun_seconds: the fixed cost, the share of the sweep's groups measured again, a set forked late
    in a run (LATE_SET_START_S) for the first run of each set of the pass, and a start across two GPUs."""
    from types import SimpleNamespace

    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.engine.scenario import WorkerSpec
    from gpuipc_bench.harness import estimate
    from gpuipc_bench.harness.plan import registry

    ipc, config = registry()["ipc"], RunConfig(scenarios=("ipc",))
    mode = SimpleNamespace(name="time-sliced", scenarios=())
    same = [WorkerSpec(0, "producer", 0), WorkerSpec(1, "consumer", 0)]
    pair = [WorkerSpec(0, "producer", 0), WorkerSpec(1, "consumer", 1)]
    fixed = estimate.COSTS["ipc"][0] * estimate.RUN_COST_SCALE  # as run_seconds scales it
    sweep = estimate.run_seconds(ipc, same, mode, config, [mode]) - fixed
    started: set = set()
    first = resample.rerun_seconds(ipc, same, mode, config, [mode], 2, 8, started)
    again = resample.rerun_seconds(ipc, same, mode, config, [mode], 2, 8, started)
    assert first == pytest.approx(fixed + sweep / 4 + estimate.LATE_SET_START_S)
    assert again == pytest.approx(fixed + sweep / 4)
    across = resample.rerun_seconds(ipc, pair, None, config, [mode], 8, 8, started)
    whole = estimate.run_seconds(ipc, pair, None, config, [mode])
    assert across == pytest.approx(whole + estimate.LATE_SET_START_S + estimate.PAIR_START_S)


# --------------------------------------------------------------------------- the column and the option


def test_the_replica_column_is_written_and_read_and_a_file_without_it_reads_1(tmp_path):
    path = tmp_path / "run.csv"
    results = ResultsFile(path, {"host": "h"})
    results.add([{**figure("ipc", "ce", 1e-3, n=1)[0], "replica": 2}] + figure("ipc", "ce", 1e-3, n=1))
    results.write(partial=False)
    written, _ = read_results(path)
    assert written["replica"].tolist() == [2, 1]
    committed, _ = read_results("results/h100-both-modes-quick.csv")  # schema 3, no replica column
    assert set(committed["replica"]) == {1}
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if not line.startswith("#"))  # the table's header line
    drop = lines[at].split(",").index("replica")
    table = [",".join(c for j, c in enumerate(line.split(",")) if j != drop) for line in lines[at:] if line]
    (tmp_path / "old.csv").write_text("\n".join(lines[:at] + table) + "\n")
    assert read_results(tmp_path / "old.csv")[0]["replica"].tolist() == [1, 1]


@pytest.mark.parametrize("value, says", [("-5", "must be 1 to 86400 seconds"), ("soon", "'soon' is not a number"),
                                         ("nan", "must be 1 to 86400 seconds")])
def test_a_bad_budget_is_one_error_line(value, says):
    result = CliRunner().invoke(cli, ["run", "--budget", value])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "--budget" in errors[0] and says in errors[0]
    assert "Traceback" not in result.output


def test_a_budget_below_the_first_pass_is_refused():
    with pytest.raises(UsageError, match=r"--budget 20: the first pass alone should take about 38 s"):
        check_budget(20.0, 38.2)
    check_budget(40.0, 38.2)
    check_budget(None, 38.2)


def test_a_run_of_the_pass_samples_only_the_groups_it_names():
    """RunConfig.only_groups: the named (path, variant, measure, bytes) groups are sampled, the others
    at the same size are not (done before their first sample), in every worker alike."""
    from types import SimpleNamespace

    from gpuipc_bench.engine.sampler import Counts, Sample, Sampler

    named = frozenset({("ipc", "ce", "handoff", OPEN)})
    config = SimpleNamespace(order_seed=None, sample_order="interleaved", known_best=(), stream_sizes=None,
                             only_groups=named)
    ctx = SimpleNamespace(row_fields={"scenario": "ipc", "workers": 2, "sharing": "time-sliced"}, clock=None,
                          phase=lambda *a, **k: None, spec=None, store=lambda name, word: None,
                          wait=lambda *a, **k: None, load=lambda name: 0, config=config)
    sampler = Sampler(ctx, Counts(warmup=1, min_samples=6, max_samples=9))
    groups = [dict(path="ipc", variant=v, measure="handoff", metric="bandwidth", src="0", dst="0", bytes=OPEN)
              for v in ("ce", "push")]
    made = [sampler.run(g, lambda trial: Sample(1e-3, 1), timer=True) for g in groups]
    rows = list(sampler.interleave(made, "k"))
    assert {r["variant"] for r in rows} == {"ce"} and len(rows) >= 6


def test_a_gpu_pair_that_differs_in_one_process_set_is_measured_again():
    """peer/sm is 1.5x slower on 0>2 in the first process set only: the query asks for both figures
    on that pair again; with a second set that shows it too, nothing is open for it."""
    from gpuipc_bench.harness import resample

    found = resample.query(frame([r for g in pairs_run(disagree=True) for r in g]), NV18)
    differ = [g for g in found.groups if g.decision.tier == resample.DIFFERS]
    assert {(g.src, g.dst, g.path, g.variant) for g in differ} == {("0", "2", "peer", "sm"), ("0", "2", "peer", "ce")}
    assert differ[0].decision.why == "differs once" and differ[0].decision.name.endswith(" 0>2")
    again = resample.query(frame([r for g in pairs_run(disagree=True, replicas=(1, 2)) for r in g]), NV18)
    assert not [g for g in again.groups if g.decision.tier == resample.DIFFERS]


def test_a_declared_first_api_passed_over_as_beaten_in_one_set_can_move_the_choice():
    """MPS stream 4 B on an H200: ipc/ce shown the same as the choice vmm/ce, but beaten 3.5% by
    another figure in this one process set, so vmm/ce was chosen; ipc/ce (declared first) is measured
    again, so that the replicas decide (beaten then needs both)."""
    import types

    d = types.SimpleNamespace(
        src="0", dst="0", sharing="mps", measure="stream", bytes=4, outcome="faster", ratio_lo=1.08,
        ratio_hi=1.09, next_members=("vmm/sm",), choice="vmm/ce", members=("vmm/ce",),
        same=("ipc/ce", "torch/expandable"), compared=("vmm/ce", "ipc/ce", "torch/expandable", "vmm/sm"),
        compared_s=(1.70e-6, 1.735e-6, 1.675e-6, 1.85e-6), compared_states=(), delta=0.02,
        beaten=("ipc/ce", "vmm/sm"))
    order = {"ipc/ce": (0,), "vmm/ce": (1,), "torch/expandable": (2,), "vmm/sm": (3,)}.get
    (found,) = resample.open_decisions([d], lambda label: (math.nan,) * 3, order)
    assert found[1].why == "can move" and found[1].labels == ("vmm/ce", "ipc/ce")
    d.beaten = ("vmm/sm",)  # not beaten: in the pool and not passed over, nothing to move
    assert resample.open_decisions([d], lambda label: (math.nan,) * 3, order) == []


def test_among_runs_as_open_as_each_other_those_of_the_set_now_running_come_first():
    """A pass that cannot hold every run takes the most open first, but within one tier it stays in
    the process set it is in: leaving it and coming back forks another set and starts the mode again.
    (A more open run in another set still comes first: h200-leave-3's pass took staging time-sliced
    (undecided), ipc under MPS (can move), then mempool under MPS and ipc and mempool time-sliced (all
    within), three sets either way.)"""
    from types import SimpleNamespace

    from gpuipc_bench.engine.scenario import WorkerSpec
    from gpuipc_bench.harness.resample import CAN_MOVE, UNDECIDED, OpenDecision, Rerun, in_set_first, pass_set

    specs = [WorkerSpec(0, "producer", 0), WorkerSpec(1, "consumer", 0)]
    ts, mps = SimpleNamespace(name="time-sliced"), SimpleNamespace(name="mps")

    def rerun(name, mode, tier, reach):
        decision = OpenDecision(f"{mode.name} {name}", tier, reach, ())
        return Rerun((name, mode.name, "0", "0"), None, specs, mode, (4,), frozenset(), 0.5, decision)

    runs = [rerun("ipc", mps, CAN_MOVE, 0.3), rerun("mempool", mps, CAN_MOVE, 0.2), rerun("ipc", ts, CAN_MOVE, 0.1),
            rerun("staging", ts, UNDECIDED, 0.05)]
    order = [(r.key[0], r.key[1]) for r in in_set_first(runs, pass_set(specs, ts))]
    assert order == [("staging", "time-sliced"), ("ipc", "time-sliced"), ("ipc", "mps"), ("mempool", "mps")]
    assert in_set_first(runs, None) == sorted(runs, key=lambda r: -r.first.tier)  # no set yet: most open first


def test_a_set_the_pass_left_for_another_mode_or_a_scenario_of_its_own_processes_counts_as_forked_again():
    """Resampler.enter: the sets the pass holds after each run, which a later run's cost counts as
    forked (rerun_seconds adds a late set's start for the others)."""
    from types import SimpleNamespace

    from gpuipc_bench.engine.scenario import WorkerSpec
    from gpuipc_bench.harness.resample import CAN_MOVE, OpenDecision, Rerun, Resampler, pass_set

    specs = [WorkerSpec(0, "producer", 0), WorkerSpec(1, "consumer", 0)]
    ts, mps = SimpleNamespace(name="time-sliced"), SimpleNamespace(name="mps")

    def rerun(mode, persistent=True):
        scenario = SimpleNamespace(persistent_workers=persistent, start_method="fork" if persistent else "forkserver")
        return Rerun(("x", mode.name, "0", "0"), scenario, specs, mode, (4,), frozenset(), 0.5,
                     OpenDecision("x", CAN_MOVE, 0.1, ()))

    pass_ = Resampler.__new__(Resampler)
    pass_.started = set()
    assert pass_.enter(rerun(ts)) == pass_set(specs, ts) and pass_.started == {pass_set(specs, ts)}
    pass_.enter(rerun(mps))
    assert pass_.started == {pass_set(specs, mps)}  # the time-sliced set left as the MPS one started
    pass_.enter(rerun(mps, persistent=False))
    assert pass_.started == set()  # a scenario of its own processes: every set before it left


# --------------------------------------------------------------------------- --replicas


def test_replicas_measure_every_run_again_on_fresh_sets_and_no_resampling_follows(tmp_path, monkeypatch):
    import dataclasses

    clock = [5.0]
    monkeypatch.setattr(session_module, "process_seconds", lambda: clock[0])
    plan = plan_of((Named("ipc"), SAME_GPU), (Named("vmm"), SAME_GPU))
    plan.config = dataclasses.replace(plan.config, replicas=3)
    sets = Resampling(clock, 0.5)
    _, heard, out = run_session(tmp_path, plan, sets, Heard())
    written, meta = read_results(out)
    assert [e[1] for e in heard.events if e[0] == "started"] == ["ipc", "vmm", "ipc #2", "vmm #2", "ipc #3", "vmm #3"]
    assert sets.asked == [] and sets.closed == 2  # every group, not chosen ones; each pass's sets fresh
    counts = written.groupby("replica").size()
    assert counts.to_dict() == {1: counts[1], 2: counts[1], 3: counts[1]}
    assert meta["replicas"] == "3" and "--replicas 3" in meta["sampling.budget"]
    assert "sampling.resampled" not in meta


def two_sets(ratio_one: float, ratio_two: float) -> list[dict]:
    """ipc/ce and ipc/push at one size, push `ratio` times ce's time in each of two process sets."""
    rows = []
    for replica, ratio in ((1, ratio_one), (2, ratio_two)):
        tight = [1 + 0.001 * i for i in range(6)]
        for row in (figure("ipc", "ce", 1e-3, sizes=(OPEN,), ceiling="", samples=tight)
                    + figure("ipc", "push", 1e-3 * ratio, sizes=(OPEN,), ceiling="", samples=tight)):
            rows.append({**row, "replica": replica})
    return rows


def test_a_ratio_that_moves_between_process_sets_widens_delta_to_that_movement():
    """push is 1% behind ce in one set and 7% in the other: pooled, 4% (beyond the 2% floor), but
    the offset between sets is 6%: delta takes it in, and push is not shown slower."""
    pooled = analyse(frame(two_sets(1.01, 1.07)), META).answer.decisions[0]
    assert pooled.replicas == 2 and pooled.delta == pytest.approx(1.07 / 1.01 - 1, rel=1e-3)
    assert pooled.outcome != "faster"
    steady = analyse(frame(two_sets(1.04, 1.045)), META).answer.decisions[0]
    assert steady.outcome == "faster" and steady.delta == pytest.approx(0.02)


@pytest.mark.parametrize("args, says", [(["--replicas", "0"], "must be 1 to 8 process sets per run"),
                                        (["--replicas", "9"], "must be 1 to 8 process sets per run"),
                                        (["--replicas", "2", "--budget", "500"], "--replicas 2 and --budget")])
def test_bad_replicas_are_one_error_line(args, says):
    result = CliRunner().invoke(cli, ["run", *args])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if "Error" in line or "error" in line]
    assert len(errors) == 1 and says in errors[0] and "Traceback" not in result.output


def test_a_ratio_that_moves_between_the_sets_of_two_scenarios_and_their_replicas_widens_delta():
    """Two figures that two scenarios timed, each on two process sets (the kernel ping-pongs of latency
    and sharing under --replicas): their ratio is 1.05 in three sets and 1.12 in the fourth; pooled it
    is beyond the 2% floor, but delta takes in the 6.7% it moved, and the faster is not claimed."""
    a, b = np.full(12, 1e-3) * np.linspace(0.999, 1.001, 12), np.full(12, 1.05e-3) * np.linspace(0.999, 1.001, 12)
    rows = {r["variant"]: r for r in figure("ipc", "ce", 1e-3, ceiling="") + figure("ipc", "sm", 1.05e-3, ceiling="")}
    summary = frame(list(rows.values()))
    summary = summary.assign(median_s=summary["seconds"], fraction_of_ceiling=np.nan, call_bound=False,
                             l2_resident=None)
    records = list(summary.itertuples(index=False))
    keys = (("latency", 1), ("latency", 2), ("sharing", 1), ("sharing", 2))

    def decided(moved: float):
        fa = Figure("ipc/ce", records[0], a, (), tuple((k, 1e-3) for k in keys))
        fb = Figure("ipc/sm", records[1], b, (), tuple((k, 1.05e-3 * (moved if k == keys[-1] else 1)) for k in keys))
        return decide([fa, fb], {}, lambda label: (np.nan,) * 3, lambda label: (label,))

    steady, moving = decided(1.0), decided(1.12 / 1.05)
    assert steady.choice == "ipc/ce" and steady.outcome == "faster" and steady.delta == pytest.approx(0.02)
    assert moving.delta == pytest.approx(1.12 / 1.05 - 1, rel=1e-6) and moving.outcome != "faster"


def test_each_process_set_s_median_of_a_figure_is_keyed_by_its_scenario_and_replica():
    from types import SimpleNamespace

    from gpuipc_bench.analysis.verdict import set_medians

    row = SimpleNamespace(scenario="latency", median_s=2e-6, sets=(("latency", 2e-6), ("sharing", 3e-6)),
                          set_conditions=(("latency", "L"), ("sharing", "S")))
    assert set_medians(row) == ((("latency", 1), 2e-6), (("sharing", 1), 3e-6))
    replicas = {"L": (np.array([1e-6, 1e-6]), np.array([4e-6]))}  # latency on two sets; sharing on one
    assert set_medians(row, replicas) == ((("latency", 1), 1e-6), (("latency", 2), 4e-6), (("sharing", 1), 3e-6))
    plain = SimpleNamespace(scenario="ipc", median_s=5e-6)  # a row from before the column: its own scenario
    assert set_medians(plain) == ((("ipc", 1), 5e-6),)


def test_the_analysis_imports_in_a_thread_that_every_fork_waits_for(monkeypatch):
    """A process forked while the thread holds an import lock would inherit it held."""
    import os
    import threading

    from gpuipc_bench.harness import preload

    order = []
    release = threading.Event()
    monkeypatch.setattr(preload, "_thread", None)
    monkeypatch.setattr(preload, "_import_all", lambda: (release.wait(5), order.append("imported")))
    hooks = []
    monkeypatch.setattr(os, "register_at_fork", lambda before: hooks.append(before))
    preload.start()
    preload.start()  # once per process
    assert len(hooks) == 1 and preload._thread is not None and preload._thread.is_alive()
    release.set()
    hooks[0]()  # what os.fork runs first
    order.append("forked")
    assert order == ["imported", "forked"]
    monkeypatch.setattr(preload, "_thread", None)
