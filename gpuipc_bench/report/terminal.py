"""The terminal renderer (rich): the report, the one-screen run summary and the comparison
of runs. All width fitting lives here.

A table never cuts a figure: when it is wider than the console, its headers wrap first
('median GB/s' over two lines), then columns are left out by priority (Column.priority,
the least important first), and only then do cells of words (variants, links) wrap.
Every cell is passed to rich as Text, never as markup, so names such as '[cuda12]' print
as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpuipc_bench.report import wording
from gpuipc_bench.report.document import Header, Report
from gpuipc_bench.report.tables import Table

if TYPE_CHECKING:
    from rich.console import Console

GAP = 3  # between two columns of a rich SIMPLE_HEAD table: padding, divider, padding
MIN_WORDS_WIDTH = 8  # the narrowest a column of words may wrap to


@functools.lru_cache(maxsize=1 << 16)
def _cells(text: str) -> int:
    """Terminal cells of a text (rich's count), once per text: a report asks for the same cells
    at every width it tries."""
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
    if _total(widths) <= console.width and all(widths):  # rich lays the columns out as given: no collapsing
        console.print(_Rows(rich_table, table, sectioned))
        return
    previous = object()
    for group, row in zip(table.groups or [None] * len(table.rows), table.rows):
        if sectioned and group != previous and rich_table.row_count:
            rich_table.add_section()
        previous = group
        rich_table.add_row(*(_styled(col.name, cell) for col, cell in zip(table.columns, row)))
    console.print(rich_table)


class _Rows:
    """A table as rich.table.Table renders it, its rows laid out here: the same segments, in a
    fraction of the time (rich renders every cell through a padding, a wrap and a crop).

    Only what print_table asks of rich: the SIMPLE_HEAD box without edges, default padding,
    columns of the widths given (their sum fits the console: rich collapses none), unstyled
    columns and rows, each cell a Text of one style (_styled). rich renders the header (an empty copy of
    the table) and every cell that is not one line that fits its column (words to wrap, a
    tab): the rest are one segment each, justified as rich justifies."""

    def __init__(self, header, table: Table, sectioned: bool):
        self.header = header  # the rich Table, with its columns and no rows
        self.table = table
        self.sectioned = sectioned

    def __rich_console__(self, console: Console, options):
        from rich.control import strip_control_codes
        from rich.padding import Padding
        from rich.segment import Segment
        from rich.style import Style

        header = self.header
        yield from console.render(header, options)
        columns = header.columns
        n = len(columns)
        pads = [(0 if i == 0 else 1, 0 if i == n - 1 else 1) for i in range(n)]
        full = [col.width + left + right for col, (left, right) in zip(columns, pads)]
        table_width = sum(full) + header._extra_width
        table_options = options.update(width=table_width, highlight=header.highlight, height=None)
        cell_options = [table_options.update(width=w, justify=col.justify, no_wrap=col.no_wrap, overflow=col.overflow,
                                             height=None, highlight=col.highlight) for col, w in zip(columns, full)]
        row_style = Style.null()
        cell_styles = [console.get_style(col.style or "") + row_style for col in columns]
        border_style = console.get_style(header.style or "") + console.get_style(header.border_style or "")
        from rich.box import SIMPLE_HEAD

        box = SIMPLE_HEAD.substitute(options, safe=console.safe_box if header.safe_box is None else header.safe_box)
        dividers = []
        for vertical in (box.mid_vertical, box.foot_vertical):
            divider = Segment(vertical, border_style)
            dividers.append(divider if divider.text.strip() else
                            Segment(divider.text, row_style.background_style + divider.style))
        section = [Segment(box.get_row(full, "row", edge=False), border_style), Segment.line()]
        new_line = Segment.line()
        null = Style.null()
        styles: dict[str, Style | None] = {}

        def text_style(name: str) -> Style | None:
            """The style rich gives the segment of a one-line Text of this style (joined lines
            carry it as a span over the blank base style)."""
            if name not in styles:
                styles[name] = Style.combine((console.get_style("", default=null),
                                              console.get_style(name, default=null))) if name else None
            return styles[name]

        rows = list(zip(self.table.groups or [None] * len(self.table.rows), self.table.rows))
        names = [col.name for col in self.table.columns]
        layout = [(columns[i].width, columns[i].justify, pads[i][0], pads[i][1], not cell_styles[i]
                   and columns[i].justify in ("left", "right")) for i in range(n)]
        previous: object = object()
        for index, (group, row) in enumerate(rows):
            if self.sectioned and group != previous and index:
                yield from section  # add_section() before this row: the line after the one above
            previous = group
            cells = []
            for i, cell in enumerate(row):
                width, justify, left, right, plain_column = layout[i]
                style = _style_of(names[i], cell)
                plain = strip_control_codes(cell)  # as Text(cell) keeps it
                length = _cells(plain)
                if plain_column and length <= width and "\n" not in plain and "\t" not in plain \
                        and (justify == "left" or plain == plain.rstrip()):
                    fill = " " * (width - length)
                    line = [Segment(plain + fill if justify == "left" else fill + plain, text_style(style))]
                    if left:
                        line.insert(0, Segment(" " * left, null))
                    if right:
                        line.append(Segment(" " * right, null))
                    cells.append([line])
                else:
                    cells.append(console.render_lines(Padding(_styled(names[i], cell), (0, right, 0, left)),
                                                      cell_options[i], style=cell_styles[i]))
            height = max(len(lines) for lines in cells)
            if height > 1:
                cells = [Segment.set_shape(Segment.align_top(lines, w, height, style), w, height)
                         for lines, w, style in zip(cells, full, cell_styles)]
            divider = dividers[1 if index == len(rows) - 1 else 0]
            for line_no in range(height):
                for i, lines in enumerate(cells):
                    yield from lines[line_no]
                    if i < n - 1:
                        yield divider
                yield new_line


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

    return Text(cell, style=_style_of(column, cell))


def _style_of(column: str, cell: str) -> str:
    """The style of a cell of the column."""
    if column in ("verified",):
        return "green" if cell == "✓" else "bold red" if cell == "✗" else ""
    if column.startswith("median") or column == "flags" and cell:
        return "bold" if column.startswith("median") else "yellow"
    return ""


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
