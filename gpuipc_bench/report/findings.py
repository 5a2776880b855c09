"""The answer's one-line findings under its decisions: the hand-over cost per sharing mode, what a
busy neighbour costs, and a library that fell back to a slow transport."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpuipc_bench.analysis.handover import Figure, Handover, NeighbourCost
from gpuipc_bench.analysis.model import RunAnalysis
from gpuipc_bench.analysis.transport import worst_per_scenario
from gpuipc_bench.report import wording
from gpuipc_bench.report.lines import NBSP, Line, fmt_time, time_span
from gpuipc_bench.report.wording import fmt_num


def fallback_lines(analysis: RunAnalysis) -> list[Line]:
    """A line per scenario whose library fell back to a slow transport (numbers held to their units)."""
    return [Line("! " + re.sub(r"(\d) (GB/s|B|KiB|MiB|GiB)\b", "\\1" + NBSP + "\\2", wording.fallback_text(f, n)),
                 2, "bold yellow") for f, n in worst_per_scenario(analysis.fallbacks)]


def neighbour_lines(found: Sequence[NeighbourCost]) -> list[Line]:
    """Per mode with a busy neighbour: what it costs the pair's hand-off and stream, each figure
    with its interval, the same path without the neighbour first."""
    out = []
    for mode in dict.fromkeys(c.mode for c in found):
        mine = [c for c in found if c.mode == mode]
        parts = []
        for c in mine:
            if c.measure == "handoff":
                parts.append(f"hand-off {wording.format_size(c.nbytes)} {c.label} {_time(c.without)} → "
                             f"{_time(c.beside)} ({c.ratio:.2f}×)")
            else:
                parts.append(f"stream {wording.format_size(c.nbytes)} {c.label} {_gbps(c.without, c.nbytes)} → "
                             f"{_gbps(c.beside, c.nbytes)}{NBSP}GB/s ({1 / c.ratio:.2f}×)")
        out.append(Line(f"BUSY NEIGHBOUR ({mode} against {mine[0].base}): " + " · ".join(parts), 2))
    return out


def _time(f: Figure) -> str:
    """'273 µs [272–273 µs]': a time per transfer and its interval."""
    return f"{fmt_time(f.median_s)} [{time_span([f.lo_s, f.hi_s])}]"


def _gbps(f: Figure, nbytes: int) -> str:
    """'1,487 [1,479–1,495]': the same figure as GB/s (its slower end first)."""
    def rate(seconds: float) -> str:
        return fmt_num(nbytes / seconds / 1e9)
    return f"{rate(f.median_s)} [{rate(f.hi_s)}–{rate(f.lo_s)}]"


def handover_line(found: Sequence[Handover], width: int = 80) -> Line:
    """Why the sharing mode flips the small-message answer: the GPU-ordered hand-over's cost per
    mode, with the paths that measured it where that fits one line of `width`."""
    first = found[0]

    def text(named: bool) -> str:
        parts = []
        for h in found:
            why = " (a context switch)" if h.sharing == "time-sliced" else ""
            path = "" if h.label == first.label or not named else f", {h.label}"
            span = time_span([h.lo_s, h.hi_s])
            interval = "" if span == fmt_time(h.median_s) else f" [{span}]"  # an interval that rounds away
            parts.append(f"{fmt_time(h.median_s)}{interval} {h.sharing}{why}{path}")
        return f"HAND-OVER on one GPU, 4 KiB{f' ({first.label})' if named else ''}: " + " · ".join(parts)

    full = text(True)
    return Line(full if len(full) + 2 <= width else text(False), 2)
