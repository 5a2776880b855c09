"""Plots: the figures' labels and titles, the files written, and that only drawing imports matplotlib."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from gpuipc_bench.errors import UsageError
from gpuipc_bench.results import read_results

HERE = Path(__file__).parent
SMALL = HERE / "data" / "small_run.csv"
H200 = HERE.parent / "results" / "h200x2-nvlink-all.csv"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

plots = pytest.importorskip("gpuipc_bench.plots")


@pytest.fixture(scope="module")
def small():
    return read_results(SMALL)


def texts(fig) -> str:
    return "\n".join(t.get_text() for t in fig.texts)


def visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def test_bandwidth_figure_has_units_machine_panels_and_dashed_ceilings(small):
    df, meta = small
    fig = plots.plot_bandwidth(df, meta)
    try:
        header = texts(fig)
        assert "Bandwidth vs message size" in header and "best variant per path" in header
        assert "dgx-a17" in header and "2× NVIDIA H100 80GB HBM3" in header and "links 0-1 NV18" in header
        axes = visible_axes(fig)
        titles = [ax.get_title(loc="left") for ax in axes]
        assert titles[0].startswith("GPU 0 → GPU 0\nstream")
        assert all("best variant per path" in t for t in titles)
        assert axes[0].get_ylabel() == "GB/s, one direction"
        assert all(ax.get_xlabel() == "message size" for ax in axes)
        assert all(ax.get_xscale() == "log" and ax.get_yscale() == "log" for ax in axes)
        labels = {line.get_label(): line for line in axes[0].get_lines()}
        assert set(labels) == {"ipc", "ceiling: d2d"}  # one line per path (ce and sm: the best of the two)
        assert titles[1].startswith("GPU 0 → GPU 0\nhandoff")
        assert [line.get_label() for line in axes[1].get_lines()] == ["staging"]
        assert labels["ceiling: d2d"].get_linestyle() == "--"  # dashed
        assert labels["ipc"].get_linestyle() == "-"
        assert axes[0].collections, "the interval is shaded"
        fig.canvas.draw()
        ticks = [t.get_text() for t in axes[0].get_xticklabels() if t.get_text()]
        assert "4 KiB" in ticks and "1 MiB" in ticks
        yticks = [t.get_text() for t in axes[0].get_yticklabels() if t.get_text()]
        assert "1,000" in yticks and "1" in yticks
    finally:
        plots.pyplot().close(fig)


def test_latency_and_setup_figures_are_labelled(small):
    df, meta = small
    fig = plots.plot_latency(df, meta)
    try:
        (ax,) = visible_axes(fig)
        assert "One-way latency vs message size" in texts(fig)
        assert ax.get_ylabel() == "one-way latency (µs)" and ax.get_xlabel() == "message size"
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert {"ipc/host-driven", "ipc/device-driven (GPU-initiated)"} <= set(lines)
        assert lines["ipc/host-driven"].get_linestyle() == "-"
        assert lines["ipc/device-driven (GPU-initiated)"].get_linestyle() == "--"
    finally:
        plots.pyplot().close(fig)
    fig = plots.plot_setup(df, meta)
    try:
        (ax,) = visible_axes(fig)
        assert "Setup costs" in texts(fig) and "dgx-a17" in texts(fig)
        assert ax.get_xlabel() == "median time of the operation (ms, log scale)"
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert "ipc: ipc_open_cold 64 MiB (GPU 0 → GPU 0)" in labels
        assert len(ax.patches) == 4  # one bar per operation
    finally:
        plots.pyplot().close(fig)


def test_save_plots_into_a_folder_writes_three_real_pngs(small, tmp_path):
    df, meta = small
    written = plots.save_plots(df, meta, tmp_path / "plots", "small")
    assert [p.name for p in written] == ["small-bandwidth.png", "small-latency.png", "small-setup.png"]
    for path in written:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC)
        assert 8_000 < len(data) < 300_000, (path, len(data))


def test_save_plots_as_svg_and_to_a_file_name(small, tmp_path):
    df, meta = small
    written = plots.save_plots(df, meta, tmp_path, "small", fmt="svg")
    assert all(p.suffix == ".svg" and b"<svg" in p.read_bytes()[:2000] for p in written)
    written = plots.save_plots(df, meta, tmp_path / "fig.png", "small")
    assert [p.name for p in written] == ["fig.png", "fig-latency.png", "fig-setup.png"]
    written = plots.save_plots(df, meta, tmp_path / "fig.png", "small", several=True)
    assert [p.name for p in written] == ["fig-small.png", "fig-small-latency.png", "fig-small-setup.png"]


def test_plot_targets_refuse_what_they_cannot_honour(tmp_path):
    with pytest.raises(UsageError, match=r"\.png or \.svg"):
        plots.plot_targets(tmp_path / "fig.jpg", "run", None, False)
    with pytest.raises(UsageError, match="--plot-format svg disagree"):
        plots.plot_targets(tmp_path / "fig.png", "run", "svg", False)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        plots.check_plot_dest(blocker / "plots")


@pytest.mark.skipif(not H200.exists(), reason="reference run not in this checkout")
def test_reference_run_bandwidth_figure_has_a_panel_per_link_class_and_measure():
    df, meta = read_results(H200)
    fig = plots.plot_bandwidth(df, meta)
    try:
        titles = [ax.get_title(loc="left").split("\n") for ax in visible_axes(fig)]
        assert [t[0] for t in titles][:3] == ["GPU 0 → GPU 0"] * 2 + ["NV18 · 2 GPU pairs"]
        assert [t[1].split(" · ")[0] for t in titles][:3] == ["stream", "handoff", "stream"]
        assert "2× NVIDIA H200" in texts(fig)
    finally:
        plots.pyplot().close(fig)


def test_only_drawing_imports_matplotlib(tmp_path):
    code = f"""
import sys
from click.testing import CliRunner
from gpuipc_bench.cli import cli
r = CliRunner().invoke(cli, ["report", "--format", "markdown", {str(SMALL)!r}])
assert r.exit_code == 0, r.output
r = CliRunner().invoke(cli, ["report", {str(SMALL)!r}])
assert r.exit_code == 0, r.output
assert "matplotlib" not in sys.modules, "report without --plot imported matplotlib"
r = CliRunner().invoke(cli, ["report", {str(SMALL)!r}, "--plot", {str(tmp_path)!r}])
assert r.exit_code == 0, r.output
assert "matplotlib" in sys.modules
import matplotlib
assert matplotlib.get_backend().lower() == "agg"
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "small_run-bandwidth.png").exists()


def test_no_setup_figure_for_a_run_without_setup_rows(small, tmp_path):
    df, meta = small
    written = plots.save_plots(df[df["metric"] != "setup"], meta, tmp_path, "nosetup")
    assert [p.name for p in written] == ["nosetup-bandwidth.png", "nosetup-latency.png"]
    assert not (tmp_path / "nosetup-setup.png").exists()


def _inside(fig, artist) -> bool:
    renderer = fig.canvas.get_renderer()
    box = artist.get_window_extent(renderer)
    return box.x0 >= 0 and box.x1 <= fig.bbox.width + 0.5


@pytest.mark.skipif(not H200.exists(), reason="reference run not in this checkout")
@pytest.mark.parametrize("kind", ["bandwidth", "latency", "setup"])
def test_titles_and_subtitles_are_never_clipped(kind):
    df, meta = read_results(H200)
    meta = {**meta, "partial": "true", "note": "x" * 300}
    fig = plots.PLOTTERS[kind](df, meta)
    try:
        assert fig.texts and all(_inside(fig, t) for t in fig.texts)
    finally:
        plots.pyplot().close(fig)


@pytest.mark.skipif(not H200.exists(), reason="reference run not in this checkout")
def test_legend_entries_only_for_what_is_drawn():
    df, meta = read_results(H200)
    for plot in (plots.plot_bandwidth, plots.plot_latency):
        fig = plot(df, meta)
        try:
            for ax in visible_axes(fig):
                handles, labels = ax.get_legend_handles_labels()
                for handle, label in zip(handles, labels):
                    x, y = handle.get_data()
                    assert len(x) and any(math.isfinite(v) and v > 0 for v in y), label
                assert len(labels) == len(set(labels)), labels
        finally:
            plots.pyplot().close(fig)


def test_colours_come_from_the_path_facts(small):
    df, meta = small
    fig = plots.plot_bandwidth(df, {**meta, "path.ipc": "role=transfer; colour=#123456"})
    try:
        ipc = [line for ax in visible_axes(fig) for line in ax.get_lines() if line.get_label() == "ipc"]
        assert ipc and all(line.get_color() == "#123456" for line in ipc)
    finally:
        plots.pyplot().close(fig)


def test_setup_against_size_figure_only_where_an_operation_was_timed_at_three_sizes(small, tmp_path):
    import pandas as pd

    from gpuipc_bench.results import new_row, typed_frame

    df, meta = small
    rows = [new_row(scenario="handles", path=path, variant=op, measure="", metric="setup", src="0", dst="0",
                    bytes=n, iteration=i, seconds=1e-4 * (1 + n / (1 << 30)) * (1 + i / 10), workers=2,
                    sharing="time-sliced")
            for path, op in (("ipc", "ipc_open_cold"), ("mempool", "ptr_import_first"))
            for n in (1 << 20, 64 << 20, 1 << 30) for i in range(6)]
    sized = pd.concat([df, typed_frame(pd.DataFrame(rows))], ignore_index=True)
    written = {p.name for p in plots.save_plots(sized, meta, tmp_path / "with", "run")}
    assert "run-setup-size.png" in written
    fig = plots.plot_setup_size(sized, meta)
    try:
        assert [ax.get_title() for ax in visible_axes(fig)] == ["ipc", "mempool"]
        ipc = visible_axes(fig)[0]
        (line,) = [ln for ln in ipc.get_lines() if ln.get_label() == "ipc_open_cold"]
        assert line.get_linestyle() == "-"  # ipc pays it before its first transfer
        assert {1 << 20, 64 << 20, 1 << 30} <= {int(x) for x in line.get_xdata()}
    finally:
        plots.pyplot().close(fig)
    assert "run-setup-size.png" not in {p.name for p in plots.save_plots(df, meta, tmp_path / "without", "run")}


# --------------------------------------------------------------------------- crafted runs: 8 GPUs, two sharing modes

PAIRS_ALL = HERE.parent / "results" / "h100x2-nvlink-pairs-all.csv"
ONE_GPU = HERE.parent / "results" / "h100-default.csv"
MAX_ENTRIES = 12  # lines with a label in one panel


def eight_gpus():
    """A crafted run over the 56 ordered pairs of 8 GPUs: NV18 inside each group of four, PCIe
    across them; ipc (ce, push) and staging, stream and handoff, with peer ceilings and a
    host-driven and a GPU-initiated ping-pong per pair."""
    import pandas as pd

    from gpuipc_bench.results import new_row, typed_frame

    _, meta = read_results(SMALL)
    meta = {k: v for k, v in meta.items() if not k.startswith(("link.", "peer.", "gpu."))}
    meta["gpu_count"] = "8"
    for g in range(8):
        meta[f"gpu.{g}.name"] = "NVIDIA H100 80GB HBM3"
    rows = []
    for s in range(8):
        for d in range(8):
            if s == d:
                continue
            near = s // 4 == d // 4
            meta[f"link.{min(s, d)}-{max(s, d)}"] = "NV18" if near else "PCIe (across CPUs)"
            gbps = (390 if near else 50) * (1 - 0.01 * ((s + d) % 5))
            ceiling = f"peer@{s}>{d}"
            for nbytes in (4096, 1 << 20, 256 << 20):
                for i in range(4):
                    jitter = 1 + 0.01 * i
                    rows.append(new_row(scenario="ipc", path="ceiling", variant=ceiling, measure="stream", src=s,
                                        dst=d, bytes=nbytes, iteration=i, workers=2, sharing="exclusive",
                                        seconds=(nbytes / (gbps * 1.01e9) + 2e-6) * jitter))
                    for path, variant, slower in (("ipc", "ce", 1.0), ("ipc", "push", 1.1), ("staging", "pinned", 5)):
                        for measure, fixed in (("stream", 3e-6), ("handoff", 17e-6)):
                            rows.append(new_row(scenario=path, path=path, variant=variant, measure=measure, src=s,
                                                dst=d, bytes=nbytes, iteration=i, workers=2, sharing="exclusive",
                                                verified=True, ceiling=ceiling,
                                                seconds=(nbytes * slower / (gbps * 1e9) + fixed) * jitter))
            for nbytes in (4, 4096):
                for i in range(4):
                    for variant, t in (("ce-pingpong", 10e-6), ("device-ll", 0.9e-6)):
                        rows.append(new_row(scenario="latency", path="ipc", variant=variant, measure="pingpong",
                                            metric="latency", src=s, dst=d, bytes=nbytes, iteration=i, workers=2,
                                            sharing="exclusive", seconds=t * (1 + 0.01 * i) * (1 if near else 2)))
    return typed_frame(pd.DataFrame(rows)), meta


def two_modes():
    """The same-GPU rows of a one-GPU run, copied under MPS: the hand-off without the time
    slice's context switch (about 270 µs off at small sizes), the stream figures alike."""
    import pandas as pd

    from gpuipc_bench.results import typed_frame

    df, meta = read_results(ONE_GPU)
    keys = ["path", "variant", "metric", "src", "dst"]
    measured = set(map(tuple, df.loc[df["sharing"] == "mps", keys].to_numpy()))  # the run's own MPS rows stay
    same = df[(df["src"] == df["dst"]) & (df["sharing"] == "time-sliced") & (df["path"] != "ceiling")]
    mps = same[[tuple(k) not in measured for k in same[keys].to_numpy()]].copy()
    mps["sharing"] = "mps"
    for measure, penalty in (("handoff", 260e-6), ("pingpong", 130e-6)):  # one way: half a round trip's
        rows = mps["measure"] == measure
        mps.loc[rows, "seconds"] = (mps.loc[rows, "seconds"] - penalty).clip(lower=mps.loc[rows, "seconds"] * 0.04)
    bandwidth = mps["metric"] == "bandwidth"
    mps.loc[bandwidth, "bandwidth_gbps"] = mps.loc[bandwidth, "bytes"] / mps.loc[bandwidth, "seconds"] / 1e9
    return typed_frame(pd.concat([df, mps], ignore_index=True)), meta


def crafted(name):
    if name == "eight-gpus":
        return eight_gpus()
    if name == "two-modes":
        return two_modes()
    path = {"one-gpu": ONE_GPU, "pairs-all": PAIRS_ALL}[name]
    if not path.exists():
        pytest.skip(f"{path.name} not in this checkout")
    return read_results(path)


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


RUNS = ["one-gpu", "pairs-all", "eight-gpus", "two-modes"]


@pytest.fixture(scope="module", params=RUNS)
def run(request):
    from gpuipc_bench.plots import analysed_summary

    df, meta = crafted(request.param)
    return request.param, (df, meta, analysed_summary(df, meta))


@pytest.mark.parametrize("kind", ["bandwidth", "latency"])
def test_legends_lie_outside_the_axes_with_a_few_entries_per_panel(run, kind):
    name, (df, meta, summary) = run
    fig = plots.PLOTTERS[kind](df, meta, summary)
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        axes = visible_axes(fig)
        assert axes and all(ax.get_legend() is None for ax in axes), "no legend inside a panel"
        (legend,) = fig.legends
        box = legend.get_window_extent(renderer)
        assert box.x0 >= 0 and box.y0 >= 0 and box.x1 <= fig.bbox.width + 0.5, name
        for ax in axes:
            assert not _overlaps(box, ax.get_window_extent(renderer)), (name, ax.get_title(loc="left"))
            labelled = {line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")}
            assert len(labelled) <= MAX_ENTRIES, (name, ax.get_title(loc="left"), sorted(labelled))
        width, height = fig.get_size_inches()
        assert width <= 20 and height <= 26, (name, width, height)
        assert all(_inside(fig, t) for t in fig.texts)
    finally:
        plots.pyplot().close(fig)


def test_every_figure_is_written_for_each_run(run, tmp_path):
    name, (df, meta, summary) = run
    written = plots.save_plots(df, meta, tmp_path, name, summary=summary)
    kinds = {p.stem[len(name) + 1:] for p in written}
    assert {"bandwidth", "latency"} <= kinds
    assert ("matrix" in kinds) == (name in ("pairs-all", "eight-gpus"))
    for path in written:
        assert path.read_bytes().startswith(PNG_MAGIC)
        assert len(path.read_bytes()) < 600_000, path


def test_pairs_of_a_link_class_are_one_line_per_path_with_their_spread():
    df, meta = eight_gpus()
    fig = plots.plot_bandwidth(df, meta)
    try:
        titles = [ax.get_title(loc="left") for ax in visible_axes(fig)]
        classes = ["NV18 · 24 GPU pairs"] * 2 + ["PCIe (across CPUs) · 32 GPU pairs"] * 2
        assert [t.split("\n")[0] for t in titles] == classes
        assert all("best variant per path; median of the pairs" in t for t in titles)
        first = visible_axes(fig)[0]
        assert sorted(line.get_label() for line in first.get_lines()) == ["ceiling: peer", "ipc", "staging"]
    finally:
        plots.pyplot().close(fig)
    fig = plots.plot_latency(df, meta)
    try:
        lines = {line.get_label(): line for line in visible_axes(fig)[0].get_lines()}
        assert lines["ipc/device-ll (GPU-initiated)"].get_linestyle() == "--"
        assert lines["ipc/ce-pingpong"].get_linestyle() == "-"
    finally:
        plots.pyplot().close(fig)


def test_pair_matrices_are_heatmaps_annotated_at_eight_gpus():
    df, meta = eight_gpus()
    fig = plots.plot_matrix(df, meta)
    try:
        axes = visible_axes(fig)
        titles = [ax.get_title(loc="left") for ax in axes]
        assert titles[0].startswith("links between the GPUs")
        wanted = {"ipc · GB/s at 256 MiB\nbest stream variant",
                  "staging · µs per message at 4 KiB\nbest handoff variant"}
        assert wanted <= set(titles)
        ipc = axes[titles.index("ipc · GB/s at 256 MiB\nbest stream variant")]
        assert ipc.images and len(ax_texts(ipc)) == 64  # a number in every cell, the diagonal a dash
        assert "NV18" in ax_texts(axes[0]) and sum(t == "—" for t in ax_texts(axes[0])) == 8
        width, height = fig.get_size_inches()
        assert width <= 20 and height <= 26
    finally:
        plots.pyplot().close(fig)


def ax_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_sharing_modes_lie_side_by_side_where_they_differ():
    df, meta = two_modes()
    fig = plots.plot_bandwidth(df, meta)
    try:
        axes = {ax.get_title(loc="left").split("\n")[1].split(" · best")[0]: ax for ax in visible_axes(fig)
                if ax.get_title(loc="left").startswith("GPU 0 → GPU 0")}
        assert list(axes)[:4] == ["stream · time-sliced", "stream · mps", "handoff · time-sliced", "handoff · mps"]
        sliced, mps = axes["handoff · time-sliced"], axes["handoff · mps"]
        assert sliced.get_position().y0 == mps.get_position().y0  # one row
        assert sliced.get_shared_y_axes().joined(sliced, mps)  # one scale

        def at_4k(ax, label):
            line = next(line for line in ax.get_lines() if line.get_label() == label)
            return dict(zip(line.get_xdata(), line.get_ydata()))[4096]

        assert at_4k(mps, "ipc") > 10 * at_4k(sliced, "ipc")  # GB/s: the context switch gone
    finally:
        plots.pyplot().close(fig)


def test_a_gzipped_run_plots_under_its_own_name(tmp_path):
    import gzip

    from click.testing import CliRunner

    from gpuipc_bench.cli import cli

    packed = tmp_path / "small_run.csv.gz"
    packed.write_bytes(gzip.compress(SMALL.read_bytes()))
    r = CliRunner().invoke(cli, ["report", str(packed), "--plot", str(tmp_path / "plots")])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "small_run-bandwidth.png", "small_run-latency.png", "small_run-setup.png"]
