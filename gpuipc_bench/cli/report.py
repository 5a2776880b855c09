"""`report`: summarise results CSVs in the terminal, as markdown, csv or json, and plots."""

from __future__ import annotations

from pathlib import Path

import click

from gpuipc_bench.cli.console import stderr_console, stdout_console
from gpuipc_bench.cli.params import Bounded
from gpuipc_bench.errors import UsageError


@click.command()
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
@click.option("--min-effect", "min_effect", type=Bounded("min_effect", float), default=2.0, show_default=True,
              metavar="PCT", help="Verdict: medians less than PCT% apart (or than the processes' own measured "
                                  "offset) are never 'faster'; figures whose ratio's interval lies within it "
                                  "are 'the same'; the rest are 'undecided'.")
@click.option("--force", is_flag=True, help="Overwrite the --plot files if they exist.")
@click.option("--detailed", is_flag=True, help="Every column (samples, intervals in µs, MAD, verified) and "
                                               "every figure of each warning.")
@click.option("--summary", "summary", is_flag=True,
              help="The one-screen answer `run` prints at its end: a line per decision, set-up costs, "
                   "confidence, the warnings that could change a line.")
def report(files, fmt, plot, plot_format, amortise_over, min_effect, detailed, force=False, summary=False):
    """Summarise results CSVs: median and its 95% interval per path, variant and size, against
    the ceiling; the fastest path per size (ties decided by a test on the samples) and the
    break-even of the paths with a setup cost.

    Several files: each run, then the ratios of their medians (run N / run 1), with
    a warning when the machines differ (GPUs, driver, links). A file gzipped to
    attach to an issue (RUN.csv.gz) reads as it is.

    \b
    gpuipc-bench report RUN.csv                      tables in the terminal
    gpuipc-bench report RUN.csv --format markdown    to paste into an issue
    gpuipc-bench report RUN.csv --plot plots/        PNG figures
    gpuipc-bench report H100.csv H200.csv            side by side, with ratios
    """
    from gpuipc_bench.report import (
        analyse_runs, check_reportable, load_runs, render_csv, render_json, render_markdown_runs,
    )

    if plot_format and plot is None:
        raise UsageError("--plot-format needs --plot DIR")
    if plot is not None:
        from gpuipc_bench.plots import check_plot_dest, check_plot_targets

        check_plot_dest(plot)
        check_plot_targets(plot, _stems(files), plot_format, force)  # a bad suffix, a figure there
    runs = load_runs(files)
    for path, (frame, meta) in zip(files, runs):
        check_reportable(path, frame, meta)
    sources = [str(path) for path in files]
    options = {"min_effect": min_effect / 100, "amortise_over": amortise_over}
    analyses = analyse_runs(runs, **options)  # once per run: every format and the plots render these
    if fmt == "markdown":
        click.echo(render_markdown_runs(runs, sources, analyses=analyses, **options))
    elif fmt == "csv":
        click.echo(render_csv(runs, sources, analyses), nl=False)
    elif fmt == "json":
        click.echo(render_json(runs, sources, analyses=analyses, **options))
    elif summary:
        from gpuipc_bench.report import render_run_summary

        console = stdout_console()
        for source, (frame, meta), analysis in zip(sources, runs, analyses):
            render_run_summary(frame, meta, console, source=source, analysis=analysis)
    else:
        _report_terminal(runs, sources, analyses, detailed)
    if plot is not None:
        _report_plots(runs, files, plot, plot_format, analyses)


def _report_terminal(runs, sources, analyses, detailed: bool) -> None:
    """Each run's report, then, for several, their comparison. The comparison's decisions are
    those of the default --min-effect and --amortise-over, as this report has always shown
    them (markdown and json compare the decisions of the options given): with other options
    the runs are analysed again for it."""
    from rich.text import Text

    from gpuipc_bench.report import analyse_runs, render_comparison_terminal, render_terminal

    console = stdout_console()
    compared = None  # the runs analysed with the default options, for the comparison (once)
    if len(runs) > 1:  # whether a choice changed, the mechanism class first, before any run's tables
        from gpuipc_bench.report import render_decision_headline

        compared = analyses if _default_options(analyses) else analyse_runs(runs)
        render_decision_headline(compared, console)
    for i, (source, (frame, meta), analysis) in enumerate(zip(sources, runs, analyses)):
        if len(runs) > 1:
            console.rule(Text(f"run {i + 1}: {source}"), style="bold", characters="═")
        render_terminal(frame, meta, console, source=source, detailed=detailed, analysis=analysis)
    if len(runs) > 1:
        console.rule("comparison", style="bold", characters="═")
        render_comparison_terminal(runs, sources, console, compared)


def _default_options(analyses) -> bool:
    """Whether the runs were analysed with the default --min-effect and --amortise-over."""
    from gpuipc_bench.analysis.breakeven import AMORTISE_OVER
    from gpuipc_bench.analysis.stats import MIN_EFFECT

    return all(a.min_effect == MIN_EFFECT and a.amortise_over == AMORTISE_OVER for a in analyses)


def _stems(files) -> list[str]:
    """Each file's name for its figures: its stem (RUN of RUN.csv and of RUN.csv.gz), numbered where two
    files share one."""
    stems: list[str] = []
    for path in files:
        name = Path(path).name
        stem = Path(name.removesuffix(".gz") if name.endswith(".csv.gz") else name).stem
        stems.append(stem if stem not in stems else f"{stem}-{len(stems) + 1}")
    return stems


def _report_plots(runs, files, plot: Path, plot_format, analyses) -> None:
    from gpuipc_bench.plots import save_plots

    written = []
    for (frame, meta), stem, analysis in zip(runs, _stems(files), analyses):
        written += save_plots(frame, meta, plot, stem, plot_format, several=len(runs) > 1, summary=analysis.summary)
    # a file a line: paths stay whole, and the line stays inside 80 columns unless one path is longer
    stderr_console().print("plots: " + "".join(f"\n  {p}" for p in written), soft_wrap=True, markup=False)
