"""Every word and number format of the reports, defined once: the terminal, Markdown, the
data exports' notes and the plots take their text from here.

Numbers: about three significant digits (fmt_num), an interval as 'lo–hi' (fmt_interval) or
as the distance its farther end reaches from the median (fmt_pm: '±0.4%'). Words: links,
the machine, measures, the warnings (one line per cause, in the words of report/causes.py),
the verdict's bands and the break-even.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gpuipc_bench.analysis.breakeven import BreakEven, Crossing
from gpuipc_bench.analysis.summary import SETUP_INTERVAL_SAMPLES
from gpuipc_bench.analysis.verdict import MIXED, Decision
from gpuipc_bench.analysis.warnings import StabilityWarning
from gpuipc_bench.report.causes import CAUSES, cause_of
from gpuipc_bench.report.header import gpu_links, gpu_names, gpus, machine_differences  # noqa: F401 - re-exported
from gpuipc_bench.report.header import machine_facts, machine_line, machine_parts  # noqa: F401 - re-exported
from gpuipc_bench.report.header import machine_summary, partial_note, run_summary  # noqa: F401 - re-exported
from gpuipc_bench.sizes import format_size

DASH = "—"

# --------------------------------------------------------------------------- numbers


def _missing(value) -> bool:
    try:
        return value is None or math.isnan(float(value))
    except (TypeError, ValueError):
        return True


def fmt_num(value) -> str:
    """About three significant digits: 1,450 / 137 / 27.1 / 2.40 / 0.290 / 4.10e-05."""
    if _missing(value):
        return DASH
    v = float(value)
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a == 0:
        return "0"
    return f"{v:#.3g}"


def fmt_interval(lo, hi) -> str:
    """'1,348–1,398'; a dash when either end is unknown (fewer than 6 samples)."""
    if _missing(lo) or _missing(hi):
        return DASH
    return f"{fmt_num(lo)}–{fmt_num(hi)}"


def halfwidth(lo, median, hi) -> float:
    """How far the interval's farther end is from the median, as a fraction of it."""
    if _missing(lo) or _missing(hi) or _missing(median) or not median:
        return math.nan
    return max(float(median) - float(lo), float(hi) - float(median)) / abs(float(median))


def fmt_pm(lo, median, hi) -> str:
    """The interval as '±0.4%' / '±3.2%' / '±12%' of the median, '±<0.1%' below 0.05%; a dash
    without one."""
    h = halfwidth(lo, median, hi)
    if math.isnan(h):
        return DASH
    pct = h * 100
    if pct < 0.05:
        return "±<0.1%"  # not '±0.0%'
    return f"±{pct:.1f}%" if pct < 10 else f"±{pct:.0f}%"


def fmt_percent(fraction) -> str:
    if _missing(fraction):
        return DASH
    pct = float(fraction) * 100
    return f"{pct:.0f}%" if abs(pct) >= 10 else f"{pct:.1f}%"


def fmt_verified(flag) -> str:
    if flag is None or flag is _NA or (isinstance(flag, float) and math.isnan(flag)):
        return DASH
    return "✓" if bool(flag) else "✗"


def fmt_ratio(value, lo=math.nan, hi=math.nan) -> str:
    """0.9921 -> '0.99×', 12.34 -> '12.3×'; '~1.00×' when the interval lo..hi includes 1 (no
    difference the two runs' intervals can show)."""
    if _missing(value):
        return DASH
    text = f"{value:.2f}×" if abs(value) < 10 else f"{fmt_num(value)}×"
    if not (_missing(lo) or _missing(hi)) and lo <= 1 <= hi:
        text = "~" + text
    return text


def fmt_ms(seconds) -> str:
    return DASH if _missing(seconds) else f"{fmt_num(float(seconds) * 1e3)} ms"


def fmt_us(seconds) -> str:
    return DASH if _missing(seconds) else f"{fmt_num(float(seconds) * 1e6)} µs"


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else (words or word + 's')}"


try:  # pandas' missing value, without importing pandas for the formats alone
    from pandas import NA as _NA
except ImportError:  # pragma: no cover
    _NA = None

# --------------------------------------------------------------------------- places, sizes


def where(device: str) -> str:
    """'0' -> 'GPU 0', 'host' -> 'host', 'MIG-4f8e2c1a-...' -> 'MIG-4f8e2c1a' (a MIG instance)."""
    device = str(device)
    if device.startswith("MIG-"):
        return device[:12]
    return f"GPU {device}" if device.isdigit() else (device or "?")


def link(src: str, dst: str) -> str:
    return f"{where(src)} → {where(dst)}"


def size_span(lo: int, hi: int) -> str:
    return format_size(lo) if lo == hi else f"{format_size(lo)} – {format_size(hi)}"


def size_list(sizes: Sequence[int], all_sizes: Sequence[int] | None = None) -> str:
    """'4 B – 1 KiB, 1 MiB': runs of consecutive sizes (consecutive in `all_sizes`) as spans;
    without `all_sizes`, every size on its own."""
    if all_sizes is None:
        return ", ".join(format_size(s) for s in sorted(sizes))
    order = sorted(all_sizes)
    index = {s: i for i, s in enumerate(order)}
    runs: list[list[int]] = []
    for s in sorted(sizes, key=lambda s: index.get(s, -1)):
        if runs and index.get(s, -9) == index.get(runs[-1][-1], -9) + 1:
            runs[-1].append(s)
        else:
            runs.append([s])
    return ", ".join(size_span(r[0], r[-1]) for r in runs)



# --------------------------------------------------------------------------- measures, stability

MEASURES = {
    "handoff": "handoff: every transfer handed from producer to consumer (time per transfer)",
    "stream": "stream: transfers queued back to back after one hand-off (throughput)",
    MIXED: "measures mixed: a schema-1 file, where staging handed every transfer over and the "
           "other paths streamed them",
}
MEASURE_SHORT = {"handoff": "handoff", "stream": "stream", MIXED: "measures mixed (schema 1)", "pingpong": "ping-pong"}


def fallback_text(f, figures: int = 1) -> str:
    """A transport-fallback (analysis/transport.py) in one sentence: the figure (the lowest of
    `figures` of its scenario), its share of raw IPC, the transport and the setting to check."""
    where = f" ({link(f.src, f.dst)})" if f.src != f.dst or f.src != "host" else ""
    if f.path == "nixl":
        from gpuipc_bench.analysis.transport import UCX_HINT, UCX_NO_GET, UCX_NO_PATH

        own = f.settings in ("", "none")
        hint = UCX_NO_PATH if own and f.src == "host" and f.dst != "host" else \
            UCX_NO_GET if getattr(f, "no_get", False) else UCX_HINT
        settings = f"UCX settings: {f.settings}" if f.settings and hint == UCX_HINT else ""
    else:
        hint, settings = "check NCCL_P2P_DISABLE, NCCL_SHM_DISABLE and the container's IPC namespace", f.settings
    many = f" (1 of {figures} figures)" if figures > 1 else ""
    return (f"transport fallback{many}: {f.path}/{f.variant} {f.gbps:.3g} GB/s at {format_size(f.bytes)}{where} = "
            f"{f.fraction * 100:.2g}% of {f.reference}: "
            + (f"{f.path.upper()} reported no transport for it" if f.transport == "not reported"
               else f"{f.path.upper()} used {f.transport}")
            + (f" ({settings})" if settings else "") + f"; {hint}")


def warning_subject(w: StabilityWarning, with_link: bool = False) -> str:
    """'staging/pageable 4 KiB', with ' latency' for a latency figure and the link when asked."""
    text = f"{w.path}/{w.variant}"
    if w.bytes or w.metric != "setup":
        text += f" {format_size(int(w.bytes))}"
    if w.metric != "bandwidth":
        text += f" {w.metric}"
    if with_link:
        text += f" ({link(w.src, w.dst)})"
    return text


def warning_short(w: StabilityWarning) -> str:
    """A few words of what is wrong: '±5.8%', 'two states 2.9% apart, 70%/30%', 'n=2'."""
    cause, value = cause_of(w.cause), warning_value(w)
    return cause.with_value.format(value=value) if value else cause.short


def warning_value(w: StabilityWarning) -> str:
    """The warning's number as its cause shows it ('' without one)."""
    cause = CAUSES.get(w.cause)
    return "" if cause is None or math.isnan(w.value) else cause.value(w)


def warning_lines(warnings: Sequence[StabilityWarning], limit: int | None = 6,
                  measured: Mapping[tuple, Sequence[int]] | None = None) -> list[tuple[str, str, str]]:
    """One line per cause: (title with the count, the figures concerned, the hint). Figures of
    one path/variant/metric are listed once with their sizes (runs of sizes consecutive in
    `measured[(path, variant, metric)]` as spans); beyond `limit` of them, the rest is
    counted ('and 12 more')."""
    measured = measured or {}
    out = []
    links_of: dict[tuple, set] = {}
    measures_of: dict[tuple, set] = {}
    for w in warnings:
        links_of.setdefault((w.path, w.variant, w.metric), set()).add((w.src, w.dst))
        measures_of.setdefault((w.path, w.variant, w.metric), set()).add(w.measure)
    for cause in CAUSES.values():
        mine = [w for w in warnings if w.cause == cause.key]
        if not mine:
            continue
        grouped: dict[tuple, list[StabilityWarning]] = {}
        for w in mine:
            several = len(links_of[(w.path, w.variant, w.metric)]) > 1
            key = (w.path, w.variant, w.metric, w.measure, w.src if several else "", w.dst if several else "")
            grouped.setdefault(key, []).append(w)
        subjects = []
        for (path, variant, metric, measure, src, dst), ws in grouped.items():
            text = f"{path}/{variant}"
            if len(measures_of[(path, variant, metric)]) > 1:
                text += f" {measure}"
            if any(w.bytes for w in ws):
                text += " " + size_list(sorted({w.bytes for w in ws}), measured.get((path, variant, metric)))
            if metric != "bandwidth":
                text += f" {metric}"
            if src or dst:
                text += f" ({link(src, dst)})"
            values = [warning_value(w) for w in ws if warning_value(w)]
            if values and len(ws) == 1:
                text += f" {values[0]}"
            subjects.append(text)
        shown = subjects if limit is None else subjects[:limit]
        rest = len(subjects) - len(shown)
        listing = ", ".join(shown) + (f" and {rest} more" if rest else "")
        out.append((f"{cause.title} ({plural(len(mine), 'figure')})", listing, cause.advice))
    return out


def warnings_count(warnings: Sequence[StabilityWarning]) -> str:
    """'12 warnings: 5 two states, 7 few samples'."""
    counts: dict[str, int] = {}
    for w in warnings:
        counts[w.cause] = counts.get(w.cause, 0) + 1
    parts = [f"{counts[c.key]} {c.short}" for c in CAUSES.values() if c.key in counts]
    return f"{plural(len(warnings), 'warning')}: " + ", ".join(parts)


# --------------------------------------------------------------------------- the verdict


def verdict_heading(min_effect: float) -> str:
    return (f"The fastest mechanism per size between the same two processes, on one link, in one sharing mode "
            f"and one measure. Figures are compared by the interval of their ratio (Hodges-Lehmann, from both "
            f"samples): faster where the whole interval lies beyond 1 + delta (delta: {min_effect:.0%}, or more "
            f"where the processes measured one ceiling further apart), the same (≈) where it lies within "
            f"delta, within X% where it reaches no further than X (5% at most), else undecided (≈?); figures "
            f"in two scheduler states are compared state by state. Paths that are the same copy (one ceiling, "
            f"90% of it or more, or one declared mechanism where the call dominates) form one mechanism; the "
            f"one to use is declared: fewest dependencies, then the cheaper set-up where the intervals "
            f"separate, then declared order, never one that a figure beats beyond delta.")


def decision_text(d: Decision | None) -> str:
    """'staging/pinned-hostsync (two hops through pinned host, host-synchronised)'; '—' for none."""
    if d is None:
        return DASH
    return d.choice if d.cls == d.choice else f"{d.choice} ({d.cls})"


def decision_changes(changes) -> list[str]:
    """'run 2: GPU 0 → GPU 0 · time-sliced · handoff: the choice at 4 KiB changed from
    staging/pinned-hostsync to ipc/push' for each analysis.compare.DecisionChange (sizes in a
    row with the same change as one span)."""
    out: list[str] = []
    runs: dict[tuple, list[int]] = {}
    for c in changes:
        runs.setdefault((c.run, c.src, c.dst, c.sharing, c.measure, c.before, c.after), []).append(c.bytes)
    for (run, src, dst, sharing, measure, before, after), sizes in runs.items():
        where = f"{link_title(src, dst, sharing)} · {MEASURE_SHORT.get(measure, measure)}"
        what = (f"changed from {before} to {after}" if before and after else
                f"is new: {after}" if after else f"is gone (was {before})")
        out.append(f"run {run + 1}: {where}: the choice at {size_list(sizes)} {what}")
    return out


def class_headline(changes, decisions: Sequence[int]) -> list[str]:
    """What changed against run 1, the mechanism class first (issue 33: 'report A B' says first
    whether a choice changed, at the class level): one line per other run, 'run 2: the same
    mechanism class in all 29 decisions, the same API in 28', and the decisions whose class
    changed under it. `changes`: analysis.compare.DecisionChange; `decisions`: each run's
    decision count."""
    out: list[str] = []
    for run in range(1, len(decisions)):
        mine = [c for c in changes if c.run == run]
        moved = [c for c in mine if c.before_class != c.after_class]
        total = max(decisions[0], decisions[run])
        same_class = (f"the same mechanism class in all {total} decisions" if not moved else
                      f"another mechanism class in {len(moved)} of {total} decisions")
        out.append(f"run {run + 1}: {same_class}, the same API in {total - len(mine)}")
        for c in moved:
            where = f"{link_title(c.src, c.dst, c.sharing)} · {MEASURE_SHORT.get(c.measure, c.measure)}"
            out.append(f"  {where} at {size_list([c.bytes])}: {c.before_class or 'none'} → {c.after_class or 'none'}")
    return out


def link_title(src: str, dst: str, sharing: str) -> str:
    """'GPU 0 → GPU 0 · time-sliced' (the sharing mode left out when 'none')."""
    return " · ".join([link(src, dst)] + ([sharing] if sharing and sharing != "none" else []))


# --------------------------------------------------------------------------- break-even


def describe_crossing(c: Crossing, short: bool = False) -> str:
    """'from 4 MiB (loses at 1 MiB)', 'at every size', 'never', '4 B – 4 MiB only, not above',
    and where the intervals leave it open: 'between 1 MiB and 16 MiB'. short: 'from 4 MiB',
    '4 B – 4 MiB only'."""
    if c.never and c.latest is None and c.earliest is None:
        return "never"
    if c.uncertain:
        if c.earliest is None:
            text = "never on the medians" if c.never else f"{_wins(c)} only"
            return text + f"; from {format_size(c.latest)} at best" if c.latest else text
        if c.latest is None:
            return f"from {format_size(c.earliest)} at best, maybe never"
        return f"between {format_size(c.earliest)} and {format_size(c.latest)}"
    if c.from_bytes is None:
        return f"{_wins(c)} only" if short else f"{_wins(c)} only, not above"
    if c.last_loss is None:
        return "at every size"
    if short:
        return f"from {format_size(c.from_bytes)}"
    text = f"from {format_size(c.from_bytes)} (loses at {format_size(c.last_loss)})"
    if len(c.wins) > 1:
        text += ", also " + ", ".join(size_span(lo, hi) for lo, hi in c.wins[:-1])
    return text


def _wins(c: Crossing) -> str:
    return ", ".join(size_span(lo, hi) for lo, hi in c.wins)


def setup_cost(be: BreakEven, short: bool = False) -> str:
    """'0.126 ms (1 sample: indicative)' / '0.152–220 ms by size' / '27.4 ms (range 26.9–147)':
    the median and its 95% interval, or the samples' range below 9 of them (where the
    interval would be the range); short: '0.126 ms n=1'."""
    if be.size_dependent:
        text = f"{fmt_num(be.setup_min_s * 1e3)}–{fmt_num(be.setup_s * 1e3)} ms" + ("" if short else " by size")
    else:
        text = f"{fmt_num(be.setup_s * 1e3)} ms"
        if be.setup_samples >= 2 and be.setup_lo_s < be.setup_hi_s:
            ranged = "range " if be.setup_samples < SETUP_INTERVAL_SAMPLES else ""
            text += f" ({ranged}{fmt_interval(be.setup_lo_s * 1e3, be.setup_hi_s * 1e3)})"
    if be.setup_samples < 3:
        text += f" n={be.setup_samples}" if short else f" ({plural(be.setup_samples, 'sample')}: indicative)"
    return text


def break_even_notes(items: Sequence[BreakEven]) -> list[str]:
    if not items:
        return []
    n, baseline = items[0].amortise_over, items[0].baseline
    notes = [(
        f"A size counts as a win when setup / N + the path's median time per transfer < {baseline}'s, N = {n:,} "
        f"or N = 1; each side at its fastest variant at that size, on the same link, sharing mode and measure; "
        f"'between X and Y' where the 95% intervals leave it open. {baseline.capitalize()}'s own one-time "
        f"registration of its buffer is not counted."),
    ]
    for be in items:
        if be.composed:
            notes.append(f"{be.path}: measured in halves; one transfer is taken as its fastest GPU→host half plus "
                         "its fastest host→GPU half, without the hand-over between the processes (optimistic at "
                         "small sizes).")
        if be.size_dependent:
            notes.append(f"{be.path}: {' + '.join(be.setup)} was measured at each size; each size pays its own.")
        if be.measure == MIXED:
            notes.append(f"Break-even with {MEASURES[MIXED]}.")
    return list(dict.fromkeys(notes))


UNITS_NOTE = ("GB/s = 1e9 bytes/s, one direction; µs per transfer (latency rows: one-way); median of n samples "
              "with its distribution-free 95% confidence interval (± its farther end), MAD: median absolute "
              "deviation over the median")
