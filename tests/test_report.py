"""Reports: the Markdown golden file, the terminal report and its width fitting, partial runs,
schema-1 files, untrusted text, the number formats.

To accept a deliberate change of the Markdown, regenerate the golden file with
    GPUIPC_UPDATE_GOLDEN=1 python -m pytest tests/test_report.py
and read the diff before committing it.
"""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest
from rich.console import Console

from gpuipc_bench.errors import ResultsFormatError
from gpuipc_bench.report import load_runs, render_markdown, render_terminal
from gpuipc_bench.report.tables import Column, Table
from gpuipc_bench.report.terminal import fit
from gpuipc_bench.report.wording import (
    fmt_interval,
    fmt_num,
    fmt_percent,
    fmt_pm,
    fmt_ratio,
    machine_summary,
)
from gpuipc_bench.results import ResultsFile, empty_frame, new_row, read_results

HERE = Path(__file__).parent
SMALL = HERE / "data" / "small_run.csv"
SMALL_V1 = HERE / "data" / "small_run_v1.csv"
GOLDEN = HERE / "golden" / "summary.md"


@pytest.fixture
def small():
    return read_results(SMALL)


def terminal_text(df, meta, width: int = 120, **kwargs) -> str:
    console = Console(record=True, width=width, color_system=None, file=io.StringIO())
    render_terminal(df, meta, console, **kwargs)
    return console.export_text()


def written(tmp_path: Path, rows, name="r.csv", **meta) -> tuple:
    rf = ResultsFile(tmp_path / name, {"host": "n1", **meta})
    rf.add(rows)
    rf.write(partial=False)
    return read_results(tmp_path / name)


# --------------------------------------------------------------------------- markdown


def test_markdown_matches_golden_file(small):
    df, meta = small
    text = render_markdown(df, meta)
    if os.environ.get("GPUIPC_UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")


def test_markdown_is_deterministic(small):
    df, meta = small
    assert render_markdown(df, meta) == render_markdown(df.copy(), dict(meta))


def test_markdown_tables_are_well_formed(small):
    text = render_markdown(*small)
    blocks = [block for block in text.split("\n\n") if block.startswith("| ")]
    assert len(blocks) == 4  # bandwidth, ceilings, latency, setup
    for block in blocks:
        widths = {line.count("|") - line.count("\\|") for line in block.split("\n")}
        assert len(widths) == 1, block


def test_markdown_verdict_names_the_measure_and_the_tie_rule(small):
    text = render_markdown(*small)
    assert "faster where the whole interval lies beyond 1 + delta (delta: 2%" in text and "undecided (≈?)" in text
    assert "- **GPU 0 → GPU 0 · time-sliced · stream (messages queued back to back)**" in text
    assert "  - 4 KiB – 64 MiB: **IPC mapping, copy engine (ipc/ce)**" in text
    # ipc/sm's interval is wide at 4 KiB, but it is ranked with its spread: nothing is left out
    assert "not ranked" not in text and "next IPC mapping, kernel copy 1.13–1.29×" in text


def test_markdown_shows_partial_run_and_failed_verification(small):
    df, meta = small
    df = df.copy()
    df.loc[(df["variant"] == "sm") & (df["bytes"] == 4096) & (df["iteration"] == 2), "verified"] = False
    meta = {**meta, "partial": "true", "status": "failed: scenario peer: worker 1 died"}
    text = render_markdown(df, meta)
    assert "partial run" in text and "failed: scenario peer: worker 1 died" in text
    bandwidth = text.split("### bandwidth")[1].split("###")[0]
    assert [line for line in bandwidth.splitlines() if "| 4 KiB | ipc/sm |" in line and "bytes wrong" in line]
    assert "bytes wrong in some samples (1 figure): ipc/sm 4 KiB" in text
    assert "every sample's bytes verified" not in text


def test_markdown_of_a_file_without_rows():
    text = render_markdown(empty_frame(), {"host": "n1", "partial": "true", "status": "failed: setup"})
    assert "No samples" in text and "partial run" in text and "**n1**" in text


def test_markdown_lists_links_when_a_path_has_several(tmp_path):
    rows = []
    for src, dst, secs in (("0", "1", 2e-5), ("1", "0", 1e-5)):
        for i in range(6):
            rows.append(new_row(scenario="peer", path="peer", variant="ce", measure="stream", src=src, dst=dst,
                                bytes=1 << 20, iteration=i, seconds=secs * (1 + 0.001 * i), verified=True, workers=2,
                                sharing="exclusive", ceiling=f"peer@{src}>{dst}"))
    text = render_markdown(*written(tmp_path, rows, **{"gpu.0.name": "A", "gpu.1.name": "B"}))
    assert "GPU 0: A, GPU 1: B" in text
    assert "| 1 MiB | peer/ce | GPU 0 → GPU 1 |" in text and "| 1 MiB | peer/ce | GPU 1 → GPU 0 |" in text
    assert "No link has two paths between the same two processes to compare" in text


def test_a_schema_1_file_still_reports_and_says_its_measures_are_mixed():
    df, meta = read_results(SMALL_V1)
    text = render_markdown(df, meta)
    assert "measures mixed (a schema-1 file)" in text and "### Verdict" in text
    terminal = terminal_text(df, meta, width=80)
    assert "measures mixed (a" in terminal and "Break-even against staging" in terminal


# --------------------------------------------------------------------------- terminal


def test_terminal_report_has_the_figures(small):
    text = terminal_text(*small, detailed=True)
    assert text.splitlines()[0].startswith("gpuipc-bench · dgx-a17 · 2× NVIDIA H100 80GB HBM3")
    for expected in (
        "driver 550.54.15", "CUDA 12.4",
        "staging · bandwidth · handoff", "ipc · bandwidth · stream", "ipc · one-way latency", "setup costs",
        "4 KiB", "64 MiB", "8 B",
        "1,372", "95%", "48.9",  # ipc ce 64 MiB: GB/s, % of d2d@0, µs per transfer
        "2,476", "27.1", "51%",  # staging pinned 64 MiB vs d2h@0
        "ipc_open_cold", "0.142", "host_alloc_pinned", "21.4",
        "ceiling", "verified", "✓", "MAD", "95% CI",
        "Verdict", "Warnings (7)", "first sample much slower than the rest (1 figure): staging/pageable 4 KiB 2.2×",
        "fewer than 3 samples",
    ):
        assert expected in text, expected
    assert "partial" not in text
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "…" not in text


@pytest.mark.parametrize("width", [80, 100, 110, 120])
def test_terminal_report_fits_without_cropping_figures(small, width):
    for detailed in (False, True):
        text = terminal_text(*small, width=width, detailed=detailed)
        assert max(len(line) for line in text.splitlines()) <= width
        assert "…" not in text and "..." not in text
        for expected in ("1,372", "2,476", "0.142", "64 MiB", "4 KiB", "0.00610"):
            assert expected in text, expected


def test_terminal_report_says_partial(small):
    df, meta = small
    text = terminal_text(df, {**meta, "partial": "true", "status": "interrupted"})
    assert "partial run" in text and "status: interrupted" in text


def test_terminal_report_without_rows():
    text = terminal_text(empty_frame(), {"host": "n1"})
    assert "n1" in text and "No samples" in text


def test_untrusted_text_never_reaches_markup(tmp_path):
    rows = [new_row(path="host", variant="[bold]x[/]", measure="handoff", seconds=1e-6, bytes=64, iteration=i,
                    verified=True, src="host", dst="host") for i in range(6)]
    df, meta = written(tmp_path, rows, note="install gpuipc-bench[cuda12]", command="run --out [red]x.csv")
    meta["host"] = "[red]h"
    text = terminal_text(df, meta)
    assert "[bold]x[/]" in text and "[red]h" in text and "gpuipc-bench[cuda12]" in text and "[red]x.csv" in text


def test_fit_wraps_headers_then_words_then_leaves_out_columns_by_priority():
    table = Table("t", "bandwidth", [Column("size"), Column("variant", "left", 0, True), Column("median GB/s"),
                                     Column("95% CI GB/s", priority=3), Column("flags", "left", 1, True)],
                  [["64 MiB", "pinned-hostsync", "1,372", "1,348–1,398", "bimodal, wide interval"]])
    kept, widths = fit(table, 200)
    assert kept.names == table.names and widths == [6, 15, 11, 11, 22]
    kept, widths = fit(table, 70)  # headers wrap: 'median GB/s' over two lines
    assert kept.names == table.names and widths[2] == 6
    kept, widths = fit(table, 60)  # the flags wrap, nothing left out
    assert kept.names == table.names and widths[4] < 22 and sum(widths) + 3 * 4 <= 60
    kept, widths = fit(table, 45)  # the interval goes first
    assert kept.names == ["size", "variant", "median GB/s", "flags"] and sum(widths) + 3 * 3 <= 45


# --------------------------------------------------------------------------- loading, formats


def test_load_runs_reads_each_and_names_a_bad_one(tmp_path):
    runs = load_runs([SMALL, SMALL])
    assert len(runs) == 2 and runs[0][1]["host"] == "dgx-a17"
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    with pytest.raises(ResultsFormatError, match="notes.txt"):
        load_runs([SMALL, bad])


@pytest.mark.parametrize(
    "value, text",
    [(1449.44, "1,449"), (137.2, "137"), (27.13, "27.1"), (2.4, "2.40"), (0.29, "0.290"),
     (4.1e-5, "4.10e-05"), (0.0, "0"), (float("nan"), "—"), (None, "—")],
)
def test_fmt_num(value, text):
    assert fmt_num(value) == text


def test_fmt_interval_pm_percent_ratio():
    assert fmt_interval(1.0, 2.0) == "1.00–2.00" and fmt_interval(float("nan"), 2.0) == "—"
    assert fmt_pm(99.0, 100.0, 100.4) == "±1.0%" and fmt_pm(88, 100, 101) == "±12%"
    assert fmt_pm(1, 1, float("nan")) == "—"
    assert fmt_percent(0.951) == "95%" and fmt_percent(0.042) == "4.2%" and fmt_percent(float("nan")) == "—"
    assert fmt_ratio(1.36) == "1.36×" and fmt_ratio(1.01, 0.99, 1.03) == "~1.01×" and fmt_ratio(12.34) == "12.3×"


def test_every_number_is_whole_no_ellipsis_in_any_cell(small):
    text = terminal_text(*small, width=80)
    assert not re.search(r"\d[…]|[…]\d", text)


def test_machine_header_reads_the_machine_metadata():
    meta = {
        "host": "n1", "gpu.1.name": "H200", "gpu.0.name": "H200", "gpu.2.name": "H200",
        "driver": "580.65", "cuda_runtime": "12.9", "cuda_driver": "13.0", "cupy": "13.6.0", "mps": "running",
        "link.0-1": "NV18", "peer.0-1": "yes", "link.0-2": "SYS", "peer.0-2": "no",
        "link.1-2": "SYS", "peer.1-2": "no",
    }
    assert machine_summary(meta) == [
        "n1", "3× H200", "driver 580.65", "CUDA 12.9 (driver supports 13.0)", "CuPy 13.6.0", "MPS running",
        "links 0-1 NV18, 0-2 SYS no P2P, 1-2 SYS no P2P",
    ]
    same = {"host": "n2", "link.0-1": "NV18", "link.0-2": "NV18", "link.1-2": "NV18"}
    assert machine_summary(same) == ["n2", "no GPU", "links all NV18"]
    assert machine_summary(meta, leave_out=("cupy", "cuda_driver", "links"))[-2:] == ["CUDA 12.9", "MPS running"]


def test_pair_matrices_only_for_a_run_over_several_gpu_pairs():
    from pathlib import Path

    from gpuipc_bench.analysis import analyse
    from gpuipc_bench.report.matrix import pair_matrices
    from gpuipc_bench.results import read_results

    results = Path(__file__).parent.parent / "results"
    df, meta = read_results(results / "h200x2-nvlink-all.csv")
    tables = pair_matrices(analyse(df, meta).summary, meta)
    assert [t.title for t in tables] == ["peer · GB/s at 256 MiB, best streamed variant ± its 95% interval",
                                         "links between the GPUs (NVML)"]
    peer, links = tables
    assert peer.names == ["src \\ dst", "GPU 0", "GPU 1"]
    assert peer.rows[0][1] == "—" and peer.rows[0][2].startswith("393") and "±" in peer.rows[0][2]
    assert links.rows == [["GPU 0", "—", "NV18"], ["GPU 1", "NV18", "—"]]
    df, meta = read_results(results / "h100-default.csv")
    assert pair_matrices(analyse(df, meta).summary, meta) == []
