"""Reports from results: rich tables for the terminal, GitHub markdown for issues.

Both renderers share one intermediate form: `build_tables(summary, detailed)` turns
the summary (stats.summarize) into plain `Table`s of strings, one per
(scenario, path, metric), plus one table of setup costs. Keys that are the same for
every row of a table (the link, the worker count, the sharing mode, the ceiling,
the sample count) go into its title; keys that vary become columns. A later
renderer (HTML, a comparison of runs) reuses the same tables.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping, Sequence

import pandas as pd

from gpuipc_bench.results import read_results
from gpuipc_bench.sizes import format_size
from gpuipc_bench.stats import StabilityWarning, stability_warnings, summarize

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


def build_tables(summary: pd.DataFrame, detailed: bool) -> list[Table]:
    """Tables for one run's summary. detailed=True: every column (terminal);
    detailed=False: the compact set for markdown."""
    tables: list[Table] = []
    measured = summary[summary["metric"] != "setup"]
    keys = ["scenario", "path", "metric"]
    for (scenario, path, metric), part in measured.groupby(keys, sort=False):
        tables.append(_measure_table(scenario, path, metric, part, detailed))
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


# --------------------------------------------------------------------------- markdown


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(table: Table) -> list[str]:
    lines = [f"### {table.title}", ""]
    lines.append("| " + " | ".join(_md_cell(c.name) for c in table.columns) + " |")
    lines.append("|" + "|".join("---:" if c.align == "right" else ":---" for c in table.columns) + "|")
    for row in table.rows:
        lines.append("| " + " | ".join(_md_cell(cell) for cell in row) + " |")
    return lines


def render_markdown(df: pd.DataFrame, meta: Mapping[str, str]) -> str:
    """A compact report for pasting into a GitHub issue. Deterministic for a given input."""
    summary = summarize(df)
    lines = ["## gpuipc-bench results", ""]
    machine = machine_summary(meta)
    lines.append(" · ".join([f"**{_md_inline(machine[0])}**"] + [_md_inline(p) for p in machine[1:]]))
    run = run_summary(meta)
    if run:
        lines += ["", " · ".join(_md_inline(p) for p in run)]
    command = meta.get("command", "").strip()
    if command:
        lines += ["", "`" + command.replace("`", "'") + "`"]
    note = partial_note(meta)
    if note:
        lines += ["", f"> **⚠ {note}**"]
    lines.append("")
    if summary.empty:
        lines += ["No samples in this file.", ""]
        return "\n".join(lines)
    for table in build_tables(summary, detailed=False):
        lines += _md_table(table) + [""]
    warnings = stability_warnings(df, summary)
    if warnings:
        lines += ["**Warnings**", ""]
        lines += [f"- {_md_inline(text)}" for text in describe_warnings(warnings, summary)]
        lines.append("")
    lines += [f"<sub>{UNITS_NOTE}{_verified_note(summary)}</sub>", ""]
    return "\n".join(lines)


def _verified_note(summary: pd.DataFrame) -> str:
    """'; every sample verified' when every measured sample's bytes were checked and right."""
    flags = summary.loc[summary["metric"] != "setup", "verified"]
    if len(flags) and flags.notna().all() and flags.astype(bool).all():
        return "; every sample's bytes verified"
    return ""


def _md_inline(text: str) -> str:
    return re.sub(r"([\\*`<>\[\]])", r"\\\1", text)


# --------------------------------------------------------------------------- terminal


NARROW_TERMINAL = 100  # columns; below this the bandwidth tables leave out the µs spread
NARROW_LABELS = {"samples": "n", "verified": "ok"}


def render_terminal(df: pd.DataFrame, meta: Mapping[str, str], console: "Console") -> None:
    """Print the report: machine header, a table per scenario/path/metric, setup costs,
    then the stability warnings; a partial run says so first. Below NARROW_TERMINAL
    columns the headers get shorter and the bandwidth tables leave out the p5–p95 µs
    column, so that they fit in 80."""
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    summary = summarize(df)
    machine = machine_summary(meta)
    header = Text("gpuipc-bench", style="bold")
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
    note = partial_note(meta)
    if note:
        console.print(Text("⚠ " + note, style="bold red"))
    if summary.empty:
        console.print(Text("No samples in this file.", style="yellow"))
        return

    for table in build_tables(summary, detailed=True):
        if console.width < NARROW_TERMINAL:
            table = table.renamed(NARROW_LABELS)
            if table.kind == "bandwidth":
                table = table.without("p5–p95 µs")  # the GB/s spread stays
        rich_table = RichTable(
            title=Text(table.title, style="bold"), title_justify="left", box=box.SIMPLE_HEAD,
            pad_edge=False, show_edge=False,
        )
        for col, width in zip(table.columns, _terminal_widths(table, console.width)):
            rich_table.add_column(col.name, justify=col.align, width=width, no_wrap=width is None)
        previous = object()
        # Separate the sizes only where a size has several rows (variants) to keep apart.
        sectioned = table.kind != "setup" and len(set(table.groups)) < len(table.groups)
        for group, row in zip(table.groups, table.rows):
            if sectioned and group != previous and rich_table.row_count:
                rich_table.add_section()
            previous = group
            rich_table.add_row(*(_styled(col.name, cell) for col, cell in zip(table.columns, row)))
        console.print(rich_table)
        console.print()

    warnings = stability_warnings(df, summary)
    if warnings:
        console.print(Text("Warnings", style="bold yellow"))
        texts = describe_warnings(warnings, summary)
        for text in texts[:MAX_TERMINAL_WARNINGS]:
            console.print(Text("  ⚠ " + text, style="yellow"))
        if len(texts) > MAX_TERMINAL_WARNINGS:
            console.print(Text(f"  … and {len(texts) - MAX_TERMINAL_WARNINGS} more "
                               "(all of them: gpuipc-bench report --format markdown)", style="yellow"))
    console.print(Text(UNITS_NOTE, style="dim"))


MAX_TERMINAL_WARNINGS = 12


def _terminal_widths(table: Table, console_width: int) -> list[int | None]:
    """None for every column when the table fits as it is; otherwise fixed widths that
    keep every figure whole and let the headers wrap ('median µs' over two lines)."""
    cells = [max((len(row[i]) for row in table.rows), default=0) for i in range(len(table.columns))]
    # between two columns: one space of padding each side and the box's blank separator
    natural = sum(max(len(c.name), w) for c, w in zip(table.columns, cells)) + 3 * (len(cells) - 1)
    if natural <= console_width:
        return [None] * len(cells)
    return [max(w, *(len(word) for word in c.name.split())) for c, w in zip(table.columns, cells)]


def _styled(column: str, cell: str):
    from rich.text import Text

    if column == "verified":
        return Text(cell, style="green" if cell == "✓" else "bold red" if cell == "✗" else "")
    if column in ("median GB/s", "median µs", "median ms"):
        return Text(cell, style="bold")
    return Text(cell)
