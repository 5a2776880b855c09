"""What a report says, built once from the analysis; the renderers (terminal, Markdown) only
lay it out. Two documents:

- Report: the header, a table per path, metric, link and measure (every size), the verdict
  (a block per ranking, a line per band), the break-even, the warnings (a line per cause)
  and the notes.
- RunSummary: what `run` prints at the end, one screen: the machine, the verdict per link
  in a line per band, each path's headline figures, the break-even sizes, how many warnings
  and the command that shows them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from gpuipc_bench.analysis import RunAnalysis
from gpuipc_bench.report import tables
from gpuipc_bench.report import wording
from gpuipc_bench.report.matrix import pair_matrices
from gpuipc_bench.report.tables import Table
from gpuipc_bench.verdict import BreakEven, Ranking


@dataclasses.dataclass
class Header:
    meta: dict[str, str]  # the machine line is fitted to the width by the renderer
    run: list[str]
    command: str = ""
    note: str = ""
    partial: str | None = None


def header(meta: Mapping[str, str]) -> Header:
    return Header(dict(meta), wording.run_summary(meta), meta.get("command", "").strip(),
                  meta.get("note", "").strip(), wording.partial_note(meta))


@dataclasses.dataclass
class BandLine:
    sizes: str
    leaders: str
    details: list[str]
    ranked: bool = True


@dataclasses.dataclass
class RankingBlock:
    title: str
    bands: list[BandLine]


@dataclasses.dataclass
class WarningLine:
    title: str
    subjects: str
    hint: str


@dataclasses.dataclass
class Report:
    header: Header
    empty: bool
    tables: list[Table]
    verdict_heading: str
    rankings: list[RankingBlock]
    no_verdict: str | None
    break_even: list[BreakEven]
    break_even_table: Table | None
    break_even_notes: list[str]
    warnings: list[WarningLine]
    warning_count: int
    notes: list[str]
    source: str


NO_VERDICT = ("No link has two paths between the same two processes to compare (staging, ipc, mmap, peer: "
              "two workers, the same sharing mode and measure).")


def verdict_blocks(rankings: list[Ranking]) -> list[RankingBlock]:
    """A block per ranking that compares something, a line per band."""
    blocks = []
    for r in rankings:
        if r.compared:
            lines = [BandLine(*wording.describe_band(band, r), band.winner is not None) for band in r.bands]
            blocks.append(RankingBlock(wording.ranking_title(r), lines))
    return blocks


@dataclasses.dataclass
class SummaryLine:
    measure: str  # '' when the link has one ranking (its measure is in the title then)
    sizes: str  # '*' at the end: a cache figure at some of the sizes (L2-resident, or above the ceiling)
    leaders: str
    margin: str
    ranked: bool = True


@dataclasses.dataclass
class LinkBlock:
    title: str
    lines: list[SummaryLine]


def summary_blocks(rankings: list[Ranking]) -> tuple[list[LinkBlock], str | None]:
    """The verdict on one screen: a block per link and sharing mode, a line per band (its
    measure where the link has two rankings); and the legend of its marks, if any."""
    blocks: dict[str, LinkBlock] = {}
    marked = partial = unstable = False
    by_link: dict[str, list[Ranking]] = {}
    for r in rankings:
        if r.compared:
            by_link.setdefault(wording.link_title(r), []).append(r)
    for title, group in by_link.items():
        several = len(group) > 1
        if not several:
            title = wording.ranking_title(group[0])
        lines = []
        for r in group:
            for band in r.bands:
                cache = bool(band.l2_sizes or band.over_ceiling)
                marked |= cache
                partial |= bool(band.tied_at)
                unstable |= bool(band.faster_unranked)
                lines.append(SummaryLine(
                    wording.MEASURE_SHORT.get(r.measure, r.measure) if several and band is r.bands[0] else "",
                    wording.size_span(band.lo_bytes, band.hi_bytes) + ("*" if cache else "")
                    + ("†" if band.faster_unranked else ""),
                    wording.compact_leaders(band), wording.compact_margin(band), band.winner is not None))
        blocks[title] = LinkBlock(title, lines)
    legend = [text for flag, text in ((partial, "(~ x): tied at some of the sizes"),
                                      (marked, "*: a cache figure at some sizes (L2-resident, or above its ceiling)"),
                                      (unstable, "†: a faster figure was too unstable to rank (see the report)"))
              if flag]
    return list(blocks.values()), "; ".join(legend) or None


def build_report(analysis: RunAnalysis, source: str | None = None, detailed: bool = False) -> Report:
    summary = analysis.summary
    measured = {key: sorted(part["bytes"]) for key, part in summary.groupby(["path", "variant", "metric"])}
    warning_lines = [WarningLine(*w) for w in wording.warning_lines(analysis.warnings, None if detailed else 6,
                                                                     measured)]
    blocks = verdict_blocks(analysis.rankings)
    name = source or "RUN.csv"
    notes = [wording.UNITS_NOTE + tables.verified_note(summary) + "."]
    # What the scenarios found while running ('# note.<scenario>.<key>: text' in the CSV header).
    notes += [f"{key[len('note.'):]}: {text}" for key, text in analysis.meta.items() if key.startswith("note.")]
    if not detailed:
        notes.append(f"Every column (samples, intervals in µs, MAD, verified) and every warning's figures: "
                     f"gpuipc-bench report {name} --detailed.")
    return Report(
        header=header(analysis.meta), empty=summary.empty,
        tables=(tables.measurement_tables(summary, detailed) + pair_matrices(summary, analysis.meta))
        if not summary.empty else [],
        verdict_heading=wording.verdict_heading(analysis.min_effect), rankings=blocks,
        no_verdict=None if blocks else NO_VERDICT, break_even=list(analysis.break_even),
        break_even_table=tables.break_even_table(analysis.break_even) if analysis.break_even else None,
        break_even_notes=wording.break_even_notes(analysis.break_even), warnings=warning_lines,
        warning_count=len(analysis.warnings), notes=notes, source=name,
    )


# --------------------------------------------------------------------------- the run summary


@dataclasses.dataclass
class RunSummary:
    meta: dict[str, str]
    partial: str | None
    verdict_heading: str
    rankings: list[LinkBlock]
    legend: str | None  # what the marks of the verdict's lines mean
    no_verdict: str | None
    figures: Table | None
    break_even: Table | None
    warnings: str | None
    more: str  # the command that shows the rest


def build_summary(analysis: RunAnalysis, source: str | None = None) -> RunSummary:
    name = source or "RUN.csv"
    blocks, legend = summary_blocks(analysis.rankings)
    no_verdict = None
    if not blocks:
        summary = analysis.summary
        measured = summary[(summary["path"] != "ceiling") & (summary["metric"] != "setup")]
        names = list(dict.fromkeys(f"{p}/{v}" for p, v in zip(measured["path"], measured["variant"])))
        shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
        no_verdict = NO_VERDICT + (f" Measured: {shown}." if names else "")
    return RunSummary(
        meta=analysis.meta, partial=wording.partial_note(analysis.meta),
        verdict_heading=f"Fastest path per size (~: tied, no {analysis.min_effect:.0%} difference), "
                        f"next path's time ×",
        rankings=blocks, legend=legend, no_verdict=no_verdict, figures=tables.path_figures(analysis),
        break_even=tables.break_even_table(analysis.break_even, short=True) if analysis.break_even else None,
        warnings=wording.warnings_count(analysis.warnings) if analysis.warnings else None,
        more=f"gpuipc-bench report {name}",
    )
