"""The one-screen summary `run` prints at the end: within 80 columns without a cut cell, in at
most 40 lines, for every committed reference run and a two-measure (schema 2) run."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from rich.console import Console

from gpuipc_bench.cli import cli
from gpuipc_bench.paths import BUILTIN, to_metadata
from gpuipc_bench.report import render_run_summary
from gpuipc_bench.results import read_results, write_results

HERE = Path(__file__).parent
RESULTS = HERE.parent / "results"
REFERENCES = sorted(RESULTS.glob("*.csv"))
H100, H100_SHARING = RESULTS / "h100-pcie-all.csv", RESULTS / "h100-pcie-latency-sharing.csv"
H200 = RESULTS / "h200x2-nvlink-all.csv"
SMALL = HERE / "data" / "small_run.csv"


def summary_text(path: Path, width: int = 80, source: str | None = None) -> str:
    df, meta = read_results(path)
    console = Console(record=True, width=width, color_system=None, file=io.StringIO())
    render_run_summary(df, meta, console, source=source or str(path))
    return console.export_text()


def assert_one_screen(text: str, width: int = 80) -> None:
    lines = text.splitlines()
    assert len(lines) <= 40, f"{len(lines)} lines"
    assert max(len(line) for line in lines) <= width
    assert "…" not in text and "..." not in text


def default_like(tmp_path: Path) -> Path:
    """The H100 reference with its latency/sharing rows appended: a default run on one GPU."""
    body = [line for line in H100_SHARING.read_text().splitlines() if not line.startswith("#")][1:]
    path = tmp_path / "default-like.csv"
    path.write_text(H100.read_text() + "\n".join(body) + "\n")
    return path


def two_measures(source: Path, tmp_path: Path) -> Path:
    """A schema-2 run made from a reference: every transfer path measured both streamed and
    handed over (a fixed hand-off cost added), small sizes flagged L2-resident."""
    df, meta = read_results(source)
    transfers = df[(df["metric"] == "bandwidth") & df["path"].isin(["staging", "ipc", "mmap", "peer"])]
    extra = []
    for measure, factor, add in (("handoff", 1.0, 20e-6), ("stream", 0.9, 0.0)):
        part = transfers[transfers["measure"] != measure].copy()
        part["measure"] = measure
        part["seconds"] = part["seconds"] * factor + add
        part["bandwidth_gbps"] = part["bytes"] / part["seconds"] / 1e9
        extra.append(part)
    out = pd.concat([df, *extra], ignore_index=True)
    out["l2_resident"] = (out["bytes"] <= 16 << 20).astype("boolean")
    out.loc[out["metric"] == "setup", "l2_resident"] = pd.NA
    path = tmp_path / f"{source.stem}-v2.csv"
    write_results(path, out, {**meta, **to_metadata(BUILTIN)})
    return path


@pytest.mark.skipif(not REFERENCES, reason="reference runs not in this checkout")
@pytest.mark.parametrize("path", REFERENCES, ids=[p.stem for p in REFERENCES])
def test_summary_of_each_reference_run_fits_one_screen(path):
    text = summary_text(path)
    assert_one_screen(text)
    assert text.startswith("gpuipc-bench · vm · ")
    assert " ".join(text.split()).endswith(f"every table and warning: gpuipc-bench report {path}")


@pytest.mark.skipif(not H100.exists(), reason="reference runs not in this checkout")
def test_summary_of_a_default_like_run_has_the_verdict_figures_and_break_even(tmp_path):
    text = summary_text(default_like(tmp_path))
    assert_one_screen(text)
    lines = text.splitlines()
    assert len(lines[0]) <= 80 and "NVIDIA H100 80GB HBM3" in lines[0]  # the machine in one line
    assert "GPU 0 → GPU 0 · time-sliced · measures mixed (schema 1)" in text
    words = " ".join(text.split())
    assert "64 MiB – 1 GiB ipc/push ~ ce staging 46.0–54.8×" in words
    assert "4 KiB – 4 MiB ipc/push (~ ce, sm) staging 9.97–106×" in words  # tied at some of the sizes
    assert "sharing" not in text.split("GB/s of each path")[0]  # no sharing row in the verdict
    assert "ipc       GPU 0 → GPU 0" in text and "1,478 ±0.4% 100%" in text  # ipc at 256 MiB: 100% of d2d
    assert "Break-even against staging" in text and "from 4 MiB" in text
    assert "warnings:" in text and "bimodal" in text


@pytest.mark.skipif(not H100.exists(), reason="reference runs not in this checkout")
@pytest.mark.parametrize("source", [H100, H200], ids=["h100", "h200"])
def test_summary_of_a_run_with_both_measures_fits_one_screen(tmp_path, source):
    text = summary_text(two_measures(source, tmp_path))
    assert_one_screen(text)
    assert "  handoff  " in text and "  stream   " in text
    assert "*: a cache figure at some sizes (L2-resident, or above its ceiling)" in " ".join(text.split())


@pytest.mark.skipif(not H100.exists(), reason="reference runs not in this checkout")
@pytest.mark.parametrize("width", [100, 120])
def test_summary_at_wider_terminals(tmp_path, width):
    assert_one_screen(summary_text(default_like(tmp_path), width=width), width=width)


def test_summary_of_the_small_run_without_intervals():
    text = summary_text(SMALL)
    assert_one_screen(text)
    assert "stream 4 KiB – 64 MiB ipc/ce sm 1.13×" in " ".join(text.split())
    assert "0.418 ±? 28%" in text  # five samples: no 95% interval


def test_summary_prints_untrusted_text_as_it_is(tmp_path):
    weird = tmp_path / "[cuda12]"
    weird.mkdir()
    copy = weird / "run.csv"
    copy.write_bytes(SMALL.read_bytes())
    text = summary_text(copy)
    assert "[cuda12]/run.csv" in text


def test_run_prints_the_summary_then_the_csv_path(tmp_path, no_leaks):
    out = tmp_path / "run.csv"
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--out", str(out), "--sizes", "64,4K", "--iterations", "3",
                                      "--warmup", "1"], env={"COLUMNS": "80"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = result.output
    assert "No link has two paths between the same two processes" in text and "host/shared-buffer" in text
    assert f"every table and warning: gpuipc-bench report {out}" in " ".join(text.split())
    summary = text[text.index("gpuipc-bench · "):text.index("wrote")]
    assert_one_screen(summary)


def test_summary_and_report_of_the_harness_rows(monkeypatch, tmp_path, no_leaks):
    """The GPU scenarios on the fake CUDA layer (made-up times, the harness's real rows: both
    measures, '-sm' and two-hop ceilings, setup rows repeated): the summary fits one screen,
    the report cuts nothing, every transfer path is ranked in both measures."""
    import fake_gpu
    from gpuipc_bench.scenarios import SCENARIOS

    from gpuipc_bench.cli.run import path_facts
    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.launcher import run_scenario
    from gpuipc_bench.report import render_terminal
    from gpuipc_bench.results import ResultsFile

    fake_gpu.install(monkeypatch)
    monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    out = ResultsFile(tmp_path / "fake.csv", {"host": "fake", "gpu.0.name": "Fake GPU", **path_facts()})
    for name in ("staging", "ipc", "mmap"):
        config = RunConfig(scenarios=(name,), sizes=(4, 64 << 10), min_samples=6, max_samples=6, warmup=1,
                           timeout=20.0)
        scenario = SCENARIOS[name]
        outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=lambda r: out.add([r]),
                               on_progress=lambda n: None)
        assert outcome.ok, outcome.error
    out.write(partial=False)
    text = summary_text(out.path)
    assert_one_screen(text)
    assert "  handoff  " in text and "  stream   " in text
    df, meta = read_results(out.path)
    for width in (80, 120):
        console = Console(record=True, width=width, color_system=None, file=io.StringIO())
        render_terminal(df, meta, console)
        report = console.export_text()
        assert max(len(line) for line in report.splitlines()) <= width and "…" not in report
        assert "mmap · bandwidth · handoff" in report
