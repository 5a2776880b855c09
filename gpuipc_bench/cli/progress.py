"""What `run` shows while its session runs (gpuipc_bench.harness.session): a line per scenario on
stderr (what it does now, how far it is, the time spent and left), notes, the summary of the
written file on stdout, and the end's lines (failed scenarios, the file written, the workers' log)."""

from __future__ import annotations

import dataclasses

import click
from rich.markup import escape

from gpuipc_bench.cli.console import print_failure, stdout_console
from gpuipc_bench.errors import BenchError, WorkerFailed, signal_name
from gpuipc_bench.harness.session import Reporter, RunInterrupted, Session, interrupted_where

STATUS_WIDTH = 34  # the characters of a scenario line's status


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


class ProgressReporter(Reporter):
    """The session's reporter for the terminal: rich's Progress on `err` (none when quiet), the
    notes beside it, and the summary of the written file."""

    def __init__(self, err, out, quiet: bool):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self.err, self.out, self.quiet = err, out, quiet
        self.progress = Progress(TextColumn("{task.description:>8}"), BarColumn(bar_width=16), TimeElapsedColumn(),
                                 TextColumn("left"), TimeRemainingColumn(), TextColumn("{task.fields[doing]}"),
                                 console=err, disable=quiet, transient=False)

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def started(self, label: str, total: int):
        return self.progress.add_task(label, total=total, doing=""), label

    def advance(self, line, steps: int) -> None:
        self.progress.advance(line[0], steps)

    def status(self, line, text: str) -> None:
        self.progress.update(line[0], doing=_fit(text, STATUS_WIDTH))

    def failed(self, line) -> None:
        self.progress.update(line[0], description=f"[red]{line[1]}")

    def finished(self, line) -> None:
        task = next(t for t in self.progress.tasks if t.id == line[0])
        self.progress.update(line[0], completed=task.total)  # no time 'left' on a line that ended

    def note(self, text: str) -> None:
        if not self.quiet:
            self.err.print(f"[yellow]note[/]: {escape(text)}", soft_wrap=True)

    @property
    def shows_summary(self) -> bool:
        """Whether written() prints the run's summary (it analyses the rows for it)."""
        return not self.quiet

    def written(self, frame, metadata, analysis=None) -> None:
        """The file is written: its summary (`analysis`: the rows' analysis where the run has it)."""
        if not self.quiet:
            from gpuipc_bench.report import render_run_summary

            render_run_summary(frame, metadata, stdout_console(), source=self.out, analysis=analysis)


def run_session(planned, config, out, err, quiet: bool, verbose: bool, job=None, head_start=None) -> None:
    """Run the plan (with `config`, the caller's) into `out`, showing it; then the failed
    scenarios, the file written and the workers' log. BenchError when a scenario failed; a
    signal ends the command with 128 + its number, the file kept."""
    session = Session(out, ProgressReporter(err, out, quiet), job=job, head_start=head_start)
    try:
        outcome = session.run(dataclasses.replace(planned, config=config))
    except RunInterrupted as exc:
        err.print(f"[red]{signal_name(exc.signum)}[/]{escape(interrupted_where(exc.scenario, exc.at))}; "
                  f"{exc.rows} samples kept in {escape(str(out))}", soft_wrap=True)
        if quiet:
            print(out, flush=True)
        raise click.exceptions.Exit(128 + exc.signum) from None
    for name, error, rows in outcome.failures:
        print_failure(err, "error", f"in scenario {name} ({rows} samples kept): {error}")
        if verbose and isinstance(error, WorkerFailed) and error.traceback_text:
            err.print(error.traceback_text, markup=False, highlight=False)
    err.print(f"wrote {escape(str(out))} ({outcome.rows} rows{', partial' if outcome.partial else ''})"
              + (f"; the workers' output and tracebacks: {escape(outcome.log)}" if outcome.log else ""),
              soft_wrap=True)
    if quiet:
        print(out, flush=True)
    if outcome.failures:
        failed = len({f.scenario for f in outcome.failures})  # a scenario runs in each sharing mode: counted once
        raise BenchError(f"{failed} of {outcome.planned} scenarios failed; samples taken before "
                         f"the failure are kept in {out}")
