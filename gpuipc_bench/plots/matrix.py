"""The GPU-pair matrices as heatmaps, like NVIDIA's p2pBandwidthLatencyTest: producer GPUs in
rows, consumer GPUs in columns, one heatmap per path and measure (the best streamed variant's
GB/s at 256 MiB, the best hand-off variant's µs at 4 KiB: the figures of report/matrix.py's
tables) and the NVML link of each pair. Every cell is annotated, so the colours only guide
the eye: brighter is better, one colour scale per measure across the paths; the diagonal
(the same GPU, measured with time-slicing or MPS) is grey and out of the scale."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd

from gpuipc_bench.paths import from_metadata, path_order
from gpuipc_bench.plots import facets  # the module
from gpuipc_bench.plots.bandwidth import grid_of
from gpuipc_bench.plots.style import pyplot, finish, suptitle
from gpuipc_bench.report.matrix import HANDOFF_BYTES, link_matrix
from gpuipc_bench.report.wording import DASH, fmt_num, fmt_pm
from gpuipc_bench.sizes import format_size

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

STREAM_BYTES = 256 << 20
MAX_COLUMNS = 4
LINK_COLOURS = ("#c6dbef", "#fdd0a2", "#c7e9c0", "#dadaeb", "#fcbba1", "#d9d9d9", "#f6e8c3", "#c7eae5")


def _cells(part: pd.DataFrame, best: str) -> dict[tuple[int, int], tuple[float, str]]:
    """Per (src, dst) GPU pair: the best variant's median and its interval as text (as the table)."""
    cells = {}
    for (src, dst), group in part.groupby(["src", "dst"]):
        if not (str(src).isdigit() and str(dst).isdigit()):
            continue
        key = "median_gbps" if best == "max" else "median_s"
        row = group.sort_values(key, ascending=best != "max").iloc[0]
        scale = 1.0 if best == "max" else 1e6
        cols = ("median_gbps", "ci_lo_gbps", "ci_hi_gbps") if best == "max" else ("median_s", "ci_lo_s", "ci_hi_s")
        median, lo, hi = (float(row[c]) * scale for c in cols)
        pm = fmt_pm(lo, median, hi)
        cells[(int(src), int(dst))] = (median, "" if pm == DASH else pm)
    return cells


def pair_heatmaps(summary: pd.DataFrame, meta: Mapping[str, str]) -> tuple[list[int], list[dict]]:
    """The GPUs, and a heatmap per path measured on two GPU pairs or more and per measure:
    {path, measure, title, cells, best}. None when no path was measured on two pairs."""
    facts = from_metadata(meta)
    summary = facets.prepared(summary, meta)
    rows = facets.drawable(summary[summary["metric"] == "bandwidth"], facts)
    maps: dict[str, list[dict]] = {"stream": [], "handoff": []}
    gpus: set[int] = set()
    for path in path_order(facts, rows["path"]):
        part = rows[rows["path"] == path]
        pairs = {(s, d) for s, d in zip(part["src"], part["dst"]) if s.isdigit() and d.isdigit()}
        if len({p for p in pairs if p[0] != p[1]}) < 2:
            continue
        gpus |= {int(x) for p in pairs for x in p}
        for measure, nbytes, best, unit in (("stream", STREAM_BYTES, "max", "GB/s"),
                                            ("handoff", HANDOFF_BYTES, "min", "µs per message")):
            here = part[(part["measure"] == measure) & (part["bytes"] == nbytes)]
            if not here.empty:
                maps[measure].append({"path": path, "measure": measure, "best": best, "cells": _cells(here, best),
                                      "title": f"{path} · {unit} at {format_size(nbytes)}\nbest {measure} variant"})
    return sorted(gpus), maps["stream"] + maps["handoff"]


def _luminance(rgba) -> float:
    r, g, b = rgba[:3]
    return 0.299 * r + 0.587 * g + 0.114 * b


def _heatmap(ax: Axes, gpus: list[int], spec: dict, norm) -> None:
    import matplotlib as mpl
    import numpy as np

    n = len(gpus)
    cmap = mpl.colormaps["viridis" if spec["best"] == "max" else "viridis_r"]
    grid = np.full((n, n), np.nan)
    for (s, d), (value, _) in spec["cells"].items():
        if s != d and s in gpus and d in gpus:
            grid[gpus.index(s), gpus.index(d)] = value
    ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="equal")
    ax.set_facecolor("#eeeeee")
    size = 10 if n <= 2 else 8.5 if n <= 4 else 6.5
    for i, s in enumerate(gpus):
        for j, d in enumerate(gpus):
            value, pm = spec["cells"].get((s, d), (math.nan, ""))
            if math.isnan(value):
                text, colour_ = DASH, "#888888"
            else:
                text = fmt_num(value) + (f"\n{pm}" if pm and n <= 4 else "")
                colour_ = "#666666" if s == d else ("black" if _luminance(cmap(norm(value))) > 0.5 else "white")
            ax.text(j, i, text, ha="center", va="center", fontsize=size, color=colour_)
    _axes(ax, gpus)
    ax.set_title(spec["title"], fontsize=9.5, loc="left")


def _axes(ax: Axes, gpus: list[int]) -> None:
    ax.set_xticks(range(len(gpus)), [str(g) for g in gpus])
    ax.set_yticks(range(len(gpus)), [str(g) for g in gpus])
    ax.set_xlabel("consumer GPU (dst)")
    ax.set_ylabel("producer GPU (src)")
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)


def _links(ax: Axes, gpus: list[int], meta: Mapping[str, str]) -> None:
    import textwrap

    import numpy as np
    from matplotlib.colors import ListedColormap

    table = link_matrix(gpus, meta)
    words = [[str(cell) for cell in row[1:]] for row in table.rows]
    kinds = sorted({w for i, row in enumerate(words) for j, w in enumerate(row) if i != j})
    codes = np.array([[kinds.index(w) if i != j else np.nan for j, w in enumerate(row)] for i, row in enumerate(words)])
    palette = ListedColormap([LINK_COLOURS[k % len(LINK_COLOURS)] for k in range(max(1, len(kinds)))])
    ax.imshow(np.ma.masked_invalid(codes), cmap=palette, vmin=-0.5, vmax=max(1, len(kinds)) - 0.5, aspect="equal")
    ax.set_facecolor("#eeeeee")
    n = len(gpus)
    size = 9 if n <= 2 else 7.5 if n <= 4 else 5.5
    for i, row in enumerate(words):
        for j, word in enumerate(row):
            ax.text(j, i, "\n".join(textwrap.wrap(word, 7 if n > 4 else 12)) or DASH, ha="center", va="center",
                    fontsize=size, color="#222222")
    _axes(ax, gpus)
    ax.set_title("links between the GPUs\n(NVML)", fontsize=9.5, loc="left")


def plot_matrix(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> Figure:
    """Heatmaps of every path measured on two GPU pairs or more, and the links, one figure."""
    from matplotlib.colors import LogNorm

    from gpuipc_bench.plots.summary import analysed_summary

    plt = pyplot()
    summary = analysed_summary(df, meta) if summary is None else summary
    gpus, maps = pair_heatmaps(summary, meta)
    stream = [m for m in maps if m["measure"] == "stream"]
    handoff = [m for m in maps if m["measure"] == "handoff"]
    layout = grid_of([[{"links": True}] + stream, handoff], MAX_COLUMNS) if gpus else [[]]
    layout = [row for row in layout if row] or [[]]
    ncols = max(1, max(len(r) for r in layout))
    side = 2.5 if len(gpus) <= 2 else 3.0 if len(gpus) <= 4 else 3.6
    fig, axes = plt.subplots(len(layout), ncols, figsize=(side * ncols + 0.6, (side + 0.5) * len(layout) + 1.4),
                             squeeze=False)
    norms = {}
    for measure, specs in (("stream", stream), ("handoff", handoff)):
        values = [v for m in specs for (s, d), (v, _) in m["cells"].items() if s != d and v > 0]
        if values:
            lo, hi = min(values), max(values)
            widen = max(1.05, math.sqrt(2 * lo / hi))  # a scale of a factor of 2 at least: 2% is no colour
            norms[measure] = LogNorm(lo / widen, hi * widen)
    for r, row in enumerate(layout):
        for c in range(ncols):
            ax = axes[r][c]
            if c >= len(row):
                ax.set_visible(False)
            elif row[c].get("links"):
                _links(ax, gpus, meta)
            else:
                _heatmap(ax, gpus, row[c], norms[row[c]["measure"]])
    if not gpus:
        axes[0][0].set_visible(True)
        axes[0][0].text(0.5, 0.5, "no path measured on two GPU pairs or more", ha="center", va="center")
        axes[0][0].set_axis_off()
    header = suptitle(fig, "GPU pairs: producer (rows) × consumer (columns)", meta,
                      "median of the samples of each pair's best variant (± its 95% interval where it fits); colours "
                      "only guide the eye, brighter is better, one scale per measure across the paths; grey "
                      "diagonal: the same GPU, out of the scale")
    finish(fig, header, h_pad=2.0)
    return fig


def has_pairs(summary: pd.DataFrame, meta: Mapping[str, str]) -> bool:
    return bool(pair_heatmaps(summary, meta)[0])
