"""Reports from results: rich tables for the terminal, GitHub markdown for issues, CSV and
JSON for scripts, and the comparison of several runs.

- Terminal (render_terminal): `build_tables(summary, detailed=True)` turns the summary
  (stats.summarize) into plain `Table`s of strings, one per (scenario, path, metric)
  and one of setup costs; keys that are the same for every row go into the title,
  keys that vary become columns. Then the verdict (stats.verdicts, stats.break_even)
  and the stability warnings. Narrow terminals get shorter headers, fewer repeated
  columns and one table per link, never a cropped figure.
- Markdown (render_markdown, render_markdown_runs): a compact summary for an issue
  comment: the machine, the verdict, headline tables at a few representative sizes
  (headline_tables), setup costs, warnings; under MARKDOWN_LIMIT characters.
- Data (render_csv, render_json): the summary with its ceilings, for scripts.
- Several runs: ratios of the medians against the first run (stats.compare), and
  the machine facts that differ (machine_differences).

The logic (what wins where, break-even, ratios) is in stats; this module only words
and lays it out.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import pandas as pd

from gpuipc_bench.errors import BenchError
from gpuipc_bench.results import read_results
from gpuipc_bench.sizes import format_size
from gpuipc_bench.stats import (
    AMORTISE_OVER, BASELINE_PATH, TIE, Band, BreakEven, Crossing, LinkVerdict, StabilityWarning, break_even,
    compare, link_rank, stability_warnings, summarize, verdicts,
)

if TYPE_CHECKING:
    from rich.console import Console

# Metadata keys the header reads, first match wins (machine.collect_* writes the first ones).
DRIVER_KEYS = ("driver", "driver_version")
CUDA_KEYS = ("cuda_runtime", "cuda_runtime_version", "cuda_version", "cuda")
CUDA_DRIVER_KEYS = ("cuda_driver", "cuda_driver_version")
CUPY_KEYS = ("cupy", "cupy_version")
TOOL_KEYS = ("tool_version",)
TIME_KEYS = ("created_utc",)

DASH = "—"
UNITS_NOTE = (
    "GB/s = 1e9 bytes/s, one direction; µs per transfer (latency rows: one-way); "
    "median of n samples, spread p5–p95"
)


# --------------------------------------------------------------------------- loading


def load_runs(paths: Iterable[Path | str]) -> list[tuple[pd.DataFrame, dict[str, str]]]:
    """Read each results file; the first bad one raises ResultsFormatError naming it."""
    return [read_results(Path(p)) for p in paths]


def check_reportable(path: Path | str, df: pd.DataFrame, meta: Mapping[str, str]) -> None:
    """Refuse, with one line, a run there is nothing to report on: no samples at all, or
    measured samples that every one failed verification."""
    status = meta.get("status", "").strip() or "unknown"
    if df.empty:
        raise BenchError(f"{path}: the run holds no samples (status: {status})")
    flags = df.loc[df["metric"] != "setup", "verified"].dropna()
    if len(flags) and not flags.astype(bool).any():
        raise BenchError(f"{path}: every one of its {len(flags)} measured samples failed verification (the bytes "
                         f"that arrived were not the bytes sent), so there is no figure to report (status: {status})")


# --------------------------------------------------------------------------- number formats


def fmt_num(value: float) -> str:
    """About three significant digits: 1,450 / 137 / 27.1 / 2.40 / 0.290 / 4.10e-05."""
    if value is None or pd.isna(value):
        return DASH
    v = float(value)
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a == 0:
        return "0"
    return f"{v:#.3g}"


def fmt_range(lo: float, hi: float, samples: int | None = None) -> str:
    if samples is not None and samples < 2:
        return DASH
    if pd.isna(lo) or pd.isna(hi):
        return DASH
    return f"{fmt_num(lo)}–{fmt_num(hi)}"


def fmt_percent(fraction: float) -> str:
    if fraction is None or pd.isna(fraction):
        return DASH
    pct = float(fraction) * 100
    return f"{pct:.0f}%" if abs(pct) >= 10 else f"{pct:.1f}%"


def fmt_verified(flag) -> str:
    if flag is None or pd.isna(flag):
        return DASH
    return "✓" if bool(flag) else "✗"


def where(device: str) -> str:
    """'0' -> 'GPU 0', 'host' -> 'host'."""
    device = str(device)
    return f"GPU {device}" if device.isdigit() else (device or "?")


def link(src: str, dst: str) -> str:
    return f"{where(src)} → {where(dst)}"


# --------------------------------------------------------------------------- machine facts


def _first(meta: Mapping[str, str], keys: Sequence[str]) -> str:
    for key in keys:
        value = meta.get(key, "").strip()
        if value:
            return value
    return ""


def gpu_names(meta: Mapping[str, str]) -> list[str]:
    """The 'gpu.N.name' values in device order."""
    found = []
    for key, value in meta.items():
        m = re.fullmatch(r"gpu\.(\d+)\.name", key)
        if m:
            found.append((int(m.group(1)), value.strip()))
    return [name for _, name in sorted(found)]


def machine_summary(meta: Mapping[str, str]) -> list[str]:
    """Pieces of the machine line: host, GPUs (identical ones collapsed), driver, CUDA,
    CuPy, MPS when running, and the links between GPUs."""
    parts = [meta.get("host", "").strip() or "unknown host"]
    names = gpu_names(meta)
    if not names:
        parts.append("no GPU")
    elif len(set(names)) == 1:
        parts.append(f"{len(names)}× {names[0]}" if len(names) > 1 else names[0])
    else:
        parts.append(", ".join(f"GPU {i}: {n}" for i, n in enumerate(names)))
    driver = _first(meta, DRIVER_KEYS)
    if driver:
        parts.append(f"driver {driver}")
    runtime, cuda_driver = _first(meta, CUDA_KEYS), _first(meta, CUDA_DRIVER_KEYS)
    if runtime and cuda_driver and runtime != cuda_driver:
        parts.append(f"CUDA {runtime} (driver supports {cuda_driver})")
    elif runtime or cuda_driver:
        parts.append(f"CUDA {runtime or cuda_driver}")
    cupy = _first(meta, CUPY_KEYS)
    if cupy:
        parts.append(f"CuPy {cupy}")
    if meta.get("mps", "").strip() == "running":
        parts.append("MPS running")
    links = gpu_links(meta)
    if links:
        parts.append(links)
    return parts


def gpu_links(meta: Mapping[str, str]) -> str:
    """'links 0-1 NV18' from the 'link.I-J' (and 'peer.I-J') metadata; 'links all NV18'
    when every pair is the same; pairs without peer access say 'no P2P'."""
    pairs = []
    for key, value in meta.items():
        m = re.fullmatch(r"link\.(\d+)-(\d+)", key)
        if m and value.strip():
            i, j = int(m.group(1)), int(m.group(2))
            text = value.strip()
            peer = meta.get(f"peer.{i}-{j}", "").strip()
            if peer and peer != "yes":
                text += " no P2P" if peer == "no" else f" P2P {peer}"
            pairs.append(((i, j), text))
    if not pairs:
        return ""
    pairs.sort()
    texts = {text for _, text in pairs}
    if len(pairs) > 1 and len(texts) == 1:
        return f"links all {texts.pop()}"
    return "links " + ", ".join(f"{i}-{j} {text}" for (i, j), text in pairs)


def run_summary(meta: Mapping[str, str]) -> list[str]:
    """Pieces of the second header line: tool version, schema, time (the command goes apart)."""
    parts = []
    tool = _first(meta, TOOL_KEYS)
    if tool:
        parts.append(f"gpuipc-bench {tool}")
    if meta.get("schema_version"):
        parts.append(f"schema {meta['schema_version']}")
    created = _first(meta, TIME_KEYS)
    if created:
        parts.append(created)
    return parts


def partial_note(meta: Mapping[str, str]) -> str | None:
    if meta.get("partial", "").strip().lower() != "true":
        return None
    status = meta.get("status", "").strip() or "unknown"
    return f"partial run: it did not finish (status: {status}); the figures below are what was measured"


# --------------------------------------------------------------------------- tables


@dataclasses.dataclass
class Column:
    name: str
    align: str = "right"  # 'left' or 'right'


@dataclasses.dataclass
class Table:
    """A renderer-agnostic table: a title, columns and rows of strings.
    `groups[i]` is the group (size) of row i; renderers may draw a line between groups."""

    title: str
    kind: str  # 'bandwidth', 'latency' or 'setup'
    columns: list[Column]
    rows: list[list[str]]
    groups: list[object] = dataclasses.field(default_factory=list)

    def column(self, name: str) -> list[str]:
        i = [c.name for c in self.columns].index(name)
        return [row[i] for row in self.rows]

    def without(self, name: str) -> "Table":
        """The same table less one column (if it has it)."""
        names = [c.name for c in self.columns]
        if name not in names:
            return self
        i = names.index(name)
        return dataclasses.replace(
            self,
            columns=self.columns[:i] + self.columns[i + 1:],
            rows=[row[:i] + row[i + 1:] for row in self.rows],
        )

    def renamed(self, names: Mapping[str, str]) -> "Table":
        """The same table with some columns relabelled."""
        columns = [dataclasses.replace(c, name=names.get(c.name, c.name)) for c in self.columns]
        return dataclasses.replace(self, columns=columns)


_METRIC_TITLES = {"bandwidth": "bandwidth", "latency": "one-way latency"}


def build_tables(summary: pd.DataFrame, detailed: bool, width: int | None = None) -> list[Table]:
    """Tables for one run's summary. detailed=True: every column (terminal);
    detailed=False: the compact set. With a `width`, a table whose rows span several
    links and that would not fit in it (see _fit) becomes one table per link."""
    tables: list[Table] = []
    measured = summary[summary["metric"] != "setup"]
    keys = ["scenario", "path", "metric"]
    for (scenario, path, metric), part in measured.groupby(keys, sort=False):
        table = _measure_table(scenario, path, metric, part, detailed)
        if width is not None and _varying(part)["link"] and _natural_width(_fit(table, width)) > width:
            for _, sub in part.groupby(["src", "dst"], sort=False):
                tables.append(_measure_table(scenario, path, metric, sub, detailed))
        else:
            tables.append(table)
    setup = summary[summary["metric"] == "setup"]
    if not setup.empty:
        tables.append(_setup_table(setup, detailed))
    return tables


def _varying(part: pd.DataFrame) -> dict[str, bool]:
    links = set(zip(part["src"], part["dst"]))
    return {
        "link": len(links) > 1,
        "workers": part["workers"].nunique() > 1,
        "sharing": part["sharing"].nunique() > 1,
        "ceiling": part["ceiling"].nunique() > 1,
        "samples": part["samples"].nunique() > 1,
    }


def _title_parts(part: pd.DataFrame, varying: dict[str, bool], with_samples: bool) -> list[str]:
    first = part.iloc[0]
    parts = []
    if not varying["link"]:
        parts.append(link(first["src"], first["dst"]))
    if not varying["workers"]:
        n = int(first["workers"])
        parts.append(f"{n} worker" if n == 1 else f"{n} workers")
    if not varying["sharing"] and first["sharing"]:
        parts.append(str(first["sharing"]))
    if not varying["ceiling"] and first["ceiling"]:
        parts.append(f"vs {first['ceiling']}")
    if with_samples and not varying["samples"]:
        n = int(first["samples"])
        parts.append(f"{n} sample" if n == 1 else f"{n} samples")
    return parts


def _key_cells(row, varying: dict[str, bool]) -> list[str]:
    cells = []
    if varying["link"]:
        cells.append(link(row["src"], row["dst"]))
    if varying["workers"]:
        cells.append(str(int(row["workers"])))
    if varying["sharing"]:
        cells.append(str(row["sharing"]))
    if varying["ceiling"]:
        cells.append(str(row["ceiling"]) or DASH)
    return cells


def _key_columns(varying: dict[str, bool]) -> list[Column]:
    names = [("link", "link"), ("workers", "workers"), ("sharing", "sharing"), ("ceiling", "ceiling")]
    return [Column(label, "left") for key, label in names if varying[key]]


def _measure_table(scenario: str, path: str, metric: str, part: pd.DataFrame, detailed: bool) -> Table:
    part = part.sort_values("bytes", kind="stable")  # size-major; variants keep summary order
    varying = _varying(part)
    name = path if scenario == path else f"{scenario}: {path}"
    title = " · ".join([name, _METRIC_TITLES.get(metric, metric)] + _title_parts(part, varying, not detailed))
    bandwidth = metric == "bandwidth"
    has_ceiling = bandwidth and part["fraction_of_ceiling"].notna().any()
    show_samples = detailed or varying["samples"]
    show_verified = detailed or (part["verified"] == False).any()  # noqa: E712 (nullable boolean)

    columns = [Column("size"), Column("variant", "left")] + _key_columns(varying)
    if show_samples:
        columns.append(Column("samples" if detailed else "n"))
    columns.append(Column("median µs"))
    if detailed or not bandwidth:
        columns.append(Column("p5–p95 µs"))
    if bandwidth:
        columns += [Column("median GB/s" if detailed else "GB/s"), Column("p5–p95 GB/s")]
    if has_ceiling:
        columns.append(Column("% of ceiling" if detailed else "% ceiling"))
    if show_verified:
        columns.append(Column("verified", "left" if not detailed else "right"))

    rows, groups = [], []
    for _, row in part.iterrows():
        n = int(row["samples"])
        cells = [format_size(int(row["bytes"])), str(row["variant"])] + _key_cells(row, varying)
        if show_samples:
            cells.append(str(n))
        cells.append(fmt_num(row["median_s"] * 1e6))
        if detailed or not bandwidth:
            cells.append(fmt_range(row["p5_s"] * 1e6, row["p95_s"] * 1e6, n))
        if bandwidth:
            cells += [fmt_num(row["median_gbps"]), fmt_range(row["p5_gbps"], row["p95_gbps"], n)]
        if has_ceiling:
            cells.append(fmt_percent(row["fraction_of_ceiling"]))
        if show_verified:
            cells.append(fmt_verified(row["verified"]))
        rows.append(cells)
        groups.append(int(row["bytes"]))
    return Table(title, metric, columns, rows, groups)


def _setup_table(setup: pd.DataFrame, detailed: bool) -> Table:
    varying = _varying(setup)
    show_size = (setup["bytes"] > 0).any()
    title = " · ".join(["setup costs"] + _title_parts(setup, varying, False))
    columns = [Column("path", "left"), Column("operation", "left")] + _key_columns(varying)
    if show_size:
        columns.append(Column("size"))
    columns += [Column("samples" if detailed else "n"), Column("median ms"), Column("p5–p95 ms")]
    rows, groups = [], []
    for _, row in setup.iterrows():
        n = int(row["samples"])
        cells = [str(row["path"]), str(row["variant"])] + _key_cells(row, varying)
        if show_size:
            cells.append(format_size(int(row["bytes"])) if int(row["bytes"]) > 0 else DASH)
        cells += [str(n), fmt_num(row["median_s"] * 1e3), fmt_range(row["p5_s"] * 1e3, row["p95_s"] * 1e3, n)]
        rows.append(cells)
        groups.append(row["path"])
    return Table(title, "setup", columns, rows, groups)


def describe_warning(w: StabilityWarning, with_link: bool = False) -> str:
    """'staging/pageable 4 KiB: first sample 2.2x slower than the rest (try more --warmup)'.
    with_link adds '(GPU 0 → GPU 1)', for when the rest does not say which figure it is."""
    what = f"{w.path}/{w.variant} {format_size(int(w.bytes))}"
    if w.metric and w.metric != "bandwidth":
        what += f" {w.metric}"
    if with_link:
        what += f" ({link(w.src, w.dst)})"
    return f"{what}: {w.message} ({w.hint})"


def describe_warnings(warnings: Sequence[StabilityWarning], summary: pd.DataFrame) -> list[str]:
    """describe_warning for each, naming the link only where path/variant/size/metric
    has figures for more than one link."""
    ambiguous = {
        key for key, part in summary.groupby(["path", "variant", "bytes", "metric"], sort=False)
        if len(set(zip(part["src"], part["dst"]))) > 1
    }
    return [
        describe_warning(w, with_link=(w.path, w.variant, w.bytes, w.metric) in ambiguous) for w in warnings
    ]


# --------------------------------------------------------------------------- headline (a few sizes)

# The sizes the compact reports show, where the run has them; the smallest and the
# largest size measured are always shown.
HEADLINE_SIZES = (4, 4 << 10, 1 << 20, 256 << 20, 1 << 30)
MAX_HEADLINE_SIZES = 6


def representative_sizes(sizes: Iterable[int], preferred: Sequence[int] = HEADLINE_SIZES) -> list[int]:
    """A few sizes out of `sizes` (0 left out): the preferred ones present, plus the
    smallest and the largest; a middle one when that leaves fewer than three."""
    present = sorted({int(s) for s in sizes if int(s) > 0})
    if not present:
        return []
    chosen = {s for s in preferred if s in present} | {present[0], present[-1]}
    if len(chosen) < 3 and len(present) >= 3:
        chosen.add(present[len(present) // 2])
    chosen = sorted(chosen)
    if len(chosen) > MAX_HEADLINE_SIZES:
        chosen = chosen[: MAX_HEADLINE_SIZES - 1] + [chosen[-1]]
    return chosen


def _context(part: pd.DataFrame) -> tuple[list[str], dict[str, bool]]:
    """Worker count and sharing mode: in the title when the same for every row, else columns."""
    varying = {"workers": part["workers"].nunique() > 1, "sharing": part["sharing"].nunique() > 1}
    parts = []
    if not varying["workers"]:
        n = int(part["workers"].iloc[0])
        parts.append(f"{n} worker" if n == 1 else f"{n} workers")
    if not varying["sharing"] and part["sharing"].iloc[0]:
        parts.append(str(part["sharing"].iloc[0]))
    return parts, varying


def headline_tables(summary: pd.DataFrame, df: pd.DataFrame) -> list[Table]:
    """The compact tables of the markdown summary, at representative sizes only:
    bandwidth (fastest first at each size), the ceilings, one-way latency, setup costs."""
    tables: list[Table] = []
    bw = summary[(summary["metric"] == "bandwidth") & (summary["path"] != "ceiling")]
    sizes = representative_sizes(summary.loc[summary["metric"] == "bandwidth", "bytes"])
    if not bw.empty:
        part = bw[bw["bytes"].isin(sizes)]
        part = part.assign(_neg=-part["median_gbps"].fillna(-1.0),
                           _link=[link_rank(a, b) for a, b in zip(part["src"], part["dst"])])
        part = part.sort_values(["bytes", "_link", "_neg"], kind="stable")
        tables.append(_headline_bandwidth(part))
    ceilings = summary[(summary["metric"] == "bandwidth") & (summary["path"] == "ceiling")]
    if not ceilings.empty:
        tables.append(_ceiling_matrix(ceilings, df, sizes))
    lat = summary[summary["metric"] == "latency"]
    if not lat.empty:
        lat_sizes = set(representative_sizes(lat["bytes"])) | {0}
        part = lat[lat["bytes"].isin(lat_sizes)]
        part = part.assign(_link=[link_rank(a, b) for a, b in zip(part["src"], part["dst"])])
        part = part.sort_values(["bytes", "_link", "median_s"], kind="stable")
        tables.append(_headline_latency(part))
    setup = summary[summary["metric"] == "setup"]
    if not setup.empty:
        tables.append(_headline_setup(setup))
    return tables


def _headline_bandwidth(part: pd.DataFrame) -> Table:
    extra, varying = _context(part)
    has_ceiling = part["fraction_of_ceiling"].notna().any()
    show_n = part["samples"].nunique() > 1
    show_verified = (part["verified"] == False).any()  # noqa: E712
    title = " · ".join(["bandwidth at a few sizes, fastest first on each link"] + extra)
    columns = _headline_lead_columns(varying, show_n)
    columns += [Column("median µs"), Column("GB/s"), Column("p5–p95 GB/s")]
    if has_ceiling:
        columns.append(Column("% ceiling"))
    if show_verified:
        columns.append(Column("verified", "left"))
    rows, groups = [], []
    for _, row in part.iterrows():
        n = int(row["samples"])
        cells = _headline_lead_cells(row, varying, show_n)
        cells += [fmt_num(row["median_s"] * 1e6), fmt_num(row["median_gbps"]),
                  fmt_range(row["p5_gbps"], row["p95_gbps"], n)]
        if has_ceiling:
            frac = row["fraction_of_ceiling"]
            cells.append(f"{fmt_percent(frac)} {row['ceiling']}" if not pd.isna(frac) else DASH)
        if show_verified:
            cells.append(fmt_verified(row["verified"]))
        rows.append(cells)
        groups.append(int(row["bytes"]))
    return Table(title, "bandwidth", columns, rows, groups)


def _headline_lead_columns(varying: dict, show_n: bool) -> list[Column]:
    """size, path/variant, link, then workers/sharing where they vary, then n where it varies."""
    columns = [Column("size"), Column("path/variant", "left"), Column("link", "left")]
    columns += [Column(k, "left") for k in ("workers", "sharing") if varying[k]]
    return columns + ([Column("n")] if show_n else [])


def _headline_lead_cells(row, varying: dict, show_n: bool) -> list[str]:
    cells = [format_size(int(row["bytes"])), f"{row['path']}/{row['variant']}", link(row["src"], row["dst"])]
    cells += [str(row[k]) for k in ("workers", "sharing") if varying[k]]
    return cells + ([str(int(row["samples"]))] if show_n else [])


def _ceiling_matrix(ceilings: pd.DataFrame, df: pd.DataFrame, sizes: Sequence[int]) -> Table:
    """One row per ceiling (variant and link), its median GB/s at each size: all the
    samples of that variant, whichever scenario measured them (as % ceiling uses them)."""
    rows_df = df[(df["path"] == "ceiling") & (df["metric"] == "bandwidth") & df["bytes"].isin(sizes)]
    medians = rows_df.groupby(["variant", "src", "dst", "bytes"], sort=False)["bandwidth_gbps"].median()
    columns = [Column("ceiling", "left"), Column("link", "left")] + [Column(format_size(s)) for s in sizes]
    rows, groups = [], []
    for variant, src, dst in dict.fromkeys(zip(ceilings["variant"], ceilings["src"], ceilings["dst"])):
        cells = [str(variant), link(src, dst)]
        cells += [fmt_num(medians.get((variant, src, dst, s), float("nan"))) for s in sizes]
        rows.append(cells)
        groups.append(variant)
    return Table("ceilings · median GB/s, measured in the same run", "ceiling", columns, rows, groups)


def _headline_latency(part: pd.DataFrame) -> Table:
    extra, varying = _context(part)
    show_n = part["samples"].nunique() > 1
    title = " · ".join(["one-way latency at a few sizes, fastest first on each link"] + extra)
    columns = _headline_lead_columns(varying, show_n)
    columns += [Column("median µs"), Column("p5–p95 µs")]
    rows, groups = [], []
    for _, row in part.iterrows():
        n = int(row["samples"])
        cells = _headline_lead_cells(row, varying, show_n)
        cells += [fmt_num(row["median_s"] * 1e6), fmt_range(row["p5_s"] * 1e6, row["p95_s"] * 1e6, n)]
        rows.append(cells)
        groups.append(int(row["bytes"]))
    return Table(title, "latency", columns, rows, groups)


def _headline_setup(setup: pd.DataFrame) -> Table:
    """Setup costs; an operation measured at many sizes (host_register) at the representative ones."""
    keep = []
    for _, part in setup.groupby(["path", "variant", "src", "dst"], sort=False):
        if part["bytes"].nunique() > 2:
            part = part[part["bytes"].isin(representative_sizes(part["bytes"]))]
        keep.append(part)
    part = pd.concat(keep)
    show_spread = (part["samples"] > 1).any()
    columns = [Column("path", "left"), Column("operation", "left"), Column("link", "left"), Column("size"),
               Column("median ms")]
    if show_spread:
        columns += [Column("n"), Column("p5–p95 ms")]
    rows, groups = [], []
    for _, row in part.iterrows():
        n = int(row["samples"])
        cells = [str(row["path"]), str(row["variant"]), link(row["src"], row["dst"]),
                 format_size(int(row["bytes"])) if int(row["bytes"]) > 0 else DASH, fmt_num(row["median_s"] * 1e3)]
        if show_spread:
            cells += [str(n), fmt_range(row["p5_s"] * 1e3, row["p95_s"] * 1e3, n)]
        rows.append(cells)
        groups.append(row["path"])
    return Table("setup costs (one-time operations)", "setup", columns, rows, groups)


# --------------------------------------------------------------------------- verdicts


def size_span(lo: int, hi: int) -> str:
    return format_size(lo) if lo == hi else f"{format_size(lo)} – {format_size(hi)}"


def verdict_heading(tie: float = TIE) -> str:
    return (f"Fastest path per size: median time per transfer, same link, ceilings left out; "
            f"within {tie:.0%} of the fastest is a tie")


def describe_band(band: Band, tie: float = TIE) -> tuple[str, str, str]:
    """(sizes, winner, details) of one band, e.g. ('4 B – 1 GiB', 'ipc/ce',
    '2,106 GB/s at 1 GiB, 1.55 µs at 4 B · ipc/push within 5% · next path: staging, 13–67× slower')."""
    details = [f"{fmt_num(band.winner_gbps)} GB/s at {format_size(band.hi_bytes)}"]
    if band.lo_bytes != band.hi_bytes and not pd.isna(band.winner_lo_s):
        details[0] += f", {fmt_num(band.winner_lo_s * 1e6)} µs at {format_size(band.lo_bytes)}"
    if band.tied:
        details.append(f"{', '.join(band.tied)} within {tie:.0%}")
    if band.runner_up and not pd.isna(band.margin_min):
        lo, hi = band.margin_min, band.margin_max
        span = fmt_num(lo) if fmt_num(lo) == fmt_num(hi) else f"{fmt_num(lo)}–{fmt_num(hi)}"
        how = "slower" if lo >= 1 else "the time"
        details.append(f"next path: {band.runner_up.split('/', 1)[0]}, {span}× {how}")
    return size_span(band.lo_bytes, band.hi_bytes), band.winner, " · ".join(details)


def compared_links(link_verdicts: Sequence[LinkVerdict]) -> list[LinkVerdict]:
    """The links where there is something to compare: two path/variants or more."""
    return [v for v in link_verdicts if len(v.candidates) > 1]


def describe_crossing(c: Crossing) -> str:
    """'from 4 MiB (loses at 1 MiB)', 'at every size', 'never', '4 B – 4 MiB only'."""
    if c.never:
        return "never"
    ranges = ", ".join(size_span(lo, hi) for lo, hi in c.wins)
    if c.from_bytes is None:
        return f"{ranges} only, not above"
    if c.last_loss is None:
        return "at every size"
    text = f"from {format_size(c.from_bytes)} (loses at {format_size(c.last_loss)})"
    if len(c.wins) > 1:
        text += ", also " + ", ".join(size_span(lo, hi) for lo, hi in c.wins[:-1])
    return text


def break_even_table(items: Sequence[BreakEven]) -> Table:
    n = items[0].amortise_over if items else AMORTISE_OVER
    columns = [Column("path", "left"), Column("link", "left"), Column("setup paid", "left"), Column("cost"),
               Column(f"paid once per {n:,} transfers", "left"), Column("paid every transfer", "left")]
    rows = []
    for be in items:
        cost = f"{fmt_num(be.setup_s * 1e3)} ms"
        if be.size_dependent:
            cost = f"{fmt_num(be.setup_min_s * 1e3)}–{fmt_num(be.setup_s * 1e3)} ms by size"
        what = "halves added" if be.composed else "/".join(be.variants)
        rows.append([f"{be.path} ({what})", link(be.src, be.dst), " + ".join(be.setup), cost,
                     describe_crossing(be.amortised), describe_crossing(be.per_transfer)])
    return Table(f"break-even against {BASELINE_PATH}", "break-even", columns, rows, [be.path for be in items])


def break_even_notes(items: Sequence[BreakEven]) -> list[str]:
    if not items:
        return []
    n = items[0].amortise_over
    notes = [
        f"A size counts as a win when setup / N + the path's median time per transfer < {BASELINE_PATH}'s, "
        f"N = {n:,} (paid once per {n:,} transfers) or N = 1 (paid every transfer); each side at its fastest "
        f"variant at that size; 'from X': the smallest size from which it wins at every larger size measured. "
        f"{BASELINE_PATH.capitalize()}'s own one-time registration of its buffer is not counted.",
    ]
    elsewhere: dict[tuple[str, str], list[str]] = {}
    for be in items:
        if (be.baseline_src, be.baseline_dst) != (be.src, be.dst):
            elsewhere.setdefault((be.baseline_src, be.baseline_dst), []).append(f"{be.path} {link(be.src, be.dst)}")
        if be.composed:
            notes.append(f"{be.path}: measured in halves; one transfer is taken as its fastest GPU→host half plus "
                         "its fastest host→GPU half, without the hand-over between the processes (optimistic "
                         "at small sizes).")
        if be.size_dependent:
            notes.append(f"{be.path}: {' + '.join(be.setup)} was measured at each size; each size pays its own.")
    for (src, dst), names in elsewhere.items():
        notes.append(f"{' and '.join(dict.fromkeys(names))}: set against {BASELINE_PATH} measured {link(src, dst)} "
                     "(none on its own link in this run).")
    return notes


# --------------------------------------------------------------------------- comparing runs


def machine_facts(meta: Mapping[str, str]) -> dict[str, str]:
    """The facts that decide whether two runs are comparable."""
    names = gpu_names(meta)
    if not names:
        gpus = "no GPU"
    elif len(set(names)) == 1:
        gpus = f"{len(names)}× {names[0]}"
    else:
        gpus = ", ".join(names)
    pcie = sorted({v.strip() for k, v in meta.items() if re.fullmatch(r"gpu\.\d+\.pcie", k) and v.strip()})
    return {
        "GPUs": gpus,
        "driver": _first(meta, DRIVER_KEYS) or "unknown",
        "CUDA": _first(meta, CUDA_KEYS) or _first(meta, CUDA_DRIVER_KEYS) or "unknown",
        "GPU links": gpu_links(meta).removeprefix("links ") or "none",
        "PCIe": ", ".join(pcie) or "unknown",
        "MPS": meta.get("mps", "").strip() or "unknown",
    }


def machine_differences(metas: Sequence[Mapping[str, str]]) -> list[str]:
    """'GPUs: 1× NVIDIA H100 80GB HBM3 (run 1) vs 2× NVIDIA H200 (run 2)' for each fact
    (GPU names, driver, CUDA, GPU links, PCIe, MPS) that differs between the runs."""
    facts = [machine_facts(m) for m in metas]
    out = []
    for key in facts[0]:
        values = [f[key] for f in facts]
        if len(set(values)) > 1:
            out.append(f"{key}: " + " vs ".join(f"{v} (run {i + 1})" for i, v in enumerate(values)))
    return out


def comparison_tables(comparison: pd.DataFrame, run: int) -> list[Table]:
    """Ratio tables of run `run` against run 1: bandwidth and latency as a matrix
    (rows path/variant and link, columns representative sizes), setup costs as a list."""
    part = comparison[comparison["run"] == run]
    both = part[part["ratio"].notna()]
    tables = []
    for metric, what in (("bandwidth", "GB/s"), ("latency", "one-way µs")):
        rows_df = both[both["metric"] == metric]
        if rows_df.empty:
            continue
        sizes = representative_sizes(rows_df["bytes"])
        if metric == "latency" and (rows_df["bytes"] == 0).any():
            sizes = [0] + sizes
        better = "above 1: run {r} faster" if metric == "bandwidth" else "below 1: run {r} faster"
        title = f"{metric}: median {what}, run {run + 1} ÷ run 1 ({better.format(r=run + 1)})"
        columns = [Column("path/variant", "left"), Column("link", "left")]
        columns += [Column(format_size(s)) for s in sizes]
        ratio = {(r.path, r.variant, r.src, r.dst, int(r.bytes)): r.ratio for r in rows_df.itertuples()}
        rows, groups = [], []
        for path, variant, src, dst in dict.fromkeys(zip(rows_df["path"], rows_df["variant"], rows_df["src"],
                                                         rows_df["dst"])):
            cells = [f"{path}/{variant}", link(src, dst)]
            cells += [fmt_ratio(ratio.get((path, variant, src, dst, s))) for s in sizes]
            rows.append(cells)
            groups.append(path)
        tables.append(Table(title, f"compare-{metric}", columns, rows, groups))
    setup = both[both["metric"] == "setup"]
    if not setup.empty:
        keep = setup.sort_values("bytes", kind="stable").drop_duplicates(["path", "variant", "src", "dst"], keep="last")
        keep = keep.sort_index()  # back in summary order
        columns = [Column("path", "left"), Column("operation", "left"), Column("link", "left"), Column("size"),
                   Column("run 1 ms"), Column(f"run {run + 1} ms"), Column("ratio")]
        rows = [[str(r.path), str(r.variant), link(r.src, r.dst), format_size(int(r.bytes)) if r.bytes else DASH,
                 fmt_num(r.base_s * 1e3), fmt_num(r.other_s * 1e3), fmt_ratio(r.ratio)] for r in keep.itertuples()]
        tables.append(Table(f"setup costs: median ms, run {run + 1} ÷ run 1 (below 1: run {run + 1} faster)",
                            "compare-setup", columns, rows, [r[0] for r in rows]))
    return tables


def fmt_ratio(value) -> str:
    """0.9921 -> '0.99×', 12.34 -> '12.3×': two decimals are as much as run-to-run noise allows."""
    if value is None or pd.isna(value):
        return DASH
    return f"{value:.2f}×" if abs(value) < 10 else f"{fmt_num(value)}×"


def only_in_one(comparison: pd.DataFrame, run: int) -> tuple[int, int]:
    """(figures measured only in run 1, only in run `run`+1), counted as path/variant/link/size groups."""
    part = comparison[comparison["run"] == run]
    return int((part["other_s"].isna()).sum()), int((part["base_s"].isna()).sum())


# --------------------------------------------------------------------------- markdown

MARKDOWN_LIMIT = 60_000  # characters; a GitHub comment holds 65,536
MAX_MARKDOWN_WARNINGS = 15


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table, level: str = "###") -> list[str]:
    lines = [f"{level} {table.title}", ""]
    lines.append("| " + " | ".join(_md_cell(c.name) for c in table.columns) + " |")
    lines.append("|" + "|".join("---:" if c.align == "right" else ":---" for c in table.columns) + "|")
    for row in table.rows:
        lines.append("| " + " | ".join(_md_cell(cell) for cell in row) + " |")
    return lines


def _md_header(meta: Mapping[str, str], level: str = "##", title: str = "gpuipc-bench results") -> list[str]:
    lines = [f"{level} {title}", ""]
    machine = machine_summary(meta)
    lines.append(" · ".join([f"**{_md_inline(machine[0])}**"] + [_md_inline(p) for p in machine[1:]]))
    run = run_summary(meta)
    if run:
        lines += ["", " · ".join(_md_inline(p) for p in run)]
    command = meta.get("command", "").strip()
    if command:
        lines += ["", "`" + command.replace("`", "'") + "`"]
    remark = meta.get("note", "").strip()
    if remark:
        lines += ["", f"> note: {_md_inline(remark)}"]
    note = partial_note(meta)
    if note:
        lines += ["", f"> **⚠ {note}**"]
    lines.append("")
    return lines


def _md_verdict(summary: pd.DataFrame, amortise_over: int, level: str = "###") -> list[str]:
    lines = [f"{level} Verdict", ""]
    links = compared_links(verdicts(summary))
    if links:
        lines += [f"**{verdict_heading()}**", ""]
        for v in links:
            lines.append(f"- **{link(v.src, v.dst)}**")
            for band in v.bands:
                sizes, winner, details = describe_band(band)
                lines.append(f"  - {sizes}: **{_md_inline(winner)}** · {_md_inline(details)}")
        lines.append("")
    else:
        lines += ["No link has two path/variants to compare.", ""]
    items = break_even(summary, amortise_over=amortise_over)
    if items:
        table = break_even_table(items)
        lines += _md_table(table, level=level + "#") + [""]
        lines += [f"<sub>{_md_inline(note)}</sub><br>" for note in break_even_notes(items)[:-1]]
        lines += [f"<sub>{_md_inline(break_even_notes(items)[-1])}</sub>", ""]
    return lines


def render_markdown(df: pd.DataFrame, meta: Mapping[str, str], source: str | None = None,
                    amortise_over: int = AMORTISE_OVER) -> str:
    """A compact summary to paste into a GitHub issue comment: the machine, the verdict
    (fastest path per size, break-even of the paths with a setup cost), then headline
    tables at a few representative sizes, the setup costs and the warnings. It stays
    under MARKDOWN_LIMIT characters and says how to see the rest. Deterministic."""
    return _fit_markdown(_markdown_sections(df, meta, source, amortise_over))


def _markdown_sections(df, meta, source, amortise_over, level: str = "##") -> list[list[str]]:
    """The summary of one run as sections, in order; the fitting drops from the end."""
    summary = summarize(df)
    sub = level + "#"
    header = _md_header(meta, level=level)
    if summary.empty:
        return [header + ["No samples in this file.", ""]]
    sections = [header, _md_verdict(summary, amortise_over, level=sub)]
    for table in headline_tables(summary, df):
        sections.append(_md_table(table, level=sub) + [""])
    warnings = stability_warnings(df, summary)
    if warnings:
        texts = describe_warnings(warnings, summary)
        block = [f"**Warnings** ({len(texts)})", ""]
        block += [f"- {_md_inline(text)}" for text in texts[:MAX_MARKDOWN_WARNINGS]]
        if len(texts) > MAX_MARKDOWN_WARNINGS:
            block.append(f"- … and {len(texts) - MAX_MARKDOWN_WARNINGS} more (the terminal report lists them)")
        sections.append(block + [""])
    name = _md_code(f"gpuipc-bench report {source or 'RUN.csv'}")
    rest = (f"Every size, with its spread and sample count: {name}; as data: `--format csv` or `--format json`; "
            "plots: `--plot DIR`.")
    sections.append([f"<sub>{UNITS_NOTE}{_verified_note(summary)}. {rest}</sub>", ""])
    return sections


def _fit_markdown(sections: list[list[str]], limit: int = MARKDOWN_LIMIT) -> str:
    """Join the sections; if that is over `limit` characters, leave out whole sections
    from the end of the body (keeping the last, the pointer to the rest) and say so."""
    text = "\n".join(line for section in sections for line in section)
    if len(text) <= limit or len(sections) < 3:
        return text
    tail = sections[-1]
    kept = list(sections[:-1])
    dropped = 0
    while len(kept) > 1:
        note = [f"*{dropped + 1} more section(s) left out to fit a GitHub comment.*", ""]
        candidate = "\n".join(line for section in kept + [note, tail] for line in section)
        if len(candidate) <= limit:
            return candidate
        kept.pop()
        dropped += 1
    return "\n".join(line for section in kept + [tail] for line in section)[:limit]


def render_markdown_runs(runs: Sequence[tuple[pd.DataFrame, Mapping[str, str]]], sources: Sequence[str],
                         amortise_over: int = AMORTISE_OVER) -> str:
    """One run: render_markdown. Several: the comparison first (machine differences,
    ratio tables of each run against run 1), then each run's summary."""
    if len(runs) == 1:
        return render_markdown(runs[0][0], runs[0][1], sources[0], amortise_over)
    summaries = [summarize(df) for df, _ in runs]
    comparison = compare(summaries)
    head = ["## gpuipc-bench: comparing runs", ""]
    for i, ((_, meta), source) in enumerate(zip(runs, sources)):
        head.append(f"- run {i + 1}: {_md_code(str(source))} · " + _md_inline(" · ".join(machine_summary(meta))))
    head.append("")
    differences = machine_differences([meta for _, meta in runs])
    if differences:
        head += ["> **⚠ The machines differ**, so the ratios compare hardware as well as paths:", ">"]
        head += [f"> - {_md_inline(d)}" for d in differences]
        head.append("")
    sections = [head]
    for run in range(1, len(runs)):
        block = []
        for table in comparison_tables(comparison, run):
            block += _md_table(table, level="###") + [""]
        first_only, other_only = only_in_one(comparison, run)
        if first_only or other_only:
            block += [f"<sub>figures measured only in run 1: {first_only}; only in run {run + 1}: "
                      f"{other_only}</sub>", ""]
        sections.append(block)
    for i, ((df, meta), source) in enumerate(zip(runs, sources)):
        run_sections = _markdown_sections(df, meta, source, amortise_over, level="###")
        run_sections[0][0] = f"## run {i + 1}: {source}"
        sections += run_sections
    sections.append(["<sub>all figures of every run: `gpuipc-bench report --format csv FILES`</sub>", ""])
    return _fit_markdown(sections)


def _verified_note(summary: pd.DataFrame) -> str:
    """'; every sample verified' when every measured sample's bytes were checked and right."""
    flags = summary.loc[summary["metric"] != "setup", "verified"]
    if len(flags) and flags.notna().all() and flags.astype(bool).all():
        return "; every sample's bytes verified"
    return ""


def _md_code(text: str) -> str:
    """An inline code span that survives backticks in the text."""
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def _md_inline(text: str) -> str:
    return re.sub(r"([\\*`<>\[\]])", r"\\\1", text)


# --------------------------------------------------------------------------- data (csv, json)


def summary_records(runs: Sequence[tuple[pd.DataFrame, Mapping[str, str]]], sources: Sequence[str]) -> pd.DataFrame:
    """stats.summarize of each run (with ceiling_gbps and fraction_of_ceiling), one
    table, with the file it came from as the first column."""
    parts = []
    for (df, _), source in zip(runs, sources):
        summary = summarize(df)
        summary.insert(0, "file", str(source))
        parts.append(summary)
    return pd.concat(parts, ignore_index=True)


def render_csv(runs, sources) -> str:
    return summary_records(runs, sources).to_csv(index=False, lineterminator="\n", na_rep="")


def _plain(value):
    """JSON-ready: NaN/NA -> None, numpy scalars -> Python, tuples -> lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def _records(frame: pd.DataFrame) -> list[dict]:
    return [_plain(dict(zip(frame.columns, row))) for row in frame.itertuples(index=False, name=None)]


def render_json(runs, sources, amortise_over: int = AMORTISE_OVER) -> str:
    """Every run: file, metadata, summary rows, verdicts, break-evens, warnings; with
    several runs the comparison (ratios against run 1) and the machine differences."""
    import json

    out_runs = []
    summaries = []
    for (df, meta), source in zip(runs, sources):
        summary = summarize(df)
        summaries.append(summary)
        out_runs.append({
            "file": str(source),
            "metadata": dict(meta),
            "summary": _records(summary),
            "verdicts": [_plain(dataclasses.asdict(v)) for v in verdicts(summary)],
            "break_even": [_plain(dataclasses.asdict(b)) for b in break_even(summary, amortise_over=amortise_over)],
            "warnings": [_plain(dataclasses.asdict(w)) for w in stability_warnings(df, summary)],
        })
    doc = {"tool": "gpuipc-bench", "runs": out_runs}
    if len(runs) > 1:
        doc["comparison"] = _records(compare(summaries))
        doc["machine_differences"] = machine_differences([meta for _, meta in runs])
    return json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False)


# --------------------------------------------------------------------------- terminal


NARROW_TERMINAL = 100  # columns; below this the bandwidth tables leave out the µs spread
NARROW_LABELS = {"samples": "n", "verified": "ok", "% of ceiling": "% ceil"}


def render_terminal(df: pd.DataFrame, meta: Mapping[str, str], console: "Console",
                    amortise_over: int = AMORTISE_OVER) -> None:
    """Print the report: machine header, a table per scenario/path/metric, setup costs,
    the verdict (fastest path per size band, break-even against staging), then the
    stability warnings; a partial run says so first. Below NARROW_TERMINAL columns the
    headers get shorter and columns that repeat go into the title, so that every
    figure fits whole in 80."""
    from rich.text import Text

    summary = summarize(df)
    _print_header(meta, console)
    if summary.empty:
        console.print(Text("No samples in this file.", style="yellow"))
        return

    for table in build_tables(summary, detailed=True, width=console.width):
        _print_table(_fit(table, console.width), console)
        console.print()

    _print_verdict(summary, amortise_over, console)

    warnings = stability_warnings(df, summary)
    if warnings:
        console.print(Text("Warnings", style="bold yellow"))
        texts = describe_warnings(warnings, summary)
        for text in texts[:MAX_TERMINAL_WARNINGS]:
            console.print(Text("  ⚠ " + text, style="yellow"))
        if len(texts) > MAX_TERMINAL_WARNINGS:
            console.print(Text(f"  … and {len(texts) - MAX_TERMINAL_WARNINGS} more "
                               "(all of them: gpuipc-bench report --format json)", style="yellow"))
    console.print(Text(UNITS_NOTE, style="dim"))


def _print_header(meta: Mapping[str, str], console: "Console", prefix: str = "gpuipc-bench") -> None:
    from rich.text import Text

    machine = machine_summary(meta)
    header = Text(prefix, style="bold")
    header.append(" · ")
    header.append(machine[0], style="bold cyan")
    for piece in machine[1:]:
        header.append(" · " + piece)
    console.print(header)
    run = run_summary(meta)
    command = meta.get("command", "").strip()
    if run or command:
        line = Text(" · ".join(run), style="dim")
        if command:
            line.append((" · " if run else "") + command, style="dim")
        console.print(line)
    remark = meta.get("note", "").strip()
    if remark:
        console.print(Text("note: " + remark, style="italic"))
    note = partial_note(meta)
    if note:
        console.print(Text("⚠ " + note, style="bold red"))


def _print_verdict(summary: pd.DataFrame, amortise_over: int, console: "Console") -> None:
    from rich.table import Table as RichTable
    from rich.text import Text

    links = compared_links(verdicts(summary))
    items = break_even(summary, amortise_over=amortise_over)
    if not links and not items:
        return
    console.print(Text("Verdict", style="bold green"))
    if links:
        console.print(Text(verdict_heading(), style="dim"))
        grid = RichTable.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(no_wrap=True)
        grid.add_column()
        for v in links:
            grid.add_row(Text(link(v.src, v.dst), style="bold"), "", "")
            for band in v.bands:
                sizes, winner, details = describe_band(band)
                grid.add_row(Text("  " + sizes), Text(winner, style="bold green"), Text(details))
        console.print(grid)
        console.print()
    if items:
        n = items[0].amortise_over
        console.print(Text(f"Break-even against {BASELINE_PATH}: the sizes where a path with a setup cost is "
                           "faster, its setup included", style="bold"))
        table = break_even_table(items)
        once_label, every_label = f"paid once per {n:,} transfers:", "paid every transfer:"
        pad = max(len(once_label), len(every_label)) + 1
        for be, row in zip(items, table.rows):
            what, where_, setup, cost, once, every = row
            console.print(Text.assemble(("  " + be.path, "bold"),
                                        f" · {where_} · {what.split(' ', 1)[1][1:-1]} · {setup} {cost}"))
            console.print(Text.assemble(("      " + once_label.ljust(pad), "dim"), (once, "bold")))
            console.print(Text.assemble(("      " + every_label.ljust(pad), "dim"), (every, "bold")))
        for note in break_even_notes(items):
            console.print(Text(note, style="dim"))
        console.print()


def _print_table(table: Table, console: "Console") -> None:
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    rich_table = RichTable(
        title=Text(table.title, style="bold"), title_justify="left", box=box.SIMPLE_HEAD,
        pad_edge=False, show_edge=False,
    )
    for col, width in zip(table.columns, _terminal_widths(table, console.width)):
        # Fixed widths hold the longest cell, so only the headers wrap ('median µs' over two lines).
        rich_table.add_column(col.name, justify=col.align, width=width, no_wrap=width is None)
    previous = object()
    # Separate the sizes only where a size has several rows (variants) to keep apart.
    sectioned = table.kind in ("bandwidth", "latency") and len(set(table.groups)) < len(table.groups)
    for group, row in zip(table.groups, table.rows):
        if sectioned and group != previous and rich_table.row_count:
            rich_table.add_section()
        previous = group
        rich_table.add_row(*(_styled(col.name, cell) for col, cell in zip(table.columns, row)))
    console.print(rich_table)


MAX_TERMINAL_WARNINGS = 12


def _natural_width(table: Table) -> int:
    cells = [max((len(row[i]) for row in table.rows), default=0) for i in range(len(table.columns))]
    # between two columns: one space of padding each side and the box's blank separator
    return sum(max(len(c.name), w) for c, w in zip(table.columns, cells)) + 3 * (len(cells) - 1)


def _fit(table: Table, width: int) -> Table:
    """The table made narrower, one step at a time, until it fits `width`: shorter
    headers, no µs spread in bandwidth tables (the GB/s spread stays), a sample count
    that is the same on every row moved into the title."""
    if width >= NARROW_TERMINAL:
        return table
    table = table.renamed(NARROW_LABELS)
    if table.kind == "bandwidth":
        table = table.without("p5–p95 µs")  # the GB/s spread stays
    for name in [c.name for c in table.columns]:
        if _natural_width(table) > width and table.rows and all(cell == DASH for cell in table.column(name)):
            table = table.without(name)  # e.g. the spread of one-sample setup rows
    if _natural_width(table) > width and "n" in [c.name for c in table.columns]:
        counts = set(table.column("n"))
        if len(counts) == 1:
            n = counts.pop()
            table = dataclasses.replace(table.without("n"), title=f"{table.title} · {n} sample{'s' * (n != '1')}")
    if _natural_width(table) > width and table.kind == "setup":
        table = table.without("sharing")  # the measurement tables above show it
    return table


def _terminal_widths(table: Table, console_width: int) -> list[int | None]:
    """None for every column when the table fits as it is; otherwise fixed widths that
    keep every figure whole and let the headers wrap ('median µs' over two lines)."""
    cells = [max((len(row[i]) for row in table.rows), default=0) for i in range(len(table.columns))]
    if _natural_width(table) <= console_width:
        return [None] * len(cells)
    return [max(w, *(len(word) for word in c.name.split())) for c, w in zip(table.columns, cells)]


def _styled(column: str, cell: str):
    from rich.text import Text

    if column in ("verified", "ok"):
        return Text(cell, style="green" if cell == "✓" else "bold red" if cell == "✗" else "")
    if column in ("median GB/s", "median µs", "median ms"):
        return Text(cell, style="bold")
    return Text(cell)


# --------------------------------------------------------------------------- several runs, terminal


def render_comparison_terminal(runs: Sequence[tuple[pd.DataFrame, Mapping[str, str]]], sources: Sequence[str],
                               console: "Console") -> None:
    """After each run's own report: the runs named, the machine differences, and the
    ratio tables of each run against run 1."""
    from rich.text import Text

    console.print(Text("Comparing runs", style="bold"))
    for i, ((_, meta), source) in enumerate(zip(runs, sources)):
        console.print(Text(f"  run {i + 1}: {source} · " + " · ".join(machine_summary(meta))))
    differences = machine_differences([meta for _, meta in runs])
    if differences:
        console.print(Text("⚠ the machines differ, so the ratios compare hardware as well as paths:",
                           style="bold yellow"))
        for d in differences:
            console.print(Text("  " + d, style="yellow"))
    console.print()
    comparison = compare([summarize(df) for df, _ in runs])
    for run in range(1, len(runs)):
        for table in comparison_tables(comparison, run):
            _print_table(table, console)
            console.print()
        first_only, other_only = only_in_one(comparison, run)
        if first_only or other_only:
            console.print(Text(f"figures measured only in run 1: {first_only}; only in run {run + 1}: {other_only}",
                               style="dim"))
