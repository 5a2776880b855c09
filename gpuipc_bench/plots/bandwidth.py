"""The bandwidth figure: median GB/s against message size, a row of panels per link class
(the same GPU, each class of GPU pairs, host and GPU), a panel per measure and sharing mode
side by side, one line per path (its best variant at each size), the link's ceilings dashed,
one legend under the panels."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd

from gpuipc_bench.paths import from_metadata
from gpuipc_bench.plots import facets  # the module
from gpuipc_bench.plots.style import (CEILING_STYLES, Legend, pyplot, colour, figure_size, finish, grid, hide_rest,
                                      marker, size_axis, suptitle, value_axis)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BEST = "best variant per path"
MAX_COLUMNS = 4


def draw_line(ax: Axes, line: pd.DataFrame, label: str, colour_: str, marker_: str, legend: Legend,
              rank: tuple = (), **style) -> None:
    """One line and its shaded interval (its legend entry once per figure)."""
    line = line[line["y"] > 0]
    if line.empty:
        return
    x = line["bytes"].to_numpy(dtype=float)
    (artist,) = ax.plot(x, line["y"], color=colour_, marker=marker_, markersize=4, linewidth=1.6, label=label,
                        **style)
    if len(x) > 1:
        ax.fill_between(x, line["lo"], line["hi"], color=colour_, alpha=0.15, linewidth=0)
    legend.add(label, artist, rank)


def draw_ceilings(ax: Axes, lines: Mapping[str, pd.DataFrame], styles: dict[str, tuple], legend: Legend) -> None:
    for kind, rows in lines.items():
        if kind not in styles:
            styles[kind] = CEILING_STYLES[len(styles) % len(CEILING_STYLES)]
        colour_, dash = styles[kind]
        label = f"ceiling: {kind}"
        (artist,) = ax.plot(rows["bytes"], rows["y"], color=colour_, linestyle=dash, linewidth=1.3, label=label,
                            marker="_" if len(rows) == 1 else None, markersize=14)
        legend.add(label, artist, (1_000, len(styles)))


def grid_of(rows: list[list], max_columns: int = MAX_COLUMNS) -> list[list]:
    """Rows of panels no wider than max_columns (a long row continues on the next)."""
    out = []
    for row in rows:
        out += [row[i:i + max_columns] for i in range(0, len(row), max_columns)]
    return out or [[]]


def plot_bandwidth(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> Figure:
    """Median GB/s against message size: a row per link class, a panel per measure and sharing
    mode, one line per path (the best variant at each size; GPU pairs of one class: the
    median across the pairs, shaded from the lowest to the highest pair's interval), the
    link's ceilings dashed, one legend under the panels."""
    from gpuipc_bench.plots.summary import analysed_summary

    plt = pyplot()
    facts = from_metadata(meta)
    summary = facets.prepared(analysed_summary(df, meta) if summary is None else summary, meta)
    bw = summary[summary["metric"] == "bandwidth"]
    rows = facets.drawable(bw, facts)
    layout = grid_of(facets.panels(rows))
    ncols = max(1, max(len(r) for r in layout))
    fig, axes = plt.subplots(len(layout), ncols, figsize=figure_size(ncols, len(layout)), sharex=True,
                             sharey=True, squeeze=False)
    legend, styles = Legend(), {}
    sizes = sorted(set(bw["bytes"][bw["bytes"] > 0]))
    order = list(facts) + sorted(set(rows["path"]) - set(facts))
    used = []
    for r, row in enumerate(layout):
        for c, panel in enumerate(row):
            ax = axes[r][c]
            used.append(ax)
            for path, line in facets.best_per_path(panel.rows, facts, "gbps").items():
                draw_line(ax, line, path, colour(facts, path), marker(facts, path), legend, rank=(order.index(path),))
            draw_ceilings(ax, facets.ceilings(summary, panel, "bandwidth", "gbps"), styles, legend)
            several = len(panel.links) > 1
            ax.set_title(panel.title(BEST + ("; median of the pairs" if several else "")), fontsize=9.5, loc="left")
    if not used:
        axes[0][0].text(0.5, 0.5, "no bandwidth samples", ha="center", va="center", transform=axes[0][0].transAxes)
        used.append(axes[0][0])
    hide_rest(axes, used)
    for ax in used:
        if sizes:
            size_axis(ax, sizes)
        value_axis(ax)
        grid(ax)
        ax.set_xlabel("message size")
    for row in axes:
        row[0].set_ylabel("GB/s, one direction")
    values = rows[["median_gbps", "ci_lo_gbps"]].to_numpy(dtype=float).ravel()
    values = values[(values > 0) & pd.notna(values)]
    if len(values):
        used[0].set_ylim(values.min() / 3, values.max() * 3)
    header = suptitle(fig, "Bandwidth vs message size", meta,
                      f"{BEST}: at each size the fastest variant of the path; median of the samples, shaded: its "
                      f"95% interval{facets.pairs_note(layout)}; dashed: the link's ceilings measured in the same run; "
                      "GB/s = 1e9 bytes/s, one direction")
    finish(fig, header, legend)
    return fig
