"""The terminal renderer (rich): the report, the one-screen run summary and the comparison
of runs. All width fitting lives here.

A table never cuts a figure: when it is wider than the console, its headers wrap first
('median GB/s' over two lines), then columns are left out by priority (Column.priority,
the least important first), and only then do cells of words (variants, links) wrap.
Every cell is passed to rich as Text, never as markup, so names such as '[cuda12]' print
as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuipc_bench.report import wording
from gpuipc_bench.report.document import Header, Report
from gpuipc_bench.report.tables import Table

if TYPE_CHECKING:
    from rich.console import Console

GAP = 3  # between two columns of a rich SIMPLE_HEAD table: padding, divider, padding
MIN_WORDS_WIDTH = 8  # the narrowest a column of words may wrap to


def _cells(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def _widths(table: Table, wrap_headers: bool) -> list[int]:
    out = []
    for i, col in enumerate(table.columns):
        header = max(_cells(w) for w in col.name.split()) if wrap_headers and col.name.split() else _cells(col.name)
        out.append(max([header] + [_cells(row[i]) for row in table.rows]))
    return out


def _total(widths: Sequence[int], gap: int = GAP) -> int:
    return sum(widths) + gap * (len(widths) - 1)


def fit(table: Table, width: int, gap: int = GAP) -> tuple[Table, list[int]]:
    """The table (less the columns left out) and each column's width, so that it fits `width`.
    In this order, until it fits: headers wrap; columns of words wrap, the widest first (never
    below their longest word or MIN_WORDS_WIDTH); columns are left out by priority (the
    highest number first, the rightmost among equals). Figures are never cut. `gap`: the
    characters between two columns."""
    while True:
        widths = _widths(table, wrap_headers=False)
        if _total(widths, gap) <= width:
            return table, widths
        widths = _widths(table, wrap_headers=True)
        floors = [max([_cells(w) for row in table.rows for w in row[i].split()] + [_header_floor(col), MIN_WORDS_WIDTH])
                  if col.wrap else widths[i] for i, col in enumerate(table.columns)]
        excess = _total(widths, gap) - width
        while excess > 0:  # take a character from the widest column of words that can give one
            give = [i for i in range(len(widths)) if widths[i] > floors[i]]
            if not give:
                break
            widths[max(give, key=lambda i: widths[i])] -= 1
            excess -= 1
        droppable = [(col.priority, i) for i, col in enumerate(table.columns) if col.priority > 0]
        if excess <= 0 or not droppable:
            return table, widths
        _, i = max(droppable)
        table = table.without(table.columns[i].name)


def _header_floor(col) -> int:
    return max((_cells(w) for w in col.name.split()), default=0)


def print_table(table: Table, console: Console) -> None:
    from rich import box
    from rich.table import Table as RichTable
    from rich.text import Text

    table, widths = fit(table, console.width)
    console.print(Text(table.title, style="bold"))
    rich_table = RichTable(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col, width in zip(table.columns, widths):
        rich_table.add_column(Text(_wrapped(col.name, width)), justify=col.align, width=width, no_wrap=not col.wrap,
                              overflow="fold" if col.wrap else "ellipsis")
    # Separate the sizes only where a size has several rows (variants) to keep apart.
    sectioned = table.kind in ("bandwidth", "latency") and len(set(table.groups)) < len(table.groups)
    previous = object()
    for group, row in zip(table.groups or [None] * len(table.rows), table.rows):
        if sectioned and group != previous and rich_table.row_count:
            rich_table.add_section()
        previous = group
        rich_table.add_row(*(_styled(col.name, cell) for col, cell in zip(table.columns, row)))
    console.print(rich_table)


def _wrapped(header: str, width: int) -> str:
    """The header broken into lines of at most `width` at spaces (figure columns do not wrap,
    their headers are broken here)."""
    lines: list[str] = []
    for word in header.split():
        if lines and _cells(lines[-1]) + 1 + _cells(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


def _styled(column: str, cell: str):
    from rich.text import Text

    if column in ("verified",):
        return Text(cell, style="green" if cell == "✓" else "bold red" if cell == "✗" else "")
    if column.startswith("median") or column == "flags" and cell:
        return Text(cell, style="bold" if column.startswith("median") else "yellow")
    return Text(cell)


# --------------------------------------------------------------------------- header, verdict, warnings


def print_header(head: Header, console: Console, prefix: str = "gpuipc-bench · ") -> None:
    from rich.text import Text

    console.print(Text(wording.machine_line(head.meta, console.width, prefix), style="bold"))
    line = " · ".join(head.run + ([head.command] if head.command else []))
    if line:
        console.print(Text(line, style="dim"))
    if head.note:
        console.print(Text("note: " + head.note, style="italic"))
    if head.partial:
        console.print(Text("⚠ " + head.partial, style="bold red"))


def _print_blocks(blocks, console: Console) -> None:
    """A block per ranking: its title, then per band its sizes and, under the leaders, the
    details, the full width."""
    from rich.table import Table as RichTable
    from rich.text import Text

    for block in blocks:
        console.print(Text(block.title, style="bold"))
        grid = RichTable.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold", ratio=1)
        for line in block.bands:
            leaders = Text(line.leaders, style="bold green" if line.ranked else "yellow")
            grid.add_row(Text("  " + line.sizes), Text("\n").join([leaders] + [Text(d) for d in line.details if d]))
        console.print(grid)


def print_verdict(doc: Report, console: Console) -> None:
    from rich.text import Text

    console.print(Text("Verdict", style="bold green"))
    console.print(Text(doc.verdict_heading, style="dim"))
    if doc.no_verdict:
        console.print(Text(doc.no_verdict))
    _print_blocks(doc.rankings, console)
    console.print()
    if doc.break_even_table is not None:
        print_table(doc.break_even_table, console)
        for note in doc.break_even_notes:
            console.print(Text(note, style="dim"))
        console.print()


def print_warnings(doc: Report, console: Console) -> None:
    from rich.text import Text

    if not doc.warnings:
        return
    console.print(Text(f"Warnings ({doc.warning_count})", style="bold yellow"))
    for w in doc.warnings:
        console.print(Text.assemble(("  ⚠ " + w.title + ": ", "yellow"), w.subjects, (f" ({w.hint})", "dim")))


# --------------------------------------------------------------------------- the report


def render_report(doc: Report, console: Console) -> None:
    """Header, the tables, the verdict and break-even, the warnings, the notes."""
    from rich.text import Text

    print_header(doc.header, console)
    if doc.empty:
        console.print(Text("No samples in this file.", style="yellow"))
        return
    console.print()
    for table in doc.tables:
        print_table(table, console)
        console.print()
    print_verdict(doc, console)
    print_warnings(doc, console)
    for note in doc.notes:
        console.print(Text(note, style="dim"))


# --------------------------------------------------------------------------- the one-screen answer


def render_summary(lines: Sequence[tuple[str, str]], console: Console) -> None:
    """The one-screen answer (answer.summary_lines, already wrapped to the console's width):
    each line as plain text (never markup), styled only where the console is a terminal."""
    from rich.text import Text

    for text, style in lines:
        console.print(Text(text, style=style), soft_wrap=True, overflow="ignore", crop=False)


# --------------------------------------------------------------------------- several runs


def render_comparison(sources: Sequence[str], machines: Sequence[str], differences: Sequence[str],
                      blocks: Sequence[tuple[list[Table], tuple[int, int], int]], console: Console,
                      changes: Sequence[str] = ()) -> None:
    """The runs named, the machine facts that differ, the decisions that changed, and the
    ratio tables of each run against run 1 (with how many figures only one of the two
    measured)."""
    from rich.text import Text

    console.print(Text("Comparing runs", style="bold"))
    for i, (source, machine) in enumerate(zip(sources, machines)):
        console.print(Text(f"  run {i + 1}: {source} · {machine}"))
    if differences:
        console.print(Text("⚠ the machines differ, so the ratios compare hardware as well as paths:",
                           style="bold yellow"))
        for d in differences:
            console.print(Text("  " + d, style="yellow"))
    console.print(Text("Decisions", style="bold"))
    if changes:
        for line in changes:
            console.print(Text("  " + line))
    else:
        console.print(Text("  every choice is the same in every run"))
    console.print()
    for tables, (first_only, other_only), run in blocks:
        for table in tables:
            print_table(table, console)
            console.print()
        if first_only or other_only:
            console.print(Text(f"figures measured only in run 1: {first_only}; only in run {run + 1}: {other_only}",
                               style="dim"))
