"""What the full report says, built once from the analysis (its Answer: analysis/model.py);
the renderers (terminal, Markdown) only lay it out: the header, a table per path, metric,
link and measure (every size), the verdict (a block per section of the answer, a line per
band), the break-even, the warnings (grouped by cause, each with what it means and what to
do) and the notes. The one-screen answer is answer.py's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from gpuipc_bench.analysis.breakeven import BreakEven
from gpuipc_bench.analysis.model import RunAnalysis, Section
from gpuipc_bench.report import answer, tables, wording
from gpuipc_bench.report.matrix import pair_matrices
from gpuipc_bench.report.tables import Table


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


def verdict_blocks(sections: list[Section], meta: Mapping[str, str] | None = None) -> list[RankingBlock]:
    """A block per section of the answer, a line per band: its sizes, the choice with its
    mechanism and every member, then the figure, what ties, the next mechanism."""
    blocks = []
    for section in sections:
        sizes = sorted({d.bytes for b in section.bands for d in b.decisions})
        lines = []
        for band in section.bands:
            d = band.first
            members = sorted(band.pool) or sorted({m for x in band.decisions for m in x.members})
            leaders = d.cls + (f" ({', '.join(members)})" if len(members) > 1 or d.cls != d.choice else "")
            head, rest = (_plain(line.text) for line in answer.band_lines(band, section.measure, {},
                                                                          links=section.links))
            details = [head.split(": ", 1)[-1], rest]
            details += [_plain(line.text) for line in answer.differ_lines(band, section.measure)]
            if any(x.l2_resident for x in band.decisions):
                details.append("L2-resident at " + wording.size_list(
                    sorted({x.bytes for x in band.decisions if x.l2_resident}), sizes) + ": a cache figure")
            lines.append(BandLine(wording.size_span(band.lo, band.hi), leaders, details))
        blocks.append(RankingBlock(answer.section_title(section, meta), lines))
    return blocks


def _plain(text: str) -> str:
    """A summary line's text unwrapped: its non-breaking joins as spaces."""
    return text.replace(answer.NBSP, " ").strip()


def build_report(analysis: RunAnalysis, source: str | None = None, detailed: bool = False) -> Report:
    summary = analysis.summary
    measured = {key: sorted(part["bytes"]) for key, part in summary.groupby(["path", "variant", "metric"])}
    warning_lines = [WarningLine(*w) for w in wording.warning_lines(analysis.warnings, None if detailed else 6,
                                                                     measured)]
    blocks = verdict_blocks(list(analysis.answer.sections), analysis.meta)
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
