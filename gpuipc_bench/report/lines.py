"""The one-screen answer's lines and figures: a logical line and its wrapping at the terminal's
width, and the numbers held to their units (a time, a span of times, a span of sizes)."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Sequence

from gpuipc_bench.report import wording
from gpuipc_bench.report.wording import fmt_num


@dataclasses.dataclass(frozen=True)
class Line:
    """One logical line: its text, how far its continuation lines are indented, its style."""

    text: str
    indent: int = 0
    style: str = ""
    long_words: bool = False  # a word longer than the line (a file's path) may be broken


def wrap(lines: Sequence[Line], width: int) -> list[tuple[str, str]]:
    """(text, style) of every screen line: each logical line wrapped at `width` between words
    (never inside one), continuation lines indented by its `indent`."""
    out = []
    for line in lines:  # textwrap breaks at ASCII whitespace only: NBSP holds a number to its unit
        parts = textwrap.wrap(line.text, width=width, subsequent_indent=" " * line.indent,
                              break_long_words=line.long_words, break_on_hyphens=False,
                              drop_whitespace=True) or [""]
        lead = len(line.text) - len(line.text.lstrip(" "))
        if lead and not parts[0].startswith(" "):
            parts[0] = " " * lead + parts[0]
        out += [(p.replace(NBSP, " "), line.style) for p in parts]
    return out


def fewest_lines(variants: Sequence[str], indent: int, width: int, style: str = "", long_words: bool = False) -> Line:
    """The first of `variants` (the fullest first) that wraps onto the fewest screen lines."""
    made = [Line(text, indent, style, long_words) for text in variants]
    counts = [len(wrap([line], width)) for line in made]
    return made[counts.index(min(counts))]


# --------------------------------------------------------------------------- figures


NBSP = "\u00a0"  # joins a number to its unit: wrap() never breaks there, and prints a space


def fmt_time(seconds: float) -> str:
    """1.9e-06 -> '1.90 µs', 3.4e-4 -> '340 µs', 2.9e-3 -> '2.90 ms' (number and unit joined by NBSP)."""
    number, unit = time_parts(seconds)
    return f"{number}{NBSP}{unit}" if unit else number


def time_parts(seconds: float) -> tuple[str, str]:
    if not (seconds > 0):
        return wording.DASH, ""
    if seconds >= 1:
        return fmt_num(seconds), "s"
    if seconds >= 1e-3:
        return fmt_num(seconds * 1e3), "ms"
    return fmt_num(seconds * 1e6), "µs"


def time_span(values: Sequence[float]) -> str:
    """'1.86–3.33 µs' (one unit where both ends share it), '180 µs–1.20 ms'."""
    (lo, lu), (hi, hu) = time_parts(min(values)), time_parts(max(values))
    if lo == hi and lu == hu:
        return f"{lo}{NBSP}{lu}"
    return f"{lo}–{hi}{NBSP}{hu}" if lu == hu else f"{lo}{NBSP}{lu}–{hi}{NBSP}{hu}"


def value_span(values: Sequence[float], fmt) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def sizes_text(lo: int, hi: int) -> str:
    """'4 B–4 MiB', '64–256 MiB', '16 MiB' (each number joined to its unit by NBSP)."""
    a, b = wording.format_size(lo), wording.format_size(hi)
    if lo == hi:
        return no_break(a)
    (na, ua), (nb, ub) = a.split(" "), b.split(" ")
    return no_break(f"{na}–{nb} {ub}" if ua == ub else f"{a}–{b}")


def no_break(text: str) -> str:
    return text.replace(" ", NBSP)


def size_text(nbytes: int) -> str:
    return no_break(wording.format_size(nbytes))
