"""The set-up figures: one horizontal bar per one-time operation (log ms), and, for operations
timed at three sizes or more (the handles study), their cost against the allocation's size."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd

from gpuipc_bench.paths import from_metadata
from gpuipc_bench.plots import facets  # the module
from gpuipc_bench.plots.bandwidth import draw_line
from gpuipc_bench.plots.facets import values
from gpuipc_bench.plots.style import (Legend, pyplot, colour, finish, formatter, grid, plain_number, size_axis,
                                      suptitle, value_axis)
from gpuipc_bench.report.tables import representative_sizes
from gpuipc_bench.report.wording import link
from gpuipc_bench.sizes import format_size

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def plot_setup(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> Figure:
    """One horizontal bar per one-time operation (median ms, log scale), coloured by path;
    an operation measured at many sizes (host_register) at a few representative ones."""
    from gpuipc_bench.plots.summary import analysed_summary

    plt = pyplot()
    facts = from_metadata(meta)
    summary = analysed_summary(df, meta) if summary is None else summary
    setup = summary[summary["metric"] == "setup"]
    parts = []
    for _, part in setup.groupby(["path", "variant", "src", "dst"], sort=False):
        if part["bytes"].nunique() > 2:
            part = part[part["bytes"].isin(representative_sizes(part["bytes"]))]
        parts.append(part)
    rows = _by_link_class(pd.concat(parts) if parts else setup, meta)
    height = max(3.0, 0.32 * len(rows) + 1.6)
    fig, ax = plt.subplots(figsize=(10, height))
    if rows.empty:
        ax.text(0.5, 0.5, "no setup rows in this run", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("median time (ms)")
    else:
        labels, values, colours, spreads = [], [], [], []
        for row in rows.itertuples():
            size = f" {format_size(int(row.bytes))}" if row.bytes else ""
            labels.append(f"{row.path}: {row.variant}{size} ({row.where})")
            values.append(row.median_s * 1e3)
            colours.append(colour(facts, row.path))
            spreads.append((row.lo_s * 1e3, row.hi_s * 1e3) if row.lo_s == row.lo_s else None)
        y = list(range(len(labels)))[::-1]
        ax.barh(y, values, color=colours, height=0.7)
        for yi, value, spread in zip(y, values, spreads):
            if spread:
                ax.plot(spread, [yi, yi], color="#222222", linewidth=1)
            right = max(value, spread[1]) if spread else value  # past the interval's line, never over it
            ax.text(right * 1.12, yi, f"{_plain_ms(value)} ms", va="center", fontsize=8)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=8.5)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(formatter(plain_number))
        ax.set_xlim(min(values) / 2, max(values) * 6)
        ax.grid(True, axis="x", which="major", color="#cccccc", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.set_xlabel("median time of the operation (ms, log scale)")
    finish(fig, suptitle(fig, "Setup costs (one-time operations)", meta,
                           "median time of each operation, with its 95% interval (several links of one class, e.g. "
                           "GPU pairs over NV18: the median of the links, the line from the lowest one's interval to "
                           "the highest's); paid once per buffer or per pair of processes, not per transfer"))
    return fig


def _by_link_class(rows: pd.DataFrame, meta: Mapping[str, str]) -> pd.DataFrame:
    """One bar per operation, size and link class (GPU pairs of one NVML class together): the
    median of the links' medians, lo..hi from the lowest interval to the highest; `where` names
    the link, or the class and how many links."""
    rows = facets.prepared(rows, meta)
    out = []
    for _, part in rows.groupby(["path", "variant", "klass", "bytes"], sort=False):
        lo = part["ci_lo_s"].fillna(part["median_s"])
        hi = part["ci_hi_s"].fillna(part["median_s"])
        links = list(dict.fromkeys(zip(part["src"], part["dst"])))
        first = part.iloc[0]
        interval = part["ci_lo_s"].notna().any() or len(links) > 1
        out.append({"path": first["path"], "variant": first["variant"], "bytes": int(first["bytes"]),
                    "median_s": float(part["median_s"].median()), "lo_s": float(lo.min()) if interval else math.nan,
                    "hi_s": float(hi.max()) if interval else math.nan, "where": first["klass"].title(links)})
    return pd.DataFrame(out, columns=["path", "variant", "bytes", "median_s", "lo_s", "hi_s", "where"])


def sized_setup(summary: pd.DataFrame) -> pd.DataFrame:
    """The setup rows of operations measured at three sizes or more (the handles study)."""
    setup = summary[summary["metric"] == "setup"]
    sizes = setup.groupby(["path", "variant", "src", "dst"])["bytes"].transform("nunique")
    return setup[sizes >= 3]


def plot_setup_size(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> Figure:
    """Set-up cost against the allocation's size: one line per operation (median ms, its 95%
    interval shaded), a panel per path; the operations a path pays before its first
    transfer drawn solid, the others dashed."""
    from gpuipc_bench.plots.summary import analysed_summary

    plt = pyplot()
    facts = from_metadata(meta)
    summary = analysed_summary(df, meta) if summary is None else summary
    rows = sized_setup(summary)
    paths = list(pd.unique(rows["path"])) or ["(none)"]
    fig, axes = plt.subplots(1, len(paths), figsize=(4.6 * len(paths) + 1, 5.2), squeeze=False, sharey=True)
    for ax, path in zip(axes[0], paths):
        part = rows[rows["path"] == path]
        paid = facts[path].setup if path in facts else ()
        for i, ((variant, src, dst), line) in enumerate(part.groupby(["variant", "src", "dst"], sort=False)):
            label = f"{variant}" + ("" if src == dst == part["src"].iloc[0] else f" ({link(src, dst)})")
            draw_line(ax, values(line, "s").sort_values("bytes"), label, f"C{i % 10}", "os^vD<>"[i % 7], Legend(),
                      linestyle="-" if variant in paid else "--")
        ax.set_title(path)
        size_axis(ax, part["bytes"])
        value_axis(ax)
        grid(ax)
        ax.set_xlabel("allocation size")
        if ax.get_legend_handles_labels()[0]:  # under the panel, never over its lines
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)
    axes[0][0].set_ylabel("median time of the operation (µs, log scale)")
    finish(fig, suptitle(fig, "Set-up cost against allocation size", meta,
                           "one allocation exported, opened or imported, mapped and closed on fresh objects; "
                           "solid: paid before a path's first transfer"))
    return fig


def _plain_ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
