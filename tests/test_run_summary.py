"""The one-screen answer `run` prints at the end (and `report --summary`): within the
terminal's width without a cut figure, at most 25 lines for one GPU with both sharing modes,
30 for any node of several GPUs (a plain run: the same-GPU answer in brief, then the pairs'
per link class), for every committed reference run."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner
from rich.console import Console

from gpuipc_bench.analysis import analyse
from gpuipc_bench.cli import cli
from gpuipc_bench.paths import BUILTIN, to_metadata
from gpuipc_bench.report import answer, render_run_summary
from gpuipc_bench.results import read_results, write_results

HERE = Path(__file__).parent
RESULTS = HERE.parent / "results"
REFERENCES = sorted([*RESULTS.glob("*.csv"), *RESULTS.glob("*.csv.gz")])  # a run shared gzipped too
H100, H100_SHARING = RESULTS / "h100-pcie-all.csv", RESULTS / "h100-pcie-latency-sharing.csv"
H200 = RESULTS / "h200x2-nvlink-all.csv"
H100_DEFAULT = RESULTS / "h100-default.csv"
H100_MODES = RESULTS / "h100-default-modes.csv"
PAIRS_ALL, PAIRS_DEFAULT = RESULTS / "h100x2-nvlink-pairs-all.csv", RESULTS / "h100x2-nvlink-default.csv"
SMALL = HERE / "data" / "small_run.csv"


# The references that tests below summarise again (at another width, or another source) or analyse: each
# one's analysis is kept from its first summary here (it takes seconds; the reference fixture's own, made
# inside render_run_summary, for every reference), so it is made once in this module.
KEPT = (H200, H100_DEFAULT, H100_MODES, PAIRS_ALL, PAIRS_DEFAULT, RESULTS / "h100-both-modes-default.csv")
kept_analyses: dict[Path, Any] = {}


def summary_text(path: Path, width: int = 80, source: str | None = None) -> str:
    df, meta = read_results(path)
    console = Console(record=True, width=width, color_system=None, file=io.StringIO())
    if path in KEPT and path not in kept_analyses:
        kept_analyses[path] = analyse(df, meta)
    render_run_summary(df, meta, console, source=source or str(path), analysis=kept_analyses.get(path))
    return console.export_text()


def assert_one_screen(text: str, width: int = 80, lines: int = 40) -> None:
    count = len(text.splitlines())
    assert count <= lines, f"{count} lines"
    lines_ = text.splitlines()
    assert max(len(line) for line in lines_) <= width
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


def budget(analysis) -> int:
    """The summary's line budget at 80 columns (issue 33): 25 for one GPU (or links to the
    host) with both sharing modes, 30 for any node with GPU pairs. A check's rows of every GPU
    of a node measured on itself (`check --preset health` on four GPUs) have a section a GPU:
    25 for the first, 5 more for each further GPU; a run with busy neighbours (`--sharing
    mps+copy`) has a BUSY NEIGHBOUR line of at most 2 screen lines a mode beyond the 25."""
    decisions = analysis.answer.decisions
    cross = [d for d in decisions if d.src.isdigit() and d.dst.isdigit() and d.src != d.dst]
    if cross:
        return 30
    same_gpus = {d.src for d in decisions if d.src.isdigit()}
    busy = {s for s in analysis.summary["sharing"].dropna().unique() if "+" in str(s)}
    return 25 + 5 * max(len(same_gpus) - 1, 0) + 2 * len(busy)


def ends_with_the_report_command(text: str, name: str) -> bool:
    words = " ".join(text.split())
    return any(words.endswith(f"{lead}: gpuipc-bench report {name}") for lead in ("every table and warning", "in full"))


@dataclasses.dataclass
class Summarised:
    path: Path
    name: str  # as a user in the checkout types it: results/NAME.csv
    text: str  # the summary at 80 columns, rendered by render_run_summary with `name` as its source
    analysis: Any  # the RunAnalysis render_run_summary rendered it from


@pytest.fixture(scope="module", params=REFERENCES, ids=[p.stem for p in REFERENCES])
def reference(request) -> Summarised:
    """Each committed reference run read, analysed and summarised once for every test of it below
    (the analysis of a large run takes seconds, and there are dozens): render_run_summary's own
    analysis is kept, not made again. Module-scoped and parametrized, so pytest runs a run's tests
    one after the other and holds one run's analysis at a time."""
    import gpuipc_bench.analysis as analysis_module

    path = request.param
    made = []
    real = analysis_module.analyse

    def keep(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    name = f"results/{path.name}"
    kept_analyses.pop(path, None)  # analysed here by render_run_summary itself
    with pytest.MonkeyPatch.context() as patch:  # render_run_summary imports analyse as it is called
        patch.setattr(analysis_module, "analyse", keep)
        df, meta = read_results(path)
        console = Console(record=True, width=80, color_system=None, file=io.StringIO())
        render_run_summary(df, meta, console, source=name)
        text = console.export_text()
    assert len(made) == 1, "render_run_summary analysed the run once"
    if path in KEPT:
        kept_analyses[path] = made[0]
    return Summarised(path, name, text, made[0])


@pytest.mark.skipif(not REFERENCES, reason="reference runs not in this checkout")
def test_summary_of_each_reference_run_fits_its_budget(reference):
    text, name = reference.text, reference.name
    assert_one_screen(text, lines=budget(reference.analysis))
    assert text.startswith("gpuipc-bench · vm · ")
    assert ends_with_the_report_command(text, name)


@pytest.mark.skipif(not PAIRS_ALL.exists(), reason="reference runs not in this checkout")
def test_the_nvlink_pairs_answer_is_one_per_link_class_within_30_lines():
    text = summary_text(PAIRS_ALL, source="results/h100x2-nvlink-pairs-all.csv")
    assert_one_screen(text, lines=30)
    words = " ".join(text.split())
    assert "2 GPU pairs over NV18 (0→1, 1→0) · exclusive · hand-off" in words
    assert "GPU 0 → GPU 1 ·" not in words and "GPU 1 → GPU 0 ·" not in words  # no block per direction
    # the GPU-signalled hand-off bridges the sizes its kernel was not run at, and says so, and
    # where it stops being measured
    assert ("peer/device-ll (kernel ping-pong, IPC-mapped LL words): 0.856–1.13 µs ±0.3% over 2 pairs "
            "(not measured at 16, 256 B) (not measured above 4 KiB)") in words
    assert words.count("needs a polling kernel on both GPUs") == 1
    assert "394 GB/s at 256 MiB (394–395 over 2 pairs) = 100% of peer" in words
    # one process set (a schema-3 run): the 1.29x gap on 1>0 at 16 KiB is not named as a pair that
    # differs, only said to differ in one set
    assert "differs at" not in words
    assert "ipc/push (IPC mapping, copy engine): 17.9 µs ±1.3% on 0→1 (1→0 differs in one process set only)" in words
    assert words.count("IPC mapping, copy engine") == 1  # a mechanism is named at its first band only


@pytest.mark.skipif(not PAIRS_DEFAULT.exists(), reason="reference runs not in this checkout")
def test_a_plain_run_on_two_gpus_fits_30_lines_same_gpu_first_in_brief():
    """51 lines in full (the same GPU's 18 and the pairs' 26): the same GPU's answer is said
    in brief, each band's choice and sizes, the pairs' in full."""
    text = summary_text(PAIRS_DEFAULT, source="results/h100x2-nvlink-default.csv")
    assert_one_screen(text, lines=30)
    same, pairs = text.index("GPU 0 → GPU 0 · same GPU (figures: the report)"), text.index("2 GPU pairs over NV18")
    assert same < pairs
    words = " ".join(text.split())
    brief = words[:words.index("2 GPU pairs over NV18")]
    sections = kept_analyses[PAIRS_DEFAULT].answer.sections
    for section in sections:
        for band in section.bands:
            if not section.cross_gpu:
                assert f"{band.pick} {' '.join(answer.band_span(band).split())}" in brief, band.pick
            else:  # every band of the pairs with its own figure and interval
                assert f"{' '.join(answer.band_span(band).split())} {band.pick}" in words, band.pick
    assert "µs" not in brief and "±" not in brief


def without_mps(path: Path, tmp_path: Path) -> Path:
    df, meta = read_results(path)
    out = tmp_path / f"{path.stem}-one-mode.csv"
    write_results(out, df[df["sharing"] != "mps"], meta)
    return out


@pytest.mark.skipif(not H100_DEFAULT.exists(), reason="reference runs not in this checkout")
def test_the_h100_answer_one_gpu_one_mode_fits_25_lines_with_one_line_per_mechanism(tmp_path):
    text = summary_text(without_mps(H100_DEFAULT, tmp_path))
    assert_one_screen(text, lines=25)
    words = " ".join(text.split())
    # the 16 KiB hand-off: host-synchronised staging, not pageable (every sample of it is faster)
    assert "4 B–4 MiB* staging/pinned-hostsync (two hops via pinned host, host-synced)" in words
    assert "staging/pageable" not in words
    # one line for the copy engine's stream, with the one to use (declared first: no reason said), its
    # mechanism named at its first band only, the runner-up by its fastest API
    assert "4 B–256 MiB* ipc/ce: 1.86–3.33 µs to 1 MiB" in words and "· next ipc/sm 1.03–1.07×" in words
    assert words.count("IPC mapping, copy engine") == 1
    assert "per transfer" not in words.split("stream")[0]  # hand-offs are not call-bound
    assert "(call-bound)" in words and "1,486 GB/s ±0.9% at 256 MiB = 100% of d2d@0" in words
    assert "SET-UP per buffer (median): ipc 189 µs" in words and "CONFIDENCE" in words


@pytest.mark.skipif(not H100_DEFAULT.exists(), reason="reference runs not in this checkout")
def test_the_h100_answer_with_both_sharing_modes_fits_25_lines():
    text = summary_text(H100_DEFAULT)
    assert_one_screen(text, lines=25)
    assert "GPU 0 → GPU 0 · same GPU · time-sliced · hand-off" in text
    assert " mps · handoff, where it changes the choice" in text
    assert "needs a polling kernel on both GPUs" in " ".join(text.split())


@pytest.mark.skipif(not H100_MODES.exists(), reason="reference runs not in this checkout")
def test_the_h100_answer_time_sliced_then_mps_fits_25_lines_with_one_band_per_mechanism():
    """32 lines in full: said without the mechanisms' names (every band's choice, figure and
    runner-up kept)."""
    text = summary_text(H100_MODES, source="results/h100-default-modes.csv")
    assert_one_screen(text, lines=25)
    words = " ".join(text.split())
    mps = words[words.index("mps · handoff, where it changes the choice"):]
    # under MPS the pushes through one mapping take turns at being the fastest: one band, the
    # cheapest of them; the pulls win from 64 MiB, where the pushes are behind beyond delta
    # (why the choice is the cheapest to set up is said once in a summary: at its first band)
    assert "16 KiB–16 MiB* ipc/push: 11.3–23.9 µs ±2.7% · next ipc/ce 1.10–1.26×" in mps
    assert "64–256 MiB ipc/ce: 61.9–201 µs ±83% · next torch/caching 1.86×" in mps
    assert words.count("(cheapest set-up)") == 1
    assert mps[:mps.index("mps · stream")].count(" · next ") == 3
    # the stream under MPS: lines at 4 and 64 KiB only, where the kernel copy changes the choice
    stream = mps[mps.index("mps · stream, where it changes the choice"):]
    assert stream.count("(call-bound)") == 2 and "4 KiB* ipc/sm: 2.34 µs ±0.2% (call-bound)" in stream
    # time-sliced hand-off: push and pull apart at 64-256 MiB, the pushes one band; at 16 MiB, compared
    # state by state, the pull is not behind (the declared order names it)
    assert "16 MiB ipc/ce: 307 µs ±0.2% (54.7 GB/s) · ≈ ipc/sm" in words
    assert "64–256 MiB ipc/push (cheapest set-up): 299–338 µs ±0.4% · next ipc/ce 1.09–1.69×" in words


@pytest.mark.skipif(not REFERENCES, reason="reference runs not in this checkout")
def test_no_next_is_faster_than_the_choice_and_no_number_loses_its_unit(reference):
    import re

    text = reference.text
    for ratio in re.findall(r"next [^·]*?(\d[\d.,]*)(?:–[\d.,]+)?×", " ".join(text.split())):
        assert float(ratio.replace(",", "")) >= 1, ratio
    units = ("B ", "KiB", "MiB", "GiB", "µs", "ms", "s ", "GB/s", "%")
    for line in text.splitlines():
        assert not line.strip().startswith(units), line
    assert "±0.0%" not in text
    # the ratio is measured from the choice: below 1 only where the outcome is open (the choice is
    # declared, not the fastest median), never where it is called faster
    for d in reference.analysis.answer.decisions:
        assert d.outcome != "faster" or d.ratio_lo >= 1 + d.delta, (d.bytes, d.choice, d.next, d.ratio)


@pytest.mark.skipif(not H200.exists(), reason="reference runs not in this checkout")
def test_the_gpu_pair_answer_fits_30_lines_and_keeps_the_pair_apart():
    """28 lines in full before issue 33's summary: in full, the same GPU's answer too."""
    text = summary_text(H200)
    assert_one_screen(text, lines=30)
    assert "(figures: the report)" not in text
    assert "GPU 0 → GPU 1 · NV18 · exclusive" in text
    assert text.index("GPU 0 → GPU 0 · same GPU") < text.index("GPU 0 → GPU 1 · NV18")


@pytest.mark.skipif(not H100.exists(), reason="reference runs not in this checkout")
@pytest.mark.parametrize("width", [60, 100, 120])
def test_summary_wraps_at_the_terminal_width(tmp_path, width):
    assert_one_screen(summary_text(default_like(tmp_path), width=width), width=width, lines=40 if width >= 80 else 80)


def test_no_escape_codes_when_stdout_is_not_a_terminal():
    df, meta = read_results(SMALL)
    stream = io.StringIO()
    render_run_summary(df, meta, Console(file=stream, width=80), source="run.csv")
    assert "\x1b" not in stream.getvalue() and stream.getvalue().startswith("gpuipc-bench · ")


def test_summary_of_the_small_run_ranks_from_five_samples():
    text = summary_text(SMALL)
    assert_one_screen(text)
    assert "ipc/ce" in text and "CONFIDENCE" in text
    assert "from 5 samples a range covers the median 93.8% of the time" in " ".join(text.split())


def test_summary_prints_untrusted_text_as_it_is(tmp_path):
    weird = tmp_path / "[cuda12]"
    weird.mkdir()
    copy = weird / "run.csv"
    copy.write_bytes(SMALL.read_bytes())
    text = summary_text(copy)
    assert "[cuda12]/run.csv" in "".join(text.split())  # a long path may break anywhere


def test_report_summary_prints_the_answer_run_prints(tmp_path):
    result = CliRunner().invoke(cli, ["report", str(SMALL), "--summary"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert result.output == summary_text(SMALL, source=str(SMALL))


def test_run_prints_the_summary_then_the_csv_path(tmp_path, no_leaks):
    out = tmp_path / "run.csv"
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--out", str(out), "--sizes", "64,4K", "--iterations", "3",
                                      "--warmup", "1"], env={"COLUMNS": "80"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = result.output
    words = " ".join(text.split())
    assert "No GPU path was measured" in words and "a hand-off through shared memory:" in words
    # (the path may be wrapped anywhere at 80 columns: compared without the whitespace)
    assert "".join(f"every table and warning: gpuipc-bench report {out}".split()) in "".join(text.split())
    summary = text[text.index("gpuipc-bench · "):text.index("wrote")]
    assert_one_screen(summary)


def test_summary_and_report_of_the_harness_rows(monkeypatch, tmp_path, no_leaks):
    """The GPU scenarios on the fake CUDA layer (made-up times, the harness's real rows: both
    measures, '-sm' and two-hop ceilings, setup rows repeated): the summary fits one screen,
    the report cuts nothing, every transfer path is ranked in both measures."""
    import fake_gpu
    from gpuipc_bench.scenarios import SCENARIOS

    from gpuipc_bench.harness.header import path_facts
    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.harness.launcher import run_scenario
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
    assert "hand-off (one message at a time)" in text and "stream (messages queued back to back)" in text
    df, meta = read_results(out.path)
    for width in (80, 120):
        console = Console(record=True, width=width, color_system=None, file=io.StringIO())
        render_terminal(df, meta, console)
        report = console.export_text()
        assert max(len(line) for line in report.splitlines()) <= width and "…" not in report
        assert "mmap · bandwidth · handoff" in report


def test_the_hand_over_cost_per_sharing_mode_explains_the_flip(tmp_path):
    """With both modes measured, one line gives the GPU-ordered hand-over's cost in each (the
    context switch time-sliced, none under MPS), from the run's own figures; with one mode, none."""
    from gpuipc_bench.analysis.handover import handovers
    from gpuipc_bench.report.answer import NBSP, handover_line

    summary_text(H100_MODES)  # its analysis kept
    found = handovers(kept_analyses[H100_MODES].summary)
    assert [h.sharing for h in found] == ["time-sliced", "mps"]
    sliced, mps = found
    assert sliced.lo_s <= sliced.median_s <= sliced.hi_s and mps.lo_s <= mps.median_s <= mps.hi_s
    assert sliced.median_s > 10 * mps.median_s  # the context switch, on this H100
    text = " ".join(summary_text(H100_MODES).split())
    # on one screen line at 80 columns: each figure with its interval, the unit said once
    assert "HAND-OVER at 4 KiB: 273 µs [272–273] time-sliced · 11.1 µs [11.0–11.2] mps" in text
    wide = handover_line(found, width=200).text.replace(NBSP, " ")
    assert wide.startswith("HAND-OVER on one GPU, 4 KiB") and "time-sliced (a context switch)" in wide
    assert "HAND-OVER" not in summary_text(without_mps(H100_MODES, tmp_path))


def test_a_run_without_a_gpu_answers_with_the_host_baseline(tmp_path):
    from gpuipc_bench.results import new_row, typed_frame

    rows = []
    for path, variant, metric, measure, sizes, base in (
            ("host", "pingpong", "latency", "pingpong", (4, 64 << 10), 20e-6),
            ("host", "shared-buffer", "bandwidth", "handoff", (4, 16 << 20), 30e-6),
            ("barrier", "shm", "latency", "", (0,), 5e-6)):
        for size in sizes:
            rows += [new_row(scenario=path, path=path, variant=variant, measure=measure, metric=metric, src="host",
                             dst="host", bytes=size, iteration=i, seconds=base * (1 + i / 100), workers=2,
                             verified=True, sharing="none") for i in range(6)]
    source = tmp_path / "cpu.csv"
    write_results(source, typed_frame(pd.DataFrame.from_records(rows)), to_metadata(BUILTIN))
    text = summary_text(source)
    words = " ".join(text.split())
    assert "No link has two paths" not in words and "none could change a line" not in words
    assert "a message one way (ping-pong): 20.5 µs [20.0–21.0 µs] at 4 B" in words
    assert "one crossing of the shared-memory barrier: 5.1" in words  # 5.00-5.05 µs, median 5.125
    assert "With a GPU the run also measures" in words
    assert_one_screen(text)


def test_one_gpu_with_both_sharing_modes_fits_25_lines():
    text = summary_text(RESULTS / "h100-both-modes-default.csv", source="results/h100-both-modes-default.csv")
    assert_one_screen(text, lines=25)
    assert "(not measured above 4 KiB)" in text  # where the kernel ping-pong stops being measured


def test_a_next_class_ahead_of_the_choice_within_delta_says_how_close():
    """Two H200s, the hand-off at 4 MiB from GPU 1 to 0: vmm/push chosen, peer/push 1.4% ahead of it with the
    two within 2.6% (outcome within): the line says so, not a bare '≈' after 'next'
    (results/h200x2-between-plain.csv.gz)."""
    text = " ".join(summary_text(RESULTS / "h200x2-between-plain.csv.gz").split())
    assert "next peer/push within 2.6%" in text and "next peer/push ≈" not in text
