"""Rows of MPS at a share of the SMs (--sharing mps:25) say `sharing=mps` with their share in
`mps_thread_pct`; the analysis keeps them apart from plain MPS: a condition, a decision and a
section of the summary of their own, named 'mps:25'."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from click.testing import CliRunner
from rich.console import Console

from gpuipc_bench.analysis import analyse, summarize
from gpuipc_bench.analysis.conditions import with_mps_shares
from gpuipc_bench.cli import cli
from gpuipc_bench.paths import BUILTIN, to_metadata
from gpuipc_bench.report import render_run_summary
from gpuipc_bench.results import new_row, read_results, typed_frame, write_results

MIB = 1 << 20
# The time per transfer of each variant at each share: at all the SMs the copy engine is the
# faster, at a quarter of them the kernel copy (as on an H100 the other way round: any order does).
SECONDS = {(100, "ce"): 20e-6, (100, "sm"): 30e-6, (25, "ce"): 60e-6, (25, "sm"): 40e-6}


def rows(share: int, sharing: str = "mps") -> list[dict]:
    return [new_row(scenario="ipc", path="ipc", variant=variant, measure="handoff", metric="bandwidth", src=0,
                    dst=0, bytes=MIB, iteration=i, seconds=SECONDS[share, variant] * (1 + i / 100), workers=2,
                    verified=True, sharing=sharing, mps_thread_pct=share)
            for variant in ("ce", "sm") for i in range(6)]


@pytest.fixture
def both(tmp_path):
    """A crafted CSV with an MPS run at every SM and one at 25%, as `--sharing mps,mps:25` writes it."""
    path = tmp_path / "mps-and-mps25.csv"
    write_results(path, typed_frame(pd.DataFrame.from_records(rows(100) + rows(25))), to_metadata(BUILTIN))
    return path


def test_each_share_is_a_condition_of_its_own(both):
    df, meta = read_results(both)
    assert set(df["sharing"]) == {"mps"}  # the CSV says mps for both, the share in its own column
    summary = summarize(df, meta=meta)
    got = {(r.sharing, r.variant): (r.samples, r.median_s) for r in summary.itertuples()}
    assert got == {("mps", "ce"): (6, pytest.approx(20.5e-6)), ("mps", "sm"): (6, pytest.approx(30.75e-6)),
                   ("mps:25", "ce"): (6, pytest.approx(61.5e-6)), ("mps:25", "sm"): (6, pytest.approx(41e-6))}


def test_each_share_has_its_decision_and_its_section(both):
    df, meta = read_results(both)
    answer = analyse(df, meta).answer
    assert {(d.sharing, d.bytes, d.choice) for d in answer.decisions} == {
        ("mps", MIB, "ipc/ce"), ("mps:25", MIB, "ipc/sm")}
    console = Console(record=True, width=80, color_system=None, file=io.StringIO())
    render_run_summary(df, meta, console, source=str(both))
    text = console.export_text()
    assert "· mps · hand-off" in text and "\n mps:25 · handoff" in text, text
    result = CliRunner().invoke(cli, ["report", str(both), "--summary"], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and result.output == text, result.output


def test_a_share_beside_a_busy_neighbour_keeps_both_names():
    df = typed_frame(pd.DataFrame.from_records(rows(100) + rows(25, "mps+copy") + rows(100, "mps+copy")))
    assert list(dict.fromkeys(with_mps_shares(df)["sharing"])) == ["mps", "mps:25+copy", "mps+copy"]


def test_a_run_without_a_share_is_read_as_it_was():
    df = typed_frame(pd.DataFrame.from_records(rows(100)))
    assert with_mps_shares(df) is df
    keyed = with_mps_shares(typed_frame(pd.DataFrame.from_records(rows(25))))
    assert with_mps_shares(keyed) is keyed  # keyed once
