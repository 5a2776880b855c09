"""Reports from results files: each run analysed once (analysis.analyse), one document
built from the analysis (document.py), one renderer per format, in the way hyperfine keeps
one exporter per format:

  terminal.py   rich: the full report (`report`), the one-screen summary (end of `run`),
                the comparison of runs; all width fitting
  markdown.py   a compact summary for a GitHub issue
  data.py       csv (the summary) and json (everything)
  wording.py    every word and number format, once
  causes.py     the causes of a warning and their words, a record each
  tables.py     the tables, as strings, for any renderer

The functions below are what the CLI calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpuipc_bench.errors import BenchError

if TYPE_CHECKING:
    import pandas as pd
    from rich.console import Console

    from gpuipc_bench.analysis import RunAnalysis

Run = tuple["pd.DataFrame", Mapping[str, str]]


def load_runs(paths: Iterable[Path | str]) -> list[Run]:
    """Read each results file; the first bad one raises ResultsFormatError naming it."""
    from gpuipc_bench.results import read_results

    return [read_results(Path(p)) for p in paths]


def check_reportable(path: Path | str, df: pd.DataFrame, meta: Mapping[str, str]) -> None:
    """Refuse, with one line, a run there is nothing to report on: no samples at all, or
    measured samples that every one failed verification."""
    status = meta.get("status", "").strip() or "unknown"
    if df.empty:
        raise BenchError(f"{path}: the run holds no samples (status: {status})")
    flags = df.loc[df["metric"] != "setup", "verified"].dropna()
    if len(flags) and not flags.astype(bool).any():
        raise BenchError(f"{path}: every one of its {len(flags)} measured samples failed verification (the bytes "
                         f"that arrived were not the bytes sent), so there is no figure to report (status: {status})")


def analyse_runs(runs: Sequence[Run], min_effect: float | None = None,
                 amortise_over: int | None = None) -> list[RunAnalysis]:
    from gpuipc_bench.analysis import analyse

    return [analyse(df, meta, min_effect=min_effect, amortise_over=amortise_over) for df, meta in runs]


# --------------------------------------------------------------------------- terminal


def render_run_summary(frame: pd.DataFrame, meta: Mapping[str, str], console: Console,
                       source: str | Path | None = None, min_effect: float | None = None,
                       amortise_over: int | None = None, analysis: RunAnalysis | None = None) -> None:
    """The one-screen answer, what `run` prints at the end and `report RUN.csv --summary`
    prints (answer.py): a line per decision band of each link, sharing mode and measure,
    the set-up costs, the confidence, the warnings that could change a line, and the command
    that shows everything (`gpuipc-bench report SOURCE`), wrapped at the console's width.
    `analysis`: the run's, when the caller has it (else analysed here)."""
    from gpuipc_bench.report import answer, terminal

    if analysis is None:
        from gpuipc_bench.analysis import analyse

        analysis = analyse(frame, meta, min_effect=min_effect, amortise_over=amortise_over)
    terminal.render_summary(answer.summary_lines(analysis, str(source) if source else None, console.width), console)


def render_terminal(df: pd.DataFrame, meta: Mapping[str, str], console: Console, source: str | None = None,
                    detailed: bool = False, min_effect: float | None = None,
                    amortise_over: int | None = None, analysis: RunAnalysis | None = None) -> None:
    """The full report of one run: a table per path, metric, link and measure (every size),
    the verdict and break-even, the warnings (a line per cause). detailed: every column and
    every warning's figures. `analysis`: the run's, when the caller has it."""
    from gpuipc_bench.report import document, terminal

    if analysis is None:
        from gpuipc_bench.analysis import analyse

        analysis = analyse(df, meta, min_effect=min_effect, amortise_over=amortise_over)
    terminal.render_report(document.build_report(analysis, source, detailed), console)


def render_comparison_terminal(runs: Sequence[Run], sources: Sequence[str], console: Console,
                               analyses: Sequence[RunAnalysis] | None = None) -> None:
    """After each run's own report: the runs named, the machine differences, and the ratio
    tables of each run against run 1."""
    from gpuipc_bench.analysis import compare
    from gpuipc_bench.report import tables, terminal, wording

    from gpuipc_bench.analysis import compare_decisions

    analyses = list(analyses) if analyses is not None else analyse_runs(runs)
    comparison = compare([a.summary for a in analyses])
    changes = compare_decisions([a.answer.decisions for a in analyses])
    blocks = [(tables.comparison_tables(comparison, run), tables.only_in_one(comparison, run), run)
              for run in range(1, len(analyses))]
    terminal.render_comparison(sources, [" · ".join(wording.machine_summary(a.meta)) for a in analyses],
                               wording.machine_differences([a.meta for a in analyses]), blocks, console,
                               wording.decision_changes(changes))


def render_decision_headline(analyses: Sequence[RunAnalysis], console: Console) -> None:
    """Before several runs' reports: whether each run's choices differ from run 1's, the mechanism
    class first, then the API (wording.class_headline; the comparison at the end lists every change)."""
    from rich.text import Text

    from gpuipc_bench.analysis import compare_decisions
    from gpuipc_bench.report import wording

    changes = compare_decisions([a.answer.decisions for a in analyses])
    console.print(Text("Decisions against run 1", style="bold"))
    for line in wording.class_headline(changes, [len(a.answer.decisions) for a in analyses]):
        console.print(Text("  " + line))
    console.print()


# --------------------------------------------------------------------------- markdown, data


def render_markdown(df: pd.DataFrame, meta: Mapping[str, str], source: str | None = None,
                    min_effect: float | None = None, amortise_over: int | None = None) -> str:
    """A compact summary of one run to paste into a GitHub issue (markdown.py)."""
    return render_markdown_runs([(df, meta)], [source] if source else [None], min_effect, amortise_over)


def render_markdown_runs(runs: Sequence[Run], sources: Sequence[str | None], min_effect: float | None = None,
                         amortise_over: int | None = None, analyses: Sequence[RunAnalysis] | None = None) -> str:
    """One run: its summary. Several: the comparison first (machine differences, ratio tables
    of each run against run 1), then each run's summary. `analyses`: the runs', when the
    caller has them."""
    from gpuipc_bench.analysis import compare
    from gpuipc_bench.report import document, markdown, wording

    analyses = list(analyses) if analyses is not None else analyse_runs(runs, min_effect, amortise_over)
    if len(analyses) == 1:
        doc = document.build_report(analyses[0], sources[0])
        return markdown.fit(markdown.sections(doc, analyses[0]))
    from gpuipc_bench.analysis import compare_decisions

    comparison = compare([a.summary for a in analyses])
    changes = wording.decision_changes(compare_decisions([a.answer.decisions for a in analyses]))
    parts = markdown.comparison_sections(analyses, [str(s) for s in sources], comparison, changes)
    for i, (analysis, source) in enumerate(zip(analyses, sources)):
        run_parts = markdown.sections(document.build_report(analysis, source), analysis, level="###")
        run_parts[0][0] = f"## run {i + 1}: {source}"
        parts += run_parts
    parts.append(["<sub>all figures of every run: `gpuipc-bench report --format csv FILES`</sub>", ""])
    return markdown.fit(parts)


def render_csv(runs: Sequence[Run], sources: Sequence[str], analyses: Sequence[RunAnalysis] | None = None) -> str:
    """The runs' summaries (which no option changes) as CSV."""
    from gpuipc_bench.report import data

    return data.render_csv(list(analyses) if analyses is not None else analyse_runs(runs), sources)


def render_json(runs: Sequence[Run], sources: Sequence[str], min_effect: float | None = None,
                amortise_over: int | None = None, analyses: Sequence[RunAnalysis] | None = None) -> str:
    from gpuipc_bench.analysis import compare
    from gpuipc_bench.report import data

    from gpuipc_bench.analysis import compare_decisions

    analyses = list(analyses) if analyses is not None else analyse_runs(runs, min_effect, amortise_over)
    comparison = compare([a.summary for a in analyses]) if len(analyses) > 1 else None
    changes = compare_decisions([a.answer.decisions for a in analyses]) if len(analyses) > 1 else []
    return data.render_json(analyses, sources, comparison, changes)


def __getattr__(name: str):
    if name == "MARKDOWN_LIMIT":  # without importing pandas for the other commands
        from gpuipc_bench.report.markdown import MARKDOWN_LIMIT

        return MARKDOWN_LIMIT
    raise AttributeError(name)


__all__ = [
    "MARKDOWN_LIMIT", "analyse_runs", "check_reportable", "load_runs", "render_comparison_terminal", "render_csv",
    "render_json", "render_markdown", "render_markdown_runs", "render_run_summary", "render_terminal",
]
