"""`gpuipc-bench report` through click's CliRunner: formats, comparing runs, plots, bad input."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import assert_refused
from gpuipc_bench.analysis import SUMMARY_COLUMNS, summarize
from gpuipc_bench.cli import cli
from gpuipc_bench.report import MARKDOWN_LIMIT
from gpuipc_bench.report.markdown import fit as fit_markdown
from gpuipc_bench.results import SCHEMA_VERSION, ResultsFile, new_row, read_results, write_results

HERE = Path(__file__).parent
SMALL = HERE / "data" / "small_run.csv"
SMALL_V1 = HERE / "data" / "small_run_v1.csv"
RESULTS = HERE.parent / "results"
H100 = RESULTS / "h100-pcie-all.csv"
H200 = RESULTS / "h200x2-nvlink-all.csv"
H200_STAGING = RESULTS / "h200x2-nvlink-staging-mmap-gpu0-to-gpu1.csv"
H100_SHARING = RESULTS / "h100-pcie-latency-sharing.csv"
references = pytest.mark.skipif(not (H100.exists() and H200.exists()), reason="reference runs not in this checkout")


@pytest.fixture(scope="module")
def h100_default_like(tmp_path_factory):
    """A default-like H100 run: every scenario of one GPU, latency and sharing included (the
    reference run with the rows of the latency/sharing run appended)."""
    lines = H100_SHARING.read_text().splitlines()
    body = [line for line in lines if not line.startswith("#")][1:]
    path = tmp_path_factory.mktemp("h100") / "h100-default-like.csv"
    path.write_text(H100.read_text() + "\n".join(body) + "\n")
    return path


def invoke(*args, columns: int | None = None):
    env = {"COLUMNS": str(columns)} if columns else None
    result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, env=env)
    return result.exit_code, result.output


# --------------------------------------------------------------------------- formats


def test_csv_is_the_summary_and_parses_back():
    code, out = invoke("report", "--format", "csv", SMALL)
    assert code == 0, out
    table = pd.read_csv(io.StringIO(out))
    assert list(table.columns) == ["file"] + list(SUMMARY_COLUMNS) + ["candidate"]  # competes in the decisions
    df, _ = read_results(SMALL)
    assert len(table) == len(summarize(df))
    ipc = table[(table["variant"] == "ce") & (table["bytes"] == 64 << 20)].iloc[0]
    assert ipc["median_gbps"] == pytest.approx(1372, rel=1e-3)
    assert ipc["median_gbps"] == pytest.approx((64 << 20) / ipc["median_s"] / 1e9)
    assert ipc["fraction_of_ceiling"] == pytest.approx(ipc["median_gbps"] / ipc["ceiling_gbps"])
    assert set(table["file"]) == {str(SMALL)}
    assert {"ci_lo_s", "ci_hi_s", "ci_lo_gbps", "ci_hi_gbps", "mad_rel", "bimodal", "unstable"} <= set(table.columns)


def test_json_has_summary_decisions_break_even_and_warnings():
    code, out = invoke("report", "--format", "json", "--amortise-over", "50", "--min-effect", "5", SMALL_V1)
    assert code == 0, out
    doc = json.loads(out)
    (run,) = doc["runs"]
    assert run["file"] == str(SMALL_V1) and run["metadata"]["host"] == "dgx-a17" and run["min_effect"] == 0.05
    assert len(run["summary"]) == len(summarize(read_results(SMALL_V1)[0]))
    assert {"median_s", "ci_lo_s", "ci_hi_s", "mad_rel", "bimodal", "fraction_of_ceiling"} <= set(run["summary"][0])
    found = [d for d in run["decisions"] if d["src"] == d["dst"] == "0"]
    assert found and {d["measure"] for d in found} == {"mixed"}
    assert found[-1]["choice"] == "ipc/ce" and found[-1]["outcome"] in ("faster", "same", "undecided")
    (be,) = run["break_even"]
    assert be["path"] == "ipc" and be["amortise_over"] == 50 and be["per_transfer"]["from_bytes"] == 64 << 20
    assert {w["cause"] for w in run["warnings"]} >= {"few-samples", "slow-first-sample"}
    assert all(w["says"] for w in run["warnings"])
    assert "comparison" not in doc


def test_markdown_from_the_cli_names_the_file_for_the_rest():
    code, out = invoke("report", "--format", "markdown", SMALL)
    assert code == 0
    assert out.startswith("## gpuipc-bench results")
    assert f"`gpuipc-bench report {SMALL}`" in out
    assert "> note: synthetic figures for the report tests, not a measurement" in out


def test_terminal_report_ends_with_the_verdict_and_warnings():
    code, out = invoke("report", SMALL_V1, columns=120)
    assert code == 0
    verdict = out.index("Verdict")
    assert out.index("setup costs") < verdict < out.index("Warnings")
    assert "IPC mapping, copy engine" in out
    assert "Break-even against staging" in out and "paid every transfer" in out
    assert "from 64 MiB (loses at 4 KiB)" in out
    assert "--detailed" in out


def test_detailed_adds_columns_and_min_effect_changes_ties():
    _, plain = invoke("report", SMALL, columns=200)
    code, detailed = invoke("report", SMALL, "--detailed", columns=200)
    assert code == 0 and "MAD" in detailed and "MAD" not in plain.split("Verdict")[0]
    code, strict = invoke("report", "--format", "json", SMALL)
    code, loose = invoke("report", "--format", "json", "--min-effect", "50", SMALL)
    at = {d["bytes"]: d for d in json.loads(strict)["runs"][0]["decisions"] if d["measure"] == "stream"}
    assert at[64 << 20]["outcome"] == "faster" and at[64 << 20]["next"] == "IPC mapping, kernel copy"
    # ce and sm 13% apart at 64 MiB: the same within a 50% minimum effect
    at = {d["bytes"]: d for d in json.loads(loose)["runs"][0]["decisions"] if d["measure"] == "stream"}
    assert at[64 << 20]["outcome"] == "same" and at[64 << 20]["same"] == ["ipc/sm"]


# --------------------------------------------------------------------------- reference runs


@references
@pytest.mark.parametrize("path", [H100, H200, H200_STAGING])
def test_markdown_of_the_reference_runs_fits_a_github_comment(path):
    code, out = invoke("report", "--format", "markdown", path)
    assert code == 0
    assert len(out) < MARKDOWN_LIMIT
    assert "### Verdict" in out and "| size | path/variant | link |" in out
    for size in ("| 4 B |", "| 4 KiB |", "| 1 MiB |", "| 256 MiB |", "| 1 GiB |"):
        assert size in out
    assert "| 16 MiB |" not in out  # representative sizes only; the rest is in the terminal report


@references
def test_verdict_of_the_h200_run():
    code, out = invoke("report", "--format", "markdown", H200)
    assert code == 0
    assert ("- **GPU 0 → GPU 0 · time-sliced · measures mixed (a schema-1 file)**\n"
            "  - 4 B – 1 GiB: **IPC mapping, copy engine (ipc/ce, ipc/push)**") in out
    # peer/ce is faster from 1 MiB: the copy engine there, the kernel copy below
    assert "  - 1 MiB – 1 GiB: **peer copy engine (peer/ce)**" in out
    assert ("| ipc (ce/sm/push) | GPU 0 → GPU 0 | ipc_open_cold | 0.107 ms (1 sample: indicative) | at every size "
            "| from 4 MiB (loses at 1 MiB) |") in out
    assert "| peer (" not in out  # no staging on GPU 0 → GPU 1 in this run: no break-even against another link


@references
def test_no_verdict_of_a_default_like_run_names_a_sharing_aggregate_or_single_process_row(h100_default_like):
    from gpuipc_bench.analysis import analyse

    analysis = analyse(*read_results(h100_default_like))
    assert analysis.answer.decisions
    for d in analysis.answer.decisions:
        for lab in (d.choice, *d.members, *d.same, *d.close, *d.next_members):
            assert not lab.startswith(("sharing/", "host/", "barrier/", "ceiling/")), lab
            assert "aggregate" not in lab and lab != "peer/p2p-off"
        # the choice is the fastest figure's class, or shown the same as it, or undecided against it
        assert d.choice in d.members
        # the ratio never says the next mechanism is faster than the winner by more than the noise
        assert math.isnan(d.ratio) or d.ratio > 1 - d.delta
    code, out = invoke("report", h100_default_like, columns=100)
    assert code == 0
    verdict = out[out.index("Verdict"):out.index("Break-even")]
    assert "sharing/" not in verdict and "aggregate" not in verdict and "0.998" not in verdict


@references
def test_comparing_two_runs_gives_ratios_and_warns_that_the_machines_differ():
    code, out = invoke("report", "--format", "markdown", H100, H200)
    assert code == 0
    assert len(out) < MARKDOWN_LIMIT
    assert "The machines differ" in out
    assert "GPUs: 1× NVIDIA H100 80GB HBM3 (run 1) vs 2× NVIDIA H200 (run 2)" in out
    assert "GPU links: none (run 1) vs 0-1 NV18 (run 2)" in out
    assert "driver:" not in out.split("## run 1")[0]  # same driver: not a difference
    assert ("### bandwidth: median GB/s, run 2 ÷ run 1 · GPU 0 → GPU 0 · 2 workers · time-sliced (above 1: run 2 "
            "faster; ~: within the intervals)") in out
    ipc = next(line for line in out.splitlines() if line.startswith("| ipc/ce | stream |"))
    cells = [c.strip() for c in ipc.strip("|").split("|")]
    assert len(cells) == 7 and all(c.endswith("×") for c in cells[2:])
    assert 1.2 < float(cells[-1].rstrip("×")) < 1.6  # H200 HBM3e vs H100 HBM3 at 1 GiB
    assert "## run 1: " in out and "## run 2: " in out

    code, text = invoke("report", H100, H200, columns=80)
    assert code == 0
    assert "the machines differ" in text and "run 2 ÷ run 1" in text
    comparison = text[text.index("Comparing runs"):]
    assert "Decisions" in comparison
    # every ratio and size whole at 80 columns (the tables are split by link and mode to fit)
    assert max(len(line) for line in comparison.splitlines()) <= 80 and "…" not in comparison

    code, data = invoke("report", "--format", "json", H100, H200)
    doc = json.loads(data)
    assert len(doc["runs"]) == 2 and doc["machine_differences"]
    rows = [r for r in doc["comparison"] if r["path"] == "ipc" and r["variant"] == "ce" and r["bytes"] == 1 << 30
            and r["metric"] == "bandwidth"]
    assert len(rows) == 1 and rows[0]["ratio"] == pytest.approx(rows[0]["other_gbps"] / rows[0]["base_gbps"])
    assert rows[0]["ratio_lo"] <= rows[0]["ratio"] <= rows[0]["ratio_hi"]


@references
@pytest.mark.parametrize("columns", [80, 100, 110, 120])
def test_report_never_cuts_a_number_at_any_width(h100_default_like, columns):
    for path in (h100_default_like, H200):
        code, out = invoke("report", path, columns=columns)
        assert code == 0
        lines = out.splitlines()
        assert max(len(line) for line in lines) <= columns
        assert "…" not in out and "..." not in out


def test_same_machine_runs_give_no_difference_warning():
    code, out = invoke("report", "--format", "markdown", SMALL, SMALL)
    assert code == 0
    assert "machines differ" not in out and "1.00×" in out


def test_markdown_is_cut_to_fit_a_comment_and_says_so():
    sections = [["## head", ""]] + [["x" * 1000] * 10 for _ in range(10)] + [["<sub>the rest</sub>"]]
    text = fit_markdown(sections, limit=35_000)
    assert len(text) <= 35_000 and "left out to fit a GitHub comment" in text
    assert text.startswith("## head") and text.endswith("<sub>the rest</sub>")


# --------------------------------------------------------------------------- plots


def test_report_plot_into_a_folder_and_to_a_file(tmp_path):
    code, out = invoke("report", SMALL, "--format", "csv", "--plot", tmp_path / "plots")
    assert code == 0, out
    for kind in ("bandwidth", "latency", "setup"):
        path = tmp_path / "plots" / f"small_run-{kind}.png"
        assert path.stat().st_size > 8_000
    code, out = invoke("report", SMALL, "--format", "csv", "--plot", tmp_path / "fig.svg")
    assert code == 0 and (tmp_path / "fig.svg").exists() and (tmp_path / "fig-setup.svg").exists()
    code, out = invoke("report", SMALL, "--format", "csv", "--plot", tmp_path / "svgs", "--plot-format", "svg")
    assert code == 0 and (tmp_path / "svgs" / "small_run-latency.svg").exists()


@pytest.mark.parametrize("args, words", [
    (["--plot-format", "svg"], "--plot-format needs --plot"),
    (["--plot", "fig.jpg"], "a folder, or a file ending in .png or .svg"),
    (["--plot", "fig.png", "--plot-format", "svg"], "disagree"),
    (["--format", "html"], "Invalid value for '--format'"),
    (["--amortise-over", "0"], "--amortise-over"),
])
def test_report_refuses_bad_options_with_exit_2(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    code, out = invoke("report", SMALL, *args)
    assert code == 2 and words in out and "Traceback" not in out
    assert not list(tmp_path.iterdir()), "nothing drawn for refused input"


def test_run_plot_draws_the_plots_of_its_own_run(tmp_path, no_leaks):
    out = tmp_path / "run.csv"
    code, text = invoke("run", "-s", "host", "--out", out, "--sizes", "64,4K", "--iterations", "3", "--warmup", "1",
                        "--plot", tmp_path / "plots")
    assert code == 0, text
    assert (tmp_path / "plots" / "run-bandwidth.png").stat().st_size > 8_000
    assert "plots: " in text


def test_run_refuses_an_unwritable_plot_destination_before_any_work(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = tmp_path / "run.csv"
    code, text = invoke("run", "-s", "host", "--out", out, "--plot", blocker / "plots")
    assert code == 2 and "--plot" in text and not out.exists()


# --------------------------------------------------------------------------- bad files


def _write(path: Path, rows, **meta) -> Path:
    rf = ResultsFile(path, {"host": "n1", **meta})
    rf.add(rows)
    rf.write(partial=False)
    return path


def test_a_file_that_is_not_ours_is_exit_2_in_one_line(tmp_path):
    for name, data in (("other.csv", b"a,b\n1,2\n"), ("blob.bin", b"\x00\x01\x02"), ("empty.csv", b"")):
        path = tmp_path / name
        path.write_bytes(data)
        code, out = invoke("report", path)
        assert code == 2, out
        assert name in out and "Traceback" not in out and len(out.strip().splitlines()) == 1


def test_a_newer_schema_is_ours_so_exit_1(tmp_path):
    newer = tmp_path / "newer.csv"
    newer.write_text(SMALL.read_text().replace("# schema_version: 2\n", "# schema_version: 7\n"))
    code, out = invoke("report", newer)
    assert code == 1
    assert "written by a newer gpuipc-bench (schema 7)" in out and "pip install -e ." in out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1


def test_an_empty_run_holds_no_samples(tmp_path):
    path = _write(tmp_path / "empty-run.csv", [])
    code, out = invoke("report", "--format", "markdown", path)
    assert code == 1 and "the run holds no samples" in out and "empty-run.csv" in out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1


def test_a_run_whose_samples_all_failed_verification(tmp_path):
    rows = [new_row(path="host", variant="shared-buffer", bytes=64, iteration=i, seconds=1e-6, verified=False)
            for i in range(5)]
    rows.append(new_row(path="host", variant="alloc", metric="setup", seconds=1e-3))
    path = _write(tmp_path / "failed.csv", rows)
    code, out = invoke("report", path)
    assert code == 1
    assert "failed.csv: every one of its 5 measured samples failed verification" in out
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1


def test_some_failed_samples_are_reported_not_refused(tmp_path):
    rows = [new_row(path="host", variant="shared-buffer", bytes=64, iteration=i, seconds=1e-6, verified=i != 2)
            for i in range(5)]
    path = _write(tmp_path / "some.csv", rows)
    code, out = invoke("report", "--format", "markdown", path)
    assert code == 0 and "bytes wrong in some samples (1 figure): host/shared-buffer 64 B" in out


def test_the_first_bad_file_of_several_is_named(tmp_path):
    path = _write(tmp_path / "empty-run.csv", [])
    code, out = invoke("report", SMALL, path)
    assert code == 1 and "empty-run.csv" in out


def test_results_written_by_write_results_round_trip_through_report(tmp_path):
    df, meta = read_results(SMALL)
    copy = tmp_path / "copy.csv"
    write_results(copy, df, meta)
    assert invoke("report", "--format", "markdown", copy)[1] == invoke("report", "--format", "markdown", SMALL)[1] \
        .replace(str(SMALL), str(copy)).replace(f"schema {meta['schema_version']}", f"schema {SCHEMA_VERSION}")


# --------------------------------------------------------------------------- options refused before reading


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "101"])
def test_min_effect_out_of_range_is_refused(no_work, value):
    assert_refused(*invoke("report", "--min-effect", value, "x.csv"), "--min-effect")


def test_plot_does_not_overwrite_without_force(no_work):
    existing = no_work / "fig.png"
    existing.write_bytes(b"keep")
    assert_refused(*invoke("report", str(SMALL), "--plot", str(existing)), "--plot", "fig.png", "--force")
    assert existing.read_bytes() == b"keep"
    code, output = invoke("report", str(SMALL), "--plot", str(existing), "--force")
    assert code == 0, output
    assert existing.read_bytes() != b"keep"
