"""The command line: list, info, run, report. A thin layer: parse, validate, hand over.

Progress and notes go to stderr, results to stdout. Every BenchError, and every
complaint of click's about the command line, becomes one `Error:` line and an exit
code (2 for bad input); tracebacks only with --verbose. SIGINT, SIGTERM and SIGHUP end
any command at once with 130, 143 or 129, keeping what was measured.

One module per command (info.py: list and info; run.py; report.py), the parameter types
in params.py; this module holds the group, the error and signal policy and the output's
robustness. Planning (which scenarios with which workers) is gpuipc_bench.harness.plan.
"""

from __future__ import annotations

import codecs
import os
import signal
import sys
import textwrap

import click

from gpuipc_bench import __version__
from gpuipc_bench.cli.console import stderr_console
from gpuipc_bench.cli import check, info, report, run
from gpuipc_bench.errors import BenchError, Interrupted, signal_name
from gpuipc_bench.sizes import format_size


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


class BenchGroup(click.Group):
    """Turns our errors, click's and signals into messages and exit codes, for every command."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as e:
            raise _one_line(e) from None

    def format_help_text(self, ctx, formatter):
        """The docstring, then the scenarios as the registry lists them (never a list that drifts)."""
        super().format_help_text(ctx, formatter)
        from gpuipc_bench.harness.plan import registry

        scenarios = registry().values()
        default = [s.name for s in scenarios if s.in_default_run]
        by_name = [s.name for s in scenarios if not s.in_default_run]
        paragraphs = [f"Scenarios ({len(default)} in the default run): {', '.join(default)}."]
        if by_name:
            paragraphs.append(f"Run only when named with -s: {', '.join(by_name)}.")
        width = max((formatter.width or 80) - formatter.current_indent - 2, 20)
        for text in paragraphs:  # wrapped here: click's wrapper would cut 'nccl-net' at its hyphen
            formatter.write_paragraph()
            for line in textwrap.wrap(text, width, break_on_hyphens=False):
                formatter.write(f"{'':>{formatter.current_indent + 2}}{line}\n")

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
            stderr_console().print(f"[red]{signal_name(signum)}[/]")
            sys.exit(128 + signum)
        finally:
            restore()


@click.group(cls=BenchGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuipc-bench")
def cli():
    """Measure the ways of moving data between processes on one GPU node.

    Each scenario runs across worker processes, verified, next to the hardware
    ceiling measured in the same run.

    \b
    gpuipc-bench list                 which scenarios can run here, and why not
    gpuipc-bench info                 GPUs, links, driver and CUDA versions
    gpuipc-bench run                  every scenario that can run here
    gpuipc-bench run -s ipc           one scenario
    gpuipc-bench report RUN.csv       summary tables of a results file
    """



# The commands, in the order --help lists them; the modules keep their names (cli.run is the module).
for command in (info.list_cmd, info.info, run.run, report.report, check.check):
    cli.add_command(command)


# What a terminal without Unicode shows instead (anything else becomes '?').
_ASCII = {"±": "+-", "µ": "u", "…": "...", "×": "x", "≥": ">=", "≤": "<=", "→": "->", "—": "-", "–": "-",
          "·": ".", "≈": "~", "═": "=", "─": "-", "━": "-", "│": "|", "•": "*", "✓": "ok", "✗": "x", "°": " deg"}


def _ascii_fallback(error: UnicodeError):
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start:error.end]
    return "".join(_ASCII.get(c, "?") for c in text), error.end


codecs.register_error("gpuipc-bench-ascii", _ascii_fallback)


class _UntilClosed:
    """sys.stdout or sys.stderr that drops the output once its reader has gone (`| head`,
    `2>&1 | head`): the run goes on, writes its CSV, and exits as it would have. Any other
    failure to write it (`> /dev/full`) also drops the output, says so in one line on stderr
    and sets `failed` (main() then exits 1)."""

    def __init__(self, stream, name: str = ""):
        self._stream = stream
        self._name = name
        self.reader_gone = False
        self.failed = ""

    def write(self, text):
        if not self.reader_gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._gone()
            except OSError as exc:
                self._fail(exc)
        return len(text)

    def flush(self):
        if not self.reader_gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._gone()
            except OSError as exc:
                self._fail(exc)

    def _fail(self, exc: OSError):
        self.failed = exc.strerror or str(exc)
        self._gone()
        if self._name == "stdout" and sys.stderr is not self:
            try:
                sys.stderr.write(f"Error: cannot write the standard output: {self.failed.lower()}\n")
                sys.stderr.flush()
            except (OSError, ValueError):
                pass

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
    look-alikes, and a closed standard output or error ends only that output."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="gpuipc-bench-ascii")
        except (AttributeError, ValueError):
            pass
    if sys.stdout is not None:
        sys.stdout = _UntilClosed(sys.stdout, "stdout")
    if sys.stderr is not None:
        sys.stderr = _UntilClosed(sys.stderr, "stderr")


def main():
    _degrade_output()
    try:
        cli(prog_name="gpuipc-bench")
    except SystemExit as end:
        sys.stdout.flush()  # what is still buffered: a failure to write it is told here, not at exit
        if end.code in (0, None) and getattr(sys.stdout, "failed", ""):
            raise SystemExit(1) from None
        raise



__all__ = ["cli", "main", "format_size"]
