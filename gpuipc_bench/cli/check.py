"""`check`: does this node, and every node of an allocation, move GPU data as it should?

    gpuipc-bench check                                  this node: paths, then the short preset
    mpirun --map-by ppr:2:node gpuipc-bench check       every node of the job (rank 0 writes)
    gpuipc-bench check --format junit > check.xml       for CI; json (lines), prometheus too
    gpuipc-bench check --learn fleet.json fleet.csv     expectations from a healthy fleet run

    gpuipc-bench check --preset health --drain          Slurm's HealthCheckProgram: drain on failure

Exit 0: every check passed (warnings, skipped paths, figures without an expectation
included); 1: a check failed (a figure, a path expected to work here, a scenario's error, a
missing figure, a node that did not report); 2: bad input (with --format npd also: the check
could not run); 128 + N: signal N ended it (the CSV says 'interrupted').
"""

from __future__ import annotations

import datetime
import io
import math
import shlex
import signal
import socket
import sys
from pathlib import Path

import click
from rich.markup import escape

from gpuipc_bench.cli.console import print_failure, stderr_console, stdout_console
from gpuipc_bench.errors import BenchError, Interrupted, UsageError

FORMATS = ("terminal", "json", "junit", "prometheus", "markdown", "health", "npd")
PRESETS = ("full", "health")
MIN_TIMEOUT_S = 1.0  # a worker's start-up alone takes longer than a shorter --timeout
MIN_DEADLINE_S = 5.0
MAX_SECONDS = 86400.0
NPD_UNKNOWN = 2  # node-problem-detector's custom plugin: 0 OK, 1 a problem, 2 unknown


@click.command()
@click.argument("csv_files", nargs=-1, type=click.Path(path_type=Path), metavar="[RUN.csv ...]")
@click.option("--expect", "expect_file", type=click.Path(path_type=Path), default=None, metavar="FILE.json",
              help="Expectations to judge by (written by --learn). Default: the references shipped with the tool, "
                   "learned from the runs in results/.")
@click.option("--learn", "learn_file", type=click.Path(path_type=Path), default=None, metavar="FILE.json",
              help="Write expectations learned from the RUN.csv files given (a healthy fleet run of check, or "
                   "runs of `gpuipc-bench run`), then stop.")
@click.option("--learn-partial", is_flag=True,
              help="With --learn: also learn from a partial run, or one that lists failed nodes (from its nodes "
                   "that passed); without it such a run is refused.")
@click.option("--tolerance", type=float, default=None, metavar="FRACTION",
              help="How far below its expectation's band a figure may fall (above, for a latency) before it fails "
                   "or warns, and below the share of its own ceiling the references reached. Default: the "
                   "expectations file's (0.10).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal", show_default=True,
              help="What goes to standard output: a table, JSON lines (one event per check), JUnit XML, "
                   "Prometheus text (a node exporter's textfile collector; with --output, written atomically), "
                   "Markdown, `NODE | Healthy` lines (health), or node-problem-detector's one message (npd: "
                   "exit 0 OK, 1 a problem, 2 unknown).")
@click.option("--out", "-o", type=click.Path(path_type=Path), default=None,
              help="The CSV of the measurement (every node's rows, a node column). Default: "
                   "results/check-<UTC time>-<host>.csv")
@click.option("--output", "output_file", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Write the --format output into FILE instead of standard output (written before anything is "
                   "printed: an MPI launcher that ends the job may drop what its ranks print last).")
@click.option("--force", is_flag=True, help="Overwrite --out, --output, --table and --learn's file if they exist.")
@click.option("--table", "table_file", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Also write the fleet table: .md, .json, or .png/.svg (node x figure heatmaps, one per figure "
                   "family: FILE's name with -host-link, -memory, -pairs, -host, -nixl before the suffix).")
@click.option("--deadline", type=float, default=600.0, show_default=True,
              help="Under MPI: seconds rank 0 waits for every node's report; a node that has not reported "
                   "by then is named as hung.")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds a worker may go without progress before its scenario is ended.")
@click.option("--preset", type=click.Choice(PRESETS), default="full", show_default=True,
              help="'health': this node only, without MPI, the headline figures with fewer samples (for Slurm's "
                   "HealthCheckProgram or a node-problem-detector plugin); prints `NODE | Healthy` or "
                   "`NODE | DRAIN: <reason>` unless --format says otherwise.")
@click.option("--drain", is_flag=True,
              help="When a check fails, drain this node: `scontrol update NodeName=NODE State=DRAIN "
                   "Reason=...` (NODE: $SLURMD_NODENAME, else the host name). Not under MPI.")
@click.option("--launcher", type=click.Choice(["fork", "mpi"]), default=None,
              help="'mpi': every node of the MPI job (default when started by mpirun or srun); 'fork': this node.")
def check(csv_files, expect_file, learn_file, tolerance, fmt, out, force, table_file, deadline, timeout,
          launcher=None, output_file=None, learn_partial=False, preset="full", drain=False):
    """Check this node, or every node of an MPI job: which paths work here and why not, then a
    short measurement whose headline figures are judged against their GPU model's expectations
    and, across nodes, against the fleet."""
    from gpuipc_bench.harness import mpi_launch
    from gpuipc_bench.check import expect

    if learn_file is not None:
        if not csv_files:
            raise UsageError("--learn FILE: give the healthy runs' CSV files to learn from")
        from gpuipc_bench.config import check_writable

        try:
            check_writable(learn_file, force)
        except UsageError as exc:  # its words name --out
            raise UsageError(str(exc).replace(f"--out {learn_file}", f"--learn {learn_file}", 1)) from None
        learned = expect.learn(list(csv_files), expect.TOLERANCE if tolerance is None else tolerance,
                               partial=learn_partial)
        expect.save(learned, learn_file)
        stderr_console().print(f"wrote {escape(str(learn_file))}: {len(learned.entries)} expectations over "
                               f"{len({m for m, _ in learned.entries})} models", soft_wrap=True)
        return
    if csv_files:
        raise UsageError(f"{csv_files[0]}: CSV files are read by --learn only")
    if tolerance is not None and not 0 <= tolerance < 1:
        raise UsageError(f"--tolerance {tolerance:g}: must be a fraction from 0 to 1 (0.1 is 10%)")
    for option, seconds, low in (("--deadline", deadline, MIN_DEADLINE_S), ("--timeout", timeout, MIN_TIMEOUT_S)):
        if not (math.isfinite(seconds) and low <= seconds <= MAX_SECONDS):
            raise UsageError(f"{option} {seconds:g}: must be from {low:g} to {MAX_SECONDS:g} seconds")
    fleet_mode = mpi_launch.resolve_launcher(launcher) == "mpi"
    if fleet_mode and (preset == "health" or drain):
        raise UsageError(f"{'--drain' if drain else '--preset health'}: checks this node alone, without MPI "
                         "(run it on each node: Slurm's HealthCheckProgram, a DaemonSet); use --launcher fork")
    if drain:
        import shutil

        if shutil.which("scontrol") is None:
            raise UsageError("--drain: no scontrol on PATH (Slurm's client drains the node)")
    if preset == "health" and fmt == "terminal":
        fmt = "health"
    if fleet_mode and _mpi_rank() != 0:  # rank 0 reads the files, sends the expectations, writes the results
        from gpuipc_bench.check import fleet

        fleet.run(expect.Expectations({}, {}), tolerance, deadline, timeout, lambda n, f: None, lambda r: None,
                  on_own_report=_node_textfile(fmt, output_file))
        mpi_launch.Job.leave_if_nixl(0)  # NIXL's libnl and Open MPI's clash at exit (see there)
        return
    try:
        expectations, out = _inputs(expect_file, out, force, table_file, output_file)
    except (BenchError, OSError):
        if fleet_mode:  # the other ranks wait for rank 0's word: send them home at once
            from gpuipc_bench.check import fleet

            fleet.refuse()
        raise
    try:
        code = _check(expectations, tolerance, fmt, out, table_file, deadline, timeout, fleet_mode, output_file,
                      preset, drain)
    except BenchError as exc:
        if fmt != "npd":
            raise
        sys.stdout.write(f"gpuipc-bench: unknown: {exc}"[:80] + "\n")  # the plugin's 'unknown'
        code = NPD_UNKNOWN
    if fleet_mode:
        mpi_launch.Job.leave_if_nixl(code)
    raise click.exceptions.Exit(code)


def files_written(table_file) -> list[Path]:
    """The files --table writes: FILE itself, or for a heatmap (.png, .svg) one a figure family
    (FILE's stem, '-', the family: check/heatmap.py's FAMILIES, and 'figures' for a fleet of none)."""
    from gpuipc_bench.check.heatmap import FAMILIES

    path = Path(table_file)
    if path.suffix.lower() not in (".png", ".svg"):
        return [path]
    return [path.with_name(f"{path.stem}-{family}{path.suffix}") for family in (*FAMILIES, "figures")]


def _inputs(expect_file, out, force, table_file, output_file):
    """What rank 0 (or a check without MPI) reads and claims before it measures: (the
    expectations, the CSV's path); UsageError for a bad file or a name taken."""
    from gpuipc_bench.check import expect
    from gpuipc_bench.config import check_writable
    from gpuipc_bench.results.writing import claim_free_name, claim_name, default_results_path

    expectations = expect.load(expect_file)
    default_name = out is None
    out = out or default_results_path("check-")
    check_writable(out, force or default_name)
    for option, extra in (("--table", table_file), ("--output", output_file)):
        for written in ([] if extra is None else files_written(extra) if option == "--table" else [Path(extra)]):
            try:
                check_writable(written, force)
            except UsageError as exc:  # its words name --out
                raise UsageError(str(exc).replace(f"--out {written}", f"{option} {written}", 1)) from None
    if default_name:  # a check started in the same second has it: the next free name (<name>-2.csv)
        out = claim_free_name(out)
    elif not force:  # a name two checks give at once: the second refused (run's --out alike)
        out = claim_name(out)
    return expectations, out


def _mpi_rank() -> int:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        from gpuipc_bench.harness.mpi_launch import INSTALL_HINT

        raise UsageError(f"check under MPI needs mpi4py: {INSTALL_HINT} ({exc})") from None
    return MPI.COMM_WORLD.Get_rank()


def _check(expectations, tolerance, fmt, out, table_file, deadline, timeout, fleet_mode, output_file=None,
           preset="full", drain=False) -> int:
    from gpuipc_bench import __version__
    from gpuipc_bench.check import judge
    from gpuipc_bench.hooks import plant
    from gpuipc_bench.results import SCHEMA_VERSION, ResultsFile

    err = stderr_console()
    meta = {"tool_version": __version__, "schema_version": str(SCHEMA_VERSION),
            "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "gpuipc-bench " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "host": plant.node_name(0), "launcher": "mpi" if fleet_mode else "fork",
            "check.expectations": expectations.source}
    results = ResultsFile(out, meta, hold_rows=False)  # rows live in the file (a fleet's can be millions)
    results.write(partial=True, status="running")
    # JSON lines into --output are appended per node as its report arrives: a job its launcher ends keeps them
    stream = _JsonLines(output_file) if fmt == "json" and output_file is not None else None

    def on_start(names: list[str]) -> None:
        results.set_meta("check.nodes", ",".join(names))
        results.write(partial=True, status=f"running: waiting for {len(names)} node{'s' if len(names) != 1 else ''}")

    def on_report(report) -> None:
        # appended, never rewritten (rank 0's work stays linear in nodes); the facts go into the final header
        for key, value in report.facts.items():
            results.set_meta(f"node.{report.node}.{key}", value)
        if report.csv:  # formatted on its node (NodeReport.packed)
            results.add_text(report.csv, report.row_count)
        results.add(report.rows)
        report.rows, report.csv = [], ""  # the rows live in the results file alone
        if stream is not None:
            stream.add(report.events)

    floor = judge.FLEET_GAP if tolerance is None else max(tolerance, judge.FLEET_GAP)
    measured = _measure(expectations, tolerance, fmt, deadline, timeout, fleet_mode, output_file, preset, floor,
                        results, on_start, on_report)
    reports, missing, interrupted, first_values, unfinished, output_file = measured
    events = _events(reports, missing, first_values, floor)
    results.set_meta("check.missing", ",".join(missing))
    failed = sorted({e.node for e in events if e.status == judge.FAIL})
    status = f"complete; failed nodes: {','.join(failed)}" if failed else "complete"
    if interrupted is not None:
        status = f"interrupted by {signal.Signals(interrupted).name}" + (f"; failed nodes: {','.join(failed)}"
                                                                 if failed else "")
    results.write(partial=bool(missing) or interrupted is not None, status=status)
    results.close()
    if stream is not None:
        stream.add([e for e in events if id(e) not in stream.written])
        stream.close()
        output_file = None if fmt == "json" else output_file
    _emit(events if stream is None else [], reports, missing, fmt, table_file, output_file,
          quiet=stream is not None)
    if drain and any(e.status == judge.FAIL for e in events):
        _drain(events)
    for e in events:
        if e.status == judge.FAIL:  # the lines a fleet tool greps: node, GPUs, figure, measured, expected
            print_failure(err, "FAIL", _fail_line(e))
    err.print(f"wrote {escape(str(out))} ({len(results)} rows, {len(reports)} node"
              f"{'s' if len(reports) != 1 else ''}{f', {len(missing)} missing' if missing else ''})", soft_wrap=True)
    if interrupted is not None:
        raise Interrupted(interrupted)
    code = judge.exit_code(events)
    if fleet_mode and (missing or unfinished):  # ranks that hang would keep the job alive: end it as mpirun does
        sys.stdout.flush()
        sys.stderr.flush()
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)
    return code


def _measure(expectations, tolerance, fmt, deadline, timeout, fleet_mode, output_file, preset, floor, results,
             on_start, on_report):
    """Measure this node, or every node of the MPI job: (reports, missing, interrupted signal, the fleet
    outliers' first values, nodes unfinished at the deadline, the --output file still to write)."""
    from gpuipc_bench.check import fleet, judge
    from gpuipc_bench.check.node import check_node
    from gpuipc_bench.hooks import plant

    interrupted = None
    first_values: dict[tuple[str, str, str], float] = {}
    unfinished: list[str] = []  # nodes still measuring again at the deadline: their ranks are ended too
    if fleet_mode:
        def again(reports: dict) -> dict[str, list[str]]:  # the fleet's outliers, measured again before they fail
            wanted: dict[str, list[str]] = {}
            for node, name, _ in judge.fleet_outliers({n: r[0].figures for n, r in reports.items()}, floor):
                wanted.setdefault(node, []).append(name)
            return {n: sorted(set(v)) for n, v in wanted.items()}

        outcome = fleet.run(expectations, tolerance, deadline, timeout,
                            lambda names, facts: on_start(names), on_report, again, _node_textfile(fmt, output_file))
        if fmt == "prometheus":
            output_file = None  # each node wrote its own textfile; the fleet's text goes to standard output
        assert outcome is not None
        reports, missing, interrupted = outcome.reports, outcome.missing, outcome.interrupted
        first_values = _take_second(outcome.remeasured, reports, results)
        unfinished = outcome.unfinished
    else:
        node = plant.node_name(0)
        on_start([node])
        reports, missing = {}, {}
        try:
            report = check_node(node, expectations, tolerance, timeout=timeout,
                                on_row=lambda row: results.add([row]), preset=preset)
        except (Interrupted, KeyboardInterrupt) as exc:
            interrupted = getattr(exc, "signum", signal.SIGINT)
            missing[node] = f"interrupted by {signal.Signals(interrupted).name} before its check ended"
        else:
            report.rows = []  # already in the results file, row by row
            on_report(report)
            reports = {node: report}
    return reports, missing, interrupted, first_values, unfinished, output_file


def _events(reports, missing, first_values, floor) -> list:
    """Every node's events, the fleet's outliers and the missing nodes as failures."""
    from gpuipc_bench.check import judge
    from gpuipc_bench.check.figures import format_value

    events = [e for r in reports.values() for e in r.events]
    by_node = {n: r.figures for n, r in reports.items() if not r.error}
    figures_at = {(n, f.name, f.gpus): f for n, fs in by_node.items() for f in fs}
    medians = judge.fleet_medians(by_node)
    for (node, name, gpus), why in judge.fleet_outliers(by_node, floor).items():
        f = figures_at[(node, name, gpus)]
        if (node, name, gpus) in first_values:
            why += f" (measured twice; first {format_value(first_values[(node, name, gpus)], f.unit)})"
        status = judge.fleet_status(f, medians.get((name, gpus)))
        if status == judge.WARN:
            why += f" (a CPU figure: a warning within {judge.CPU_FACTOR:g}x of the median)"
        events.append(judge.Event(status, node, "fleet", name, gpus, f.value, "the fleet's median", f.unit,
                                  why, medians.get((name, gpus))))
    for node, why in missing.items():
        events.append(judge.Event(judge.FAIL, node, "node", "report", reason=why))
    return events


def _take_second(remeasured: dict, reports: dict, results) -> dict[tuple[str, str, str], float]:
    """The fleet outliers' second measurements replace their first (whose rows stay in the CSV, the
    second's appended); returns the first values of the figures replaced."""
    first: dict[tuple[str, str, str], float] = {}
    for node, second in remeasured.items():
        if second.error or node not in reports:
            continue
        if second.csv:
            results.add_text(second.csv, second.row_count)
        results.add(second.rows)
        by_key = {(f.name, f.gpus): f for f in second.figures}
        figures = reports[node].figures
        for k, f in enumerate(figures):
            if (f.name, f.gpus) in by_key:
                first[(node, f.name, f.gpus)] = f.value
                figures[k] = by_key[(f.name, f.gpus)]
        results.set_meta(f"node.{node}.check.fleet_remeasured", ",".join(f"{n}@{g}" for n, g in by_key))
    return first


def _node_textfile(fmt: str, output_file):
    """Under MPI with --format prometheus --output FILE: each node's leader writes its own node's
    textfile (FILE on that node; '{node}' in FILE is replaced by the node's name), atomically."""
    if fmt != "prometheus" or output_file is None:
        return None

    def write(report) -> None:
        from gpuipc_bench.check import output

        output.write_atomically(Path(str(output_file).replace("{node}", report.node)),
                                output.to_prometheus(report.events))

    return write


def _drain(events) -> None:
    """Drain this node through Slurm, the reason naming the first failure (as NHC does)."""
    import os
    import subprocess

    from gpuipc_bench.check import output

    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    reason = "gpuipc-bench: " + output.failure_reason(events, 200)
    command = ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        stderr_console().print(f"--drain: scontrol failed: {escape(str(exc))}"[:80], soft_wrap=True)
        return
    said = (done.stderr or done.stdout).strip().splitlines()
    word = f"drained {node}" if done.returncode == 0 else \
        f"--drain: scontrol said: {said[0] if said else done.returncode}"
    stderr_console().print(escape(word[:80]), soft_wrap=True)


def _fail_line(e) -> str:
    from gpuipc_bench.check.figures import format_value

    where = f" GPU {e.gpus}" if e.gpus and e.gpus != "host" else (" host" if e.gpus == "host" else "")
    parts = [f"node {e.node}{where}: {e.kind} {e.figure}"]
    if e.measured is not None:
        parts.append(f"measured {format_value(e.measured, e.unit)}")
    if e.expected:
        parts.append(f"expected {e.expected}")
    return "; ".join(parts + ([e.reason] if e.reason else []))


class _JsonLines:
    """--format json into --output: each event appended (and flushed) as it is known."""

    def __init__(self, path: Path):
        self.file = open(path, "w", encoding="utf-8")
        self.written: set[int] = set()  # the events' ids

    def add(self, events) -> None:
        from gpuipc_bench.check import output

        if events:
            self.file.write(output.to_json_lines(events))
            self.file.flush()
            self.written.update(id(e) for e in events)

    def close(self) -> None:
        self.file.close()


def _emit(events, reports, missing, fmt, table_file, output_file=None, quiet=False) -> None:
    from gpuipc_bench.check import output, table

    rows = table.fleet_rows({n: r.figures for n, r in reports.items() if not r.error}, events, missing)
    if fmt == "terminal":
        buffer = io.StringIO()
        if output_file is None:
            console = stdout_console()
        else:
            from rich.console import Console

            console = Console(file=buffer, width=160, no_color=True)
        output.render_terminal(events, console)
        if len(rows) > 1:
            table.render(rows, console)
        text = buffer.getvalue()
    elif fmt == "json":
        text = output.to_json_lines(events)
    elif fmt == "junit":
        text = output.to_junit(events)
    elif fmt == "prometheus":
        text = output.to_prometheus(events)
    elif fmt == "health":
        text = output.to_health(events, list(dict.fromkeys([*reports, *missing])))
    elif fmt == "npd":
        text = output.to_npd(events, list(dict.fromkeys([*reports, *missing])))
    else:
        text = (table.to_markdown(rows) + "\n" if len(rows) > 1 else "") + output.to_markdown(events)
    if output_file is not None:  # atomically: a textfile collector never reads half a file
        output.write_atomically(Path(output_file), text)
    elif text and not quiet:
        sys.stdout.write(text)
    if table_file is not None:
        table.save(rows, table_file)
    sys.stdout.flush()
