"""Tables of strings built from the analysis, for any renderer: no layout, no width here.

A Column says how important it is (`priority`: 0 is never left out, a higher number is
left out sooner when a terminal is narrow) and whether its cells are words that may wrap
(`wrap`) or figures that must stay whole. terminal.py decides what fits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Sequence

import pandas as pd

from gpuipc_bench.analysis.breakeven import BreakEven
from gpuipc_bench.analysis.conditions import link_rank, records
from gpuipc_bench.analysis.model import RunAnalysis
from gpuipc_bench.analysis.warnings import FAILED_VERIFICATION, above_ceiling
from gpuipc_bench.report.causes import cause_of
from gpuipc_bench.report.wording import (
    DASH,
    MEASURE_SHORT,
    describe_crossing,
    fmt_interval,
    fmt_ms,
    fmt_num,
    fmt_percent,
    fmt_pm,
    fmt_ratio,
    fmt_verified,
    link,
    plural,
    setup_cost,
)
from gpuipc_bench.sizes import format_size


@dataclasses.dataclass
class Column:
    name: str
    align: str = "right"  # 'left' or 'right'
    priority: int = 0  # 0: always shown; higher: left out sooner where the width is short
    wrap: bool = False  # words that may wrap; figures never do


@dataclasses.dataclass
class Table:
    """A renderer-agnostic table: a title, columns and rows of strings. `groups[i]` is the
    group (size) of row i; renderers may draw a line between groups."""

    title: str
    kind: str  # 'bandwidth', 'latency', 'setup', 'ceiling', 'break-even', 'summary', 'compare-...'
    columns: list[Column]
    rows: list[list[str]]
    groups: list[object] = dataclasses.field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> list[str]:
        i = self.names.index(name)
        return [row[i] for row in self.rows]

    def without(self, name: str) -> Table:
        """The same table less one column (if it has it)."""
        if name not in self.names:
            return self
        i = self.names.index(name)
        return dataclasses.replace(self, columns=self.columns[:i] + self.columns[i + 1:],
                                   rows=[row[:i] + row[i + 1:] for row in self.rows])


_METRIC_TITLES = {"bandwidth": "bandwidth", "latency": "one-way latency"}


def _flags(row) -> str:
    """Short words for what is wrong with a figure (they also say why it was not ranked)."""
    words = [cause_of(r).short for r in str(row.unstable).split(",") if r]
    if _known(row.l2_resident) and bool(row.l2_resident):
        words.append("L2")
    if bool(getattr(row, "call_bound", False)):
        words.append("call-bound")
    if not math.isnan(above_ceiling(row)):
        words.append("above ceiling")
    if _known(row.verified) and not bool(row.verified):
        words.append(cause_of(FAILED_VERIFICATION).short)
    return ", ".join(words)


def _known(flag) -> bool:
    return flag is not None and flag is not pd.NA


def _varying(part: pd.DataFrame) -> dict[str, bool]:
    return {k: part[k].nunique() > 1 for k in ("workers", "sharing", "ceiling", "samples")} | {
        "link": len(set(zip(part["src"], part["dst"]))) > 1}


def _title_parts(part: pd.DataFrame, varying: dict[str, bool]) -> list[str]:
    first = part.iloc[0]
    parts = []
    if not varying["link"]:
        parts.append(link(first["src"], first["dst"]))
    if not varying["workers"]:
        parts.append(plural(int(first["workers"]), "worker"))
    if not varying["sharing"] and first["sharing"] and first["sharing"] != "none":
        parts.append(str(first["sharing"]))
    if not varying["ceiling"] and first["ceiling"]:
        parts.append(f"vs {first['ceiling']}")
    return parts


def _key_columns(varying: dict[str, bool]) -> list[Column]:
    out = [Column("link", "left", 0, wrap=True)] if varying["link"] else []
    out += [Column(k, "left", 0) for k in ("workers", "sharing") if varying[k]]
    return out + ([Column("ceiling", "left", 4)] if varying["ceiling"] else [])


def _key_cells(row, varying: dict[str, bool]) -> list[str]:
    cells = [link(row.src, row.dst)] if varying["link"] else []
    cells += [str(getattr(row, k)) for k in ("workers", "sharing") if varying[k]]
    return cells + ([str(row.ceiling) or DASH] if varying["ceiling"] else [])


# --------------------------------------------------------------------------- every figure


def measurement_tables(summary: pd.DataFrame, detailed: bool) -> list[Table]:
    """A table per (scenario, path, metric, link, measure) with every size, then one of the
    setup costs. Keys the same on every row go into the title; keys that vary are columns."""
    tables = []
    measured = summary[summary["metric"] != "setup"]
    keys = ["scenario", "path", "metric", "src", "dst", "measure"]
    for (scenario, path, metric, _, _, measure), part in measured.groupby(keys, sort=False):
        tables.append(_measure_table(scenario, path, metric, measure, part, detailed))
    setup = summary[summary["metric"] == "setup"]
    if not setup.empty:
        tables.append(setup_table(setup, detailed))
    return tables


def _measure_table(scenario, path, metric, measure, part: pd.DataFrame, detailed: bool) -> Table:
    part = part.sort_values("bytes", kind="stable")  # size-major; variants keep summary order
    varying = _varying(part)
    name = path if scenario == path else f"{scenario}: {path}"
    what = [name, _METRIC_TITLES.get(metric, metric)]
    if measure and metric == "bandwidth":
        what.append(MEASURE_SHORT.get(measure, measure))
    title = " · ".join(what + _title_parts(part, varying))
    bandwidth = metric == "bandwidth"
    has_ceiling = bandwidth and part["fraction_of_ceiling"].notna().any()
    show_n = detailed or varying["samples"]
    part_rows = records(part)
    flags = [_flags(r) for r in part_rows]

    columns = [Column("size"), Column("variant", "left", 0, wrap=True)] + _key_columns(varying)
    if show_n:
        columns.append(Column("n", priority=4))
    columns.append(Column("median µs", priority=2 if bandwidth else 0))
    if not bandwidth:
        columns.append(Column("±", priority=1))
    if detailed or not bandwidth:
        columns.append(Column("95% CI µs", priority=5 if bandwidth else 3))
    if bandwidth:
        columns += [Column("median GB/s"), Column("±", priority=1)]
        if detailed:
            columns.append(Column("95% CI GB/s", priority=3))
    if detailed:
        columns.append(Column("MAD", priority=5))
    if has_ceiling:
        columns.append(Column("% of ceiling", priority=1))
    if detailed:
        columns.append(Column("verified", "left", 6))
    if any(flags):
        columns.append(Column("flags", "left", 2, wrap=True))

    rows, groups = [], []
    for row, flag in zip(part_rows, flags):
        cells = [format_size(int(row.bytes)), str(row.variant)] + _key_cells(row, varying)
        if show_n:
            cells.append(str(int(row.samples)))
        cells.append(fmt_num(row.median_s * 1e6))
        if not bandwidth:
            cells.append(fmt_pm(row.ci_lo_s, row.median_s, row.ci_hi_s))
        if detailed or not bandwidth:
            cells.append(fmt_interval(row.ci_lo_s * 1e6, row.ci_hi_s * 1e6))
        if bandwidth:
            cells += [fmt_num(row.median_gbps), fmt_pm(row.ci_lo_gbps, row.median_gbps, row.ci_hi_gbps)]
            if detailed:
                cells.append(fmt_interval(row.ci_lo_gbps, row.ci_hi_gbps))
        if detailed:
            cells.append(fmt_percent(row.mad_rel))
        if has_ceiling:
            # below twice the per-call floor the ceiling is one call too: a fraction of it says nothing
            cells.append(DASH if bool(row.call_bound) else fmt_percent(row.fraction_of_ceiling))
        if detailed:
            cells.append(fmt_verified(row.verified))
        if any(flags):
            cells.append(flag)
        rows.append(cells)
        groups.append(int(row.bytes))
    return Table(title, metric, columns, rows, groups)


def setup_table(setup: pd.DataFrame, detailed: bool, representative: bool = False) -> Table:
    """The one-time operations; `representative`: an operation measured at many sizes
    (host_register) at a few of them."""
    if representative:
        keep = []
        for _, part in setup.groupby(["path", "variant", "src", "dst"], sort=False):
            if part["bytes"].nunique() > 2:
                part = part[part["bytes"].isin(representative_sizes(part["bytes"]))]
            keep.append(part)
        setup = pd.concat(keep)
    varying = _varying(setup)
    show_size = (setup["bytes"] > 0).any()
    title = " · ".join(["setup costs (one-time operations)"] + _title_parts(setup, {**varying, "link": True}))
    columns = [Column("path", "left"), Column("operation", "left", 0, wrap=True), Column("link", "left", 0, wrap=True)]
    columns += [Column(k, "left", 3) for k in ("workers", "sharing") if varying[k]]
    if show_size:
        columns.append(Column("size"))
    columns += [Column("n", priority=2), Column("median ms"), Column("±", priority=1)]
    if detailed:
        columns.append(Column("95% CI ms", priority=3))
    rows, groups = [], []
    for row in records(setup):
        cells = [str(row.path), str(row.variant), link(row.src, row.dst)]
        cells += [str(getattr(row, k)) for k in ("workers", "sharing") if varying[k]]
        if show_size:
            cells.append(format_size(int(row.bytes)) if int(row.bytes) > 0 else DASH)
        cells += [str(int(row.samples)), fmt_num(row.median_s * 1e3), fmt_pm(row.ci_lo_s, row.median_s, row.ci_hi_s)]
        if detailed:
            cells.append(fmt_interval(row.ci_lo_s * 1e3, row.ci_hi_s * 1e3))
        rows.append(cells)
        groups.append(row.path)
    return Table(title, "setup", columns, rows, groups)


# --------------------------------------------------------------------------- a few sizes

# The sizes the compact reports show, where the run has them; the smallest and the largest
# size measured are always shown.
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


def _lead(part: pd.DataFrame) -> tuple[list[str], list[Column], Callable]:
    """Title pieces, lead columns and a row -> lead cells function for the headline tables:
    size, path/variant, link, then workers/sharing/measure where they vary, n where it varies."""
    varying = {k: part[k].nunique() > 1 for k in ("workers", "sharing", "measure", "samples")}
    extra = []
    if not varying["workers"]:
        extra.append(plural(int(part["workers"].iloc[0]), "worker"))
    if not varying["sharing"] and part["sharing"].iloc[0] not in ("", "none"):
        extra.append(str(part["sharing"].iloc[0]))
    shown = [k for k in ("workers", "sharing", "measure") if varying[k]]
    columns = [Column("size"), Column("path/variant", "left", 0, True), Column("link", "left", 0, True)]
    columns += [Column(k, "left") for k in shown] + ([Column("n", priority=3)] if varying["samples"] else [])

    def cells(row) -> list[str]:
        out = [format_size(int(row.bytes)), f"{row.path}/{row.variant}", link(row.src, row.dst)]
        out += [str(getattr(row, k)) for k in shown]
        return out + ([str(int(row.samples))] if varying["samples"] else [])

    return extra, columns, cells


def headline_tables(analysis: RunAnalysis) -> list[Table]:
    """The compact tables of the Markdown summary, at representative sizes only: bandwidth
    (fastest first on each link), the ceilings, one-way latency, setup costs."""
    summary = analysis.summary
    tables: list[Table] = []
    bw = summary[(summary["metric"] == "bandwidth") & (summary["path"] != "ceiling")]
    sizes = representative_sizes(summary.loc[summary["metric"] == "bandwidth", "bytes"])
    if not bw.empty:
        part = bw[bw["bytes"].isin(sizes)]
        part = part.assign(_neg=-part["median_gbps"].fillna(-1.0),
                           _link=[link_rank(a, b) for a, b in zip(part["src"], part["dst"])])
        tables.append(_headline_bandwidth(part.sort_values(["bytes", "_link", "_neg"], kind="stable")))
    ceilings = summary[(summary["metric"] == "bandwidth") & (summary["path"] == "ceiling")]
    if not ceilings.empty:
        tables.append(_ceiling_matrix(ceilings, sizes))
    lat = summary[summary["metric"] == "latency"]
    if not lat.empty:
        part = lat[lat["bytes"].isin(set(representative_sizes(lat["bytes"])) | {0})]
        part = part.assign(_link=[link_rank(a, b) for a, b in zip(part["src"], part["dst"])])
        tables.append(_headline_latency(part.sort_values(["bytes", "_link", "median_s"], kind="stable")))
    setup = summary[summary["metric"] == "setup"]
    if not setup.empty:
        tables.append(setup_table(setup, detailed=False, representative=True))
    return tables


def _headline_bandwidth(part: pd.DataFrame) -> Table:
    extra, columns, lead = _lead(part)
    has_ceiling = part["fraction_of_ceiling"].notna().any()
    title = " · ".join(["bandwidth at a few sizes, fastest first on each link"] + extra)
    columns += [Column("median µs", priority=2), Column("GB/s"), Column("95% CI GB/s", priority=1)]
    if has_ceiling:
        columns.append(Column("% ceiling", priority=1))
    part_rows = records(part)
    flags = [_flags(r) for r in part_rows]
    if any(flags):
        columns.append(Column("flags", "left", 2, True))
    rows, groups = [], []
    for row, flag in zip(part_rows, flags):
        cells = lead(row) + [fmt_num(row.median_s * 1e6), fmt_num(row.median_gbps),
                             fmt_interval(row.ci_lo_gbps, row.ci_hi_gbps)]
        if has_ceiling:
            frac = row.fraction_of_ceiling
            cells.append(f"{fmt_percent(frac)} {row.ceiling}" if not math.isnan(frac) and not bool(row.call_bound)
                         else DASH)
        if any(flags):
            cells.append(flag)
        rows.append(cells)
        groups.append(int(row.bytes))
    return Table(title, "bandwidth", columns, rows, groups)


def _ceiling_matrix(ceilings: pd.DataFrame, sizes: Sequence[int]) -> Table:
    """One row per ceiling (scenario, sharing mode and variant), its median GB/s at each size."""
    several = ceilings[["scenario", "sharing"]].drop_duplicates().shape[0] > 1
    columns = [Column("ceiling", "left"), Column("link", "left", 0, True)]
    columns += [Column("measured in", "left", 2, True)] if several else []
    columns += [Column(format_size(s)) for s in sizes]
    rows, groups = [], []
    for (scenario, sharing, variant), part in ceilings.groupby(["scenario", "sharing", "variant"], sort=False):
        at = {int(r.bytes): r for r in records(part)}
        cells = [str(variant), link(part["src"].iloc[0], part["dst"].iloc[0])]
        if several:
            cells.append(f"{scenario}, {sharing}")
        for s in sizes:
            r = at.get(s)
            pm = fmt_pm(r.ci_lo_gbps, r.median_gbps, r.ci_hi_gbps) if r is not None else DASH
            cells.append(DASH if r is None else fmt_num(r.median_gbps) + ("" if pm == DASH else f" {pm}"))
        rows.append(cells)
        groups.append(variant)
    return Table("ceilings · median GB/s ± its 95% interval, measured in the same run", "ceiling", columns, rows,
                 groups)


def _headline_latency(part: pd.DataFrame) -> Table:
    extra, columns, lead = _lead(part)
    title = " · ".join(["one-way latency at a few sizes, fastest first on each link"] + extra)
    columns += [Column("median µs"), Column("95% CI µs", priority=1)]
    rows = [lead(r) + [fmt_num(r.median_s * 1e6), fmt_interval(r.ci_lo_s * 1e6, r.ci_hi_s * 1e6)]
            for r in records(part)]
    return Table(title, "latency", columns, rows, [int(b) for b in part["bytes"]])


# --------------------------------------------------------------------------- break-even, comparison


def break_even_table(items: Sequence[BreakEven], short: bool = False) -> Table:
    """A row per path and link: the setup it pays, and from which size it beats the baseline
    with the setup paid once per N transfers and with every transfer. short: the run summary's
    (no operation names, the sizes only)."""
    n = items[0].amortise_over if items else 0
    # A run in several sharing modes (or measures) has a row per path and mode: the path cell names it
    modes = len({be.sharing for be in items}) > 1
    measures = len({be.measure for be in items}) > 1
    heading = "path" + (" · sharing" if modes else "") + (" · measure" if measures else "")
    columns = [Column(heading, "left", 0, True), Column("link", "left", 0, True)]
    columns += [] if short else [Column("setup paid", "left", 2, True)]
    columns += [Column("setup", "left", 1, True), Column(f"paid once per {n:,} transfers", "left", 0, True),
                Column("paid every transfer", "left", 0, True)]
    rows = []
    for be in items:
        what = "halves added" if be.composed else "/".join(be.variants)
        name = be.path if short else f"{be.path} ({what})"
        name += f" · {be.sharing}" if modes else ""
        name += f" · {be.measure}" if measures else ""
        row = [name, link(be.src, be.dst)]
        row += [] if short else [" + ".join(be.setup)]
        rows.append(row + [setup_cost(be, short), describe_crossing(be.amortised, short),
                           describe_crossing(be.per_transfer, short)])
    title = f"Break-even against {items[0].baseline}: from which size it is faster, its setup included" if items \
        else "Break-even"
    return Table(title, "break-even", columns, rows, [be.path for be in items])


def comparison_tables(comparison: pd.DataFrame, run: int) -> list[Table]:
    """Ratio tables of run `run` against run 1: bandwidth and latency as a matrix (rows:
    path/variant, link and the conditions that vary; columns: representative sizes), setup
    costs as a list. '~' marks a ratio whose intervals include 1."""
    part = comparison[comparison["run"] == run]
    both = part[part["ratio"].notna()]
    tables = []
    for metric, what in (("bandwidth", "GB/s"), ("latency", "one-way µs")):
        rows_df = both[both["metric"] == metric]
        if rows_df.empty:
            continue
        better = "above 1: run {r} faster" if metric == "bandwidth" else "below 1: run {r} faster"
        # A table per link, worker count and sharing mode (named in its title), so that the
        # ratios at each size fit 80 columns: the sizes between the smallest and the largest
        # are left out first where they do not.
        for (src, dst, workers, sharing), rows_part in rows_df.groupby(["src", "dst", "workers", "sharing"],
                                                                       sort=False):
            sizes = representative_sizes(rows_part["bytes"])
            if metric == "latency" and (rows_part["bytes"] == 0).any():
                sizes = [0] + sizes
            where = " · ".join([link(src, dst), plural(int(workers), "worker")]
                               + ([str(sharing)] if sharing not in ("", "none") else []))
            title = (f"{metric}: median {what}, run {run + 1} ÷ run 1 · {where} "
                     f"({better.format(r=run + 1)}; ~: within the intervals)")
            keys = ["path", "variant", "measure"]
            columns = [Column("path/variant", "left", 0, True), Column("measure", "left", 5, True)]
            columns += [Column(format_size(s).replace(" ", "\u00a0"), priority=0 if i in (0, len(sizes) - 1)
                               else 1 + abs(i - len(sizes) // 2)) for i, s in enumerate(sizes)]
            rows, groups = [], []
            for key, group in rows_part.groupby(keys, sort=False):
                values = dict(zip(keys, key))
                cells = [f"{values['path']}/{values['variant']}", MEASURE_SHORT.get(values["measure"],
                                                                                     values["measure"])]
                at = {int(r.bytes): r for r in records(group)}
                cells += [fmt_ratio(at[s].ratio, at[s].ratio_lo, at[s].ratio_hi) if s in at else DASH
                          for s in sizes]
                rows.append(cells)
                groups.append(values["path"])
            tables.append(Table(title, f"compare-{metric}", columns, rows, groups))
    setup = both[both["metric"] == "setup"]
    if not setup.empty:
        keep = setup.sort_values("bytes", kind="stable").drop_duplicates(["path", "variant", "src", "dst"], keep="last")
        keep = keep.sort_index()
        columns = [Column("path/operation", "left", 0, True), Column("link", "left", 4, True),
                   Column("size", priority=3), Column("run 1 ms"), Column(f"run {run + 1} ms"), Column("ratio")]
        rows = [[f"{r.path}/{r.variant}", link(r.src, r.dst), format_size(int(r.bytes)) if r.bytes else DASH,
                 fmt_ms(r.base_s).removesuffix(" ms"), fmt_ms(r.other_s).removesuffix(" ms"),
                 fmt_ratio(r.ratio, r.ratio_lo, r.ratio_hi)] for r in keep.itertuples()]
        tables.append(Table(f"setup costs: median ms, run {run + 1} ÷ run 1 (below 1: run {run + 1} faster)",
                            "compare-setup", columns, rows, [r[0].partition("/")[0] for r in rows]))
    return tables


def only_in_one(comparison: pd.DataFrame, run: int) -> tuple[int, int]:
    """(figures measured only in run 1, only in run `run`+1)."""
    part = comparison[comparison["run"] == run]
    return int(part["other_s"].isna().sum()), int(part["base_s"].isna().sum())


def verified_note(summary: pd.DataFrame) -> str:
    """'; every sample's bytes verified' when every measured sample was checked and right."""
    flags = summary.loc[summary["metric"] != "setup", "verified"]
    if len(flags) and flags.notna().all() and flags.astype(bool).all():
        return "; every sample's bytes verified"
    return ""


__all__ = ["Column", "Table", "break_even_table", "comparison_tables", "headline_tables", "measurement_tables",
           "only_in_one", "representative_sizes", "setup_table", "verified_note"]
