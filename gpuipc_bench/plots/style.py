"""What every figure shares: matplotlib (imported here, lazily, with the Agg backend), the
size and value axes, the header over the figure, one shared legend outside the axes, and
the layout that leaves room for both."""

from __future__ import annotations

import math
import re
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gpuipc_bench.paths import PathInfo
from gpuipc_bench.report.header import gpu_links
from gpuipc_bench.report.wording import machine_summary, run_summary
from gpuipc_bench.sizes import format_size

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 120
# A path's hue comes from its facts (paths.PathInfo.colour), the same in every figure; this
# palette is for what has no facts.
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#8c564b", "#e377c2")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
# The ceilings, in the order a figure meets them: grey shades and dash patterns.
CEILING_STYLES = (("#222222", (0, (5, 2))), ("#777777", (0, (5, 2, 1, 2))), ("#444444", (0, (2, 2))),
                  ("#999999", (0, (8, 3))), ("#555555", (0, (1, 1.5))), ("#888888", (0, (6, 2, 1, 2, 1, 2))))
PANEL_W, PANEL_H = 4.4, 3.3  # inches per panel
HEADER_LINES = ((13, "bold", "#111111"), (10.5, "normal", "#111111"), (8.5, "normal", "#555555"))


def pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def colour(facts: Mapping[str, PathInfo], path: str) -> str:
    info = facts.get(path)
    if info is not None:
        return info.colour
    return PALETTE[sum(map(ord, path)) % len(PALETTE)]


def marker(facts: Mapping[str, PathInfo], path: str) -> str:
    order = list(facts)
    return MARKERS[(order.index(path) if path in order else len(order)) % len(MARKERS)]


# --------------------------------------------------------------------------- axes


def size_axis(ax: Axes, sizes: Sequence[int]) -> None:
    """Log2 x axis: labelled ticks at 1 KiB, 1 MiB, 1 GiB and the smallest and largest
    size (when not too close to those), a minor tick at every power of 2 measured."""
    from matplotlib.ticker import FixedLocator, NullFormatter

    sizes = sorted({int(s) for s in sizes if s > 0})
    if not sizes:
        return
    lo, hi = sizes[0], sizes[-1]
    ax.set_xscale("log", base=2)
    ax.set_xlim(lo / 1.6, hi * 1.6)
    majors = [1 << (10 * k) for k in range(6) if lo <= 1 << (10 * k) <= hi]
    for end in (lo, hi):
        if all(max(end, m) / min(end, m) >= 32 for m in majors):
            majors.append(end)
    if len(majors) < 5:  # room for 32 B, 32 KiB, 32 MiB between them
        for k in range(5):
            mid = 32 << (10 * k)
            if lo <= mid <= hi and all(max(mid, m) / min(mid, m) >= 32 for m in majors):
                majors.append(mid)
    majors = sorted(set(majors))
    minors = [1 << k for k in range(63) if lo / 1.6 <= 1 << k <= hi * 1.6 and (1 << k) not in majors]
    ax.xaxis.set_major_locator(FixedLocator(majors))
    ax.xaxis.set_minor_locator(FixedLocator(minors))
    ax.xaxis.set_major_formatter(formatter(lambda v: format_size(round(v))))
    ax.xaxis.set_minor_formatter(NullFormatter())


def value_axis(ax: Axes) -> None:
    """Log10 y axis labelled in plain numbers (0.001, 1, 1,000), minor ticks unlabelled."""
    from matplotlib.ticker import LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=20))
    ax.yaxis.set_major_formatter(formatter(plain_number))
    ax.yaxis.set_minor_formatter(NullFormatter())


def formatter(fn):
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, pos: fn(value))


def plain_number(v: float) -> str:
    if v <= 0 or not math.isfinite(v):
        return ""
    if v >= 1:
        return f"{v:,.0f}"
    digits = max(0, -math.floor(math.log10(v)))
    return f"{v:.{digits}f}"


def grid(ax: Axes) -> None:
    ax.grid(True, which="major", color="#cccccc", linewidth=0.8)
    ax.grid(True, which="minor", color="#eeeeee", linewidth=0.5)
    ax.set_axisbelow(True)


def hide_rest(axes, used: list) -> None:
    """Hide the grid's panels that show nothing; the others keep their tick labels (a row
    may be shorter than the one under it)."""
    for ax in axes.flat:
        if ax not in used:
            ax.set_visible(False)
    for ax in used:
        ax.xaxis.set_tick_params(labelbottom=True)


# --------------------------------------------------------------------------- header, legend, layout


def machine_title(meta: Mapping[str, str]) -> str:
    """'vm · 2× NVIDIA H200 · driver 580.159.04 · CUDA 13.2 · links 0-1 NV18' (CuPy and the
    driver's CUDA left out)."""
    parts = machine_summary(meta, leave_out=("cupy", "cuda_driver", "links"))
    links = gpu_links(meta)
    if links.count(",") >= 3:  # 4 pairs or more: how many of each link, the matrix figure has them all
        counts = Counter(re.sub(r"^\d+-\d+ ", "", part) for part in links.split(", "))
        links = ", ".join(f"{n}× {word}" for word, n in counts.items()) + " (GPU pairs)"
    return " · ".join(parts + ([f"links {links}"] if links else []))


def suptitle(fig: Figure, what: str, meta: Mapping[str, str], note: str) -> float:
    """The lines over the figure: what it shows, the machine, how to read it (and the run),
    each wrapped to the figure's width so that nothing is clipped. Returns the height they
    take, in inches."""
    run = " · ".join(run_summary(meta))
    partial = meta.get("partial", "").strip().lower() == "true"
    texts = [what, machine_title(meta) + ("  ·  PARTIAL RUN (it did not finish)" if partial else ""),
             note + (f"   ({run})" if run else "")]
    renderer = fig.canvas.get_renderer()
    width_px = fig.get_figwidth() * fig.dpi * 0.98
    top = 0.08  # inches from the top edge
    for text, (size, weight, colour_) in zip(texts, HEADER_LINES):
        if partial and text is texts[1]:
            colour_ = "#b00020"
        chars = len(text)
        while True:
            wrapped = "\n".join(textwrap.wrap(text, chars)) if chars < len(text) else text
            artist = fig.text(0.01, 1 - top / fig.get_figheight(), wrapped, fontsize=size, fontweight=weight,
                              color=colour_, ha="left", va="top")
            box = artist.get_window_extent(renderer)
            if box.width <= width_px or chars <= 20:
                break
            artist.remove()
            chars = max(20, int(chars * width_px / box.width) - 1)
        top += box.height / fig.dpi + 0.06
    return top + 0.05


class Legend:
    """The entries of a figure's one legend, in the order they were first drawn (one per label)."""

    def __init__(self) -> None:
        self.entries: dict[str, object] = {}
        self.ranks: dict[str, tuple] = {}

    def add(self, label: str, artist, rank: tuple = ()) -> None:
        """An entry; entries with a rank come in its order (the others where first drawn)."""
        if label not in self.entries:
            self.ranks[label] = rank or (len(self.entries),)
            self.entries[label] = artist

    def __len__(self) -> int:
        return len(self.entries)


def finish(fig: Figure, header_in: float, legend: Legend | None = None, title: str | None = None,
           h_pad: float | None = None) -> None:
    """Lay the panels out under the header and above the figure's one legend, which lies
    below the axes, centred, in as many columns as the figure's width holds."""
    renderer = fig.canvas.get_renderer()
    legend_in = 0.0
    if legend is not None and len(legend):
        labels = sorted(legend.entries, key=lambda k: legend.ranks[k])
        handles = [legend.entries[k] for k in labels]
        width_px = fig.get_figwidth() * fig.dpi * 0.98
        ncol = max(1, min(len(labels), 6))
        while True:
            artist = fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.004), ncol=ncol,
                                fontsize=8.5, frameon=False, title=title, title_fontsize=8.5, columnspacing=1.4,
                                handlelength=2.6)
            if artist.get_window_extent(renderer).width <= width_px or ncol == 1:
                break
            artist.remove()
            ncol -= 1
        legend_in = artist.get_window_extent(renderer).height / fig.dpi + 0.12
    height = fig.get_figheight()
    fig.tight_layout(rect=(0, min(0.6, legend_in / height), 1, 1 - header_in / height), h_pad=h_pad)


def figure_size(ncols: int, nrows: int, legend_rows: int = 2, panel_w: float = PANEL_W,
                panel_h: float = PANEL_H) -> tuple[float, float]:
    """Panels plus room for the header (about 1.1 in) and the legend under them."""
    return panel_w * ncols + 0.7, panel_h * nrows + 1.3 + 0.2 * legend_rows
