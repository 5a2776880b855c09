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
        assert "Bandwidth vs message size" in header
        assert "dgx-a17" in header and "2× NVIDIA H100 80GB HBM3" in header and "links 0-1 NV18" in header
        axes = visible_axes(fig)
        titles = [ax.get_title(loc="left") for ax in axes]
        assert titles[0].startswith("fastest variant of each path")
        assert any(t.startswith("staging · GPU 0 → GPU 0") for t in titles)
        assert any(t.startswith("ipc · GPU 0 → GPU 0") for t in titles)
        assert axes[0].get_ylabel() == "bandwidth (GB/s, one direction)"
        assert all(ax.get_xlabel() == "message size" for ax in axes)
        assert all(ax.get_xscale() == "log" and ax.get_yscale() == "log" for ax in axes)
        ipc = next(ax for ax in axes if ax.get_title(loc="left").startswith("ipc"))
        labels = {line.get_label(): line for line in ipc.get_lines()}
        assert {"ce", "sm"} <= set(labels)
        ceiling = labels["ceiling d2d@0 (GPU 0 → GPU 0)"]
        assert ceiling.get_linestyle() == "--"  # dashed
        assert labels["ce"].get_linestyle() == "-"
        fig.canvas.draw()
        ticks = [t.get_text() for t in ipc.get_xticklabels() if t.get_text()]
        assert "4 KiB" in ticks and "64 MiB" in ticks and "1 MiB" in ticks
        yticks = [t.get_text() for t in axes[0].get_yticklabels() if t.get_text()]  # shared y: labelled on the left
        assert "1,000" in yticks and "1" in yticks
    finally:
        plots._pyplot().close(fig)


def test_latency_and_setup_figures_are_labelled(small):
    df, meta = small
    fig = plots.plot_latency(df, meta)
    try:
        (ax,) = visible_axes(fig)
        assert "One-way latency vs message size" in texts(fig)
        assert ax.get_ylabel() == "one-way latency (µs)" and ax.get_xlabel() == "message size"
        assert {"ipc/host-driven (GPU 0 → GPU 0)", "ipc/device-driven (GPU 0 → GPU 0)"} <= {
            line.get_label() for line in ax.get_lines()}
    finally:
        plots._pyplot().close(fig)
    fig = plots.plot_setup(df, meta)
    try:
        (ax,) = visible_axes(fig)
        assert "Setup costs" in texts(fig) and "dgx-a17" in texts(fig)
        assert ax.get_xlabel() == "median time of the operation (ms, log scale)"
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert "ipc: ipc_open_cold 64 MiB (GPU 0 → GPU 0)" in labels
        assert len(ax.patches) == 4  # one bar per operation
    finally:
        plots._pyplot().close(fig)


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
def test_reference_run_bandwidth_figure_has_a_panel_per_path():
    df, meta = read_results(H200)
    fig = plots.plot_bandwidth(df, meta)
    try:
        titles = [ax.get_title(loc="left").split(" · ")[0] for ax in visible_axes(fig)]
        assert titles[1:] == ["staging", "ipc", "mmap", "peer", "host"]
        assert "2× NVIDIA H200" in texts(fig)
    finally:
        plots._pyplot().close(fig)


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
        plots._pyplot().close(fig)


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
            plots._pyplot().close(fig)


def test_colours_come_from_the_path_facts(small):
    df, meta = small
    fig = plots.plot_bandwidth(df, {**meta, "path.ipc": "role=transfer; colour=#123456"})
    try:
        overview = visible_axes(fig)[0]
        ipc = next(line for line in overview.get_lines() if line.get_label().startswith("ipc"))
        assert ipc.get_color() == "#123456"
    finally:
        plots._pyplot().close(fig)


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
        plots._pyplot().close(fig)
    assert "run-setup-size.png" not in {p.name for p in plots.save_plots(df, meta, tmp_path / "without", "run")}
