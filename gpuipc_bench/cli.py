"""The command line: list, info, run, report. A thin layer: parse, validate, hand over.

Progress and notes go to stderr, results to stdout. Every BenchError, and every
complaint of click's about the command line, becomes one `Error:` line and an exit
code (2 for bad input); tracebacks only with --verbose. SIGINT, SIGTERM and SIGHUP end
any command at once with 130, 143 or 129, keeping what was measured.
"""

from __future__ import annotations

import codecs
import dataclasses
import datetime
import difflib
import os
import re
import shlex
import signal
import socket
import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from gpuipc_bench import __version__
from gpuipc_bench.config import BOUNDS, RunConfig, bound_problem, check_memory, check_writable
from gpuipc_bench.errors import BenchError, Interrupted, UsageError, WorkerFailed
from gpuipc_bench.sizes import format_size, parse_sizes


def _stdout() -> Console:
    return Console(highlight=False, soft_wrap=False)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


class Bounded(click.ParamType):
    """A number within config.BOUNDS[bound]: one message for too small, too large, NaN or
    not a number. A new bounded option is a line in BOUNDS and `type=Bounded("name")`."""

    def __init__(self, bound: str, kind: type = int):
        self.bound, self.kind = bound, kind
        low, high, _ = BOUNDS[bound]
        self.name = f"{low:g}..{high:g}"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = self.kind(str(value).strip())
            except (ValueError, OverflowError):
                self.fail(f"{value!r} is not a {'whole number' if self.kind is int else 'number'}", param, ctx)
        problem = bound_problem(self.bound, number)
        if problem:
            self.fail(problem, param, ctx)
        return number


class SizesType(click.ParamType):
    name = "SIZES"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        try:
            return parse_sizes(value)
        except UsageError as e:
            self.fail(str(e), param, ctx)


# A GPU or MIG instance by UUID: GPU-<uuid>, MIG-<uuid>, or the older MIG-GPU-<uuid>/<gi>/<ci>.
UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z/-]+$")


def _select_by_uuid(devices):
    """UUIDs given to --devices: (indices 0..n-1, value for CUDA_VISIBLE_DEVICES); else (devices, None).
    The parent never initialises CUDA, so the forked workers see only these devices."""
    if not devices or not isinstance(devices[0], str):
        return devices, None
    return tuple(range(len(devices))), ",".join(devices)


class DevicesType(click.ParamType):
    name = "DEVICES"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        items = [item.strip() for item in str(value).split(",")]
        if all(UUID_RE.match(item) for item in items):
            if len(set(items)) != len(items):
                self.fail(f"'{value}' names a device twice", param, ctx)
            return tuple(items)
        try:
            devices = tuple(int(item) for item in items)
        except ValueError:
            self.fail(f"'{value}' is not a comma-separated list of GPU indices (e.g. 0 or 0,1) "
                      "or of GPU/MIG UUIDs (see gpuipc-bench info)", param, ctx)
        if any(d < 0 for d in devices):
            self.fail(f"'{value}': GPU indices start at 0", param, ctx)
        if len(set(devices)) != len(devices):
            self.fail(f"'{value}' names a GPU twice", param, ctx)
        return devices


class PairsType(click.ParamType):
    """--pairs: 'all', or ordered GPU pairs 'A-B' separated by commas ('0-1,1-0,0-2')."""

    name = "PAIRS"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple) or value == "all":
            return value
        pairs = []
        for item in str(value).split(","):
            a, sep, b = item.strip().partition("-")
            if not sep or not a.isdigit() or not b.isdigit():
                self.fail(f"'{item.strip()}' is not a pair of GPU indices like 0-1 (or give 'all')", param, ctx)
            if a == b:
                self.fail(f"'{item.strip()}' names one GPU twice: a pair is two GPUs", param, ctx)
            pairs.append((int(a), int(b)))
        if len(set(pairs)) != len(pairs):
            self.fail(f"'{value}' names a pair twice", param, ctx)
        return tuple(pairs)


class BenchCommandError(click.ClickException):
    """A BenchError shown the click way: 'Error: ...' on stderr and its exit code."""

    def __init__(self, error: BenchError):
        super().__init__(str(error))
        self.exit_code = error.exit_code


def _one_line(error: click.UsageError) -> click.UsageError:
    """click's complaint about the command line as one 'Error:' line naming the option
    (no usage block): exit code 2."""
    if isinstance(error, click.exceptions.NoArgsIsHelpError):
        return error  # shows the help
    return click.UsageError(error.format_message())


SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _end_on_signals():
    """From here on SIGINT, SIGTERM and SIGHUP raise Interrupted where the parent is (once:
    a second signal while cleaning up is ignored, so that the cleanup finishes). SIGHUP
    left ignored (nohup) stays ignored. Returns the function that restores the handlers."""
    received: list[int] = []

    def handler(signum, frame):
        if received:
            return
        received.append(signum)
        raise Interrupted(signum)

    previous = {}
    for signum in SIGNALS:
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        previous[signum] = signal.signal(signum, handler)

    def restore():
        for signum, old in previous.items():
            signal.signal(signum, old)

    return restore


def _signal_name(signum: int) -> str:
    return {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}.get(
        signum, f"signal {signum}")


class BenchGroup(click.Group):
    """Turns our errors, click's and signals into messages and exit codes, for every command."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:
            raise _one_line(e) from None

    def invoke(self, ctx):
        restore = _end_on_signals()
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            raise _one_line(e) from None
        except BenchError as e:
            raise BenchCommandError(e) from None
        except (Interrupted, KeyboardInterrupt) as e:
            signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
            _stderr().print(f"[red]{_signal_name(signum)}[/]")
            sys.exit(128 + signum)
        finally:
            restore()


@click.group(cls=BenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuipc-bench")
def cli():
    """Measure the ways of moving data between processes on one GPU node.

    \b
    Paths: cudaMemcpy staging through host memory, CUDA IPC mapping, host mmap of
    pinned memory, peer access between GPUs, and a CPU-only shared-memory baseline.
    Each runs across forked worker processes, verified, next to the hardware
    ceiling measured in the same run.

    \b
    gpuipc-bench list                 which scenarios can run here, and why not
    gpuipc-bench info                 GPUs, links, driver and CUDA versions
    gpuipc-bench run                  every scenario that can run here
    gpuipc-bench run -s ipc           one scenario
    gpuipc-bench report RUN.csv       summary tables of a results file
    """


def _scenarios():
    from gpuipc_bench.scenarios import SCENARIOS

    return SCENARIOS


@cli.command("list")
def list_cmd():
    """List the scenarios and whether each can run on this machine (and if not, why)."""
    from rich.table import Table

    from gpuipc_bench.machine import probe

    machine = probe()
    table = Table(title="scenarios", title_justify="left")
    for column in ("scenario", "what it measures", "GPUs", "workers", "runs here"):
        table.add_column(column)
    for scenario in _scenarios().values():
        reason = scenario.waive_reason(machine)
        workers = f"{scenario.min_workers}" if scenario.min_workers == scenario.max_workers \
            else f"{scenario.min_workers}-{scenario.max_workers}"
        here = "[green]yes[/]" if reason is None else f"[yellow]no[/]: {escape(reason)}"
        if not scenario.in_default_run:
            here += " (not in the default run: name it with -s)"
        table.add_row(scenario.name, scenario.summary, str(scenario.gpus_needed), workers, here)
    _stdout().print(table)


@cli.command()
def info():
    """Describe this machine: CPU, GPUs, PCIe and NVLink topology, MIG/MPS, driver and CUDA."""
    from gpuipc_bench.machine import probe, render_info

    render_info(probe(), _stdout())


@cli.command()
@click.option("--scenario", "-s", "scenario_names", multiple=True, metavar="NAME",
              help="Scenario to run (repeatable). Default: every scenario that can run here.")
@click.option("--sizes", type=SizesType(), default=None,
              help="Message sizes: a range doubling from A to B (4KiB..1GiB), with a step "
                   "(4..1G:x4), or a list (4K,64K,1M). K/M/G are powers of 1024, kB/MB/GB of 1000. "
                   "Default: 4 B..256 MiB in steps of 4 (host: up to 16 MiB).")
@click.option("--quick", "preset", flag_value="quick", default=None,
              help="3 sizes (4 KiB, 1 MiB, 64 MiB), 3 samples per group after 1 warm-up, 2 processes "
                   "in sharing. Every size is ranked: 3 samples a side decide when they do not overlap "
                   "(the range of 3 covers the median 75% of the time); the rest are shown undecided.")
@click.option("--thorough", "preset", flag_value="thorough",
              help="The sweep up to 1 GiB (host: 64 MiB), 20 samples per group after 3 warm-up samples.")
@click.option("--iterations", "-n", type=Bounded("iterations"), default=None, metavar="N",
              help="Exactly N timed samples per group (turns the adaptive count off).")
@click.option("--min-samples", type=Bounded("min_samples"), default=None,
              help="Timed samples per group at least; more are taken until the median's 95% interval "
                   "is within +-1% (12 when the spread is wide), up to --max-samples. [default: 6]")
@click.option("--max-samples", type=Bounded("max_samples"), default=None,
              help="Timed samples per group at most. [default: 20]")
@click.option("--warmup", type=Bounded("warmup"), default=None,
              help="Untimed samples per group before the timed ones (each also queues 2 untimed "
                   "operations before its start event). [default: 1]")
@click.option("--devices", type=DevicesType(), default=None,
              help="GPUs to use: CUDA indices (0 or 0,1), or GPU/MIG UUIDs as `info` lists them "
                   "(MIG-..., run with CUDA_VISIBLE_DEVICES set to them). Default: GPU 0 (and 1 for peer).")
@click.option("--workers", type=Bounded("workers"), default=None,
              help="Worker processes per scenario, where the scenario allows more than 2.")
@click.option("--out", "-o", type=click.Path(dir_okay=True, path_type=Path), default=None,
              help="CSV file to write. Default: results/<UTC time>-<host>.csv")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@click.option("--chunk", "chunk", type=SizesType(), default=None,
              help="Chunk size of pipelined staging (default 16MiB; a message is cut into at most 64).")
@click.option("--timeout", type=Bounded("timeout", float), default=60.0, show_default=True,
              help="Seconds a worker may go without progress before the run is ended (a long "
                   "phase that makes progress is never cut short).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary; just the CSV path.")
@click.option("--verbose", "-v", is_flag=True, help="Show worker tracebacks on failure.")
@click.option("--plot", "plot", type=click.Path(path_type=Path), default=None, metavar="DIR|FILE.png",
              help="Also draw the run's plots (bandwidth, latency, setup costs) into a folder, or the "
                   "bandwidth figure into FILE.png/.svg and the others beside it.")
@click.option("--pairs", type=PairsType(), default=None, metavar="all|A-B,...",
              help="Run each GPU pair scenario (peer, ipc, vmm, mempool, staging, ...) once for every ordered "
                   "pair of GPUs ('all': every pair of this node) or for the pairs given (0-1,1-0): producer on "
                   "A, consumer on B. Default: one pair, as --devices says.")
@click.option("--launcher", type=click.Choice(["fork", "mpi"]), default=None,
              help="How the workers start: 'fork' (this process forks them) or 'mpi' (they are the ranks of "
                   "`mpirun -np N` / `srun -n N`; rank 0 writes the CSV; one worker per rank, so N must be "
                   "what a scenario takes, 2 for the GPU pairs). Default: mpi when started by mpirun or srun.")
def run(scenario_names, sizes, preset, iterations, min_samples, max_samples, warmup, devices, workers, out, force,
        chunk, timeout, quiet, verbose, plot=None, launcher=None, pairs=None):
    """Run scenarios across forked workers and write one tidy CSV (one row per sample).

    Where there is no GPU, the GPU scenarios are skipped with a note and the host
    baseline runs. Naming a GPU scenario with --scenario on such a machine is bad
    input (exit 2).
    """
    from gpuipc_bench import mpi_launch

    job = None
    if mpi_launch.resolve_launcher(launcher) == "mpi":
        job = mpi_launch.Job.start()
        if job.rank != 0:  # a worker: rank 0 sends each scenario (and says when to stop)
            raise click.exceptions.Exit(job.serve())
    try:
        _run(scenario_names, sizes, preset, iterations, min_samples, max_samples, warmup, devices, workers, out,
             force, chunk, timeout, quiet, verbose, plot, job, pairs)
    except mpi_launch.RanksLost as exc:  # the CSV is written: end the job with mpirun's own abort
        _stderr().print(f"[red]error[/]: {escape(str(exc))}; ending the MPI job (MPI_Abort)", soft_wrap=True)
        job.abort(1)  # type: ignore[union-attr]
    finally:
        if job is not None:
            job.stop_others()


def _run(scenario_names, sizes, preset, iterations, min_samples, max_samples, warmup, devices, workers, out,
         force, chunk, timeout, quiet, verbose, plot, job, pairs=None):
    from gpuipc_bench.machine import probe

    if pairs is not None and devices:
        raise UsageError("--pairs and --devices both choose the GPUs: give one of them")
    devices, visible = _select_by_uuid(devices)
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    try:
        registry = _scenarios()
        names = _resolve_names(scenario_names, registry)
        if job is not None:
            if workers is not None and workers != job.size:
                raise UsageError(f"--workers {workers}: under MPI each rank is one worker, and the job has "
                                 f"{job.size} ranks")
            workers = job.size
        config = RunConfig(
            scenarios=tuple(names), sizes=sizes, iterations=iterations, preset=preset or "",
            **_sample_counts(preset, min_samples, max_samples, warmup),
            devices=devices, workers=workers, timeout=timeout, launcher="mpi" if job else "fork",
            **({"chunk_bytes": _single_size(chunk, "--chunk")} if chunk else {}),
        )
        out = out or _default_out()
        check_writable(out, force)

        machine = probe()
        if job is not None and devices is None:
            config = dataclasses.replace(config, devices=job.devices(machine.gpu_count))
        _stop_stale_mps(_stderr())
        if visible and machine.gpu_count < len(devices):
            raise UsageError(f"--devices {visible}: CUDA sees {machine.gpu_count} of these devices "
                             f"({machine.cuda_error or 'one MIG instance per process at most'}); "
                             "gpuipc-bench info lists the GPU and MIG UUIDs")
        if devices:
            machine.check_devices(devices)
        plan, waived = _plan(config, registry, machine, explicit=bool(scenario_names), job=job)
        if pairs is not None:
            plan = _plan_pairs(plan, config, machine, pairs)
        check_memory(plan, config, machine)
        err = _stderr()
        if waived and not quiet:
            by_reason: dict[str, list[str]] = {}
            for name, reason in waived:
                by_reason.setdefault(reason, []).append(name)
            for reason, names in by_reason.items():  # one line per reason: "skipped ipc, mmap: needs a GPU"
                err.print(f"[yellow]skipped[/] {', '.join(names)}: {escape(reason)}", soft_wrap=True)

        if plot is not None:
            from gpuipc_bench.plots import check_plot_dest

            check_plot_dest(plot)
        try:
            _run_plan(plan, config, machine, out, err, quiet, verbose, job)
        except BenchError:
            if plot is not None:
                _plot_run(out, plot, err, quiet, failed=True)  # the samples taken before the failure
            raise
        if plot is not None:
            _plot_run(out, plot, err, quiet)
    finally:
        if visible:
            if previous is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = previous


def _plot_run(out: Path, plot: Path, err, quiet: bool, failed: bool = False) -> None:
    """Draw the plots of the run just written to `out`."""
    from gpuipc_bench.plots import save_plots
    from gpuipc_bench.results import read_results

    try:
        frame, meta = read_results(out)
        if frame.empty:
            return
        written = save_plots(frame, meta, plot, Path(out).stem)
    except BenchError as e:
        if not failed:
            raise
        err.print(f"[yellow]no plots[/]: {e}", soft_wrap=True)
        return
    if not quiet:
        err.print("plots: " + ", ".join(str(p) for p in written), soft_wrap=True)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _sample_counts(preset, min_samples, max_samples, warmup) -> dict:
    """The sample counts: as given, else the preset's, else the defaults (6 to 20, 1 warm-up)."""
    from gpuipc_bench.scenario import PRESETS

    low, high, warm = PRESETS.get(preset or "", (6, 20, 1))
    return dict(min_samples=low if min_samples is None else min_samples,
                max_samples=high if max_samples is None else max_samples,
                warmup=warm if warmup is None else warmup)


def _single_size(sizes: tuple[int, ...], option: str) -> int:
    if len(sizes) != 1:
        raise UsageError(f"{option} takes one size, not a list or range")
    return sizes[0]


def _resolve_names(requested, registry) -> list[str]:
    for name in requested:
        if name not in registry:
            close = difflib.get_close_matches(name.lower(), registry, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; choose from {', '.join(registry)}"
            raise UsageError(f"--scenario {name}: no such scenario{hint}")
    # With no --scenario: every scenario of the default run (a study such as 'handles' is only run by name).
    return list(dict.fromkeys(requested)) or [name for name, s in registry.items() if s.in_default_run]


def _plan(config, registry, machine, explicit, job=None):
    """The scenarios to run with their workers, and the ones waived with a reason."""
    plan, waived = [], []
    for name in config.scenarios:
        scenario = registry[name]
        reason = scenario.waive_reason(machine)
        if reason is None and job is not None:
            reason = _mpi_reason(scenario, job)
        if reason is not None:
            if explicit:
                raise UsageError(f"--scenario {name}: cannot run here: {reason}")
            waived.append((name, reason))
            continue
        if config.workers is not None and not scenario.min_workers <= config.workers <= scenario.max_workers:
            given = f"the MPI job has {config.workers} ranks" if job else f"--workers is {config.workers}"
            if explicit or len(config.scenarios) == 1:
                raise UsageError(f"{'mpirun -np' if job else '--workers'} {config.workers}: scenario {name} takes "
                                 f"{scenario.min_workers} to {scenario.max_workers} workers")
            waived.append((name, f"takes {scenario.min_workers} to {scenario.max_workers} workers, {given}"))
            continue
        plan.append((scenario, scenario.workers(config, machine)))
    if not plan:
        raise UsageError("nothing to run: every scenario was skipped (see above)")
    return plan, waived


def _plan_pairs(plan, config, machine, pairs):
    """Each GPU pair scenario of the plan once per ordered pair of GPUs (producer, consumer)."""
    from gpuipc_bench.pair import PairScenario

    if pairs == "all":
        if machine.gpu_count < 2:
            raise UsageError(f"--pairs all: this machine has {machine.gpu_count} GPU(s), no pair of two")
        pairs = tuple((a, b) for a in range(machine.gpu_count) for b in range(machine.gpu_count) if a != b)
    for a, b in pairs:
        if max(a, b) >= machine.gpu_count:
            raise UsageError(f"--pairs {a}-{b}: GPU {max(a, b)} does not exist (this machine has "
                             f"{machine.gpu_count})")
    expanded = []
    for scenario, specs in plan:
        if isinstance(scenario, PairScenario):
            expanded += [(scenario, scenario.workers(dataclasses.replace(config, devices=pair), machine))
                         for pair in pairs]
        else:
            expanded.append((scenario, specs))
    return expanded


def _mpi_reason(scenario, job) -> str | None:
    """Why a scenario cannot run with MPI ranks as its workers, or None."""
    if not job.one_node():
        hosts = ", ".join(dict.fromkeys(job.hosts))
        return (f"its workers meet in a shared-memory segment, and the MPI job spans hosts {hosts}: "
                "no path across nodes is measured yet")
    return scenario.mpi_waiver or None


def _default_out() -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("results") / f"{stamp}-{socket.gethostname()}.csv"


def _metadata(config: RunConfig, machine) -> dict[str, str]:
    from gpuipc_bench.results import SCHEMA_VERSION

    meta = {
        "tool_version": __version__,
        "schema_version": str(SCHEMA_VERSION),
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "gpuipc-bench " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "scenarios": ",".join(config.scenarios),
        "min_samples": str(config.min_samples),
        "max_samples": str(config.max_samples),
        "warmup": str(config.warmup),
        "chunk_bytes": str(config.chunk_bytes),
        "timeout": f"{config.timeout:g}",
    }
    meta.update(machine.metadata())
    meta.update(path_facts())
    return meta


def path_facts() -> dict[str, str]:
    """The facts of every path the registry knows, for the CSV header (gpuipc_bench.paths)."""
    from gpuipc_bench.paths import CEILING, to_metadata

    return to_metadata([p for s in _scenarios().values() for p in s.paths] + [CEILING])


def _run_plan(plan, config, machine, out, err, quiet, verbose, job=None):
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from gpuipc_bench.launcher import run_scenario
    from gpuipc_bench.results import ResultsFile

    if job is not None:
        run_scenario = job.run_scenario  # noqa: F811 - the ranks are the workers
    results = ResultsFile(out, {**_metadata(config, machine), **(job.metadata() if job else {"launcher": "fork"})})
    results.write(partial=True, status="running")
    failures: list[tuple[str, BenchError, int]] = []
    done: list[str] = []
    # One line per scenario: what it is doing now, how far it is, the time spent and the time left.
    progress = Progress(TextColumn("{task.description:>8}"), BarColumn(bar_width=16), TimeElapsedColumn(),
                        TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[doing]}"),
                        console=err, disable=quiet, transient=False)
    try:
        with progress:
            for scenario, specs in plan:
                devices = {spec.device for spec in specs}
                label = scenario.name if len(devices) < 2 else f"{scenario.name} {specs[0].device}>{specs[-1].device}"
                task = progress.add_task(label, total=scenario.progress_total(config, specs), doing="")
                started = time.monotonic()
                outcome = run_scenario(
                    scenario, config, specs,
                    on_row=lambda row: results.add([row]),
                    on_progress=lambda n, task=task: progress.advance(task, n),
                    on_status=lambda text, task=task: progress.update(task, doing=_fit(text, 34)),
                    on_note=lambda key, text: results.set_meta(f"note.{key}", text),
                )
                if outcome.error is not None:
                    failures.append((scenario.name, outcome.error, outcome.rows))
                    progress.update(task, description=f"[red]{scenario.name}")
                else:
                    done.append(scenario.name)
                spent = time.monotonic() - started + float(results.metadata.get(f"seconds.{scenario.name}", 0))
                results.set_meta(f"seconds.{scenario.name}", f"{spent:.1f}")  # summed over GPU pairs
                results.write(partial=bool(failures), status=_status(done, failures, running=True))
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        where = f" during {exc.scenario}{' ' + exc.at if exc.at else ''}" if getattr(exc, "scenario", "") else ""
        results.write(partial=True, status=f"{_signal_name(signum)}{where} ({signal.Signals(signum).name})"
                                           + "".join(f"; {part}" for part in [_status(done, failures)] if part))
        results.close()
        err.print(f"[red]{_signal_name(signum)}[/]{escape(where)}; {len(results)} samples kept in "
                  f"{escape(str(out))}", soft_wrap=True)
        if quiet:
            print(out, flush=True)
        raise click.exceptions.Exit(128 + signum) from None
    except BaseException as exc:
        parts = [str(exc)] if isinstance(exc, BenchError) else []
        results.write(partial=True, status="failed: " + "; ".join(parts + [_status(done, failures)]).strip("; "))
        results.close()
        raise
    results.write(partial=bool(failures), status=_status(done, failures) or "nothing run")
    results.close()

    if not quiet:
        from gpuipc_bench.report import render_run_summary

        render_run_summary(results.frame, results.metadata, _stdout(), source=out)
    for name, error, rows in failures:
        err.print(f"[red]error[/] in scenario {escape(name)} ({rows} samples kept): {escape(str(error))}",
                  soft_wrap=True)
        if verbose and isinstance(error, WorkerFailed) and error.traceback_text:
            err.print(error.traceback_text, markup=False, highlight=False)
    rows = len(results)
    err.print(f"wrote {escape(str(out))} ({rows} rows{', partial' if failures else ''})", soft_wrap=True)
    if quiet:
        print(out, flush=True)
    if failures:
        raise BenchError(f"{len(failures)} of {len(plan)} scenarios failed; samples taken before "
                         f"the failure are kept in {out}")


def _status(done, failures, running=False) -> str:
    parts = []
    if done:
        parts.append("completed: " + ",".join(dict.fromkeys(done)))
    if failures:
        parts.append("failed: " + "; ".join(f"{name} ({err})" for name, err, _ in failures))
    if running:
        parts.append("running")
    return "; ".join(parts)


def _stop_stale_mps(err) -> None:
    """Stop any private MPS daemon an earlier run left behind (its guard was killed too), and say so."""
    from gpuipc_bench import mps

    for note in mps.stop_stale_daemons():
        err.print(f"[yellow]note[/]: {escape(note)}", soft_wrap=True)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "csv", "json"]), default="table",
              show_default=True,
              help="table: for the terminal; markdown: a compact summary to paste into a GitHub issue; "
                   "csv, json: the summary (median, spread, fraction of the ceiling per group) for scripts.")
@click.option("--plot", "plot", type=click.Path(path_type=Path), default=None, metavar="DIR|FILE.png",
              help="Draw bandwidth and latency against size, and the setup costs: into a folder "
                   "(RUN-bandwidth.png, RUN-latency.png, RUN-setup.png), or the bandwidth figure into "
                   "FILE.png/.svg and the others beside it.")
@click.option("--plot-format", "plot_format", type=click.Choice(["png", "svg"]), default=None,
              help="Image format of --plot into a folder (default png).")
@click.option("--amortise-over", "amortise_over", type=click.IntRange(min=1), default=1000, show_default=True,
              metavar="N", help="Break-even: the setup cost is paid once per N transfers (and, apart, every transfer).")
@click.option("--min-effect", "min_effect", type=click.FloatRange(0, 100), default=2.0, show_default=True,
              metavar="PCT", help="Verdict: medians less than PCT% apart (or than the processes' own measured "
                                  "offset) are never 'faster'; figures whose ratio's interval lies within it "
                                  "are 'the same'; the rest are 'undecided'.")
@click.option("--detailed", is_flag=True, help="Every column (samples, intervals in µs, MAD, verified) and "
                                               "every figure of each warning.")
@click.option("--summary", "summary", is_flag=True,
              help="The one-screen answer `run` prints at its end: a line per decision, set-up costs, "
                   "confidence, the warnings that could change a line.")
def report(files, fmt, plot, plot_format, amortise_over, min_effect, detailed, summary):
    """Summarise results CSVs: median and its 95% interval per path, variant and size, against
    the ceiling; the fastest path per size (ties decided by a test on the samples) and the
    break-even of the paths with a setup cost.

    \b
    Several files: each run, then the ratios of their medians (run N / run 1), with a
    warning when the machines differ (GPUs, driver, links).
    \b
    gpuipc-bench report RUN.csv                      tables in the terminal
    gpuipc-bench report RUN.csv --format markdown    to paste into an issue
    gpuipc-bench report RUN.csv --plot plots/        PNG figures
    gpuipc-bench report H100.csv H200.csv            side by side, with ratios
    """
    from gpuipc_bench.report import (
        check_reportable, load_runs, render_comparison_terminal, render_csv, render_json, render_markdown_runs,
        render_terminal,
    )

    if plot_format and plot is None:
        raise UsageError("--plot-format needs --plot DIR")
    if plot is not None:
        from gpuipc_bench.plots import check_plot_dest, plot_targets

        check_plot_dest(plot)
        plot_targets(plot, "run", plot_format, len(files) > 1)  # refuses a bad suffix before any work
    runs = load_runs(files)
    for path, (frame, meta) in zip(files, runs):
        check_reportable(path, frame, meta)
    sources = [str(path) for path in files]
    options = {"min_effect": min_effect / 100, "amortise_over": amortise_over}
    if fmt == "markdown":
        click.echo(render_markdown_runs(runs, sources, **options))
    elif fmt == "csv":
        click.echo(render_csv(runs, sources), nl=False)
    elif fmt == "json":
        click.echo(render_json(runs, sources, **options))
    elif summary:
        from gpuipc_bench.report import render_run_summary

        console = _stdout()
        for source, (frame, meta) in zip(sources, runs):
            render_run_summary(frame, meta, console, source=source, **options)
    else:
        from rich.text import Text

        console = _stdout()
        for i, (source, (frame, meta)) in enumerate(zip(sources, runs)):
            if len(runs) > 1:
                console.rule(Text(f"run {i + 1}: {source}"), style="bold", characters="═")
            render_terminal(frame, meta, console, source=source, detailed=detailed, **options)
        if len(runs) > 1:
            console.rule("comparison", style="bold", characters="═")
            render_comparison_terminal(runs, sources, console)
    if plot is not None:
        _report_plots(runs, files, plot, plot_format)


def _report_plots(runs, files, plot: Path, plot_format) -> None:
    from gpuipc_bench.plots import save_plots

    stems: list[str] = []
    for path in files:
        stem = Path(path).stem
        stems.append(stem if stem not in stems else f"{stem}-{len(stems) + 1}")
    written = []
    for (frame, meta), stem in zip(runs, stems):
        written += save_plots(frame, meta, plot, stem, plot_format, several=len(runs) > 1)
    _stderr().print("plots: " + ", ".join(str(p) for p in written), soft_wrap=True, markup=False)


# What a terminal without Unicode shows instead (anything else becomes '?').
_ASCII = {"±": "+-", "µ": "u", "…": "...", "×": "x", "≥": ">=", "≤": "<=", "→": "->", "—": "-", "–": "-",
          "·": ".", "≈": "~", "═": "=", "─": "-", "━": "-", "│": "|", "•": "*", "✓": "ok", "✗": "x", "°": " deg"}


def _ascii_fallback(error: UnicodeError):
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(_ASCII.get(c, "?") for c in text), error.end


codecs.register_error("gpuipc-bench-ascii", _ascii_fallback)


class _StdoutUntilClosed:
    """sys.stdout that drops the output once its reader has gone (`| head`): the run goes
    on, writes its CSV and its messages on stderr, and exits as it would have."""

    def __init__(self, stream):
        self._stream = stream
        self.reader_gone = False

    def write(self, text):
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self):
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self):
        self.reader_gone = True
        try:  # what is still buffered goes nowhere, also at exit
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _degrade_output() -> None:
    """Output degrades instead of failing: characters the streams' encoding lacks become ASCII
    look-alikes, and a closed standard output ends only the output."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="gpuipc-bench-ascii")
        except (AttributeError, ValueError):
            pass
    if sys.stdout is not None:
        sys.stdout = _StdoutUntilClosed(sys.stdout)


def main():
    _degrade_output()
    cli(prog_name="gpuipc-bench")


if __name__ == "__main__":
    main()


__all__ = ["cli", "main", "format_size"]
