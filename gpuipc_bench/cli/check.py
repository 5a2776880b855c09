"""`check`: does this node, and every node of an allocation, move GPU data as it should?

    gpuipc-bench check                                  this node: paths, then the short preset
    mpirun --map-by ppr:2:node gpuipc-bench check       every node of the job (rank 0 writes)
    gpuipc-bench check --format junit > check.xml       for CI; json (lines), prometheus too
    gpuipc-bench check --learn fleet.json fleet.csv     expectations from a healthy fleet run

Exit 0: every check passed (warnings and skipped paths included); 1: a check failed (a
figure, a path the expectations say works on this model, a node that did not report);
2: bad input.
"""

from __future__ import annotations

import datetime
import io
import math
import shlex
import sys
from pathlib import Path

import click
from rich.markup import escape

from gpuipc_bench.cli.console import stderr_console, stdout_console
from gpuipc_bench.errors import UsageError

FORMATS = ("terminal", "json", "junit", "prometheus", "markdown")


@click.command()
@click.argument("csv_files", nargs=-1, type=click.Path(path_type=Path), metavar="[RUN.csv ...]")
@click.option("--expect", "expect_file", type=click.Path(path_type=Path), default=None, metavar="FILE.json",
              help="Expectations to judge by (written by --learn). Default: the references shipped with the tool, "
                   "learned from the runs in results/.")
@click.option("--learn", "learn_file", type=click.Path(path_type=Path), default=None, metavar="FILE.json",
              help="Write expectations learned from the RUN.csv files given (a healthy fleet run of check, or "
                   "runs of `gpuipc-bench run`), then stop.")
@click.option("--tolerance", type=float, default=None, metavar="FRACTION",
              help="How far below its expectation's band a figure may fall (above, for a latency) before it fails "
                   "or warns, and below the share of its own ceiling the references reached. Default: the "
                   "expectations file's (0.10).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="terminal", show_default=True,
              help="What goes to standard output: a table, JSON lines (one event per check), JUnit XML, "
                   "Prometheus text (a node exporter's textfile collector), or Markdown.")
@click.option("--out", "-o", type=click.Path(path_type=Path), default=None,
              help="The CSV of the measurement (every node's rows, a node column). Default: "
                   "results/check-<UTC time>-<host>.csv")
@click.option("--output", "output_file", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Write the --format output into FILE instead of standard output (written before anything is "
                   "printed: an MPI launcher that ends the job may drop what its ranks print last).")
@click.option("--force", is_flag=True, help="Overwrite --out, --output, --table and --learn's file if they exist.")
@click.option("--table", "table_file", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Also write the fleet table: .md, .json, or .png/.svg (a node x figure heatmap).")
@click.option("--deadline", type=float, default=600.0, show_default=True,
              help="Under MPI: seconds rank 0 waits for every node's report; a node that has not reported "
                   "by then is named as hung.")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="Seconds a worker may go without progress before its scenario is ended.")
@click.option("--launcher", type=click.Choice(["fork", "mpi"]), default=None,
              help="'mpi': every node of the MPI job (default when started by mpirun or srun); 'fork': this node.")
def check(csv_files, expect_file, learn_file, tolerance, fmt, out, force, table_file, deadline, timeout,
          launcher=None, output_file=None):
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
        learned = expect.learn(list(csv_files), expect.TOLERANCE if tolerance is None else tolerance)
        expect.save(learned, learn_file)
        stderr_console().print(f"wrote {escape(str(learn_file))}: {len(learned.entries)} expectations over "
                               f"{len({m for m, _ in learned.entries})} models", soft_wrap=True)
        return
    if csv_files:
        raise UsageError(f"{csv_files[0]}: CSV files are read by --learn only")
    if tolerance is not None and not 0 <= tolerance < 1:
        raise UsageError(f"--tolerance {tolerance:g}: must be a fraction from 0 to 1 (0.1 is 10%)")
    for option, seconds in (("--deadline", deadline), ("--timeout", timeout)):
        if not (math.isfinite(seconds) and seconds > 0):
            raise UsageError(f"{option} {seconds:g}: must be a positive number of seconds")
    fleet_mode = mpi_launch.resolve_launcher(launcher) == "mpi"
    if fleet_mode and _mpi_rank() != 0:  # rank 0 reads the files, sends the expectations, writes the results
        from gpuipc_bench.check import fleet

        fleet.run(expect.Expectations({}, {}), tolerance, deadline, timeout, lambda n, f: None, lambda r: None)
        mpi_launch.Job.leave_if_nixl(0)  # NIXL's libnl and Open MPI's clash at exit (see there)
        return
    expectations = expect.load(expect_file)
    from gpuipc_bench.config import check_writable
    from gpuipc_bench.results.writing import claim_free_name, default_results_path

    default_name = out is None
    out = out or default_results_path("check-")
    check_writable(out, force or default_name)
    for option, extra in (("--table", table_file), ("--output", output_file)):
        if extra is not None:
            try:
                check_writable(extra, force)
            except UsageError as exc:  # its words name --out
                raise UsageError(str(exc).replace(f"--out {extra}", f"{option} {extra}", 1)) from None
    if default_name:  # a check started in the same second has it: the next free name (<name>-2.csv)
        out = claim_free_name(out)
    code = _check(expectations, tolerance, fmt, out, table_file, deadline, timeout, fleet_mode, output_file)
    if fleet_mode:
        mpi_launch.Job.leave_if_nixl(code)
    raise click.exceptions.Exit(code)


def _mpi_rank() -> int:
    try:
        from mpi4py import MPI
    except ImportError as exc:
        from gpuipc_bench.harness.mpi_launch import INSTALL_HINT

        raise UsageError(f"check under MPI needs mpi4py: {INSTALL_HINT} ({exc})") from None
    return MPI.COMM_WORLD.Get_rank()


def _check(expectations, tolerance, fmt, out, table_file, deadline, timeout, fleet_mode, output_file=None) -> int:
    from gpuipc_bench import __version__
    from gpuipc_bench.check import fleet, judge
    from gpuipc_bench.hooks import plant
    from gpuipc_bench.check.node import check_node
    from gpuipc_bench.results import SCHEMA_VERSION, ResultsFile

    err = stderr_console()
    meta = {"tool_version": __version__, "schema_version": str(SCHEMA_VERSION),
            "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "gpuipc-bench " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "host": plant.node_name(0), "launcher": "mpi" if fleet_mode else "fork",
            "check.expectations": expectations.source}
    results = ResultsFile(out, meta)
    results.write(partial=True, status="running")

    nodes: list[str] = []

    def on_start(names: list[str]) -> None:
        nodes[:] = names
        results.set_meta("check.nodes", ",".join(names))
        results.write(partial=True, status=f"running: waiting for {','.join(names)}")

    def on_report(report) -> None:
        for key, value in report.facts.items():
            results.set_meta(f"node.{report.node}.{key}", value)
        results.add(report.rows)
        reported.append(report.node)
        waiting = [n for n in nodes if n not in reported]
        # what a job ended by its launcher leaves: the nodes that never reported are named here
        results.write(partial=True, status=f"running: waiting for {','.join(waiting) or 'nothing'} "
                                           f"(reported: {','.join(reported)})")

    reported: list[str] = []

    if fleet_mode:
        outcome = fleet.run(expectations, tolerance, deadline, timeout,
                            lambda names, facts: on_start(names), on_report)
        assert outcome is not None
        reports, missing = outcome.reports, outcome.missing
    else:
        node = plant.node_name(0)
        on_start([node])
        report = check_node(node, expectations, tolerance, timeout=timeout)
        on_report(report)
        reports, missing = {node: report}, {}
    events = [e for r in reports.values() for e in r.events]
    by_node = {n: r.figures for n, r in reports.items() if not r.error}
    figures_at = {(n, f.name, f.gpus): f for n, fs in by_node.items() for f in fs}
    for (node, name, gpus), why in judge.fleet_outliers(by_node).items():
        f = figures_at[(node, name, gpus)]
        events.append(judge.Event(judge.FAIL, node, "fleet", name, gpus, f.value,
                                  "the fleet's median", f.unit, why))
    for node, why in missing.items():
        events.append(judge.Event(judge.FAIL, node, "node", "report", reason=why))
    results.set_meta("check.missing", ",".join(missing))
    failed = sorted({e.node for e in events if e.status == judge.FAIL})
    status = f"complete; failed nodes: {','.join(failed)}" if failed else "complete"
    results.write(partial=bool(missing), status=status)
    results.close()
    _emit(events, reports, missing, fmt, table_file, output_file)
    for e in events:
        if e.status == judge.FAIL:  # the lines a fleet tool greps: node, GPUs, figure, measured, expected
            err.print(f"[red]FAIL[/] {escape(_fail_line(e))}", soft_wrap=True, highlight=False)
    err.print(f"wrote {escape(str(out))} ({len(results)} rows, {len(reports)} node"
              f"{'s' if len(reports) != 1 else ''}{f', {len(missing)} missing' if missing else ''})", soft_wrap=True)
    code = judge.exit_code(events)
    if fleet_mode and missing:  # ranks that hang would keep the job alive: end it as mpirun does
        sys.stdout.flush()
        sys.stderr.flush()
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)
    return code


def _fail_line(e) -> str:
    from gpuipc_bench.check.figures import format_value

    where = f" GPU {e.gpus}" if e.gpus and e.gpus != "host" else (" host" if e.gpus == "host" else "")
    parts = [f"node {e.node}{where}: {e.kind} {e.figure}"]
    if e.measured is not None:
        parts.append(f"measured {format_value(e.measured, e.unit)}")
    if e.expected:
        parts.append(f"expected {e.expected}")
    return "; ".join(parts + ([e.reason] if e.reason else []))


def _emit(events, reports, missing, fmt, table_file, output_file=None) -> None:
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
    else:
        text = (table.to_markdown(rows) + "\n" if len(rows) > 1 else "") + output.to_markdown(events)
    if output_file is not None:
        Path(output_file).write_text(text, encoding="utf-8")
    elif text:
        sys.stdout.write(text)
    if table_file is not None:
        table.save(rows, table_file)
    sys.stdout.flush()
