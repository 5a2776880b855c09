"""A run's session: every planned scenario in its sharing mode and process set, the results file
kept current as rows arrive (nothing lost on a fault), and the end: the workers and modes ended
while the answer is written and rendered.

    session = Session(out, reporter)         # reporter: what the caller shows (Reporter)
    outcome = session.run(plan)              # harness.plan.Plan -> RunOutcome

The session holds the worker sets (harness.pool), the results file, the figures known so far
(harness.known), the resweep of GPU pairs outside their class (harness.classes), the resampling
pass where a decision is open or can move (harness.resample, within --budget), the sharing
modes' start and leave, and the completed and failed scenarios. It prints nothing: it reports
through the Reporter's callbacks (a line per scenario, its progress and status, each row,
notes, the written file), which `run` implements with rich's Progress and the summary. A
signal ends it as RunInterrupted after the file is written (its status says so); a results
file that cannot be written ends it as BenchError, the file set aside.

`check` runs its short preset through it too: out=None (the rows kept in memory and handed to
the reporter; check writes its own file) and an independent plan (Plan.independent: each run
in fresh processes, sampled on its own, its failure its own).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from gpuipc_bench.engine.scenario import shares_processes
from gpuipc_bench.engine.sampler import FAR_BEHIND, FAR_SAMPLES, STILL_FALLING, Counts
from gpuipc_bench.errors import BenchError, Interrupted, WorkerFailed, signal_name
from gpuipc_bench.harness.header import run_header
from gpuipc_bench.harness import preload
from gpuipc_bench.harness.known import KnownBest
from gpuipc_bench.harness.plan import modes_for, plan_runs, second_mode_sizes, second_mode_stream_sizes, \
    shuffle_paths
from gpuipc_bench.harness.rounds import Proof, Round, run_round, schedule
from gpuipc_bench.harness.supervision import WorkerLost
from gpuipc_bench.hooks.profiling import mark, write_trace
from gpuipc_bench.modes import end_all as end_modes

REWRITE_S = 5.0  # the results file's header is rewritten at most this often while a run goes on


class Reporter:
    """What a session says as it goes. This one says nothing (a check, a test); `run` shows a line
    per scenario with its progress, notes on stderr and the summary of the written file."""

    def __enter__(self) -> "Reporter":
        """The scenarios start (after the header is written and the workers' imports begin)."""
        return self

    def __exit__(self, *exc) -> None:
        """The scenarios are done, or a fault ends them."""

    def started(self, label: str, total: int) -> Any:
        """A scenario starts: its line ('ipc 0>1 mps'), `total` progress steps; a handle for the calls below."""

    def advance(self, line: Any, steps: int) -> None:
        """The scenario's workers made `steps` more steps."""

    def status(self, line: Any, text: str) -> None:
        """What its workers are doing now ('sample 3 of ce at 64 MiB')."""

    def failed(self, line: Any) -> None:
        """The scenario failed (its mode could not start, or a worker failed)."""

    def finished(self, line: Any) -> None:
        """The scenario ended well: its line complete, whatever steps the plan counted (groups decided
        early take fewer than planned)."""

    def row(self, row: dict) -> None:
        """A row arrived (in the results already): `check` keeps its rows this way."""

    def note(self, text: str) -> None:
        """Something the user should know now (a pair swept whole, the driver's refusal across MIG instances)."""

    shows_summary = False  # written() prints the run's summary: the run's end analyses the rows for it

    def written(self, frame, metadata: dict[str, str], analysis=None) -> None:
        """The results file is complete and closed; the workers and modes end meanwhile (not
        called without a file). `analysis`: the rows' analysis where the run made one (the
        summary's), else None."""


class RunInterrupted(Interrupted):
    """A signal ended the session's scenarios: the file is written, its status naming the signal
    and where it came (`rows`: the samples kept). A signal elsewhere stays a plain Interrupted."""

    def __init__(self, signum: int, scenario: str = "", at: str = "", rows: int = 0):
        super().__init__(signum, scenario, at)
        self.rows = rows


class Failure(NamedTuple):
    scenario: str
    error: BenchError
    rows: int  # samples it kept


@dataclasses.dataclass
class RunOutcome:
    """What a session did: the file, its rows, the failed scenarios, the final status, the workers'
    log ('' when none was kept) and how many scenario runs were planned."""
    path: Path | str | None  # as the caller named it (None: kept in memory)
    rows: int
    failures: list[Failure]
    status: str
    log: str = ""
    planned: int = 0

    @property
    def partial(self) -> bool:
        return bool(self.failures)


class Session:
    """One run of a plan (harness.plan.Plan), its rows into `out` (None: in memory only, no file
    written, no workers' log kept). `job`: the MPI job whose ranks are the workers (None: forked
    workers). `sets`: the persistent worker sets (default harness.pool.WorkerSets; a test's stand-in)."""

    def __init__(self, out, reporter: Reporter | None = None, job=None, sets=None, head_start=None):
        self.out = out
        self.head_start = head_start  # the first process set, forked before the plan (harness.head_start)
        self.reporter = reporter or Reporter()
        self.job = job
        self.sets = sets
        self.results: Any = None
        self.failures: list[Failure] = []
        self.done: list[str] = []
        self.ended_well: set[tuple] = set()  # (scenario, its GPUs, mode) of the runs that ended without a failure
        self.lock = threading.Lock()  # the results, figures and seconds, fed from a round's threads (harness.rounds)
        self.resampler: Any = None  # the resampling pass (harness.resample), once it ran
        self.confirmed: set[tuple] = set()  # the run keys a suspect pair measured again on (replica 2 already)
        # runs of the resampling pass that failed: the first pass's answer is whole without them, so the run
        # completes; the header and a note name them, the workers' log keeps their tracebacks
        self.pass_failures: list[Failure] = []
        # the lane counters' proofs the run's processes made, by (GPU, counter): the later runs take them
        self.lane_proofs: dict[tuple[int, str], str] = {}
        self.lane_read_ms: float | None = None

    @property
    def rows(self) -> int:
        """The rows written so far."""
        return len(self.results) if self.results is not None else 0

    def run(self, plan) -> RunOutcome:
        """Run every scenario of `plan`, then write the final header and hand the file to the
        reporter while the workers and modes end. RunInterrupted (the file's status says which
        signal, where) or BenchError (the file could not be written) end it early."""
        from gpuipc_bench.harness.pool import WorkerSets
        from gpuipc_bench.results import ResultsFile, ResultsWriteError

        config, job = plan.config, self.job
        if self.sets is None:  # the persistent workers (the fork launcher's; fork-fresh and independent: none)
            self.sets = WorkerSets(config.worker_log or "",
                                   persistent=config.launcher == "fork" and not plan.independent,
                                   uuids=gpu_uuids(plan.machine))
        sets = self.sets
        if self.head_start is not None and job is None and sets.persistent:
            self.head_start.hand_to(sets, config.worker_log or "", config.timeout, plan.modes)
        launched = job.metadata() if job else {"launcher": config.launcher}
        if job is None and len(getattr(sets, "uuids", {})) > 1:  # (gpu.visible; read by the estimate's tests)
            launched[GPUS_SEEN_KEY] = "own: each process set's CUDA_VISIBLE_DEVICES names its GPUs alone"
        if job is None and getattr(sets, "persistent", False):  # (what starts processes: the estimate's tests read it)
            launched[OWN_PROCESSES_KEY] = ",".join(dict.fromkeys(
                s.name for s, _ in plan.runs if not shares_processes(s))) or "none"
        self.results = results = ResultsFile(self.out, {
            **run_header(config, plan.machine), **launched,
            **{f"note.{key}": text for key, text in (plan.mig_notes or {}).items()}})
        try:
            results.write(partial=True, status="running")
        except ResultsWriteError as exc:
            raise self._set_aside(exc) from None
        run_started = time.monotonic()  # (and the header's last rewrite)
        results.set_meta("seconds.startup", f"{process_seconds():.1f}")  # the command's start to the header
        results.set_meta("sampling.far_behind", f"a group every sample of which is over {FAR_BEHIND:g}x the best "
                                                f"median known at its size stops after {FAR_SAMPLES} samples, "
                                                f"unless they are still falling (each over {STILL_FALLING:.0%} faster "
                                                f"than the one before: a warm-up still going) or no figure known "
                                                f"lies between the best and it (it may be the next class)"
                         if not Counts.of(config).fixed else
                         f"off: a fixed count of {config.max_samples} samples a group")
        clean_end = False
        try:
            self._scenarios(plan, rewritten=run_started)
            sets.let_go()  # their contexts go down while the answer is written and rendered (end() reaps them)
            clean_end = True
        except ResultsWriteError as exc:
            # The results file could not be written (a full disk): raised by results.add() from inside the
            # workers' loop, which stopped them at once; `finally` ends them; the file is set aside.
            raise self._set_aside(exc) from None
        except (Interrupted, KeyboardInterrupt) as exc:
            signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
            scenario, at = getattr(exc, "scenario", ""), getattr(exc, "at", "")
            results.write(partial=True, status=f"{signal_name(signum)}{interrupted_where(scenario, at)} "
                                               f"({signal.Signals(signum).name})"
                                               + "".join(f"; {part}" for part in [self.status()] if part))
            results.close()
            raise RunInterrupted(signum, scenario, at, len(results)) from None
        except BaseException as exc:
            parts = [str(exc)] if isinstance(exc, BenchError) else []
            results.write(partial=True, status="failed: " + "; ".join(parts + [self.status()]).strip("; "))
            results.close()
            raise
        finally:
            if not clean_end:
                sets.end()  # every persistent worker (and the fork server) ends with the run, under every fault
        return self._end(plan, run_started)

    def _scenarios(self, plan, rewritten: float) -> None:
        """Every run of the plan (and the resweeps the first pass asks for), in its sharing mode."""
        config, results, sets, modes = plan.config, self.results, self.sets, list(plan.modes)
        known = KnownBest()  # the run's figures so far: what each later scenario's sampler compares with
        resweep = self._start_resweep(plan)
        mark("header written")
        current = None  # the mode of the scenario before: a mode left behind ends its busy neighbour
        if self.job is None:
            sets.prestart(dict.fromkeys(s for s, _ in plan.runs))
            # the analysis's imports while the workers measure (under MPI rank 0 measures: not there)
            preload.start()
        with self.reporter:
            runs = plan_runs(plan.runs, modes)  # the paths of a process set in a seeded order (not 'declared')
            queue = shuffle_paths(runs, config.order_seed if config.sample_order != "declared" else None)
            queue = schedule(queue, plan.rounds)  # disjoint pairs' headline runs at once (harness.rounds)
            proof = Proof()
            index = 0
            while True:
                if index == len(queue) and resweep is not None and resweep.suspects is None:
                    resweep.suspects = resweep.pairs()  # the first pass is done: pairs outside their class,
                    queue += self._confirms(resweep, plan)  # measured again on a fresh process set
                if index == len(queue) and resweep is not None:
                    queue += self._resweeps(resweep, plan)  # those outside there too: swept whole
                    resweep = None
                if index == len(queue):
                    break
                if isinstance(queue[index], Confirm):
                    for scenario, specs in queue[index].runs:
                        self.sets.retire(specs)  # its first pass's set, if any, leaves: this one is fresh
                        outcome = self._one(scenario, specs, None, plan, known, resweep, replica=CONFIRM_REPLICA)
                        self.confirmed.add(run_key(scenario, specs))
                        if outcome is not None and isinstance(outcome.error, WorkerLost):
                            return
                    index += 1
                    continue
                if isinstance(queue[index], Round):
                    outcomes = self._round(queue[index], plan, known, resweep, proof)
                    index += 1
                    if any(isinstance(o.error, WorkerLost) for o in outcomes if o is not None):
                        return
                    continue
                scenario, specs, mode = queue[index]
                index += 1
                current = self._follow(current, mode)
                outcome = self._one(scenario, specs, mode, plan, known, resweep)
                if outcome is None:
                    continue
                # partial until the clean end: a run killed now (SIGKILL) must not read as complete. The
                # rows are appended as they come; the header (status, seconds, notes) is rewritten at
                # most every REWRITE_S (a rewrite of the whole file between paths cost ~0.1 s each)
                if self.failures or time.monotonic() - rewritten >= REWRITE_S:
                    results.write(partial=True, status=self.status(running=True))
                    rewritten = time.monotonic()
                if isinstance(outcome.error, WorkerLost) and not plan.independent:
                    return  # a process died or went silent: the run ends (independent: its own processes only)
            if plan.independent:
                return
            if config.replicas > 1:
                self._replicas(plan, known, current, queue)
            else:
                self._resample(plan, known, current)

    def _replicas(self, plan, known: KnownBest, current, queue: list) -> None:
        """--replicas N: every run of the first pass measured again on N-1 fresh process sets, each
        pass its rows tagged with its replica; the mode the first pass ended in goes first (one mode
        switch fewer). No resampling pass follows: every group stands on N sets."""
        runs = []
        for item in queue:
            if isinstance(item, Round):
                runs += [run for pair in item.runs.values() for run in pair]
            elif not isinstance(item, Confirm):
                runs.append(item)
        runs.sort(key=lambda run: run[2] is not current)  # (stable: each mode's runs in the first pass's order)
        replicas = plan.config.replicas
        self.results.set_meta("sampling.budget", f"every run on {replicas} process sets (--replicas {replicas}); "
                                                 "no resampling pass")
        for replica in range(2, replicas + 1):
            self.sets.leave_all()  # this pass's sets are fresh: the ones before it leave while they start
            for scenario, specs, mode in runs:
                current = self._follow(current, mode)
                outcome = self._one(scenario, specs, mode, plan, known, None, replica=replica)
                if outcome is not None and isinstance(outcome.error, WorkerLost):
                    return

    def _follow(self, current, mode):
        """`mode` comes after `current`: a mode left behind ends its busy neighbour, its notes into
        the header. Returns the mode now current."""
        if mode is not current and current is not None:
            for note in current.leave():
                self.results.set_meta(f"note.sharing.{current.name}", note)
        return mode

    def _round(self, item, plan, known: KnownBest, resweep, proof) -> list:
        """A round of disjoint pairs (harness.rounds.run_round); its header keys after it."""
        def one(run, keep: bool, tee) -> Any:
            scenario, specs, mode = run
            return self._one(scenario, specs, mode, plan, known, resweep, keep=keep, tee=tee)

        outcomes = run_round(item, plan.rounds, proof, one, self.sets)
        for key, value in plan.rounds.metadata().items():
            self.results.set_meta(key, value)
        if item.proof and plan.rounds.together is not None:
            how = "their pairs at once" if plan.rounds.together else "one pair at a time"
            self.reporter.note(f"GPU pairs in rounds: {plan.rounds.proof}; the other rounds run {how} "
                               "(rounds.* in the header)")
        return outcomes

    def _resample(self, plan, known: KnownBest, current) -> None:
        """The resampling pass (harness.resample): the groups where a decision is open or can move,
        measured again on a fresh process set (replica 2) while the run's budget allows. Not under
        MPI (the job's ranks are its only processes)."""
        from gpuipc_bench.harness.resample import Resampler

        if self.job is not None:
            self.results.set_meta("sampling.budget", "the first pass only (an MPI job's ranks are its processes)")
            return
        state = {"mode": current, "fresh": False}

        def measure(scenario, specs, mode, config, replica):
            if not state["fresh"]:  # the first pass's persistent sets leave: the pass forks fresh ones
                self.sets.leave_all()
                state["fresh"] = True
            state["mode"] = self._follow(state["mode"], mode)
            failed = len(self.failures)
            outcome = self._one(scenario, specs, mode, plan, known, None, config, replica)
            if len(self.failures) > failed and not isinstance(getattr(outcome, "error", None), WorkerLost):
                self._pass_failed(self.failures.pop(), f"{run_label(scenario, specs, mode, plan)} #{replica}")
            return outcome

        self.resampler = Resampler(plan, self.results, self.reporter, process_seconds, plan.budget)
        self.resampler.done |= self.confirmed  # two replicas there already: not a third set
        self.resampler.run(measure)

    def _note(self, key: str, text: str) -> None:
        """A worker's note: a lane proof kept for the later runs (engine.lanes.PROOF_NOTE), never the
        header's; the lanes' own lines into the header as they are; the others as `note.<key>`."""
        import json

        from gpuipc_bench.engine.lanes import PROOF_NOTE

        with self.lock:
            if key.startswith(PROOF_NOTE):
                dev, _, counter = key[len(PROOF_NOTE):].partition(".")
                held = self.lane_proofs.get((int(dev), counter))
                # one with its kernel copies' figures (engine.lanes.kernel_proven) stays
                if held is None or json.loads(held).get("sm_overhead") is None \
                        or json.loads(text).get("sm_overhead") is not None:
                    self.lane_proofs[(int(dev), counter)] = text
                if "lanes.proven" not in self.results.metadata:
                    self.results.set_meta("lanes.proven", "once a run: each counter by the first process set that "
                                                          "reads it (NVLink's by a pair's); the later sets take its "
                                                          "proof (gpuipc_bench/engine/lanes.py)")
                return
            if key == "lanes.read_ms" and self.lane_read_ms is None:
                try:
                    self.lane_read_ms = float(text)
                except ValueError:
                    pass
            self.results.set_meta(key if key.startswith("lanes.") else f"note.{key}", text)

    def _pass_failed(self, failure: Failure, label: str) -> None:
        """A run of the resampling pass failed: what it measured stays (replica 2 rows), the run is not
        partial for it (the first pass measured every group), and the header and a note say so."""
        self.pass_failures.append(failure)
        said = "; ".join(filter(None, [self.results.metadata.get("sampling.failed", ""),
                                       f"{label}: {failure.error}"]))
        self.results.set_meta("sampling.failed", said)
        self.reporter.note(f"the resampling pass's {label} failed ({failure.error}); its decisions stay as the "
                           "first pass left them")

    def _one(self, scenario, specs, mode, plan, known: KnownBest, resweep, config=None, replica: int = 1,
             keep: bool = True, tee=None):
        """One scenario run in its mode: its rows into the file (`keep`; and to `tee`); its outcome
        (harness.launcher.Outcome), or None where its mode could not start (a failure, counted). `config`
        (default the plan's) and `replica`: a run of the resampling pass, its rows tagged with its process set."""
        from gpuipc_bench.machine import mig

        config, results, modes = config or plan.config, self.results, list(plan.modes)
        if mode is not None and hasattr(mode, "device"):
            mode.device = specs[0].device  # a busy neighbour goes on the pair's GPU
        label = run_label(scenario, specs, mode, plan) + (f" #{replica}" if replica > 1 else "")
        line = self.reporter.started(label, scenario.progress_total(config, specs))
        started = time.monotonic()
        mark("scenario", scenario.name, mode.name if mode is not None else "")
        lost = self.sets.ready_for(scenario, mode.name if mode is not None else None) if self.job is None else None
        if lost is not None:  # a worker died while idle: the run ends before its mode starts
            self.failures.append(Failure(scenario.name, lost.error, 0))
            self.reporter.failed(line)
            return lost
        try:
            env = start_mode(mode, results)
            mark("mode started", mode.name if mode is not None else "")
        except BenchError as exc:  # this mode cannot run: its scenarios fail, the others go on
            self.failures.append(Failure(scenario.name, exc, 0))
            self.reporter.failed(line)
            return None
        devices = tuple(spec.device for spec in specs)
        first = modes_for(scenario, specs, modes)[:1]
        borrow = mode is not None and bool(first) and first[0].name != mode.name and \
            (scenario.name, devices, first[0].name) in self.ended_well  # its host-link ceilings: engine.pair
        scenario_config = dataclasses.replace(
            config, known_best=() if plan.independent else known.rows(),
            # an independent plan's runs prove their own lanes (a check's: each run in its own processes)
            lane_proofs=() if plan.independent else tuple(sorted(self.lane_proofs.items())),
            lane_read_ms=None if plan.independent else self.lane_read_ms,
            stream_sizes=second_mode_stream_sizes(scenario, config, specs, modes, mode),
            host_ceilings_from=first[0].name if borrow else None)
        if scenario_config.stream_sizes is not None and replica == 1:
            results.set_meta(f"sampling.stream_sizes.{scenario.name}.{mode.name}",
                             ",".join(str(n) for n in scenario_config.stream_sizes))
        kept = second_mode_sizes(scenario, config, specs, modes, mode)
        if kept is not None and getattr(scenario, "only_sizes", None) is None:  # (a rerun keeps its own sizes)
            from gpuipc_bench.harness.classes import sized

            scenario = sized(scenario, kept)
            if replica == 1:
                results.set_meta(f"sampling.sizes.{scenario.name}.{mode.name}", ",".join(str(n) for n in kept))
        reporter = self.reporter
        delivered = 0

        resampling = scenario_config.only_groups is not None

        def on_row(row: dict) -> None:
            nonlocal delivered
            delivered += 1
            if resampling and row.get("metric") == "setup":
                return  # of the smaller ring of the sizes measured again: not a second size of the set-up cost
            if replica > 1:
                row = {**row, "replica": replica}
            with self.lock:
                if tee is not None:
                    tee(row)
                if not keep:  # the together pass of a round's proof: its evidence only
                    return
                results.add([row])
                known.add(row)
                if resweep is not None:
                    resweep.add(row)
                reporter.row(row)

        callbacks = dict(
            on_row=on_row,
            on_progress=lambda n: reporter.advance(line, n),
            on_status=lambda text: reporter.status(line, text),
            # the lane counters' proofs are the run's, not a scenario's (gpuipc_bench.engine.lanes)
            on_note=self._note,
        )
        try:
            if self.job is not None:  # the ranks are the workers
                outcome = self.job.run_scenario(scenario, scenario_config, specs, **callbacks)
            else:
                outcome = self.sets.run(scenario, scenario_config, specs,
                                        mode_name=mode.name if mode is not None else None, env=env, **callbacks)
        except BenchError as exc:  # independent: a run that raised (a lost MPI rank, a row the reporter
            if not plan.independent:  # could not keep) fails alone, its rows kept; else the run ends
                raise
            from gpuipc_bench.harness.launcher import Outcome

            outcome = Outcome(scenario.name, rows=delivered, error=exc)
        refused = mig.refusal(scenario.name, specs, outcome.error)
        if refused is not None:  # across MIG instances the driver said no: its words, not a failure
            results.set_meta(f"note.{refused[0]}", refused[1])
            reporter.note(refused[1])
            self.done.append(scenario.name)
        elif outcome.error is not None:
            self.failures.append(Failure(scenario.name, outcome.error, outcome.rows))
            reporter.failed(line)
        else:
            self.done.append(scenario.name)
            reporter.finished(line)
            self.ended_well.add((scenario.name, devices, mode.name if mode is not None else None))
        mark("scenario ended", scenario.name)
        with self.lock:  # summed over GPU pairs and modes (and over the pairs of a round, which overlap)
            spent = time.monotonic() - started + float(results.metadata.get(f"seconds.{scenario.name}", 0))
            results.set_meta(f"seconds.{scenario.name}", f"{spent:.1f}")
        return outcome

    def _end(self, plan, run_started: float) -> RunOutcome:
        """The clean end: the final header written, the file handed to the reporter while the workers
        are reaped and the modes end (the MPS daemon's quit and its reaping take ~1.4 s on an H100
        node), then the failed workers' tracebacks into the workers' log."""
        from gpuipc_bench.results import ResultsWriteError

        results, sets = self.results, self.sets
        closer = threading.Thread(target=end_workers_and_modes, args=(sets, plan.modes), name="gpuipc-bench-closer",
                                  daemon=True)
        status = self.status() or "nothing run"
        try:
            results.set_meta("worker_sets", str(sets.started))
            closer.start()  # the workers and the MPS daemon go down while the rows are analysed
            analysis = None
            resampler = self.resampler
            pending = resampler is not None and resampler.pending
            if pending or (self.out is not None and self.reporter.shows_summary):
                from gpuipc_bench.analysis import analyse

                analysis = analyse(results.frame, results.metadata)  # once: for what is left open and the summary
                mark("analysed")
            if pending:
                resampler.finish(analysis)
            results.set_meta("seconds.total", f"{time.monotonic() - run_started:.1f}")  # the clean end only
            # the user's clock: from the command's start (imports, probe, daemons) to this write; the summary after
            results.set_meta("seconds.wall", f"{process_seconds():.1f}")
            try:
                results.write(partial=bool(self.failures), status=status)
            except ResultsWriteError as exc:
                raise self._set_aside(exc) from None
            results.close()
            mark("results written")
            if self.out is not None:  # (kept in memory: no file, and no frame built for nothing)
                if analysis is not None:  # its header as written now (status, seconds, what is left open)
                    analysis = dataclasses.replace(analysis, meta=dict(results.metadata))
                self.reporter.written(results.frame, results.metadata, analysis)
            mark("summary shown")
        finally:
            if closer.ident is not None:
                closer.join()
                mark("closer joined")
            sets.end()  # (nothing left to do unless the closer failed)
            mark("sets ended")
            write_trace(f"parent-{os.getpid()}")
        # (no file: no log of its own)
        log = worker_log(plan.config, self.failures + self.pass_failures) if self.out is not None else ""
        return RunOutcome(self.out, len(results), list(self.failures), status, log, len({s.name for s, _ in plan.runs}))

    def _start_resweep(self, plan):
        """The run's estimate and, with --pairs all, its pairs' link classes into the header; a Resweep
        (harness.classes) where headline pairs may need their whole sweep, else None."""
        results = self.results
        results.set_meta("estimate.seconds", f"{plan.estimate:.1f}")
        for key, value in (plan.rounds.metadata() if plan.rounds is not None else {}).items():
            results.set_meta(key, value)
        if plan.pair_classes is None or plan.independent:
            return None
        for key, value in plan.pair_classes.metadata().items():
            results.set_meta(key, value)
        if not plan.pair_classes.headline:
            return None
        from gpuipc_bench.harness.classes import Resweep

        return Resweep(plan.pair_classes)

    def _confirms(self, resweep, plan) -> list:
        """A Confirm for each headline pair outside its class on the first pass: its headline runs again
        on a fresh process set (replica 2), said."""
        from gpuipc_bench.harness.classes import confirm_runs

        items = []
        for (a, b), why in resweep.suspects.items():
            self.reporter.note(f"GPU {a} → {b}: {why}; measuring it again on fresh processes")
            items.append(Confirm((a, b), confirm_runs(plan, (a, b))))
        return items

    def _resweeps(self, resweep, plan) -> list:
        """The runs that sweep whole each headline pair whose figures fall outside its class on the
        first pass and on a fresh process set, said and kept in the header (pairs.resweep.A>B: why);
        a pair inside on the fresh set is said and kept too (pairs.spared.A>B), not swept."""
        from gpuipc_bench.harness.estimate import END_S, START_S, estimate_seconds

        added = []
        whole, spared = resweep.confirmed()
        for (a, b), why in spared.items():
            self.results.set_meta(f"pairs.spared.{a}>{b}", why)
            self.reporter.note(f"GPU {a} → {b}: {why}: not swept whole")
        for (a, b), why in whole.items():
            runs = [(scenario, specs, None) for scenario, specs in plan.resweep_runs.get((a, b), [])]
            more = estimate_seconds(runs, plan.config, [], gpus=plan.machine.gpu_count) - START_S - END_S
            self.results.set_meta(f"pairs.resweep.{a}>{b}", why)
            self.reporter.note(f"GPU {a} → {b}: {why}; sweeping it whole (about {more:.0f} s more)")
            added += runs
        return added

    def _set_aside(self, error) -> BenchError:
        """The error to end the run with when the results file could not be written: the file, cut
        where the write failed, renamed to <name>.partial and named."""
        partial = self.results.set_aside()
        kept = f"; the rows written before it: {partial}" if partial else ""
        return BenchError(f"--out {self.out}: {error.reason.lower()}{kept}")

    def status(self, running: bool = False) -> str:
        """The file's status: 'completed: a,b; failed: c (why); running'."""
        parts = []
        if self.done:
            parts.append("completed: " + ",".join(dict.fromkeys(self.done)))
        if self.failures:
            parts.append("failed: " + "; ".join(f"{name} ({err})" for name, err, _ in self.failures))
        if running:
            parts.append("running")
        return "; ".join(parts)


def run_label(scenario, specs, mode, plan) -> str:
    """A scenario run's line: 'ipc', 'ipc 0>1', 'ipc GPU 0 · A>B' (MIG), 'ipc mps' (of several modes)."""
    from gpuipc_bench.machine import mig

    devices = {spec.device for spec in specs}
    label = scenario.name if len(devices) < 2 else f"{scenario.name} {specs[0].device}>{specs[-1].device}"
    if mig.is_mig_pair(specs):
        return f"{scenario.name} {mig.pair_label(specs, plan.machine)}"
    if mode is not None and len(plan.modes) > 1:
        label += f" {mode.name}"
    return label


def interrupted_where(scenario: str, at: str = "") -> str:
    """' during ipc 64 MiB' (the scenario and the size in flight when a signal came), or ''."""
    return f" during {scenario}{' ' + at if at else ''}" if scenario else ""


_IMPORTED = time.monotonic()


def process_seconds() -> float:
    """Seconds since this process started (Linux: /proc), else since this module was imported."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat, open("/proc/uptime", encoding="ascii") as up:
            started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
            return max(0.0, float(up.read().split()[0]) - started)
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


GPUS_SEEN_KEY = "workers.gpus_seen"
OWN_PROCESSES_KEY = "workers.own_processes"  # the scenarios that run in processes of their own (the rest: sets)


def gpu_uuids(machine) -> dict[int, str]:
    """Every GPU of the run by its number, for the sets' workers to see only their own
    (gpu.visible); {} on a node with MIG on (CUDA numbers its instances there, not its GPUs)."""
    if machine is None or any(getattr(gpu, "mig_mode", "") == "enabled" for gpu in machine.gpus):
        return {}
    return {gpu.index: gpu.uuid for gpu in machine.gpus}


CONFIRM_REPLICA = 2  # a suspect pair's headline runs again: a second process set (harness.resample's too)


def run_key(scenario, specs) -> tuple[str, str, str, str]:
    """A pair run's key as its rows name it (harness.resample's run keys): scenario, sharing, src, dst."""
    from gpuipc_bench.engine.scenario import sharing_mode

    devices = [spec.device for spec in specs]
    return scenario.name, sharing_mode(devices), str(devices[0]), str(devices[-1])


@dataclasses.dataclass
class Confirm:
    """A headline pair outside its class on the first pass, in the queue: its headline runs
    ((scenario, specs)) measured again on a fresh process set before a whole sweep is decided."""
    pair: tuple[int, int]
    runs: list


def end_workers_and_modes(sets, modes) -> None:
    """The closer thread's work at a run's clean end: every worker reaped, then every mode ended (the
    MPS daemon after its last client); the caller's finally ends both again, as at every fault."""
    try:
        sets.end()
        mark("closer: workers reaped")
        end_modes(modes)
        mark("closer: modes ended")
    except Exception:  # noqa: BLE001 - the main thread's own end_modes and sets.end() report it
        pass


def start_mode(mode, results) -> dict[str, str]:
    """Start a sharing mode on its first use (one MPS daemon per run); the environment its
    workers set. BenchError when it cannot start."""
    if mode is None:
        return {}
    mode.start()
    for key, value in mode.facts().items():
        results.set_meta(key, value)
    return mode.env()


def worker_log(config, failures) -> str:
    """The run's worker log with the failed workers' tracebacks added, or '' (and removed) when
    nothing was written to it."""
    path = config.worker_log
    if not path:
        return ""
    try:
        with open(path, "a") as log:
            for name, error, _ in failures:
                if isinstance(error, WorkerFailed) and error.traceback_text:
                    log.write(f"--- scenario {name}: {error}\n{error.traceback_text}\n")
    except OSError:
        return ""
    return "" if drop_if_empty(path) else path


def drop_if_empty(path: str) -> bool:
    """Remove the worker log when no worker wrote to it; True when it is gone."""
    try:
        if path and os.path.getsize(path) == 0:
            os.unlink(path)
    except OSError:
        pass
    return not path or not os.path.exists(path)
