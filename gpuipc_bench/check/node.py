"""The check of one node: which paths work, the short measurement, each figure judged.

The measurement is `gpuipc-bench run`'s machinery through its public parts (RunConfig, the
plan, launcher.run_scenario or an MPI job's run_scenario), on a short preset: two sizes (the
latency-bound 4 KiB and the bandwidth-bound 256 MiB; 16 MiB for the host path), 5 samples
after one warm-up, the same-GPU pairs time-sliced only (no MPS daemon of its own). GPU
nodes run staging (h2d, d2h), ipc (d2d, ipc-ce, ipc-handoff-4k) on GPU 0, again on every
other GPU at 256 MiB (each GPU's host link and memory: h2d, d2h, d2d, ipc-ce, judged per
GPU) and, with two GPUs or more, peer for every ordered pair; vmm and mempool run once at
4 KiB, as the proof that their path works. Every GPU's PCIe link is read from NVML while the
measurement runs (under staging's host copies): one below its maximum width fails, below its
generation warns. A node without a GPU runs the host path and the barrier (the CPU figures).
A figure that fails or warns is measured again (its scenario once more) before it counts.
--preset health: staging, ipc and peer only, three samples, each in its health form (the figures
it judges and what proves the path: scenarios/staging.py, ipc.py, peer.py); staging and ipc of one
GPU in one persistent process set, GPU after GPU (ONE_SET_PER_GPU), peer's pairs in rounds of
disjoint pairs at once where every pair is NVLink (harness.rounds); the sets forked together make
their CUDA contexts at once before the next run (CheckSets); a figure is measured again on its own
GPU or pair only.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Callable

from gpuipc_bench import modes
from gpuipc_bench.check import conditions, figures as figs, judge, paths
from gpuipc_bench.check.expect import Expectations, shape_of
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import UsageError
from gpuipc_bench.harness.plan import Plan, plan_pairs, plan_scenarios, registry
from gpuipc_bench.harness.pool import WorkerSets
from gpuipc_bench.harness.session import Reporter, Session
from gpuipc_bench.hooks import plant
from gpuipc_bench.hooks.profiling import mark, write_trace

SAMPLES, WARMUP = 5, 1
GPU_SIZES = (figs.SMALL, figs.BIG)
HOST_SIZES = (figs.SMALL, figs.HOST_BIG)
GPU_SCENARIOS = ("staging", "ipc", "peer")
PROOF_SCENARIOS = ("vmm", "mempool")  # a path's proof: one tiny run
EVERY_GPU_SCENARIOS = ("staging", "ipc")  # run on every GPU: its host link and memory
CPU_SCENARIOS = ("host", "barrier")
# --preset health: the headline paths only (no proofs, no NIXL, no barrier), fewer samples
HEALTH_GPU_SCENARIOS, HEALTH_CPU_SCENARIOS, HEALTH_SAMPLES = ("staging", "ipc", "peer"), ("host",), 3
PATH_OF = {"ipc": "ipc", "vmm": "vmm", "mempool": "mempool", "peer": "peer", "host": "host"}
# --preset health: these scenarios' runs of one GPU in one persistent process set (one start a GPU, not one
# a run: a start on a node of several GPUs costs seconds), GPU after GPU, in one session
ONE_SET_PER_GPU = ("staging", "ipc")
HEALTH_BIG_ONLY = ("staging",)  # measured at 256 MiB alone in the health preset (its figures' size)
# The check's own costs beside harness.estimate's model (estimate_check), fitted to the health preset's
# wall time (/usr/bin/time) before its per-GPU process sets and same-GPU health forms: one H200 6.0 s,
# two H200s 23 s (the full peer form; results/h200x2-health.csv, results/README.md), four H200s 68.0 s
# (peer's health form in rounds; scripts/device/health.sh). The model alone said 7.5, 17.3 and 38.0 s.
CHECK_END_S = 1.3  # judging and the lines printed (no report rendered: harness.estimate.END_S is a run's)
CHECK_START_S, CHECK_GPU_START_S = 0.0, 0.85  # each start of processes, and each further GPU of the node
WARM_AHEAD = True  # the sets a session forks together make their CUDA contexts at once (CheckSets)
# the pairs whose sets a plan with rounds forks all at once, before its first round (their contexts
# made at once): up to this many pairs (two processes each), else a round's pairs before that round.
# On four H200s the check took 44.0 s with them ahead against 46.0 s without: a round's pairs still
# spend ~4.7 s in their first run's set-up (the Gpu opened, peer access, the lane proofs)
ROUND_PAIRS_AHEAD = 16


@dataclasses.dataclass
class NodeReport:
    node: str
    facts: dict[str, str]
    rows: list[dict] = dataclasses.field(default_factory=list)
    events: list[judge.Event] = dataclasses.field(default_factory=list)
    figures: list[figs.Figure] = dataclasses.field(default_factory=list)
    error: str = ""
    csv: str = ""  # the rows as CSV lines (packed() on the node: rank 0 appends them as they are)
    row_count: int = 0  # how many rows csv holds

    def packed(self) -> "NodeReport":
        """This report for rank 0: its rows checked and formatted here, on the node (results'
        format_rows), so that rank 0 only appends text (its work linear in the bytes, not the rows)."""
        from gpuipc_bench.results import new_row
        from gpuipc_bench.results.writing import format_rows

        if not self.rows:
            return self
        text = format_rows(new_row(**r) for r in self.rows)
        return dataclasses.replace(self, rows=[], csv=self.csv + text, row_count=self.row_count + len(self.rows))


def check_node(node: str, expectations: Expectations, tolerance: float | None = None,
               job=None, peer: tuple[str, str] | None = None, peer_where: str = "a forked child",
               on_row: Callable[[dict], None] | None = None, timeout: float = 60.0,
               preset: str = "full") -> NodeReport:
    """Check this node. `job`: the node's MPI job (its ranks are the workers), None: forked workers.
    `preset`: 'full', or 'health' (the headline figures only, fewer samples)."""
    from gpuipc_bench.machine.probe import probe

    mark("check probe")
    machine = probe()
    facts = machine.metadata()
    facts["host"] = node
    report = NodeReport(node, facts)
    found = paths.gather(machine, peer, peer_where)
    facts.update({"check.pid_ns": found.pid_ns, "check.peer": peer_where, "check.peer_pid_ns": found.peer_pid_ns,
                  "check.net_ns": found.net_ns, "check.peer_net_ns": found.peer_net_ns})
    verdicts = {v.name: v for v in paths.decide(found)}

    def keep(row: dict) -> None:
        row = {**row, "node": node}
        report.rows.append(row)
        if on_row is not None:
            on_row(row)

    gpu = machine.gpu_count > 0
    names, samples = scenario_names(machine, preset)
    facts["check.estimate_seconds"] = f"{estimate_check(machine, preset, job, timeout, (names, samples)):.1f}"
    bus_ids = {str(g.index): g.pci_bus_id for g in machine.gpus}
    mark("check measure")
    with conditions.LinkWatch(bus_ids if gpu and "staging" in names else {}) as links:  # under its host copies
        outcomes = measure(names, machine, job, keep, timeout, samples, preset, facts=facts)
    mark("check judge")
    for name, error in outcomes.items():
        path = PATH_OF.get(name)
        if error and path in verdicts and verdicts[path].ok is not False:
            verdicts[path] = paths.PathVerdict(path, None if error.startswith("waived: ") else False,
                                               error.removeprefix("waived: "))
    shape = shape_of(facts)
    report.events += [path_event(v, node, shape, expectations, facts) for v in verdicts.values()]
    failed_paths = {e.figure for e in report.events if e.kind == "path" and e.status == judge.FAIL}
    for name, error in outcomes.items():  # a scenario planned here ran into an error: the node is broken
        if error and not error.startswith("waived: ") and PATH_OF.get(name) not in failed_paths:
            report.events.append(judge.Event(judge.FAIL, node, "scenario", name, reason=error))
    if not report.rows:
        report.events.append(judge.Event(judge.FAIL, node, "node", "rows", reason="no scenario of the check "
                                         f"measured anything ({', '.join(names)})"))

    for index, (fails, said) in sorted(conditions.link_findings(links.seen).items()):
        report.events.append(judge.Event(judge.FAIL if fails else judge.WARN, node, "link", "pcie", index,
                                         reason=said))
    causes = conditions.gpu_conditions(bus_ids, links=links.seen) if gpu else {}
    frame = _frame(report.rows)
    first = {(f.name, f.gpus): f for f in figs.figures_of(frame, node, facts=facts)}
    judged = {k: judge.judge_figure(f, node, facts, expectations, tolerance, causes) for k, f in first.items()}
    judge.flag_node_outliers(judged, list(first.values()), facts)  # a GPU or pair below its node's others
    again = [k for k, e in judged.items() if e.status in (judge.FAIL, judge.WARN)]
    if again:  # flutter: measure those figures' scenarios once more before they count
        rows: list[dict] = []

        def keep_again(row: dict) -> None:
            rows.append(row)
            keep(row)

        where: dict[str, set[str]] = {}  # health: only the runs of those figures' GPUs (a pair, not all twelve)
        for name, gpus in again:
            where.setdefault(figs.BY_NAME[name].scenario, set()).add(gpus)
        mark("check measure again", ",".join(f"{n}@{g}" for n, g in again))
        measure(list(where), machine, job, keep_again, timeout, samples, preset, where if preset == "health" else None)
        second = {(f.name, f.gpus): f for f in figs.figures_of(_frame(rows), node, attempt=1, facts=facts)}
        for k in again:
            if k in second:
                first[k] = second[k]
                judged[k] = judge.remeasured(judged[k], judge.judge_figure(second[k], node, facts, expectations,
                                                                           tolerance, causes))
        for k, why in judge.node_outliers(list(first.values()), facts).items():  # measured twice, still below
            if k in again and k in second and judged[k].status != judge.FAIL:
                judged[k].status, judged[k].reason = judge.FAIL, f"{why} (measured twice)"
        facts["check.remeasured"] = ",".join(f"{n}@{g}" for n, g in again)
    mark("check judged")
    write_trace(f"parent-{os.getpid()}")  # (GPUIPC_BENCH_TRACE: the check's own steps beside its sessions')
    report.figures = list(first.values())
    report.events += list(judged.values())
    report.events += missing_figures(node, facts, expectations, names, report.figures)
    facts["check.paths_passed"] = ",".join(e.figure for e in report.events if e.kind == "path" and e.status == "pass")
    return report


def scenario_names(machine, preset: str = "full") -> tuple[list[str], int]:
    """The scenarios the check runs on `machine` in `preset` ('full' or 'health'), and its samples
    per group."""
    gpu = machine.gpu_count > 0
    if preset == "health":
        names, samples = list(HEALTH_GPU_SCENARIOS if gpu else HEALTH_CPU_SCENARIOS), HEALTH_SAMPLES
    else:
        names, samples = [*GPU_SCENARIOS, *PROOF_SCENARIOS] if gpu else list(CPU_SCENARIOS), SAMPLES
        if nixl_installed():  # KV caches move with NIXL: did UCX use the link?
            names.append("nixl-read" if gpu else "nixl-host-read")
    return [n for n in names if not plant.left_out(n)], samples


def estimate_check(machine, preset: str = "full", job=None, timeout: float = 60.0,
                   chosen: tuple[list[str], int] | None = None) -> float:
    """Seconds the check's measurement should take on `machine` (harness.estimate's model over each
    session's plan, its rounds included; the command's start and the check's end once), and what a
    start of processes costs a check beyond that model (check_start_seconds). A first pass whose
    figures pass: a re-measure adds its runs again. `chosen`: scenario_names' answer."""
    from gpuipc_bench.harness.estimate import END_S, START_S, start_seconds

    names, samples = chosen or scenario_names(machine, preset)
    scenarios = registry()
    total = START_S + CHECK_END_S
    for block in sessions_of([n for n in names if n in scenarios], preset, job):
        plans, plan, _ = session_plan(block, machine, job, timeout, samples, preset)
        if plan is None:
            continue
        warmed = WARM_AHEAD and (len(plans) > 1 or plan.rounds is not None)
        starts, counted = starts_in_wall(plan, warmed)
        first = plan.runs[0][0]
        total += (plan.estimate - START_S - END_S + starts * check_start_seconds(machine.gpu_count)
                  - (counted - starts) * start_seconds(first, machine.gpu_count))
    return total


def starts_in_wall(plan, warmed: bool = False) -> tuple[int, int]:
    """(the starts of processes a plan's wall time holds, the starts harness.estimate's model counts in
    it). Each run's that starts processes (harness.estimate.set_starts) and a round's pairs' once (they
    start at once), the proof round's each (its pairs run alone first, one after another; the model
    counts them again for its together pass). `warmed` (CheckSets): the sets forked together start at
    once, the proof round's and a joined plan's (its every set ahead of its first run) too."""
    from gpuipc_bench.harness.estimate import set_starts
    from gpuipc_bench.harness.plan import plan_runs
    from gpuipc_bench.harness.rounds import split

    serial, grouped = split(plan_runs(plan.runs, plan.modes), plan.rounds)
    alone = sum(set_starts(serial))
    counted = alone + len(grouped) + (len(grouped[0]) if grouped else 0)
    if warmed:  # (a round's pairs forked with the first round's, ahead, still pay about a start each in
        # their first run's set-up: on four H200s ~4.7 s a round, its contexts made ahead or not)
        return min(1, alone) + len(grouped), counted
    return alone + len(grouped) + (len(grouped[0]) - 1 if grouped else 0), counted


def check_start_seconds(gpus: int) -> float:
    """What a start of processes costs a check beyond harness.estimate's set start, on a node of `gpus`
    GPUs: a check's process set lives for one run or two, and pays alone what a long run's sets pay once
    (the CUDA initialisation that opens every GPU of the node, the lane counters' proofs, the ceilings'
    pinned buffers, its exit)."""
    from gpuipc_bench.harness import estimate

    seen = min(gpus, 2) if estimate.SEES_OWN_GPUS else gpus  # a check's set: one GPU or a pair's (gpu.visible)
    return CHECK_START_S + CHECK_GPU_START_S * max(0, seen - 1)


def measure_again(node: str, figure_names: list[str], facts: dict[str, str], job=None,
                  timeout: float = 60.0) -> NodeReport:
    """The named figures measured once more (their scenarios run again): a report of those rows
    and figures only, for a fleet outlier's second measurement."""
    from gpuipc_bench.machine.probe import probe

    report = NodeReport(node, facts)
    measure(figs.scenarios_for(list(figure_names)), probe(), job,
            lambda row: report.rows.append({**row, "node": node}), timeout)
    wanted = set(figure_names)
    found = figs.figures_of(_frame(report.rows), node, attempt=1, facts=facts)
    report.figures = [f for f in found if f.name in wanted]
    return report


def nixl_installed() -> bool:
    from gpuipc_bench.scenarios.nixl_support import missing

    return missing() is None


def path_event(v: paths.PathVerdict, node: str, shape: str, expectations: Expectations,
               facts: dict[str, str] | None = None) -> judge.Event:
    """A path that cannot work here fails where it is expected to work: where the expectations
    say it works on this model (GPU name and count), or where it works on every node of its kind
    (expected_paths); otherwise it is skipped, with its reason."""
    if v.ok:
        return judge.Event(judge.PASS, node, "path", v.name, reason=v.reason)
    if v.ok is False and expectations.path_works(shape, v.name):
        return judge.Event(judge.FAIL, node, "path", v.name, reason=f"{v.reason} (it works on {shape} in the "
                                                                    f"expectations)")
    if v.ok is False and v.name in expected_paths(facts or {}):
        where = "every node with an NVIDIA GPU" if shape.startswith("NVIDIA") else "every node"
        if v.name == "peer":
            where = "GPUs joined by NVLink"
        return judge.Event(judge.FAIL, node, "path", v.name, reason=f"{v.reason} (it works on {where})")
    return judge.Event(judge.SKIP, node, "path", v.name, reason=v.reason)


def expected_paths(facts: dict[str, str]) -> set[str]:
    """The paths that work on any healthy node like this one, whatever the expectations say: the
    host path everywhere; on NVIDIA GPUs legacy IPC, VMM and pool IPC and host mmap within the
    node; peer access between GPUs that NVLink joins."""
    found = {"host"}
    if shape_of(facts).startswith("NVIDIA"):
        found |= {"ipc", "vmm", "mempool", "mmap"}
        if any(k.startswith("link.") and v.startswith("NV") for k, v in facts.items()):
            found.add("peer")
    return found


def missing_figures(node: str, facts: dict[str, str], expectations: Expectations, scenarios: list[str],
                    measured: list[figs.Figure]) -> list[judge.Event]:
    """A FAIL for each figure the expectations hold for this node's models that the check ran the
    scenario of but did not measure (a missing metric is a failure, not a pass)."""
    from gpuipc_bench.check.expect import model_of

    gpus = ["host"] + [str(i) for i in range(int(facts.get("gpu_count", "0") or 0))]
    gpus += [f"{a}>{b}" for a in gpus[1:] for b in gpus[1:] if a != b]
    have = {(model_of(facts, f.gpus), f.name) for f in measured} | {(f.gpus, f.name) for f in measured}
    out, seen = [], set()
    for where in gpus:
        model = model_of(facts, where)
        for (m, figure), exp in sorted(expectations.entries.items()):
            spec = figs.BY_NAME.get(figure)
            if m != model or spec is None:
                continue
            key = (where, figure) if spec.every_gpu else (m, figure)  # every GPU's, or the model's once
            if key in have or key in seen:
                continue
            if spec.scenario not in scenarios:  # not run here (NIXL not installed, a CPU figure on a GPU node)
                continue
            seen.add(key)
            out.append(judge.Event(judge.FAIL, node, "figure", figure, where, None, exp.text(), exp.unit,
                                   f"expected on {model} but not measured"))
    return out


def every_gpu(plan, config, machine) -> list:
    """The plan's runs (GPU 0), then each once more on every other GPU of the node (a same-GPU pair
    on it) at the bandwidth size only: the figures of one GPU (its host link, its memory) come from
    there; the 4 KiB hand-off is the path's, measured once on GPU 0."""
    from gpuipc_bench.harness.classes import sized

    out = list(plan)
    for scenario, _ in plan:
        for gpu in range(1, machine.gpu_count):
            out.append((sized(scenario, (figs.BIG,)), scenario.workers(dataclasses.replace(config, devices=(gpu,)),
                                                                       machine)))
    return out


def _frame(rows: list[dict]):
    from gpuipc_bench.results import empty_frame, typed_frame

    if not rows:
        return empty_frame()
    import pandas as pd

    from gpuipc_bench.results import COLUMNS, new_row

    return typed_frame(pd.DataFrame.from_records([new_row(**r) for r in rows], columns=list(COLUMNS)))


class KeepRows(Reporter):
    """What the session tells a check: each row (to `on_row`), nothing shown."""

    def __init__(self, on_row: Callable[[dict], None]):
        self.on_row = on_row

    def row(self, row: dict) -> None:
        self.on_row(row)


def measure(names, machine, job, on_row, timeout: float, samples: int = SAMPLES, preset: str = "full",
            where: dict[str, set[str]] | None = None, facts: dict[str, str] | None = None) -> dict[str, str]:
    """Run each named scenario on the preset, through a session of its own (its planted fault
    around it); scenario -> '' (ran), its errors (the first line of each), or 'waived: why'.
    `where`: scenario -> the GPUs ('2', '1>2') whose runs alone it takes (a re-measure); `facts`:
    takes each plan's rounds (check.SCENARIO.rounds.*: which pairs ran at once, the proof)."""
    with plant.node_in_turn():  # (a test hook: nodes simulated on one machine measure one at a time)
        return measure_each(names, machine, job, on_row, timeout, samples, preset, where, facts)


def measure_each(names, machine, job, on_row, timeout: float, samples: int, preset: str = "full",
                 where: dict[str, set[str]] | None = None, facts: dict[str, str] | None = None) -> dict[str, str]:
    """measure()'s loop: each named scenario through a session of its own; in the health preset (forked
    workers) staging and ipc through one session, one process set a GPU (ONE_SET_PER_GPU)."""
    scenarios = registry()
    found: dict[str, str] = {}
    for block in sessions_of([n for n in names if n in scenarios], preset, job):
        plans, plan, waived = session_plan(block, machine, job, timeout, samples, preset, where)
        found.update(waived)
        if plan is None:
            continue
        mark("check session", ",".join(plans))
        try:
            if len(plans) > 1:
                outcome = Session(None, KeepRows(on_row), job=job, sets=gpu_sets(plan)).run(plan)
            else:
                with plant.fault_for(next(iter(plans))):
                    outcome = Session(None, KeepRows(on_row), job=job, sets=round_sets(plan)).run(plan)
        finally:
            for each in plans.values():  # (the session ends them at its clean end; here under every fault)
                modes.end_all(each.modes)
        for name in plans:
            found[name] = "; ".join(str(f.error).splitlines()[0] for f in outcome.failures if f.scenario == name)
        if facts is not None and plan.rounds is not None:
            facts.update({f"check.{name}.{key}": value for name in plans
                          for key, value in plan.rounds.metadata().items()})
    return found


def session_plan(block, machine, job, timeout: float, samples: int, preset: str,
                 where: dict[str, set[str]] | None = None) -> tuple[dict[str, Plan], Plan | None, dict[str, str]]:
    """One session of the check (a block of sessions_of): each scenario's preset_plan with runs (a
    re-measure leaves out other GPUs' figures), the session's plan (joined_plan where several share
    it; None: nothing to run), and the scenarios waived here ('waived: why', the path's reason)."""
    scenarios = registry()
    plans: dict[str, Plan] = {}
    waived: dict[str, str] = {}
    for name in block:
        try:
            plan = preset_plan(scenarios[name], machine, job, timeout, samples, preset,
                               None if where is None else where.get(name, set()))
        except UsageError as exc:
            waived[name] = f"waived: {scenarios[name].waive_reason(machine) or exc}"
            continue
        if plan.runs:
            plans[name] = plan
    if not plans:
        return plans, None, waived
    return plans, joined_plan(plans, machine) if len(plans) > 1 else next(iter(plans.values())), waived


def sessions_of(names: list[str], preset: str, job) -> list[tuple[str, ...]]:
    """The check's sessions, in order: each scenario alone, except in the health preset with forked
    workers, where ONE_SET_PER_GPU's share one session (in the place of the first of them)."""
    together = tuple(n for n in names if n in ONE_SET_PER_GPU) if preset == "health" and job is None else ()
    out: list[tuple[str, ...]] = []
    for name in names:
        if name not in together:
            out.append((name,))
        elif name == together[0]:
            out.append(together)
    return out


def joined_plan(plans: dict[str, Plan], machine) -> Plan:
    """One plan of several scenarios' same-GPU runs, GPU after GPU (each GPU's runs back to back in its
    process set, in the order of `plans`), in the first plan's sharing mode; its estimate."""
    from gpuipc_bench.harness.plan import plan_runs
    from gpuipc_bench.harness.rounds import estimate_with_rounds

    first = next(iter(plans.values()))
    gpus = list(dict.fromkeys(run_gpus(specs) for plan in plans.values() for _, specs in plan.runs))
    runs = [run for gpu in gpus for plan in plans.values() for run in plan.runs if run_gpus(run[1]) == gpu]
    config = dataclasses.replace(first.config, scenarios=tuple(plans))
    estimate = estimate_with_rounds(plan_runs(runs, first.modes), config, first.modes, None, machine.gpu_count, None)
    return dataclasses.replace(first, config=config, runs=runs, estimate=estimate)


class CheckSets(WorkerSets):
    """The persistent worker sets of a check's session: the sets forked together (a round's pairs,
    prepared one after another; `ahead`, (scenario, specs) of each set the session will take, forked
    at its first run) make their CUDA contexts at once (WARM_AHEAD: WorkerSet.warm) and are waited for
    before the next run starts, so that their starts overlap and none runs beside a measurement; a
    planted fault around each scenario's runs only (hooks.plant.fault_for)."""

    def __init__(self, worker_log: str = "", ahead=(), timeout: float = 60.0):
        import threading

        super().__init__(worker_log, persistent=True)
        self.ahead, self.timeout = list(ahead), timeout
        self.warming: list = []
        self.lock = threading.Lock()  # a round's runs start in threads of their own

    def fork_ahead(self, mode_name=None, env=None) -> None:
        """Fork the sets `ahead` not forked yet (at the first prepare, a round's in the main thread, or
        at the first run)."""
        ahead, self.ahead = self.ahead, []
        for each, its_specs in ahead:
            self.prepare(each, its_specs, mode_name, env)

    def prepare(self, scenario, specs, mode_name=None, env=None) -> None:
        from gpuipc_bench.harness.pool import set_key

        self.fork_ahead(mode_name, env)
        started = self.started
        super().prepare(scenario, specs, mode_name, env)
        fresh = self.sets.get(set_key(specs, mode_name, env or {}))
        if WARM_AHEAD and self.started > started and fresh is not None:
            fresh.warm()
            self.warming.append(fresh)

    def start_ahead(self, mode_name=None, env=None) -> None:
        """Fork the sets `ahead`, then wait until every set warming has its contexts (a set that did
        not get them is ended: its run forks a fresh one and says what failed)."""
        with self.lock:
            self.fork_ahead(mode_name, env)
            for fresh in self.warming:
                if not fresh.warmed(self.timeout):
                    self.drop(fresh, close=True)
            self.warming = []

    def run(self, scenario, config, specs, mode_name=None, env=None, **callbacks):
        self.start_ahead(mode_name, env)
        mark("check run", scenario.name, run_gpus(specs))
        with plant.fault_for(scenario.name):
            return super().run(scenario, config, specs, mode_name=mode_name, env=env, **callbacks)


def gpu_sets(plan) -> CheckSets:
    """The worker sets of a joined plan (joined_plan): one a GPU, every one forked and started at the
    session's first run."""
    ahead = {run_gpus(specs): (scenario, specs) for scenario, specs in reversed(plan.runs)}
    return CheckSets(plan.config.worker_log or "", list(ahead.values())[::-1], plan.config.timeout)


def round_sets(plan):
    """The worker sets of a plan with rounds (harness.rounds): persistent, so that each round's pairs
    are forked ahead in this thread (never in a round's threads) and retired after it, one set of
    processes a pair as before; None for any other plan (the session's own: fresh processes a run).
    Up to ROUND_PAIRS_AHEAD pairs, every round's sets are forked at the first round's preparation and
    make their contexts at once."""
    if plan.rounds is None:
        return None
    pairs = {run_gpus(specs): (scenario, specs) for scenario, specs in plan.runs}
    ahead = list(pairs.values()) if len(pairs) <= ROUND_PAIRS_AHEAD else []
    return CheckSets(plan.config.worker_log or "", ahead, plan.config.timeout)


def health_form(scenario):
    """The scenario as the health preset measures it: a copy in its health form where it has one
    (peer: the figures health judges and what proves the path, scenarios/peer.py), else itself."""
    if not hasattr(scenario, "health"):
        return scenario
    reduced = copy.copy(scenario)
    reduced.health = True
    return reduced


def run_gpus(specs) -> str:
    """A run's GPUs as its figures name them: '2' (a same-GPU pair), '1>2', or 'host'."""
    a, b = specs[0].device, specs[-1].device
    return "host" if a is None else str(a) if a == b else f"{a}>{b}"


def preset_plan(scenario, machine, job, timeout: float, samples: int, preset: str = "full",
                where: set[str] | None = None) -> Plan:
    """The check's plan of one scenario: its preset sizes and samples (a path's proof: one sample
    at 4 KiB), every GPU pair where it takes two GPUs, the same-GPU pairs time-sliced (as `run
    --sharing time-sliced`; MPI ranks share as the job started them), each run independent. In
    the health preset the scenario's health form, whose GPU pairs (device memory only) run in
    rounds of disjoint pairs at once on a node whose every pair is NVLink (harness.rounds: proved
    first, alone and together). `where`: only the runs of these GPUs (run_gpus). Its estimate
    (harness.estimate). UsageError: it cannot run here."""
    from gpuipc_bench.harness.classes import sized
    from gpuipc_bench.harness.plan import plan_runs
    from gpuipc_bench.harness.rounds import estimate_with_rounds, rounds_of

    proof = scenario.name in PROOF_SCENARIOS
    sizes: tuple[int, ...] | None = (figs.SMALL,) if proof else (GPU_SIZES if scenario.gpus_needed else HOST_SIZES)
    if scenario.name == "barrier":
        sizes = None
    config = RunConfig(scenarios=(scenario.name,), sizes=sizes, iterations=1 if proof else samples,
                       warmup=0 if proof else WARMUP, timeout=timeout, workers=job.size if job else None,
                       launcher="mpi" if job else "fork", sharing=("time-sliced",),
                       worker_log="/dev/stderr")  # what libraries print: never into the JSON or JUnit on stdout
    runs, _ = plan_scenarios(config, registry(), machine, explicit=False, job=job)
    form = health_form(scenario) if preset == "health" else scenario
    runs = [(form, specs) for _, specs in runs]
    if scenario.pairable and scenario.gpus_needed >= 2 and machine.gpu_count >= 2:
        runs = plan_pairs(runs, config, machine, "all", full=True)[0]  # every pair's figures
    if scenario.name in EVERY_GPU_SCENARIOS:
        runs = every_gpu(runs, config, machine)
    if preset == "health" and scenario.name in HEALTH_BIG_ONLY:
        runs = [(sized(s, (figs.BIG,)), specs) for s, specs in runs]
    if where is not None:
        runs = [run for run in runs if run_gpus(run[1]) in where]
    rounds = None
    if getattr(form, "health", False) and job is None:
        rounds = rounds_of([(w[0].device, w[-1].device) for _, w in runs], machine, (scenario.name,))
    sharing = [] if job else modes.make(("time-sliced",))
    # a start across two GPUs: in the check's own per-start model (check_start_seconds), fitted to its runs
    estimate = estimate_with_rounds(plan_runs(runs, sharing), config, sharing, None, machine.gpu_count, rounds,
                                    pair_start_s=0.0)
    return Plan(config, machine, runs, sharing, {}, [], estimate, rounds=rounds, independent=True)
