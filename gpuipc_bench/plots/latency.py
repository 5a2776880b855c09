"""The latency figure: one-way latency (µs) against message size, a panel per link class and
sharing mode, one line per path and variant (GPU pairs of one class: the median across the
pairs), the GPU-initiated ping-pongs dashed with open markers, the host-driven ones solid;
the link's ceiling ping-pong dashed grey; the fastest no-payload host round trip dotted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd

from gpuipc_bench.paths import from_metadata
from gpuipc_bench.plots import facets  # the module
from gpuipc_bench.plots.bandwidth import MAX_COLUMNS, draw_ceilings, draw_line, grid_of
from gpuipc_bench.plots.style import (MARKERS, Legend, pyplot, colour, figure_size, finish, grid, hide_rest, marker,
                                      size_axis, suptitle, value_axis)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DEVICE_STYLE = {"linestyle": (0, (4, 1.6)), "markerfacecolor": "white"}


def _variant_markers(rows: pd.DataFrame) -> dict[str, str]:
    """A marker per variant name, the same in every panel."""
    return {v: MARKERS[i % len(MARKERS)] for i, v in enumerate(sorted(set(rows["variant"].astype(str))))}


def plot_latency(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> Figure:
    """One-way latency (µs) against message size: a panel per link class and sharing mode
    (side by side), one line per path/variant, GPU-initiated dashed; ceilings dashed grey;
    the no-payload host round trip dotted. A run without latency rows shows the time per
    transfer of its hand-off rows instead (the best variant per path)."""
    from gpuipc_bench.plots.summary import analysed_summary

    plt = pyplot()
    facts = from_metadata(meta)
    summary = facets.prepared(analysed_summary(df, meta) if summary is None else summary, meta)
    lat = summary[summary["metric"] == "latency"]
    rows = facets.drawable(lat, facts)
    what, note = ("One-way latency vs message size",
                  "median of the samples, shaded: its 95% interval{pairs}; half a ping-pong round trip; dashed with "
                  "open markers: GPU-initiated (a kernel signals), solid: host-driven; dashed grey: the link's "
                  "ceiling")
    per_transfer = rows.empty
    if per_transfer:
        bw = summary[summary["metric"] == "bandwidth"]
        rows = facets.drawable(bw[bw["measure"] == "handoff"], facts)
        what = "Time per transfer vs message size"
        note = ("no latency rows in this run: the median time per hand-off of the bandwidth samples, the best "
                "variant per path; shaded: its 95% interval{pairs}")
    layout = grid_of(facets.panels(rows, by_measure=per_transfer), MAX_COLUMNS)
    ncols = max(1, max(len(r) for r in layout))
    fig, axes = plt.subplots(len(layout), ncols, figsize=figure_size(ncols, len(layout), legend_rows=4,
                                                                      panel_w=5.0, panel_h=3.6),
                             sharex=True, sharey=True, squeeze=False)
    legend, styles = Legend(), {}
    markers = _variant_markers(rows)
    order = list(facts) + sorted(set(rows["path"]) - set(facts))
    floor = _no_payload(lat)
    used = []
    for r, row in enumerate(layout):
        for c, panel in enumerate(row):
            ax = axes[r][c]
            used.append(ax)
            if per_transfer:
                for path, line in facets.best_per_path(panel.rows, facts, "s").items():
                    draw_line(ax, line, path, colour(facts, path), marker(facts, path), legend,
                              rank=(order.index(path),))
                title = "best variant per path"
            else:
                for (path, variant), line in facets.per_variant(panel.rows, facts, "s").items():
                    device = variant.startswith(facets.GPU_INITIATED)
                    label = f"{path}/{variant}" + (" (GPU-initiated)" if device else "")
                    draw_line(ax, line, label, colour(facts, path), markers[variant], legend,
                              rank=(order.index(path), device), **(DEVICE_STYLE if device else {}))
                title = "per path/variant" + ("; median of the pairs" if len(panel.links) > 1 else "")
            draw_ceilings(ax, facets.ceilings(summary, panel, "latency" if not per_transfer else "bandwidth", "s"),
                          styles, legend)
            if floor is not None:
                label = f"no payload, host round trip ({floor[0]}): {floor[1]:.3g} µs"
                line = ax.axhline(floor[1], color="#888888", linestyle=":", linewidth=1.2, label=label)
                legend.add(label, line, (2_000,))
            ax.set_title(panel.title(title), fontsize=9.5, loc="left")
    if not used:
        axes[0][0].text(0.5, 0.5, "no latency samples", ha="center", va="center", transform=axes[0][0].transAxes)
        used.append(axes[0][0])
    hide_rest(axes, used)
    sizes = rows["bytes"] if len(rows) else []
    for ax in used:
        if len(sizes):
            size_axis(ax, sizes)
        value_axis(ax)
        grid(ax)
        ax.set_xlabel("message size")
    for row_axes in axes:
        row_axes[0].set_ylabel("one-way latency (µs)" if not per_transfer else "time per transfer (µs)")
    finish(fig, suptitle(fig, what, meta, note.format(pairs=facets.pairs_note(layout))), legend)
    return fig


def _no_payload(lat: pd.DataFrame) -> tuple[str, float] | None:
    """The fastest host round trip without payload (the tool's barrier, a flag ping-pong), one way, µs."""
    flat = lat[(lat["bytes"] == 0) & (lat["median_s"] > 0) & (lat["src"] == "host") & (lat["dst"] == "host")]
    if flat.empty:
        return None
    row = flat.sort_values("median_s").iloc[0]
    return f"{row['path']}/{row['variant']}", float(row["median_s"]) * 1e6
