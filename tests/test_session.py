"""The run's session (gpuipc_bench.harness.session): the plan's scenarios in their modes, the
results file kept current, failures named, a signal's status, what the reporter hears; with
stand-in worker sets (no process is forked), and a committed reference run replayed through it,
its rows and its summary as committed."""

from __future__ import annotations

import dataclasses
import io
import signal
from pathlib import Path

import pytest
from rich.console import Console

from fakes import CPU, SAME_GPU, Heard, Named, Sets, fake_machine, host_row, plan_of, run_session
from gpuipc_bench.config import RunConfig
from gpuipc_bench.engine.scenario import WorkerSpec
from gpuipc_bench.errors import BenchError, Interrupted, WorkerFailed
from gpuipc_bench.harness import session as session_module
from gpuipc_bench.harness.launcher import Outcome
from gpuipc_bench.harness.plan import Plan
from gpuipc_bench.harness.session import RunInterrupted, Session
from gpuipc_bench.harness.supervision import WorkerLost
from gpuipc_bench.report import render_run_summary
from gpuipc_bench.results import new_row, read_results

HERE = Path(__file__).parent
REFERENCE = HERE.parent / "results" / "h100-both-modes-quick.csv"
REFERENCE_SUMMARY = HERE / "golden" / "h100-both-modes-quick-summary.txt"


class Mode:
    """A sharing mode that starts (or cannot), and leaves with a note."""

    def __init__(self, name: str, fails: str = ""):
        self.name, self.fails, self.scenarios = name, fails, ()
        self.log: list[str] = []

    def start(self):
        self.log.append("start")
        if self.fails:
            raise BenchError(self.fails)

    def facts(self):
        return {f"sharing.{self.name}": "started"}

    def env(self):
        return {"MODE": self.name}

    def leave(self):
        self.log.append("leave")
        return [f"{self.name} left"]

    def stop(self):
        self.log.append("stop")
        return []


def test_every_row_is_written_and_each_scenario_reported(tmp_path):
    sets = Sets()
    outcome, heard, out = run_session(tmp_path, plan_of((Named("a"), CPU), (Named("b"), CPU)), sets)
    frame, meta = read_results(out)
    assert outcome.rows == len(frame) == 2 and outcome.failures == [] and not outcome.partial
    assert outcome.status == meta["status"] == "completed: a,b" and meta["partial"] == "false"
    assert outcome.path == out and outcome.planned == 2 and outcome.log == ""
    assert meta["note.a.said"] == "hello" and float(meta["seconds.a"]) >= 0 and "seconds.total" in meta
    assert meta["worker_sets"] == "1" and meta["estimate.seconds"] == "0.0"
    assert heard.events == [
        ("enter",),
        ("started", "a"), ("status", "a", "sample 1 of a"), ("advance", "a", 1),
        ("started", "b"), ("status", "b", "sample 1 of b"), ("advance", "b", 1),
        ("exit",), ("written", 2, "completed: a,b")]
    assert sets.let_go_called and sets.ended
    assert [name for name, _, _ in sets.calls] == ["a", "b"]


def test_a_failed_scenario_is_named_its_rows_kept_and_the_next_runs(tmp_path):
    error = WorkerFailed("worker 1 (consumer, CPU) raised ValueError: no")
    sets = Sets({"a": ([host_row("a"), host_row("a", 1)], error)})
    outcome, heard, out = run_session(tmp_path, plan_of((Named("a"), CPU), (Named("b"), CPU)), sets)
    assert [(f.scenario, f.rows) for f in outcome.failures] == [("a", 2)] and outcome.partial
    frame, meta = read_results(out)
    assert len(frame) == outcome.rows == 3 and meta["partial"] == "true"
    assert meta["status"] == outcome.status == f"completed: b; failed: a ({error})"
    assert ("failed", "a") in heard.events and [name for name, _, _ in sets.calls] == ["a", "b"]


def test_a_lost_worker_ends_the_run(tmp_path):
    sets = Sets({"a": ([], WorkerLost("worker 1 (consumer, CPU) died (SIGKILL)"))})
    outcome, _, out = run_session(tmp_path, plan_of((Named("a"), CPU), (Named("b"), CPU)), sets)
    assert [name for name, _, _ in sets.calls] == ["a"]
    assert read_results(out)[1]["status"].startswith("failed: a (worker 1")


class Recording(Sets):
    """Sets that keep the figures each run was handed (RunConfig.known_best), and raise a
    scenario's error after its rows where `raises` says (as an MPI job's lost rank does)."""

    def __init__(self, script=None, raises=None):
        super().__init__(script)
        self.known: list[tuple] = []
        self.raises = raises or {}

    def run(self, scenario, config, specs, **kwargs) -> Outcome:
        self.known.append(config.known_best)
        outcome = super().run(scenario, config, specs, **kwargs)
        if scenario.name in self.raises:
            raise self.raises[scenario.name]
        return outcome


def test_a_run_hands_later_scenarios_its_figures_and_an_independent_plan_does_not(tmp_path):
    script = {"a": ([host_row("a", i) for i in range(3)], None)}
    plan = plan_of((Named("a"), CPU), (Named("b"), CPU))
    shared = Recording(script)
    run_session(tmp_path, plan, shared)
    assert shared.known[0] == () and len(shared.known[1]) == 1  # a's median, for b's sampler
    alone = Recording(script)
    plan.independent = True
    Session(None, Heard(), sets=alone).run(plan)
    assert alone.known == [(), ()]


class Proving(Sets):
    """Sets whose first run proves GPU 0's PCIe counters (its workers' notes, as engine.lanes sends them),
    keeping the lane proofs each run was handed."""

    def __init__(self):
        super().__init__()
        self.handed: list[tuple] = []

    def run(self, scenario, config, specs, **kwargs) -> Outcome:
        self.handed.append((config.lane_proofs, config.lane_read_ms))
        if len(self.handed) == 1:
            note = kwargs["on_note"]
            note("lanes.read_ms", "0.620")
            note("lanes.0.pcie_tx", "trusted: 1 B a count")
            note("lanes.proof.0.pcie_tx", '{"state": "trusted", "unit": 1, "sm_overhead": 0.17}')
            note("lanes.proof.0.pcie_tx", '{"state": "trusted", "unit": 1, "sm_overhead": null}')  # (the other worker)
        return super().run(scenario, config, specs, **kwargs)


def test_the_lane_proofs_one_run_made_go_to_the_later_runs_not_the_header(tmp_path):
    """The counters are the GPU's: the proofs a run's workers send are handed to every later run of the
    session (a proof with kernel copies' figures kept over one without), the header keeps its readable
    lines and says how they were proven, never the proofs' fields; an independent plan's runs prove their own."""
    sets = Proving()
    _, _, out = run_session(tmp_path, plan_of((Named("a"), CPU), (Named("b"), CPU)), sets)
    assert sets.handed[0] == ((), None)
    assert sets.handed[1] == ((((0, "pcie_tx"), '{"state": "trusted", "unit": 1, "sm_overhead": 0.17}'),), 0.62)
    meta = read_results(out)[1]
    assert meta["lanes.0.pcie_tx"].startswith("trusted") and meta["lanes.read_ms"] == "0.620"
    assert "once a run" in meta["lanes.proven"] and not any(k.startswith("lanes.proof.") for k in meta)
    alone = Proving()
    plan = plan_of((Named("a"), CPU), (Named("b"), CPU))
    plan.independent = True
    Session(None, Heard(), sets=alone).run(plan)
    assert alone.handed == [((), None), ((), None)]


def test_an_independent_plan_runs_in_fresh_processes(monkeypatch):
    from gpuipc_bench.harness import pool

    made: list[bool] = []

    def sets(worker_log, persistent=True, uuids=None):
        made.append(persistent)
        return Sets()

    monkeypatch.setattr(pool, "WorkerSets", sets)
    for independent in (False, True):
        plan = plan_of((Named("a"), CPU))
        plan.independent = independent
        Session(None).run(plan)
    assert made == [True, False]  # the fork launcher's persistent sets for a run; for check each run its own


def test_an_independent_plan_fails_each_run_alone_and_without_a_file_hands_its_rows_over(tmp_path):
    """check's session: a lost worker and a launch that raised fail their runs only, the next runs;
    the rows reach the reporter, no file is written and the workers' log is left as it is."""
    lost = WorkerLost("worker 1 (consumer, CPU) died (SIGKILL)")
    raised = WorkerFailed("rank 1 (consumer, CPU) died")
    sets = Recording({"a": ([host_row("a")], lost)}, raises={"b": raised})

    class Rows(Heard):
        def row(self, row):
            self.events.append(("row", row["scenario"]))

    log = tmp_path / "workers.log"
    log.write_text("")  # empty: a run with a file removes it at its end
    plan = plan_of((Named("a"), CPU), (Named("b"), CPU), (Named("c"), CPU))
    plan.config = dataclasses.replace(plan.config, worker_log=str(log))
    plan.independent = True
    heard = Rows()
    outcome = Session(None, heard, sets=sets).run(plan)
    assert [name for name, _, _ in sets.calls] == ["a", "b", "c"]
    assert [(f.scenario, f.rows, f.error) for f in outcome.failures] == [("a", 1, lost), ("b", 1, raised)]
    assert [e[1] for e in heard.events if e[0] == "row"] == ["a", "b", "c"]
    assert outcome.path is None and outcome.rows == 3 and outcome.log == ""
    assert outcome.status == f"completed: c; failed: a ({lost}); b ({raised})"
    assert [p.name for p in tmp_path.iterdir()] == ["workers.log"] and heard.events[-1] == ("exit",)  # none written


def test_each_mode_starts_before_its_scenarios_leaves_after_them_and_is_handed_to_the_workers(tmp_path):
    """Mode by mode; the mode's name and environment go to the workers; one that cannot start
    fails its scenarios (no samples) and the others go on."""
    sliced, mps, broken = Mode("time-sliced"), Mode("mps"), Mode("mps:25", fails="no daemon")
    pair, alone = Named("ipc", sharing_modes=True), Named("host")
    sets = Sets()
    outcome, heard, out = run_session(tmp_path, plan_of((pair, SAME_GPU), (alone, CPU),
                                                        modes=[sliced, mps, broken]), sets)
    assert sets.calls == [("ipc", "time-sliced", {"MODE": "time-sliced"}), ("host", None, {}),
                          ("ipc", "mps", {"MODE": "mps"})]
    assert [(f.scenario, f.rows, str(f.error)) for f in outcome.failures] == [("ipc", 0, "no daemon")]
    assert [e[1] for e in heard.events if e[0] == "started"] == ["ipc time-sliced", "host", "ipc mps", "ipc mps:25"]
    assert ("failed", "ipc mps:25") in heard.events
    meta = read_results(out)[1]
    assert meta["note.sharing.time-sliced"] == "time-sliced left" and meta["note.sharing.mps"] == "mps left"
    assert meta["sharing.mps"] == "started" and sliced.log[:2] == ["start", "leave"]
    assert all(mode.log[-1] == "stop" for mode in (sliced, mps, broken))  # every mode ends with the run


def test_a_host_path_s_further_mode_measures_its_sizes_below_the_shared_ceilings_and_says_so(tmp_path):
    """staging (through_host) in the second mode of a default sweep runs as a copy measuring the sizes
    below engine.pair.HOST_CEILINGS_SHARED_FROM and its largest; the header names them; the first mode's
    run measures every size."""
    class Sized(Sets):
        def run(self, scenario, config, specs, mode_name=None, **kwargs):
            self.calls.append((scenario.name, mode_name, scenario.only_sizes))
            return Outcome(scenario.name, rows=0)

    staging = Named("staging", sharing_modes=True)
    staging.through_host = True
    sets = Sized()
    _, _, out = run_session(tmp_path, plan_of((staging, SAME_GPU), modes=[Mode("time-sliced"), Mode("mps")]), sets)
    sweep = staging.sizes(RunConfig(scenarios=("staging",)))
    kept = tuple(n for n in sweep if n < 4 << 20) + (max(sweep),)
    assert sets.calls == [("staging", "time-sliced", None), ("staging", "mps", kept)]
    assert read_results(out)[1]["sampling.sizes.staging.mps"] == ",".join(str(n) for n in kept)


def test_an_idle_worker_dead_before_a_mode_starts_ends_the_run_and_the_mode_never_starts(tmp_path):
    """Seen before the mode starts (harness.pool.WorkerSets.ready_for), not after its daemon came up."""
    sliced, mps = Mode("time-sliced"), Mode("mps")
    lost = "worker 0 (producer, GPU 0) was killed by SIGKILL while idle between scenarios"
    sets = Sets({("lost before", "mps"): lost})
    outcome, heard, out = run_session(tmp_path, plan_of((Named("ipc", sharing_modes=True), SAME_GPU),
                                                        modes=[sliced, mps]), sets)
    assert sets.calls == [("ipc", "time-sliced", {"MODE": "time-sliced"})]
    assert "start" not in mps.log and mps.log[-1] == "stop"
    assert [(f.scenario, str(f.error)) for f in outcome.failures] == [("ipc", lost)]
    assert ("failed", "ipc mps") in heard.events
    assert read_results(out)[1]["status"] == f"completed: ipc; failed: ipc ({lost})"


def test_no_worker_of_the_run_is_alive_while_a_mode_starts(tmp_path):
    """With the real worker sets: the CPU pair's set, idle after its scenario, has ended before the
    next mode starts (a private MPS daemon takes seconds), so none of its workers can die unseen then."""
    import multiprocessing

    from gpuipc_bench.harness.pool import WorkerSets
    from gpuipc_bench.scenarios import SCENARIOS

    class Watched(Mode):
        def start(self):
            self.alive = [p.pid for p in multiprocessing.active_children()]
            super().start()

    host = SCENARIOS["host"]
    config = RunConfig(scenarios=("host", "ipc"), sizes=(64,), iterations=3, warmup=1, timeout=10)
    mps = Watched("mps", fails="no daemon here")  # (so no GPU worker is forked after it)
    sets = WorkerSets()
    plan = Plan(config, fake_machine(()), [(host, host.workers(config, None)), (Named("ipc", True), SAME_GPU)],
                [mps], {}, [])
    outcome = Session(tmp_path / "run.csv", Heard(), sets=sets).run(plan)
    assert sets.started == 1 and mps.log[0] == "start" and mps.alive == []
    assert [(f.scenario, str(f.error)) for f in outcome.failures] == [("ipc", "no daemon here")]
    assert multiprocessing.active_children() == []


def test_a_signal_ends_the_session_with_the_file_written_and_the_workers_ended(tmp_path):
    sets = Sets({"b": (lambda: [host_row("b")], Interrupted(signal.SIGTERM, "b", "4 KiB"))})
    with pytest.raises(RunInterrupted) as caught:
        run_session(tmp_path, plan_of((Named("a"), CPU), (Named("b"), CPU), (Named("c"), CPU)), sets)
    assert (caught.value.signum, caught.value.scenario, caught.value.at, caught.value.rows) == (
        signal.SIGTERM, "b", "4 KiB", 2)
    frame, meta = read_results(tmp_path / "run.csv")
    assert len(frame) == 2 and meta["partial"] == "true"
    assert meta["status"] == "terminated during b 4 KiB (SIGTERM); completed: a"
    assert sets.ended and not sets.let_go_called


def test_a_reference_run_replayed_through_the_session_writes_its_rows_and_renders_as_committed(
        tmp_path, monkeypatch):
    """The behaviour check: a committed reference run's rows, delivered scenario run by scenario run
    in their order, come out of the session's file as they went in, and its summary (rendered
    where `run` renders it) is the committed one."""
    frame, meta = read_results(REFERENCE)
    blocks: list[tuple[str, list[dict]]] = []
    for row in frame.to_dict("records"):
        if not blocks or blocks[-1][0] != row["scenario"]:
            blocks.append((row["scenario"], []))
        blocks[-1][1].append({k: v for k, v in row.items() if not _missing(v)})
    queue = iter(blocks)

    class Replay(Sets):
        def run(self, scenario, config, specs, **kwargs):
            name, rows = next(queue)
            assert name == scenario.name
            self.script[name] = (rows, None)
            return super().run(scenario, config, specs, **kwargs)

    monkeypatch.setattr(session_module, "run_header", lambda config, machine: dict(meta))

    class Render(Heard):
        def written(self, written_frame, metadata, analysis=None):
            self.summary = summary(written_frame, metadata)

    plan = plan_of(*[(Named(name), CPU) for name, _ in blocks])
    outcome, heard, out = run_session(tmp_path, plan, Replay(), Render())
    written, written_meta = read_results(out)
    assert outcome.rows == len(frame) and written_meta["status"] == meta["status"]
    assert written.equals(frame)
    assert heard.summary == summary(frame, meta) == REFERENCE_SUMMARY.read_text()


def summary(frame, meta) -> str:
    console = Console(record=True, width=80, color_system=None, file=io.StringIO())
    render_run_summary(frame, meta, console, source="results/h100-both-modes-quick.csv")
    return console.export_text()


def _missing(value) -> bool:
    try:
        return value is None or value != value  # NaN, pd.NA raises
    except TypeError:
        return True


def test_a_headline_pair_outside_its_class_is_swept_whole_after_the_first_pass(tmp_path):
    """--pairs all on four GPUs: GPU 2 -> 3's 256 MiB stream at half the rate of its class: once
    every pair has run, its whole sweep is added, said with what it costs, and kept in the header."""
    from fakes import h100_node
    from gpuipc_bench.harness.classes import group_pairs

    pairs = [(a, b) for a in range(4) for b in range(4) if a != b]

    def specs(a, b):
        return [WorkerSpec(0, "producer", a), WorkerSpec(1, "consumer", b)]

    class PairSets(Sets):
        def run(self, scenario, config, specs, mode_name=None, env=None, on_row=None, **callbacks) -> Outcome:
            self.calls.append((scenario.name, specs[0].device, specs[-1].device))
            a, b = specs[0].device, specs[-1].device
            for i in range(6):
                on_row(new_row(scenario=scenario.name, path="ipc", variant="ce", measure="stream",
                               metric="bandwidth", src=str(a), dst=str(b), bytes=256 << 20, iteration=i, batch=1,
                               seconds=6.8e-4 * (2.0 if (a, b) == (2, 3) else 1.0) * (1 + 0.001 * i),
                               verified=True, workers=2, sharing="exclusive"))
            return Outcome(scenario.name, rows=6)

    machine = h100_node(4)
    classes = group_pairs(pairs, machine)
    plan = plan_of(*[(Named("ipc"), specs(a, b)) for a, b in pairs], machine=machine)
    plan.pair_classes = classes
    plan.resweep_runs = {pair: [(Named("staging"), specs(*pair))] for pair in classes.headline}
    sets = PairSets()
    outcome, heard, out = run_session(tmp_path, plan, sets)
    assert sets.calls[:12] == [("ipc", a, b) for a, b in pairs]
    # measured again on a fresh process set (its first one retired), outside there too: swept whole
    assert sets.calls[12:] == [("retired", (2, 3), None), ("ipc", 2, 3), ("staging", 2, 3)]
    meta = read_results(out)[1]
    assert "took 2.00x the median of its class" in meta["pairs.resweep.2>3"]
    assert "again on a fresh process set: 2.00x" in meta["pairs.resweep.2>3"]
    assert meta["pairs.full"] == "0>1" and "pairs.resweep.1>2" not in meta
    said = [e[1] for e in heard.events if e[0] == "note" and "sweeping it whole" in e[1]]
    assert len(said) == 1 and said[0].startswith("GPU 2 → 3: ipc/ce stream at 256 MiB") and "s more)" in said[0]


def test_a_scenario_that_ended_well_shows_its_line_complete_though_it_took_fewer_steps():
    """Groups decided early (far behind, beaten) take fewer steps than the plan counted: the line of a
    scenario that ended well is complete, with no time left on it; a failed one keeps its place."""
    import io

    from rich.console import Console

    from gpuipc_bench.cli.progress import ProgressReporter

    reporter = ProgressReporter(Console(file=io.StringIO(), width=80), "run.csv", quiet=False)
    with reporter:
        done, failed = reporter.started("staging mps", 10), reporter.started("mmap mps", 10)
        for line in (done, failed):
            reporter.advance(line, 6)
        reporter.finished(done)
        reporter.failed(failed)
        tasks = {t.id: t for t in reporter.progress.tasks}
        assert tasks[done[0]].finished and tasks[done[0]].time_remaining in (None, 0)
        assert tasks[failed[0]].completed == 6 and not tasks[failed[0]].finished
