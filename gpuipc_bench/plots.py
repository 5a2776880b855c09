"""Plots of one run: bandwidth and one-way latency against message size, and setup costs.

matplotlib is imported inside the functions, with the Agg backend, so that only
the commands that draw pay for it (and no display is needed). Every figure names
the machine it was measured on, its units, and what the lines are; the figures render
the analysis (analysis.model: the summary with its `candidate` column, path facts) and
compute nothing of their own, never reading text formatted for a table:

- bandwidth: one panel per path (and a first panel with the fastest variant of
  each ranked path per link), one line per variant (and per measure or sharing mode
  where those vary), the median's 95% interval shaded, the ceilings those rows are
  compared with dashed; log-log, sizes in B/KiB/MiB/GiB;
- latency: one-way latency per path/variant, ceilings dashed, the tool's own
  barrier as dotted horizontal lines (no payload);
- setup: one horizontal bar per one-time operation, log scale in ms (not drawn for a
  run without setup rows).

save_plots() writes them for one run: into a folder (RUN-bandwidth.png, ...) or,
given a file name, the bandwidth figure there and the others beside it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from gpuipc_bench.analysis.conditions import is_gpu, link_rank
from gpuipc_bench.errors import UsageError
from gpuipc_bench.paths import PathInfo, from_metadata, path_order
from gpuipc_bench.report.tables import representative_sizes
from gpuipc_bench.report.wording import link, machine_summary, run_summary
from gpuipc_bench.sizes import format_size

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FORMATS = ("png", "svg")
KINDS = ("bandwidth", "latency", "setup", "setup-size")
DPI = 120

# A path's hue comes from its facts (paths.PathInfo.colour), the same in every figure;
# variants of a path get their own colours inside its panel.
VARIANT_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#8c564b", "#e377c2")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
CEILING_STYLES = (("#222222", (0, (5, 2))), ("#777777", (0, (5, 2, 1, 2))), ("#444444", (0, (2, 2))),
                  ("#999999", (0, (8, 3))))


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


# --------------------------------------------------------------------------- axes


def _size_axis(ax: Axes, sizes: Sequence[int]) -> None:
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
        if all(max(end, m) / min(end, m) >= 16 for m in majors):
            majors.append(end)
    if len(majors) < 5:  # room for 32 B, 32 KiB, 32 MiB between them
        for k in range(5):
            mid = 32 << (10 * k)
            if lo <= mid <= hi and all(max(mid, m) / min(mid, m) >= 16 for m in majors):
                majors.append(mid)
    majors = sorted(set(majors))
    minors = [1 << k for k in range(63) if lo / 1.6 <= 1 << k <= hi * 1.6 and (1 << k) not in majors]
    ax.xaxis.set_major_locator(FixedLocator(majors))
    ax.xaxis.set_minor_locator(FixedLocator(minors))
    ax.xaxis.set_major_formatter(_formatter(lambda v: format_size(round(v))))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _value_axis(ax: Axes) -> None:
    """Log10 y axis labelled in plain numbers (0.001, 1, 1,000), minor ticks unlabelled."""
    from matplotlib.ticker import LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, numticks=20))
    ax.yaxis.set_major_formatter(_formatter(_plain_number))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _formatter(fn):
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, pos: fn(value))


def _plain_number(v: float) -> str:
    if v <= 0 or not math.isfinite(v):
        return ""
    if v >= 1:
        return f"{v:,.0f}"
    digits = max(0, -math.floor(math.log10(v)))
    return f"{v:.{digits}f}"


def _legend(ax: Axes, **kwargs) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def _grid(ax: Axes) -> None:
    ax.grid(True, which="major", color="#cccccc", linewidth=0.8)
    ax.grid(True, which="minor", color="#eeeeee", linewidth=0.5)
    ax.set_axisbelow(True)


def machine_title(meta: Mapping[str, str]) -> str:
    """'vm · 2× NVIDIA H200 · driver 580.159.04 · CUDA 13.2 · links 0-1 NV18' (CuPy and the
    driver's CUDA left out)."""
    return " · ".join(machine_summary(meta, leave_out=("cupy", "cuda_driver")))


HEADER_LINES = ((13, "bold", "#111111"), (10.5, "normal", "#111111"), (8.5, "normal", "#555555"))


def _suptitle(fig: Figure, what: str, meta: Mapping[str, str], note: str) -> float:
    """The lines over the figure: what it shows, the machine, how to read it (and the run),
    each wrapped to the figure's width so that nothing is clipped. Returns the height they
    take, in inches, for tight_layout's rect."""
    import textwrap

    run = " · ".join(run_summary(meta))
    partial = meta.get("partial", "").strip().lower() == "true"
    texts = [what, machine_title(meta) + ("  ·  PARTIAL RUN (it did not finish)" if partial else ""),
             note + (f"   ({run})" if run else "")]
    renderer = fig.canvas.get_renderer()
    width_px = fig.get_figwidth() * fig.dpi * 0.98
    top = 0.08  # inches from the top edge
    for text, (size, weight, colour) in zip(texts, HEADER_LINES):
        if partial and text is texts[1]:
            colour = "#b00020"
        chars = len(text)
        while True:
            wrapped = "\n".join(textwrap.wrap(text, chars)) if chars < len(text) else text
            artist = fig.text(0.01, 1 - top / fig.get_figheight(), wrapped, fontsize=size, fontweight=weight,
                              color=colour, ha="left", va="top")
            box = artist.get_window_extent(renderer)
            if box.width <= width_px or chars <= 20:
                break
            artist.remove()
            chars = max(20, int(chars * width_px / box.width) - 1)
        top += box.height / fig.dpi + 0.06
    return top + 0.05


def _layout(fig: Figure, header_in: float) -> None:
    fig.tight_layout(rect=(0, 0, 1, 1 - header_in / fig.get_figheight()))


# --------------------------------------------------------------------------- bandwidth


def plot_bandwidth(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> Figure:
    """Median GB/s against message size: a panel per path, one line per variant (per link
    where a path has several), the median's 95% interval shaded, the ceilings dashed; the first
    panel, when two paths or more were measured, shows the fastest variant of each path
    on each link."""
    plt = _pyplot()
    facts = from_metadata(meta)
    summary = _summary(df, meta) if summary is None else summary
    bw = summary[(summary["metric"] == "bandwidth") & (summary["bytes"] > 0)]
    measured = bw[bw["path"] != "ceiling"]
    paths = path_order(facts, measured["path"])
    panels: list[tuple[str, object]] = []
    if len(paths) > 1:
        panels.append(("overview", None))
    panels += [("path", p) for p in paths]
    if not panels:
        panels = [("empty", None)]
    ncols = 1 if len(panels) == 1 else 2 if len(panels) in (2, 4) else 3
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols + 0.4, 4.3 * nrows + 1.0), sharex=True, sharey=True,
                             squeeze=False)
    sizes = sorted(set(bw["bytes"]))
    for ax, (kind, path) in zip(axes.flat, panels):
        if kind == "overview":
            _bandwidth_overview(ax, bw, facts)
        elif kind == "path":
            _bandwidth_path(ax, bw, path)
        else:
            ax.text(0.5, 0.5, "no bandwidth samples", ha="center", va="center", transform=ax.transAxes)
        if sizes:
            _size_axis(ax, sizes)
        _value_axis(ax)
        _grid(ax)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    values = bw[["median_gbps", "ci_lo_gbps"]].to_numpy(dtype=float).ravel()
    values = values[(values > 0) & pd.notna(values)]
    if len(values):  # room under the lines for the legends (lines rise from the bottom left)
        axes.flat[0].set_ylim(values.min() / 12, values.max() * 2.5)
    for ax in axes[:, 0]:
        ax.set_ylabel("bandwidth (GB/s, one direction)")
    for ax in axes.flat:
        if ax.get_visible():
            ax.set_xlabel("message size")
            ax.xaxis.set_tick_params(labelbottom=True)
    header = _suptitle(fig, "Bandwidth vs message size", meta,
                       "median of the samples, shaded: its 95% interval; dashed: the ceiling measured in the same "
                       "run; GB/s = 1e9 bytes/s, one direction")
    _layout(fig, header)
    return fig


def _colour(facts: Mapping[str, PathInfo], path: str, i: int) -> str:
    info = facts.get(path)
    return info.colour if info is not None else VARIANT_COLOURS[i % len(VARIANT_COLOURS)]


def _line(ax: Axes, part: pd.DataFrame, label: str, colour: str, marker: str, value: str = "gbps",
          spread: bool = True, **style) -> None:
    """One line (with its legend entry), only where it has a point to draw."""
    part = part.sort_values("bytes")
    x = part["bytes"].to_numpy(dtype=float)
    if value == "gbps":
        y, lo, hi = (part[c].to_numpy(dtype=float) for c in ("median_gbps", "ci_lo_gbps", "ci_hi_gbps"))
    else:
        y, lo, hi = (part[c].to_numpy(dtype=float) * 1e6 for c in ("median_s", "ci_lo_s", "ci_hi_s"))
    if not (y > 0).any():
        return
    ax.plot(x, y, label=label, color=colour, marker=marker, markersize=4, linewidth=1.6, **style)
    if spread and len(x) > 1:
        ax.fill_between(x, lo, hi, color=colour, alpha=0.15, linewidth=0)


def _ceiling_lines(ax: Axes, bw: pd.DataFrame, names: Sequence[tuple[str, str, str]], value: str = "gbps") -> None:
    """The ceilings (variant, scenario, sharing mode), dashed: each measured by one scenario in
    one sharing mode (a ceiling measured twice is drawn once, from the first)."""
    ceilings = bw[bw["path"] == "ceiling"]
    drawn: set[str] = set()
    for variant, scenario, sharing in names:
        if variant in drawn:
            continue
        rows = ceilings[(ceilings["variant"] == variant) & (ceilings["scenario"] == scenario)
                        & (ceilings["sharing"] == sharing)]
        if rows.empty:
            rows = ceilings[ceilings["variant"] == variant]
            rows = rows[(rows["scenario"] == rows["scenario"].iloc[0]) & (rows["sharing"] == rows["sharing"].iloc[0])] \
                if len(rows) else rows
        rows = rows.sort_values("bytes")
        y = rows["median_gbps"] if value == "gbps" else rows["median_s"] * 1e6
        if rows.empty or not (y > 0).any():
            continue
        colour, dash = CEILING_STYLES[len(drawn) % len(CEILING_STYLES)]
        src, dst = rows["src"].iloc[0], rows["dst"].iloc[0]
        ax.plot(rows["bytes"], y, color=colour, linestyle=dash, linewidth=1.3, marker="_" if len(rows) == 1 else None,
                markersize=14, label=f"ceiling {variant} ({link(src, dst)})")
        drawn.add(variant)


# What else, besides the path, variant and link, tells two lines apart.
LINE_KEYS = ("measure", "sharing", "scenario", "workers")


def _lines(rows: pd.DataFrame) -> list[tuple[dict, pd.DataFrame]]:
    """One (keys, rows) per line: per path, variant, link, measure, sharing mode and scenario
    (a path measured at several worker counts is drawn at its most common one, 2 if present)."""
    parts = []
    for _, part in rows.groupby("path", sort=False):
        if part["workers"].nunique() > 1:
            counts = part["workers"].value_counts()
            part = part[part["workers"] == (2 if 2 in counts.index else counts.idxmax())]
        parts.append(part)
    rows = pd.concat(parts) if parts else rows
    keys = ["path", "variant", "src", "dst", *LINE_KEYS]
    return [(dict(zip(keys, key)), part) for key, part in rows.groupby(keys, sort=False)]


def _varying(lines: list[tuple[dict, pd.DataFrame]]) -> dict[tuple, set[str]]:
    """For each path, variant and link: the LINE_KEYS that tell its lines apart."""
    seen: dict[tuple, set[tuple]] = {}
    for keys, _ in lines:
        seen.setdefault(_who(keys), set()).add(tuple(keys[k] for k in LINE_KEYS))
    return {who: {k for i, k in enumerate(LINE_KEYS) if len({v[i] for v in values}) > 1}
            for who, values in seen.items()}


def _who(keys: dict) -> tuple:
    return keys["path"], keys["variant"], keys["src"], keys["dst"]


def _line_label(keys: dict, varying: dict[tuple, set[str]], with_link: bool, head: str) -> str:
    extra = [str(keys[k]) for k in LINE_KEYS if k in varying[_who(keys)] and k != "workers"]
    label = " · ".join([head] + extra)
    return f"{label} ({link(keys['src'], keys['dst'])})" if with_link else label


def _bandwidth_path(ax: Axes, bw: pd.DataFrame, path: str) -> None:
    rows = bw[bw["path"] == path]
    lines = _lines(rows)
    drawn = pd.concat([part for _, part in lines])
    links = list(dict.fromkeys(zip(drawn["src"], drawn["dst"])))
    varying = _varying(lines)
    for i, (keys, part) in enumerate(lines):
        _line(ax, part, _line_label(keys, varying, len(links) > 1, str(keys["variant"])),
              VARIANT_COLOURS[i % len(VARIANT_COLOURS)], MARKERS[i % len(MARKERS)])
    ceilings = []
    for ceiling, scenario, sharing in dict.fromkeys(zip(drawn["ceiling"], drawn["scenario"], drawn["sharing"])):
        if ceiling:
            ceilings.append((ceiling, scenario, sharing))
    _ceiling_lines(ax, bw, list(dict.fromkeys(ceilings)))
    first = drawn.iloc[0]
    where_ = link(first["src"], first["dst"]) if len(links) == 1 else f"{len(links)} links"
    sharing = [s for s in dict.fromkeys(drawn["sharing"]) if s and s != "none"]
    ax.set_title(" · ".join([path, where_] + sharing), fontsize=10.5, loc="left")
    _legend(ax, fontsize=8, loc="lower right", framealpha=0.9)


def _bandwidth_overview(ax: Axes, bw: pd.DataFrame, facts: Mapping[str, PathInfo]) -> None:
    """The fastest ranked variant of each path at each size, one line per path, link and
    measure, GPU→GPU links first; the GPU→GPU ceilings dashed."""
    rows = bw[bw["candidate"].astype(bool)] if "candidate" in bw else bw.iloc[:0]
    if rows.empty:
        rows = bw[(bw["path"] != "ceiling") & (bw["workers"] == 2)]
    order = path_order(facts, rows["path"])
    keys = sorted(dict.fromkeys(zip(rows["path"], rows["src"], rows["dst"], rows["measure"])),
                  key=lambda k: (link_rank(k[1], k[2]), order.index(k[0])))
    several_measures = rows["measure"].nunique() > 1
    shown_links = []
    for i, (path, src, dst, measure) in enumerate(keys):
        part = rows[(rows["path"] == path) & (rows["src"] == src) & (rows["dst"] == dst) & (rows["measure"] == measure)]
        best = part.sort_values("median_gbps", ascending=False).drop_duplicates("bytes")
        whole = is_gpu(src) and is_gpu(dst) or (src == dst == "host")
        style = {} if whole else {"linestyle": (0, (1, 1.5))}
        name = f"{path} · {measure}" if several_measures else path
        _line(ax, best, f"{name} ({link(src, dst)})", _colour(facts, path, i), MARKERS[i % len(MARKERS)],
              spread=False, **style)
        if is_gpu(src) and is_gpu(dst):
            shown_links.append((src, dst))
    ceilings = bw[(bw["path"] == "ceiling")]
    names = [(v, sc, sh) for v, sc, sh, s, d in dict.fromkeys(zip(ceilings["variant"], ceilings["scenario"],
                                                                     ceilings["sharing"], ceilings["src"],
                                                                     ceilings["dst"]))
             if (s, d) in shown_links]
    _ceiling_lines(ax, bw, names[:len(CEILING_STYLES)])
    ax.set_title("fastest variant of each path (dotted: one half of a transfer)", fontsize=10.5, loc="left")
    _legend(ax, fontsize=8, loc="lower right", framealpha=0.9)


# --------------------------------------------------------------------------- latency


def plot_latency(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> Figure:
    """One-way latency (µs) against message size, one line per path/variant and link (and
    sharing mode where it varies); ceilings dashed; the tool's barrier (no payload) as dotted
    horizontal lines. A run without latency rows shows the time per transfer of its
    bandwidth rows instead."""
    plt = _pyplot()
    facts = from_metadata(meta)
    summary = _summary(df, meta) if summary is None else summary
    lat = summary[summary["metric"] == "latency"]
    what, note = ("One-way latency vs message size",
                  "median of the samples; shaded: its 95% interval; half a ping-pong round trip")
    if lat.empty:
        lat = summary[(summary["metric"] == "bandwidth")]
        what = "Time per transfer vs message size"
        note = "no latency rows in this run: median time per transfer of the bandwidth samples"
    fig, ax = plt.subplots(figsize=(10, 6.2))
    sized = lat[lat["bytes"] > 0]
    measured = sized[sized["path"] != "ceiling"]
    per_path: dict[str, int] = {}
    lines = _lines(measured) if not measured.empty else []
    varying = _varying(lines)
    for keys, part in lines:
        path = keys["path"]
        k = per_path.setdefault(path, 0)
        per_path[path] += 1
        style = {"linestyle": ["-", (0, (4, 1.5)), ":"][k % 3]} if k else {}
        _line(ax, part, _line_label(keys, varying, True, f"{path}/{keys['variant']}"),
              _colour(facts, path, len(per_path)), MARKERS[len(per_path) % len(MARKERS)], value="s", **style)
    ceilings = sized[sized["path"] == "ceiling"]
    names = list(dict.fromkeys(zip(ceilings["variant"], ceilings["scenario"], ceilings["sharing"])))
    _ceiling_lines(ax, sized, names, value="s")
    flat = lat[(lat["bytes"] == 0) & (lat["metric"] == "latency")]
    for i, row in enumerate(flat.itertuples()):
        ax.axhline(row.median_s * 1e6, color=_colour(facts, row.path, i), linestyle=":", linewidth=1.2,
                   alpha=0.8 if i == 0 else 0.55,
                   label=f"{row.path}/{row.variant}: {row.median_s * 1e6:.3g} µs (no payload)")
    if len(sized):
        _size_axis(ax, sized["bytes"])
    _value_axis(ax)
    _grid(ax)
    ax.set_xlabel("message size")
    ax.set_ylabel("one-way latency (µs)" if what.startswith("One-way") else "time per transfer (µs)")
    _legend(ax, fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), framealpha=0.9)
    _layout(fig, _suptitle(fig, what, meta, note + "; dashed: ceilings"))
    return fig


# --------------------------------------------------------------------------- setup


def plot_setup(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> Figure:
    """One horizontal bar per one-time operation (median ms, log scale), coloured by path;
    an operation measured at many sizes (host_register) at a few representative ones."""
    plt = _pyplot()
    facts = from_metadata(meta)
    summary = _summary(df, meta) if summary is None else summary
    setup = summary[summary["metric"] == "setup"]
    parts = []
    for _, part in setup.groupby(["path", "variant", "src", "dst"], sort=False):
        if part["bytes"].nunique() > 2:
            part = part[part["bytes"].isin(representative_sizes(part["bytes"]))]
        parts.append(part)
    rows = pd.concat(parts) if parts else setup
    height = max(3.0, 0.32 * len(rows) + 1.6)
    fig, ax = plt.subplots(figsize=(10, height))
    if rows.empty:
        ax.text(0.5, 0.5, "no setup rows in this run", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("median time (ms)")
    else:
        labels, values, colours, spreads = [], [], [], []
        for row in rows.itertuples():
            size = f" {format_size(int(row.bytes))}" if row.bytes else ""
            labels.append(f"{row.path}: {row.variant}{size} ({link(row.src, row.dst)})")
            values.append(row.median_s * 1e3)
            colours.append(_colour(facts, row.path, len(colours)))
            spreads.append((row.ci_lo_s * 1e3, row.ci_hi_s * 1e3) if row.ci_lo_s == row.ci_lo_s else None)
        y = list(range(len(labels)))[::-1]
        ax.barh(y, values, color=colours, height=0.7)
        for yi, value, spread in zip(y, values, spreads):
            if spread:
                ax.plot(spread, [yi, yi], color="#222222", linewidth=1)
            ax.text(value * 1.08, yi, f"{_plain_ms(value)} ms", va="center", fontsize=8)
        ax.set_yticks(y)
        ax.set_yticklabels(labels, fontsize=8.5)
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(_formatter(_plain_number))
        ax.set_xlim(min(values) / 2, max(values) * 6)
        ax.grid(True, axis="x", which="major", color="#cccccc", linewidth=0.8)
        ax.set_axisbelow(True)
        ax.set_xlabel("median time of the operation (ms, log scale)")
    _layout(fig, _suptitle(fig, "Setup costs (one-time operations)", meta,
                           "median time of each operation, with its 95% interval; paid once per buffer or per "
                           "pair of processes, not per transfer"))
    return fig


def sized_setup(summary: pd.DataFrame) -> pd.DataFrame:
    """The setup rows of operations measured at three sizes or more (the handles study)."""
    setup = summary[summary["metric"] == "setup"]
    sizes = setup.groupby(["path", "variant", "src", "dst"])["bytes"].transform("nunique")
    return setup[sizes >= 3]


def plot_setup_size(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> Figure:
    """Set-up cost against the allocation's size: one line per operation (median ms, its 95%
    interval shaded), a panel per path; the operations a path pays before its first
    transfer drawn solid, the others dashed."""
    plt = _pyplot()
    facts = from_metadata(meta)
    summary = _summary(df, meta) if summary is None else summary
    rows = sized_setup(summary)
    paths = list(pd.unique(rows["path"])) or ["(none)"]
    fig, axes = plt.subplots(1, len(paths), figsize=(4.6 * len(paths) + 1, 5.2), squeeze=False, sharey=True)
    for ax, path in zip(axes[0], paths):
        part = rows[rows["path"] == path]
        paid = facts[path].setup if path in facts else ()
        for i, ((variant, src, dst), line) in enumerate(part.groupby(["variant", "src", "dst"], sort=False)):
            label = f"{variant}" + ("" if src == dst == part["src"].iloc[0] else f" ({link(src, dst)})")
            _line(ax, line, label, f"C{i % 10}", "os^vD<>"[i % 7], value="seconds",
                  linestyle="-" if variant in paid else "--")
        ax.set_title(path)
        _size_axis(ax, part["bytes"])
        _value_axis(ax)
        _grid(ax)
        ax.set_xlabel("allocation size")
        _legend(ax, fontsize=8)
    axes[0][0].set_ylabel("median time of the operation (µs, log scale)")
    _layout(fig, _suptitle(fig, "Set-up cost against allocation size", meta,
                           "one allocation exported, opened or imported, mapped and closed on fresh objects; "
                           "solid: paid before a path's first transfer"))
    return fig


def _plain_ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


# --------------------------------------------------------------------------- files

PLOTTERS = {"bandwidth": plot_bandwidth, "latency": plot_latency, "setup": plot_setup,
            "setup-size": plot_setup_size}


def plot_targets(dest: Path, stem: str, fmt: str | None, several: bool) -> dict[str, Path]:
    """Where each figure of a run goes. dest is a folder (existing, or named without a
    suffix): dest/STEM-bandwidth.FMT, ...; dest is a file (FILE.png or FILE.svg): the
    bandwidth figure there, the others beside it (FILE-latency.png, FILE-setup.png);
    with several runs, each run's stem is added (FILE-STEM.png)."""
    dest = Path(dest)
    suffix = dest.suffix.lower().lstrip(".")
    if dest.is_dir() or not suffix:
        fmt = fmt or "png"
        return {kind: dest / f"{stem}-{kind}.{fmt}" for kind in KINDS}
    if suffix not in FORMATS:
        raise UsageError(f"--plot {dest}: a folder, or a file ending in .png or .svg")
    if fmt and fmt != suffix:
        raise UsageError(f"--plot {dest} and --plot-format {fmt} disagree: drop one")
    base = dest.with_suffix("")
    if several:
        base = base.with_name(f"{base.name}-{stem}")
    return {kind: (base if kind == "bandwidth" else base.with_name(f"{base.name}-{kind}")).with_suffix(f".{suffix}")
            for kind in KINDS}


def check_plot_targets(dest: Path, stems: list[str], fmt: str | None, force: bool) -> None:
    """Refuse, before any work, a --plot that names a bad file type or would overwrite a figure
    (any file save_plots may write for these runs) without --force."""
    for stem in stems:
        for target in plot_targets(dest, stem, fmt, len(stems) > 1).values():
            if not force and os.path.lexists(target):
                raise UsageError(f"--plot {dest}: {target} exists; use --force to overwrite it")


def check_plot_dest(dest: Path, option: str = "--plot") -> None:
    """Refuse a --plot destination that cannot be written, before any work."""
    dest = Path(dest)
    folder = dest if dest.is_dir() or not dest.suffix else dest.parent
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{option} {dest}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {dest}: cannot write into {probe}")


def _summary(df: pd.DataFrame, meta: Mapping[str, str]) -> pd.DataFrame:
    """The run's summary, from its one analysis (for a caller that has none at hand)."""
    from gpuipc_bench.analysis.model import analyse

    return analyse(df, meta).summary


def save_plots(df: pd.DataFrame, meta: Mapping[str, str], dest: Path, stem: str, fmt: str | None = None,
               several: bool = False, summary: pd.DataFrame | None = None) -> list[Path]:
    """Draw the figures of one run and write them; returns the files written. A run without
    setup rows gets no setup figure. `summary`: the run's analysed summary (analysis.model:
    with its `candidate` column), analysed here when not given."""
    plt = _pyplot()
    targets = plot_targets(dest, stem, fmt, several)
    summary = _summary(df, meta) if summary is None else summary
    if not (summary["metric"] == "setup").any():
        targets.pop("setup")
    if sized_setup(summary).empty:
        targets.pop("setup-size")
    written = []
    for kind, target in targets.items():
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--plot {dest}: cannot create {target.parent} ({exc.strerror or exc})") from None
        fig = PLOTTERS[kind](df, meta, summary)
        try:
            if target.suffix == ".png":
                _save_png(fig, target)
            else:
                fig.savefig(target, dpi=DPI)
        except OSError as exc:
            raise UsageError(f"--plot {dest}: cannot write {target} ({exc.strerror or exc})") from None
        finally:
            plt.close(fig)
        written.append(target)
    return written


def _save_png(fig: Figure, target: Path) -> None:
    """A PNG with an adaptive 256-colour palette: a third of the size of a full-colour
    one, small enough to attach to an issue or show in a README, and alike to the eye."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=DPI, format="png")
    try:
        from PIL import Image
    except ImportError:  # matplotlib needs Pillow, but keep the full-colour file if it is missing
        target.write_bytes(buffer.getvalue())
        return
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE) \
            .save(target, format="PNG", optimize=True)


__all__ = ["FORMATS", "KINDS", "check_plot_dest", "plot_bandwidth", "plot_latency", "plot_setup", "plot_targets",
           "save_plots"]
