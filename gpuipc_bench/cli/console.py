"""What the commands print to: stdout (results) and stderr (progress, notes)."""

from __future__ import annotations

import os
import shutil
import textwrap

from rich.console import Console
from rich.markup import escape

MIN_WIDTH = 40  # narrower than this, tables are a few characters a line


def _width() -> int | None:
    """None (rich reads COLUMNS or the terminal) unless COLUMNS is a number below MIN_WIDTH:
    rich prints nothing at all at COLUMNS=0. Then the terminal's width (80 without one), at least
    MIN_WIDTH."""
    columns = os.environ.get("COLUMNS", "").strip()
    if not columns.isdigit() or int(columns) >= MIN_WIDTH:
        return None
    return max(shutil.get_terminal_size().columns, MIN_WIDTH)


def stdout_console() -> Console:
    return Console(highlight=False, soft_wrap=False, width=_width())


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False, width=_width())


def print_failure(console: Console, word: str, text: str) -> None:
    """One failure a line: `word` (red) and `text`, wrapped at the console's width with the
    continuation indented, so that a reader of a log joins the indented lines to the line before."""
    lines = textwrap.fill(f"{word} {text}", width=max(MIN_WIDTH, console.width), subsequent_indent="  ",
                          break_on_hyphens=False)
    console.print(f"[red]{escape(word)}[/]{escape(lines[len(word):])}", highlight=False, soft_wrap=True)
