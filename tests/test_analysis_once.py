"""Analyse once per command: `report` analyses each run once whatever it renders (the tables,
markdown, csv, json, the one-screen summary, several runs compared, the plots), an analysis
finds the candidates once (the break-even takes the decisions'), and a results file builds its
frame once for the final write and the summary after it. Counted, never timed. Also the faster
ways to the same figures (the U test by sorted search, the ratio's interval by a partial sort,
the table rows laid out without rich's per-cell render) against the plain ways, to the bit."""

from __future__ import annotations

import collections
import io
import math
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

import gpuipc_bench.analysis as analysis_package
from gpuipc_bench.analysis import breakeven, model, stats, verdict
from gpuipc_bench.cli import cli
from gpuipc_bench.report import terminal
from gpuipc_bench.report.tables import Column, Table
from gpuipc_bench.results import ResultsFile, new_row, read_results

HERE = Path(__file__).parent
SMALL = HERE / "data" / "small_run.csv"
SMALL_V1 = HERE / "data" / "small_run_v1.csv"


@pytest.fixture
def counted(monkeypatch):
    """How many times `analyse` and `candidates` ran, wherever they are called from."""
    calls: collections.Counter = collections.Counter()

    def counting(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)

        return wrapper

    analyse = counting("analyse", model.analyse)
    monkeypatch.setattr(model, "analyse", analyse)  # plots.summary imports it from here
    monkeypatch.setattr(analysis_package, "analyse", analyse)  # report imports it from here
    candidates = counting("candidates", verdict.candidates)
    monkeypatch.setattr(model, "candidates", candidates)
    monkeypatch.setattr(breakeven, "candidates", candidates)
    return calls


@pytest.mark.parametrize("args", [
    [], ["--detailed"], ["--summary"], ["--format", "markdown"], ["--format", "csv"], ["--format", "json"],
    ["--min-effect", "5", "--amortise-over", "10"],
])
@pytest.mark.parametrize("files", [[SMALL], [SMALL, SMALL_V1]], ids=["one run", "two runs"])
def test_report_analyses_each_run_once(counted, files, args):
    result = CliRunner().invoke(cli, ["report", *map(str, files), *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # The terminal's comparison of several runs decides with the default options, as it always
    # has (markdown and json with the options given): other options analyse the runs again for it.
    again = len(files) > 1 and "--min-effect" in args and not {"--format", "--summary"} & set(args)
    times = len(files) * (2 if again else 1)
    assert counted == {"analyse": times, "candidates": times}


def test_report_plots_draw_the_runs_analysis(counted, tmp_path):
    result = CliRunner().invoke(cli, ["report", str(SMALL), "--plot", str(tmp_path / "plots")],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "plots").glob("*.png"))
    assert counted == {"analyse": 1, "candidates": 1}


def test_a_results_file_builds_its_frame_once_per_set_of_rows(tmp_path):
    df, meta = read_results(SMALL)
    rf = ResultsFile(tmp_path / "run.csv", {"host": "node"})
    rf.add(df.head(5).to_dict("records"))
    first = rf.frame
    assert rf.frame is first  # the final write and the summary after it share one
    rf.add([new_row(scenario="ipc", path="ipc", variant="ce", bytes=4, iteration=0, seconds=1e-5)])
    assert rf.frame is not first and len(rf.frame) == 6


# --------------------------------------------------------------------------- the same figures


def _midrank_p(a, b):
    """The U test's p from midranks counted one by one (the textbook way)."""
    m, n = len(a), len(b)
    values = a + b
    ranks = []
    for v in values:
        below = sum(1 for w in values if w < v)
        equal = sum(1 for w in values if w == v)
        ranks.append(below + (equal + 1) / 2)
    u = sum(ranks[:m]) - m * (m + 1) / 2
    ties = list(collections.Counter(values).values())
    if not any(t > 1 for t in ties) and max(m, n) <= stats.EXACT_MAX:
        counts = stats._u_counts(m, n)
        total = sum(counts)
        k = round(u)
        return min(1.0, 2 * min(sum(counts[: k + 1]) / total, sum(counts[k:]) / total))
    big = m + n
    variance = m * n / 12 * ((big + 1) - sum(t ** 3 - t for t in ties) / (big * (big - 1)))
    if variance <= 0:
        return 1.0
    z = max(0.0, abs(u - m * n / 2) - 0.5) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))


@pytest.mark.parametrize("seed", range(6))
def test_the_u_test_gives_the_textbook_p_to_the_bit(seed):
    rng = random.Random(seed)
    for _ in range(60):
        m, n = rng.choice([1, 3, 6, 12, 25, 26, 40]), rng.choice([1, 4, 9, 25, 31, 50])
        digits = rng.choice([None, 1, 2])  # rounded: ties, within and across the two samples
        a = [rng.random() if digits is None else round(rng.random(), digits) for _ in range(m)]
        b = [rng.random() * 1.2 if digits is None else round(rng.random() * 1.2, digits) for _ in range(n)]
        assert stats.mann_whitney_p(a, b) == _midrank_p(a, b)


def test_the_ratio_interval_is_the_fully_sorted_ones():
    rng = np.random.default_rng(3)
    for m, n in [(3, 3), (6, 9), (20, 25), (60, 70), (600, 900)]:
        a, b = rng.lognormal(0, 0.1, m), rng.lognormal(0.05, 0.1, n)
        xa, xb = np.log(np.sort(a)), np.log(np.sort(b))
        k = stats._hl_rank(m, n, stats.ALPHA)
        while len(xa) * len(xb) > stats.MAX_PAIRS:  # as ratio_interval thins them
            mm, nn = len(xa), len(xb)
            if mm >= nn:
                xa = xa[np.linspace(0, mm - 1, mm // 2).round().astype(int)]
            else:
                xb = xb[np.linspace(0, nn - 1, nn // 2).round().astype(int)]
            k = max(1, round(k * len(xa) * len(xb) / (mm * nn)))
        diffs = np.sort(np.subtract.outer(xb, xa), axis=None)
        expected = (float(np.exp(diffs[k - 1])), float(np.exp(diffs[len(diffs) - k])))
        assert stats.ratio_interval(a, b) == expected


def test_prepared_samples_compare_as_fresh_ones_however_often_reused():
    """A decision prepares each figure once and compares it with every other: what it keeps
    (its states, each part's median, ends and logarithms) never carries from one to the next."""
    rng = random.Random(7)
    for _ in range(20):
        two = rng.random() < 0.5  # samples in two states: compared state by state
        n = rng.choice([2, 6, 20])
        a = [1 + rng.gauss(0, 0.003) + (0.2 if two and rng.random() < 0.3 else 0) for _ in range(n)]
        kept = stats.Prepared(np.asarray(a))
        for _ in range(10):
            b = [rng.choice([1.0, 1.03, 1.3]) + rng.gauss(0, 0.003) + (0.2 if rng.random() < 0.2 else 0)
                 for _ in range(rng.choice([3, 8, 30]))]
            delta = rng.choice([0.0, 0.02, 0.05])
            other = stats.Prepared(b)
            for x, y, xs, ys in ((kept, other, a, b), (other, kept, b, a)):
                found, fresh = stats.compare_prepared(x, y, delta), stats.compare(xs, ys, delta)
                assert repr(found) == repr(fresh)
                assert repr(found.p) == repr(fresh.p)


def test_a_figure_slower_in_every_sample_is_never_faster_beyond_delta():
    """What decide's beats skips without comparing: a figure whose every sample is slower than
    every sample of the other is not faster beyond any delta, whichever samples (all, a state,
    the state nearest the other) are compared."""
    rng = random.Random(11)
    for _ in range(400):
        b = [1 + rng.gauss(0, 0.01) + (0.2 if rng.random() < 0.3 else 0) for _ in range(rng.choice([3, 6, 9, 40]))]
        gap = rng.choice([1e-12, 1e-6, 0.01, 0.3])
        a = [max(b) + gap + abs(rng.gauss(0, 0.02)) + (0.2 if rng.random() < 0.3 else 0)
             for _ in range(rng.choice([3, 6, 9, 40]))]
        step = rng.choice([0.0, 0.2])
        for delta in (1e-9, 0.02):
            found = stats.compare_prepared(stats.Prepared(a), stats.Prepared(b), delta, step=step)
            assert found.outcome != stats.FASTER


# --------------------------------------------------------------------------- the table's rows


def _rich_table(table: Table, widths, console: Console) -> str:
    """The table as rich.table.Table renders it, row by row (what print_table did before)."""
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    rich_table = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col, width in zip(table.columns, widths):
        rich_table.add_column(Text(terminal._wrapped(col.name, width)), justify=col.align, width=width,
                              no_wrap=not col.wrap, overflow="fold" if col.wrap else "ellipsis")
    previous = object()
    for group, row in zip(table.groups, table.rows):
        if group != previous and rich_table.row_count:
            rich_table.add_section()
        previous = group
        rich_table.add_row(*(terminal._styled(col.name, cell) for col, cell in zip(table.columns, row)))
    console.print(Text(table.title, style="bold"))
    console.print(rich_table)
    return console.file.getvalue()


class _AsciiFile(io.StringIO):
    encoding = "ascii"


@pytest.mark.parametrize("console", [
    dict(color_system=None), dict(force_terminal=True, color_system="truecolor"),
    dict(force_terminal=True, color_system="standard", file=_AsciiFile),
], ids=["plain", "truecolor", "ascii"])
@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_table_rows_are_the_ones_rich_lays_out(console, width):
    """Every kind of cell: figures right-justified, words that fit and words to wrap, styled
    columns (median, flags, verified), an empty flag, a wide character, sections between sizes."""
    table = Table("ipc · bandwidth · stream", "bandwidth",
                  [Column("size"), Column("variant", "left", 0, wrap=True), Column("median µs"),
                   Column("median GB/s"), Column("±", priority=1), Column("verified", "left", 6),
                   Column("flags", "left", 2, wrap=True)],
                  [["4 B", "ce", "2.41", "0.00", "±0.5%", "✓", ""],
                   ["4 B", "pinned-hostsync-with-a-long-name", "23.3", "0.00", "±15%", "✗",
                    "few samples, L2, call-bound"],
                   ["16 MiB", "sm", "300", "56.0", "±2.8%", "–", "two states ×2"],
                   ["16 MiB", "ce", "298", "56.2", "±0.3%", "✓", "above ceiling"]],
                  [4, 4, 16 << 20, 16 << 20])
    fitted, widths = terminal.fit(table, width)
    options = {"width": width, "highlight": False, "soft_wrap": False, "file": io.StringIO, **console}
    expected = _rich_table(fitted, widths, Console(**{**options, "file": options["file"]()}))
    out = Console(**{**options, "file": options["file"]()})
    terminal.print_table(table, out)
    assert out.file.getvalue() == expected
