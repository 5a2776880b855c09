"""Reports: the markdown golden file, the terminal tables, partial runs, bad inputs.

To accept a deliberate change of the markdown, regenerate the golden file with
    GPUIPC_UPDATE_GOLDEN=1 python -m pytest tests/test_report.py
and read the diff before committing it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rich.console import Console

from gpuipc_bench.errors import ResultsFormatError
from gpuipc_bench.report import fmt_num, fmt_percent, fmt_range, load_runs, render_markdown, render_terminal
from gpuipc_bench.results import ResultsFile, empty_frame, new_row, read_results

HERE = Path(__file__).parent
SMALL = HERE / "data" / "small_run.csv"
GOLDEN = HERE / "golden" / "summary.md"


@pytest.fixture
def small():
    return read_results(SMALL)


def terminal_text(df, meta, width: int = 120) -> str:
    console = Console(record=True, width=width, color_system=None)
    render_terminal(df, meta, console)
    return console.export_text()


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
    assert len(blocks) == 5  # staging, ipc bandwidth, ipc latency, ceiling, setup
    for block in blocks:
        widths = {line.count("|") for line in block.split("\n")}
        assert len(widths) == 1, block


def test_markdown_shows_partial_run_and_failed_verification(small):
    df, meta = small
    df = df.copy()
    df.loc[(df["variant"] == "sm") & (df["bytes"] == 4096) & (df["iteration"] == 2), "verified"] = False
    meta = {**meta, "partial": "true", "status": "failed: scenario peer: worker 1 died"}
    text = render_markdown(df, meta)
    assert "partial run" in text and "failed: scenario peer: worker 1 died" in text
    bandwidth = text.split("### bandwidth")[1].split("###")[0]
    assert "| verified |" in bandwidth
    assert [line for line in bandwidth.splitlines() if "| 4 KiB | ipc/sm |" in line and line.endswith("✗ |")]
    assert "every sample's bytes verified" not in text


def test_markdown_of_a_file_without_rows():
    text = render_markdown(empty_frame(), {"host": "n1", "partial": "true", "status": "failed: setup"})
    assert "No samples" in text and "partial run" in text and "**n1**" in text


def test_markdown_lists_links_when_a_path_has_several(tmp_path):
    rows = []
    for src, dst, secs in (("0", "1", 2e-5), ("1", "0", 1e-5)):
        for i in range(5):
            rows.append(new_row(scenario="peer", path="peer", variant="ce", src=src, dst=dst, bytes=1 << 20,
                                iteration=i, seconds=secs * (1 + 0.01 * i), verified=True, workers=2,
                                sharing="exclusive", ceiling=f"peer@{src}>{dst}"))
    rf = ResultsFile(tmp_path / "peer.csv", {"host": "n1", "gpu.0.name": "A", "gpu.1.name": "B"})
    rf.add(rows)
    rf.write(partial=False)
    text = render_markdown(*read_results(tmp_path / "peer.csv"))
    assert "GPU 0: A, GPU 1: B" in text
    assert "| size | path/variant | link |" in text
    assert "| 1 MiB | peer/ce | GPU 0 → GPU 1 |" in text
    assert "| 1 MiB | peer/ce | GPU 1 → GPU 0 |" in text
    assert "No link has two path/variants to compare" in text  # one variant on each link


# --------------------------------------------------------------------------- terminal


def test_terminal_report_has_the_figures(small):
    text = terminal_text(*small)
    assert text.splitlines()[0].startswith("gpuipc-bench · dgx-a17 · 2× NVIDIA H100 80GB HBM3")
    for expected in (
        "driver 550.54.15", "CUDA 12.4",
        "staging · bandwidth", "ipc · bandwidth", "ipc · one-way latency", "setup costs",
        "4 KiB", "64 MiB", "8 B",
        "1,372", "1,348–1,398", "95%",  # ipc ce 64 MiB: GB/s, spread, % of d2d@0
        "48.9", "48.0–49.8",  # its µs per transfer
        "2,476", "27.1", "51%",  # staging pinned 64 MiB vs d2h@0
        "ipc_open_cold", "0.142", "host_alloc_pinned", "21.4",
        "% of ceiling", "verified", "✓",
        "Warnings", "first sample 2.2x slower than the rest (try more --warmup)",
        "only 3 samples (try --iterations 20)",
    ):
        assert expected in text, expected
    assert "partial" not in text
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "…" not in text  # no figure cropped


def test_terminal_report_fits_80_columns_without_cropping_figures(small):
    text = terminal_text(*small, width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for expected in ("1,372", "1,348–1,398", "95%", "2,476", "0.142", "64 MiB", "4 KiB"):
        assert expected in text, expected


def test_terminal_report_says_partial(small):
    df, meta = small
    text = terminal_text(df, {**meta, "partial": "true", "status": "interrupted"})
    assert "partial run" in text and "status: interrupted" in text


def test_terminal_report_without_rows():
    text = terminal_text(empty_frame(), {"host": "n1"})
    assert "n1" in text and "No samples" in text


def test_terminal_escapes_markup_in_names(tmp_path):
    rows = [new_row(path="host", variant="[bold]x[/]", seconds=1e-6, bytes=64, iteration=i, verified=True)
            for i in range(5)]
    rf = ResultsFile(tmp_path / "r.csv", {"host": "[red]h"})
    rf.add(rows)
    rf.write(partial=False)
    text = terminal_text(*read_results(tmp_path / "r.csv"))
    assert "[bold]x[/]" in text and "[red]h" in text


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
     (4.1e-5, "4.10e-05"), (0.0, "0"), (float("nan"), "—")],
)
def test_fmt_num(value, text):
    assert fmt_num(value) == text


def test_fmt_range_and_percent():
    assert fmt_range(1.0, 2.0) == "1.00–2.00"
    assert fmt_range(1.0, 1.0, samples=1) == "—"
    assert fmt_percent(0.951) == "95%" and fmt_percent(0.042) == "4.2%" and fmt_percent(float("nan")) == "—"


def test_machine_header_reads_the_machine_metadata():
    from gpuipc_bench.report import machine_summary

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
