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


LANE_WORDS = {"pcie": "PCIe", "nvlink": "NVLink", "nvlink+pcie": "NVLink and PCIe", "none": "no lane"}


def lane_alarm_lines(analysis: RunAnalysis) -> list[Line]:
    """The lane alarm (issue 36): a line per scenario whose figures that the answer chose took another
    lane than the path's by NVML's counters (analysis.warnings.lane_warnings), its largest such figure
    named, the lane it took and the one it should (a library that fell back to host memory between
    NVLink GPUs; a P2P-off copy that went over NVLink)."""
    from gpuipc_bench.analysis.lanes import expected_lane, figure_lanes
    from gpuipc_bench.analysis.warnings import WRONG_LANE

    # a figure the answer names: a decision's choice (the report lists every wrong-lane figure)
    chosen = {(d.choice, d.src, d.dst, d.sharing, d.measure, d.bytes) for d in analysis.answer.decisions}
    wrong = [w for w in analysis.warnings if w.cause == WRONG_LANE
             and (f"{w.path}/{w.variant}", w.src, w.dst, w.sharing, w.measure, w.bytes) in chosen]
    if not wrong:
        return []
    seen = figure_lanes(analysis.frame)
    out = []
    for scenario in dict.fromkeys(w.scenario for w in wrong):
        mine = [w for w in wrong if w.scenario == scenario]
        w = max(mine, key=lambda x: x.bytes)
        lane = seen.get((w.path, w.variant, w.measure, w.src, w.dst, w.sharing, w.bytes), "") or "another lane"
        should = expected_lane(w.path, w.variant, w.src, w.dst, analysis.meta) or "another"
        many = f" ({len(mine)} figures)" if len(mine) > 1 else ""
        size = wording.format_size(w.bytes).replace(" ", NBSP)
        should = f"its lane is {LANE_WORDS.get(should, should)}" if should != "none" else "it should cross none"
        out.append(Line(f"! wrong lane{many}: {w.path}/{w.variant} at {size} ({wording.link(w.src, w.dst)}) went "
                        f"over {LANE_WORDS.get(lane, lane)}, {should} (NVML's byte counters): check the transport "
                        "the library chose and peer access", 2, "bold yellow"))
    return out


def neighbour_lines(found: Sequence[NeighbourCost]) -> list[Line]:
    """Per mode with a busy neighbour: what it costs the pair's hand-off and stream, each figure
    with its interval, the same path without the neighbour first (the path named once where
    both measures are of one)."""
    out = []
    for mode in dict.fromkeys(c.mode for c in found):
        mine = [c for c in found if c.mode == mode]
        one = len({c.label for c in mine}) == 1
        parts = []
        for c in mine:
            label = "" if one else f" {c.label}"
            size = wording.format_size(c.nbytes).replace(" ", NBSP)
            if c.measure == "handoff":
                parts.append(f"hand-off {size}{label} {_figure(c.without)} → {_figure(c.beside)} ({c.ratio:.2f}×)")
            else:
                parts.append(f"stream {size}{label} {_gbps(c.without, c.nbytes)} → "
                             f"{_gbps(c.beside, c.nbytes)}{NBSP}GB/s ({1 / c.ratio:.2f}×)")
        against = "" if mode.partition("+")[0] == mine[0].base else f" against {mine[0].base}"
        named = f", {mine[0].label}" if one else ""
        out.append(Line(f"BUSY NEIGHBOUR {mode}{against}{named}: " + " · ".join(parts), 2))
    return out


def _figure(f: Figure) -> str:
    """'273 µs [272–273]': a time per transfer and its interval."""
    return _time(f.median_s, f.lo_s, f.hi_s)


def _gbps(f: Figure, nbytes: int) -> str:
    """'1,487 [1,479–1,495]': the same figure as GB/s (its slower end first)."""
    def rate(seconds: float) -> str:
        return fmt_num(nbytes / seconds / 1e9)
    return f"{rate(f.median_s)} [{rate(f.hi_s)}–{rate(f.lo_s)}]"


def handover_line(found: Sequence[Handover], width: int = 80) -> Line:
    """Why the sharing mode flips the small-message answer: the GPU-ordered hand-over's cost per
    mode with its interval, on one screen line of `width` where a shorter wording fits (the
    paths that measured it, then why time-sliced costs more, left out in turn)."""
    first = found[0]

    def text(named: bool, why: bool, head: str = "HAND-OVER on one GPU, 4 KiB") -> str:
        parts = []
        for h in found:
            reason = " (a context switch)" if h.sharing == "time-sliced" and why else ""
            path = "" if h.label == first.label or not named else f", {h.label}"
            parts.append(f"{_time(h.median_s, h.lo_s, h.hi_s)} {h.sharing}{reason}{path}")
        return f"{head}{f' ({first.label})' if named else ''}: " + " · ".join(parts)

    variants = [text(True, True), text(False, True), text(False, False), text(False, False, "HAND-OVER at 4 KiB")]
    return Line(next((t for t in variants if len(t) <= width), variants[1]), 2)


def _time(median_s: float, lo_s: float, hi_s: float) -> str:
    """'274 µs [273–282]': a time and its interval, the unit said once where they share it
    ('999 µs [990 µs–1.01 ms]' where not; '273 µs ±0.1%' where its ends round to the median)."""
    span = time_span([lo_s, hi_s])
    if span == fmt_time(median_s):
        return f"{span} {wording.fmt_pm(lo_s, median_s, hi_s)}"
    unit = fmt_time(median_s).rpartition(NBSP)[2]
    if span.endswith(NBSP + unit) and span.count(NBSP) == 1:
        span = span.rpartition(NBSP)[0]
    return f"{fmt_time(median_s)} [{span}]"
