"""Plots of one run: bandwidth and one-way latency against message size, and setup costs.

matplotlib is imported inside the functions, with the Agg backend, so that only
the commands that draw pay for it (and no display is needed). Every figure names
the machine it was measured on, its units, and what the lines are:

- bandwidth: one panel per path (and a first panel with the fastest variant of
  each path per link), one line per variant, the p5–p95 spread shaded, the
  ceilings those rows are compared with dashed; log-log, sizes in B/KiB/MiB/GiB;
- latency: one-way latency per path/variant, ceilings dashed, the tool's own
  barrier as dotted horizontal lines (no payload);
- setup: one horizontal bar per one-time operation, log scale in ms.

save_plots() writes them for one run: into a folder (RUN-bandwidth.png, ...) or,
given a file name, the bandwidth figure there and the others beside it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import pandas as pd

from gpuipc_bench.errors import UsageError
from gpuipc_bench.report import link, machine_summary, representative_sizes, run_summary
from gpuipc_bench.results import PATHS
from gpuipc_bench.sizes import format_size
from gpuipc_bench.stats import is_gpu, link_rank, summarize

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

FORMATS = ("png", "svg")
KINDS = ("bandwidth", "latency", "setup")
DPI = 120

# One hue per path, the same in every figure; variants of a path get their own
# colours inside its panel.
PATH_COLOURS = {
    "staging": "#1f77b4",  # blue
    "ipc": "#2ca02c",  # green
    "mmap": "#ff7f0e",  # orange
    "peer": "#9467bd",  # purple
    "host": "#7f7f7f",  # grey
    "barrier": "#8c564b",  # brown
}
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


def _size_axis(ax: "Axes", sizes: Sequence[int]) -> None:
    """Log2 x axis: labelled ticks at 1 KiB, 1 MiB, 1 GiB and the smallest and largest
    size (when not too close to those), a minor tick at every power of 2 measured."""
    from matplotlib.ticker import FixedLocator, NullFormatter

    sizes = sorted({int(s) for s in sizes if s > 0})
    if not sizes:
        return
    lo, hi = sizes[0], sizes[-1]
    ax.set_xscale("log", base=2)
    ax.set_xlim(lo / 1.6, hi * 1.6)
    majors = [1 << (10 * k) for k in range(0, 6) if lo <= 1 << (10 * k) <= hi]
    for end in (lo, hi):
        if all(max(end, m) / min(end, m) >= 16 for m in majors):
            majors.append(end)
    if len(majors) < 5:  # room for 32 B, 32 KiB, 32 MiB between them
        for k in range(0, 5):
            mid = 32 << (10 * k)
            if lo <= mid <= hi and all(max(mid, m) / min(mid, m) >= 16 for m in majors):
                majors.append(mid)
    majors = sorted(set(majors))
    minors = [1 << k for k in range(0, 63) if lo / 1.6 <= 1 << k <= hi * 1.6 and (1 << k) not in majors]
    ax.xaxis.set_major_locator(FixedLocator(majors))
    ax.xaxis.set_minor_locator(FixedLocator(minors))
    ax.xaxis.set_major_formatter(_formatter(lambda v: format_size(int(round(v)))))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _value_axis(ax: "Axes") -> None:
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
    digits = max(0, -int(math.floor(math.log10(v))))
    return f"{v:.{digits}f}"


def _legend(ax: "Axes", **kwargs) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def _grid(ax: "Axes") -> None:
    ax.grid(True, which="major", color="#cccccc", linewidth=0.8)
    ax.grid(True, which="minor", color="#eeeeee", linewidth=0.5)
    ax.set_axisbelow(True)


def machine_title(meta: Mapping[str, str]) -> str:
    """'vm · 2× NVIDIA H200 · driver 580.159.04 · CUDA 13.2 · links 0-1 NV18' (CuPy and the
    driver's CUDA left out), then the tool version and time on the line below."""
    parts = [p for p in machine_summary(meta) if not p.startswith("CuPy")]
    parts = [p.split(" (driver supports")[0] if p.startswith("CUDA") else p for p in parts]
    return " · ".join(parts)


def _suptitle(fig: "Figure", what: str, meta: Mapping[str, str], note: str) -> float:
    """Three lines over the figure: what it shows, the machine, how to read it. Returns
    the height they take, in inches, for tight_layout's rect."""
    run = " · ".join(run_summary(meta))
    partial = "  ·  PARTIAL RUN (it did not finish)" if meta.get("partial", "").strip().lower() == "true" else ""
    height = fig.get_figheight()
    top = 1 - 0.08 / height
    fig.text(0.01, top, what, fontsize=13, fontweight="bold", ha="left", va="top")
    fig.text(0.01, top - 0.27 / height, machine_title(meta) + partial, fontsize=10.5, ha="left", va="top",
             color="#b00020" if partial else "#111111")
    fig.text(0.01, top - 0.50 / height, note + (f"   ({run})" if run else ""), fontsize=8.5, color="#555555",
             ha="left", va="top")
    return 0.80


def _layout(fig: "Figure", header_in: float) -> None:
    fig.tight_layout(rect=(0, 0, 1, 1 - header_in / fig.get_figheight()))


# --------------------------------------------------------------------------- bandwidth


def plot_bandwidth(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> "Figure":
    """Median GB/s against message size: a panel per path, one line per variant (per link
    where a path has several), the p5–p95 spread shaded, the ceilings dashed; the first
    panel, when two paths or more were measured, shows the fastest variant of each path
    on each link."""
    plt = _pyplot()
    summary = summarize(df) if summary is None else summary
    bw = summary[(summary["metric"] == "bandwidth") & (summary["bytes"] > 0)]
    measured = bw[bw["path"] != "ceiling"]
    paths = _ordered_paths(measured["path"])
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
            _bandwidth_overview(ax, bw)
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
    values = bw[["median_gbps", "p5_gbps"]].to_numpy(dtype=float).ravel()
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
                       "median of the samples, shaded p5–p95; dashed: the ceiling measured in the same run; "
                       "GB/s = 1e9 bytes/s, one direction")
    _layout(fig, header)
    return fig


def _ordered_paths(paths) -> list[str]:
    present = list(dict.fromkeys(paths))
    rank = {p: i for i, p in enumerate(PATHS)}
    return sorted(present, key=lambda p: (rank.get(p, len(PATHS)), p))


def _line(ax: "Axes", part: pd.DataFrame, label: str, colour: str, marker: str, value: str = "gbps",
          spread: bool = True, **style) -> None:
    part = part.sort_values("bytes")
    x = part["bytes"].to_numpy(dtype=float)
    if value == "gbps":
        y, lo, hi = (part[c].to_numpy(dtype=float) for c in ("median_gbps", "p5_gbps", "p95_gbps"))
    else:
        y, lo, hi = (part[c].to_numpy(dtype=float) * 1e6 for c in ("median_s", "p5_s", "p95_s"))
    ax.plot(x, y, label=label, color=colour, marker=marker, markersize=4, linewidth=1.6, **style)
    if spread and len(x) > 1:
        ax.fill_between(x, lo, hi, color=colour, alpha=0.15, linewidth=0)


def _ceiling_lines(ax: "Axes", bw: pd.DataFrame, names: Sequence[tuple[str, str, str]], value: str = "gbps") -> None:
    ceilings = bw[bw["path"] == "ceiling"]
    for i, (variant, src, dst) in enumerate(names):
        rows = ceilings[(ceilings["variant"] == variant) & (ceilings["src"] == src) & (ceilings["dst"] == dst)]
        if rows.empty:
            continue
        rows = rows.groupby("bytes", as_index=False)[["median_gbps", "median_s"]].median()
        colour, dash = CEILING_STYLES[i % len(CEILING_STYLES)]
        y = rows["median_gbps"] if value == "gbps" else rows["median_s"] * 1e6
        ax.plot(rows["bytes"], y, color=colour, linestyle=dash, linewidth=1.3,
                label=f"ceiling {variant} ({link(src, dst)})")


def _bandwidth_path(ax: "Axes", bw: pd.DataFrame, path: str) -> None:
    rows = bw[bw["path"] == path]
    links = list(dict.fromkeys(zip(rows["src"], rows["dst"])))
    keyed = list(dict.fromkeys(zip(rows["variant"], rows["src"], rows["dst"])))
    for i, (variant, src, dst) in enumerate(keyed):
        part = rows[(rows["variant"] == variant) & (rows["src"] == src) & (rows["dst"] == dst)]
        part = part.drop_duplicates("bytes")
        label = variant if len(links) == 1 else f"{variant} ({link(src, dst)})"
        _line(ax, part, label, VARIANT_COLOURS[i % len(VARIANT_COLOURS)], MARKERS[i % len(MARKERS)])
    ceilings = []
    for ceiling, src, dst in dict.fromkeys(zip(rows["ceiling"], rows["src"], rows["dst"])):
        if ceiling:
            c_rows = bw[(bw["path"] == "ceiling") & (bw["variant"] == ceiling)]
            for c_src, c_dst in dict.fromkeys(zip(c_rows["src"], c_rows["dst"])):
                ceilings.append((ceiling, c_src, c_dst))
    _ceiling_lines(ax, bw, list(dict.fromkeys(ceilings)))
    first = rows.iloc[0]
    where_ = link(first["src"], first["dst"]) if len(links) == 1 else f"{len(links)} links"
    sharing = [s for s in dict.fromkeys(rows["sharing"]) if s and s != "none"]
    ax.set_title(" · ".join([path, where_] + sharing), fontsize=10.5, loc="left")
    _legend(ax, fontsize=8, loc="lower right", framealpha=0.9)


def _bandwidth_overview(ax: "Axes", bw: pd.DataFrame) -> None:
    """The fastest variant of each path at each size, one line per path and link,
    GPU→GPU links first; the GPU→GPU ceilings dashed."""
    rows = bw[bw["path"] != "ceiling"]
    keys = sorted(dict.fromkeys(zip(rows["path"], rows["src"], rows["dst"])),
                  key=lambda k: (link_rank(k[1], k[2]), _ordered_paths(rows["path"]).index(k[0])))
    shown_links = []
    for i, (path, src, dst) in enumerate(keys):
        part = rows[(rows["path"] == path) & (rows["src"] == src) & (rows["dst"] == dst)]
        best = part.sort_values("median_gbps", ascending=False).drop_duplicates("bytes")
        whole = is_gpu(src) and is_gpu(dst) or (src == dst == "host")
        style = {} if whole else {"linestyle": (0, (1, 1.5))}
        _line(ax, best, f"{path} ({link(src, dst)})", PATH_COLOURS.get(path, VARIANT_COLOURS[i % 8]),
              MARKERS[i % len(MARKERS)], spread=False, **style)
        if is_gpu(src) and is_gpu(dst):
            shown_links.append((src, dst))
    ceilings = bw[bw["path"] == "ceiling"]
    names = [(v, s, d) for v, s, d in dict.fromkeys(zip(ceilings["variant"], ceilings["src"], ceilings["dst"]))
             if (s, d) in shown_links]
    _ceiling_lines(ax, bw, names)
    ax.set_title("fastest variant of each path (dotted: one half of a transfer)", fontsize=10.5, loc="left")
    _legend(ax, fontsize=8, loc="lower right", framealpha=0.9)


# --------------------------------------------------------------------------- latency


def plot_latency(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> "Figure":
    """One-way latency (µs) against message size, one line per path/variant and link;
    ceilings dashed; the tool's barrier (no payload) as dotted horizontal lines. A run
    without latency rows shows the time per transfer of its bandwidth rows instead."""
    plt = _pyplot()
    summary = summarize(df) if summary is None else summary
    lat = summary[summary["metric"] == "latency"]
    what, note = "One-way latency vs message size", "median of the samples; shaded: p5–p95; half a ping-pong round trip"
    if lat.empty:
        lat = summary[(summary["metric"] == "bandwidth")]
        what, note = "Time per transfer vs message size", "no latency rows in this run: median time per transfer " \
                                                          "of the bandwidth samples"
    fig, ax = plt.subplots(figsize=(10, 6.2))
    sized = lat[lat["bytes"] > 0]
    measured = sized[sized["path"] != "ceiling"]
    keys = list(dict.fromkeys(zip(measured["path"], measured["variant"], measured["src"], measured["dst"])))
    per_path: dict[str, int] = {}
    for path, variant, src, dst in keys:
        part = measured[(measured["path"] == path) & (measured["variant"] == variant) & (measured["src"] == src)
                        & (measured["dst"] == dst)].drop_duplicates("bytes")
        k = per_path.setdefault(path, 0)
        per_path[path] += 1
        style = {"linestyle": ["-", (0, (4, 1.5)), ":"][k % 3]} if k else {}
        colour = PATH_COLOURS.get(path, VARIANT_COLOURS[len(per_path) % 8])
        _line(ax, part, f"{path}/{variant} ({link(src, dst)})", colour, MARKERS[len(per_path) % len(MARKERS)],
              value="s", **style)
    ceilings = list(dict.fromkeys(zip(*(sized.loc[sized["path"] == "ceiling", c] for c in ("variant", "src", "dst")))))
    _ceiling_lines(ax, sized, ceilings, value="s")
    flat = lat[(lat["bytes"] == 0) & (lat["metric"] == "latency")]
    for i, row in enumerate(flat.itertuples()):
        ax.axhline(row.median_s * 1e6, color=PATH_COLOURS.get(row.path, "#8c564b"), linestyle=":", linewidth=1.2,
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


def plot_setup(df: pd.DataFrame, meta: Mapping[str, str], summary: pd.DataFrame | None = None) -> "Figure":
    """One horizontal bar per one-time operation (median ms, log scale), coloured by path;
    an operation measured at many sizes (host_register) at a few representative ones."""
    plt = _pyplot()
    summary = summarize(df) if summary is None else summary
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
            colours.append(PATH_COLOURS.get(row.path, "#7f7f7f"))
            spreads.append((row.p5_s * 1e3, row.p95_s * 1e3) if row.samples > 1 else None)
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
                           "median time of each operation; paid once per buffer or per pair of processes, "
                           "not per transfer"))
    return fig


def _plain_ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


# --------------------------------------------------------------------------- files

PLOTTERS = {"bandwidth": plot_bandwidth, "latency": plot_latency, "setup": plot_setup}


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


def check_plot_dest(dest: Path, option: str = "--plot") -> None:
    """Refuse a --plot destination that cannot be written, before any work."""
    dest = Path(dest)
    folder = dest if dest.is_dir() or not dest.suffix else dest.parent
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"{option} {dest}: {probe} is a file, not a folder")
    import os

    if not os.access(probe, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {dest}: cannot write into {probe}")


def save_plots(df: pd.DataFrame, meta: Mapping[str, str], dest: Path, stem: str, fmt: str | None = None,
               several: bool = False) -> list[Path]:
    """Draw the three figures of one run and write them; returns the files written."""
    plt = _pyplot()
    targets = plot_targets(dest, stem, fmt, several)
    summary = summarize(df)
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


def _save_png(fig: "Figure", target: Path) -> None:
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
