"""The Markdown renderer: a compact summary to paste into a GitHub issue comment.

The machine, the verdict (a line per band, the break-even table), then the headline tables
at a few representative sizes, the setup costs and the warnings (a line per cause); under
MARKDOWN_LIMIT characters, leaving out whole sections from the end (and saying so) when a
run is too large. Deterministic: the same file gives the same text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpuipc_bench.analysis.model import RunAnalysis
from gpuipc_bench.report import wording
from gpuipc_bench.report.document import Header, Report
from gpuipc_bench.report.tables import (
    Table,
    comparison_tables,
    headline_tables,
    only_in_one,
    verified_note,
)

MARKDOWN_LIMIT = 60_000  # characters; a GitHub comment holds 65,536


def _cell(text: str) -> str:
    """A table cell: Markdown's and HTML's active characters escaped, '|' too, on one line."""
    return inline(text).replace("|", "\\|").replace("\n", " ")


def inline(text: str) -> str:
    """Text with Markdown's active characters escaped."""
    return re.sub(r"([\\*`<>\[\]])", r"\\\1", text)


def code(text: str) -> str:
    """An inline code span that survives backticks in the text."""
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def table_lines(table: Table, level: str = "###") -> list[str]:
    lines = [f"{level} {table.title}", ""]
    lines.append("| " + " | ".join(_cell(c.name) for c in table.columns) + " |")
    lines.append("|" + "|".join("---:" if c.align == "right" else ":---" for c in table.columns) + "|")
    lines += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in table.rows]
    return lines


def header_lines(head: Header, level: str = "##", title: str = "gpuipc-bench results") -> list[str]:
    machine = wording.machine_summary(head.meta)
    lines = [f"{level} {title}", "", " · ".join([f"**{inline(machine[0])}**"] + [inline(p) for p in machine[1:]])]
    if head.run:
        lines += ["", " · ".join(inline(p) for p in head.run)]
    if head.command:
        lines += ["", code(head.command)]
    if head.note:
        lines += ["", f"> note: {inline(head.note)}"]
    if head.partial:
        lines += ["", f"> **⚠ {inline(head.partial)}**"]
    return lines + [""]


def verdict_lines(doc: Report, level: str = "###") -> list[str]:
    lines = [f"{level} Verdict", "", f"**{inline(doc.verdict_heading)}**", ""]
    if doc.no_verdict:
        lines += [inline(doc.no_verdict), ""]
    for block in doc.rankings:
        lines.append(f"- **{inline(block.title)}**")
        for band in block.bands:
            leaders = f"**{inline(band.leaders)}**" if band.ranked else inline(band.leaders)
            details = "".join(f" · {inline(d)}" for d in band.details if d)
            lines.append(f"  - {inline(band.sizes)}: {leaders}{details}")
    if doc.rankings:
        lines.append("")
    if doc.break_even_table is not None:
        lines += table_lines(doc.break_even_table, level=level + "#") + [""]
        notes = [f"<sub>{inline(note)}</sub>" for note in doc.break_even_notes]
        lines += [note + "<br>" for note in notes[:-1]] + notes[-1:] + [""]
    return lines


def sections(doc: Report, analysis: RunAnalysis, level: str = "##") -> list[list[str]]:
    """The summary of one run as sections, in order; fitting drops from the end."""
    sub = level + "#"
    head = header_lines(doc.header, level=level)
    if doc.empty:
        return [head + ["No samples in this file.", ""]]
    out = [head, verdict_lines(doc, level=sub)]
    out += [table_lines(table, level=sub) + [""] for table in headline_tables(analysis)]
    if doc.warnings:
        block = [f"**Warnings** ({doc.warning_count})", ""]
        block += [f"- {inline(w.title)}: {inline(w.subjects)} ({inline(w.hint)})" for w in doc.warnings]
        out.append(block + [""])
    rest = (f"Every size, with its interval and sample count: {code('gpuipc-bench report ' + doc.source)}; as data: "
            "`--format csv` or `--format json`; plots: `--plot DIR`.")
    out.append([f"<sub>{inline(wording.UNITS_NOTE + verified_note(analysis.summary))}. {rest}</sub>", ""])
    return out


def fit(parts: list[list[str]], limit: int = MARKDOWN_LIMIT) -> str:
    """Join the sections; over `limit` characters, leave out whole sections from the end of
    the body (keeping the last, the pointer to the rest) and say so."""
    text = "\n".join(line for section in parts for line in section)
    if len(text) <= limit or len(parts) < 3:
        return text
    tail = parts[-1]
    kept = list(parts[:-1])
    dropped = 0
    while len(kept) > 1:
        note = [f"*{dropped + 1} more section(s) left out to fit a GitHub comment.*", ""]
        candidate = "\n".join(line for section in kept + [note, tail] for line in section)
        if len(candidate) <= limit:
            return candidate
        kept.pop()
        dropped += 1
    return "\n".join(line for section in kept + [tail] for line in section)[:limit]


def comparison_sections(analyses: Sequence[RunAnalysis], sources: Sequence[str], comparison,
                        changes: Sequence[str] = ()) -> list[list[str]]:
    head = ["## gpuipc-bench: comparing runs", ""]
    for i, (a, source) in enumerate(zip(analyses, sources)):
        head.append(f"- run {i + 1}: {code(str(source))} · " + inline(" · ".join(wording.machine_summary(a.meta))))
    head.append("")
    differences = wording.machine_differences([a.meta for a in analyses])
    if differences:
        head += ["> **⚠ The machines differ**, so the ratios compare hardware as well as paths:", ">"]
        head += [f"> - {inline(d)}" for d in differences]
        head.append("")
    head += ["### Decisions", ""] + ([f"- {inline(c)}" for c in changes] or ["Every choice is the same in every run."])
    head.append("")
    out = [head]
    for run in range(1, len(analyses)):
        block = []
        for table in comparison_tables(comparison, run):
            block += table_lines(table, level="###") + [""]
        first_only, other_only = only_in_one(comparison, run)
        if first_only or other_only:
            block += [f"<sub>figures measured only in run 1: {first_only}; only in run {run + 1}: {other_only}</sub>",
                      ""]
        out.append(block)
    return out
