"""The run loop of `gpuipc-bench run`: every scenario in its sharing mode and process set, the
results file kept current as rows arrive (nothing lost on a fault), and the end: the workers and
modes ended while the answer is written and rendered."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

import click
from rich.markup import escape

from gpuipc_bench.cli.console import signal_name, stdout_console
from gpuipc_bench.harness.header import run_header
from gpuipc_bench.errors import BenchError, Interrupted, WorkerFailed
from gpuipc_bench.harness.supervision import WorkerLost
from gpuipc_bench.modes import end_all as end_modes
from gpuipc_bench.engine.sampler import FAR_BEHIND, FAR_SAMPLES
from gpuipc_bench.harness.known import KnownBest
from gpuipc_bench.harness.plan import plan_runs, second_mode_stream_sizes, shuffle_paths
from gpuipc_bench.hooks.profiling import mark, write_trace


REWRITE_S = 5.0  # the results file's header is rewritten at most this often while a run goes on


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def run_plan(plan, config, machine, out, err, quiet, verbose, job=None, modes=(), notes=None, planned=None):
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from gpuipc_bench.machine import mig
    from gpuipc_bench.harness.pool import WorkerSets
    from gpuipc_bench.results import ResultsFile, ResultsWriteError

    # the persistent workers (the fork launcher's; --launcher fork-fresh: none, every scenario its own)
    sets = WorkerSets(config.worker_log or "", persistent=config.launcher == "fork")
    launched = job.metadata() if job else {"launcher": config.launcher}
    results = ResultsFile(out, {**run_header(config, machine), **launched,
                                **{f"note.{key}": text for key, text in (notes or {}).items()}})
    try:
        results.write(partial=True, status="running")
    except ResultsWriteError as exc:
        raise _set_aside(results, out, exc) from None
    run_started = rewritten = time.monotonic()
    results.set_meta("seconds.startup", f"{process_seconds():.1f}")  # the command's start to the header
    results.set_meta("sampling.far_behind", f"a group every sample of which is over {FAR_BEHIND:g}x the best "
                                            f"median known at its size stops after {FAR_SAMPLES} samples")
    known = KnownBest()  # the run's figures so far: what each later scenario's sampler compares with
    resweep = _start_resweep(planned, results)
    mark("header written")
    failures: list[tuple[str, BenchError, int]] = []
    done: list[str] = []
    # One line per scenario: what it is doing now, how far it is, the time spent and the time left.
    progress = Progress(TextColumn("{task.description:>8}"), BarColumn(bar_width=16), TimeElapsedColumn(),
                        TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[doing]}"),
                        console=err, disable=quiet, transient=False)
    current = None  # the mode of the scenario before: a mode left behind ends its busy neighbour
    clean_end = False
    try:
        if job is None:
            sets.prestart(dict.fromkeys(s for s, _ in plan))
        with progress:
            runs = plan_runs(plan, list(modes))  # the paths of a process set in a seeded order (not 'declared')
            queue = shuffle_paths(runs, config.order_seed if config.sample_order != "declared" else None)
            index = 0
            while True:
                if index == len(queue) and resweep is not None:  # the first pass is done: pairs outside their class
                    queue += _resweeps(resweep, planned, results, err, quiet)
                    resweep = None
                if index == len(queue):
                    break
                scenario, specs, mode = queue[index]
                index += 1
                if mode is not current:
                    if current is not None:
                        for note in current.leave():
                            results.set_meta(f"note.sharing.{current.name}", note)
                    current = mode
                if mode is not None and hasattr(mode, "device"):
                    mode.device = specs[0].device  # a busy neighbour goes on the pair's GPU
                devices = {spec.device for spec in specs}
                label = scenario.name if len(devices) < 2 else f"{scenario.name} {specs[0].device}>{specs[-1].device}"
                if mig.is_mig_pair(specs):
                    label = f"{scenario.name} {mig.pair_label(specs, machine)}"
                elif mode is not None and len(modes) > 1:
                    label += f" {mode.name}"
                task = progress.add_task(label, total=scenario.progress_total(config, specs), doing="")
                started = time.monotonic()
                mark("scenario", scenario.name, mode.name if mode is not None else "")
                try:
                    env = _start_mode(mode, results)
                    mark("mode started", mode.name if mode is not None else "")
                except BenchError as exc:  # this mode cannot run: its scenarios fail, the others go on
                    failures.append((scenario.name, exc, 0))
                    progress.update(task, description=f"[red]{label}")
                    continue
                scenario_config = dataclasses.replace(
                    config, known_best=known.rows(),
                    stream_sizes=second_mode_stream_sizes(scenario, config, specs, list(modes), mode))
                if scenario_config.stream_sizes is not None:
                    results.set_meta(f"sampling.stream_sizes.{scenario.name}.{mode.name}",
                                     ",".join(str(n) for n in scenario_config.stream_sizes))
                callbacks = dict(
                    on_row=lambda row: (results.add([row]), known.add(row), resweep and resweep.add(row)),
                    on_progress=lambda n, task=task: progress.advance(task, n),
                    on_status=lambda text, task=task: progress.update(task, doing=_fit(text, 34)),
                    on_note=lambda key, text: results.set_meta(f"note.{key}", text),
                )
                if job is not None:  # the ranks are the workers
                    outcome = job.run_scenario(scenario, scenario_config, specs, **callbacks)
                else:
                    outcome = sets.run(scenario, scenario_config, specs,
                                       mode_name=mode.name if mode is not None else None, env=env, **callbacks)
                refused = mig.refusal(scenario.name, specs, outcome.error)
                if refused is not None:  # across MIG instances the driver said no: its words, not a failure
                    results.set_meta(f"note.{refused[0]}", refused[1])
                    if not quiet:
                        err.print(f"[yellow]note[/]: {escape(refused[1])}", soft_wrap=True)
                    done.append(scenario.name)
                elif outcome.error is not None:
                    failures.append((scenario.name, outcome.error, outcome.rows))
                    progress.update(task, description=f"[red]{label}")
                else:
                    done.append(scenario.name)
                mark("scenario ended", scenario.name)
                spent = time.monotonic() - started + float(results.metadata.get(f"seconds.{scenario.name}", 0))
                results.set_meta(f"seconds.{scenario.name}", f"{spent:.1f}")  # summed over GPU pairs and modes
                # partial until the clean end: a run killed now (SIGKILL) must not read as complete. The
                # rows are appended as they come; the header (status, seconds, notes) is rewritten at
                # most every REWRITE_S (a rewrite of the whole file between paths cost ~0.1 s each)
                if failures or time.monotonic() - rewritten >= REWRITE_S:
                    results.write(partial=True, status=_status(done, failures, running=True))
                    rewritten = time.monotonic()
                if isinstance(outcome.error, WorkerLost):  # a process died or went silent: the run ends
                    break
        sets.let_go()  # their contexts go down while the answer is written and rendered (end() reaps them)
        clean_end = True
    except ResultsWriteError as exc:
        # The results file could not be written (a full disk): raised by results.add() from inside the
        # workers' loop, which stopped them at once; `finally` ends them; the file is set aside.
        raise _set_aside(results, out, exc) from None
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        where = f" during {exc.scenario}{' ' + exc.at if exc.at else ''}" if getattr(exc, "scenario", "") else ""
        results.write(partial=True, status=f"{signal_name(signum)}{where} ({signal.Signals(signum).name})"
                                           + "".join(f"; {part}" for part in [_status(done, failures)] if part))
        results.close()
        err.print(f"[red]{signal_name(signum)}[/]{escape(where)}; {len(results)} samples kept in "
                  f"{escape(str(out))}", soft_wrap=True)
        if quiet:
            print(out, flush=True)
        raise click.exceptions.Exit(128 + signum) from None
    except BaseException as exc:
        parts = [str(exc)] if isinstance(exc, BenchError) else []
        results.write(partial=True, status="failed: " + "; ".join(parts + [_status(done, failures)]).strip("; "))
        results.close()
        raise
    finally:
        if not clean_end:
            sets.end()  # every persistent worker (and the fork server) ends with the run, under every fault
    # The workers (told to leave at the loop's end) are reaped and the modes end (the MPS daemon's
    # quit and its reaping take ~1.4 s on an H100 node) while the answer is written and rendered.
    closer = threading.Thread(target=_end_workers_and_modes, args=(sets, modes), name="gpuipc-bench-closer",
                              daemon=True)
    try:
        results.set_meta("worker_sets", str(sets.started))
        results.set_meta("seconds.total", f"{time.monotonic() - run_started:.1f}")  # the clean end only
        # the user's clock: from the command's start (imports, probe, daemons) to this write; the summary after
        results.set_meta("seconds.wall", f"{process_seconds():.1f}")
        try:
            results.write(partial=bool(failures), status=_status(done, failures) or "nothing run")
        except ResultsWriteError as exc:
            raise _set_aside(results, out, exc) from None
        results.close()
        closer.start()
        if not quiet:
            from gpuipc_bench.report import render_run_summary

            render_run_summary(results.frame, results.metadata, stdout_console(), source=out)
    finally:
        if closer.ident is not None:
            closer.join()
        sets.end()  # (nothing left to do unless the closer failed)
        mark("sets ended")
        write_trace(f"parent-{os.getpid()}")
    for name, error, rows in failures:
        err.print(f"[red]error[/] in scenario {escape(name)} ({rows} samples kept): {escape(str(error))}",
                  soft_wrap=True)
        if verbose and isinstance(error, WorkerFailed) and error.traceback_text:
            err.print(error.traceback_text, markup=False, highlight=False)
    log = _worker_log(config, failures)
    rows = len(results)
    err.print(f"wrote {escape(str(out))} ({rows} rows{', partial' if failures else ''})"
              + (f"; the workers' output and tracebacks: {escape(log)}" if log else ""), soft_wrap=True)
    if quiet:
        print(out, flush=True)
    if failures:
        raise BenchError(f"{len(failures)} of {len(plan)} scenarios failed; samples taken before "
                         f"the failure are kept in {out}")


_IMPORTED = time.monotonic()


def process_seconds() -> float:
    """Seconds since this process started (Linux: /proc), else since this module was imported."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat, open("/proc/uptime", encoding="ascii") as up:
            started = int(stat.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
            return max(0.0, float(up.read().split()[0]) - started)
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


def _start_resweep(planned, results):
    """The run's estimate and, with --pairs all, its pairs' link classes into the header; a Resweep
    (harness.classes) where headline pairs may need their whole sweep, else None."""
    if planned is None:
        return None
    results.set_meta("estimate.seconds", f"{planned.estimate:.1f}")
    if planned.pair_classes is None:
        return None
    for key, value in planned.pair_classes.metadata().items():
        results.set_meta(key, value)
    if not planned.pair_classes.headline:
        return None
    from gpuipc_bench.harness.classes import Resweep

    return Resweep(planned.pair_classes)


def _resweeps(resweep, planned, results, err, quiet) -> list:
    """The runs that sweep whole each headline pair whose figures fall outside its class, said and
    kept in the header (pairs.resweep.A>B: why)."""
    added = []
    for (a, b), why in resweep.pairs().items():
        results.set_meta(f"pairs.resweep.{a}>{b}", why)
        if not quiet:
            err.print(f"[yellow]note[/]: GPU {a} → {b}: {escape(why)}; sweeping it whole", soft_wrap=True)
        added += [(scenario, specs, None) for scenario, specs in planned.resweep_runs.get((a, b), [])]
    return added


def _set_aside(results, out, error) -> BenchError:
    """The error to end the run with when the results file could not be written: the file, cut
    where the write failed, renamed to <name>.partial and named."""
    partial = results.set_aside()
    kept = f"; the rows written before it: {partial}" if partial else ""
    return BenchError(f"--out {out}: {error.reason.lower()}{kept}")


def _end_workers_and_modes(sets, modes) -> None:
    """The closer thread's work at a run's clean end: every worker reaped, then every mode ended (the
    MPS daemon after its last client); the caller's finally ends both again, as at every fault."""
    try:
        sets.end()
        end_modes(modes)
    except Exception:  # noqa: BLE001 - the main thread's own end_modes and sets.end() report it
        pass


def _start_mode(mode, results) -> dict[str, str]:
    """Start a sharing mode on its first use (one MPS daemon per run); the environment its
    workers set. BenchError when it cannot start."""
    if mode is None:
        return {}
    mode.start()
    for key, value in mode.facts().items():
        results.set_meta(key, value)
    return mode.env()


def _worker_log(config, failures) -> str:
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


def _status(done, failures, running=False) -> str:
    parts = []
    if done:
        parts.append("completed: " + ",".join(dict.fromkeys(done)))
    if failures:
        parts.append("failed: " + "; ".join(f"{name} ({err})" for name, err, _ in failures))
    if running:
        parts.append("running")
    return "; ".join(parts)
