"""The one-screen answer: what `run` prints at its end and `report RUN.csv --summary` prints.

Rendered from the analysis's Answer (analysis/model.py), never recomputed: a heading per
link or class of GPU pairs (the same GPU first), with its first title where it fits; a title
per sharing mode and measure; one logical line per band of sizes with one choice (its
sizes, mechanism with how many APIs reach it over the band, and the choice's figure with its
widest interval (±), or over GPU pairs the range their medians' intervals cover; the one to
use and why, what else is the same or cannot be told apart and where, the next different
class and how much slower than the mechanism's fastest, never below 1), a line per pair of a class that
chooses otherwise beyond delta, the set-up costs of the paths it names, the confidence and
the warnings that could change a line (one line each where they fit), and the command for
the full report. A choice's extra cost (a polling kernel) is said at its first mention.
Every line is wrapped here to the width asked, with a hanging indent, so that the line
count is known before anything is printed.

Below the size where a transfer costs less than twice its ceiling's per-call floor a figure
is a time per transfer ("call-bound"), never GB/s or a fraction of the ceiling.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np

from gpuipc_bench.analysis.classes import needs_of
from gpuipc_bench.analysis.conditions import is_gpu
from gpuipc_bench.analysis.mechanisms import mechanism
from gpuipc_bench.analysis.handover import neighbour_costs
from gpuipc_bench.analysis.lanes import lane_of
from gpuipc_bench.analysis.model import Band, RunAnalysis, Section, SetupCost
from gpuipc_bench.analysis.stats import FASTER, SAME, UNDECIDED, WITHIN, range_coverage
from gpuipc_bench.analysis.verdict import Decision
from gpuipc_bench.analysis.warnings import StabilityWarning
from gpuipc_bench.machine.lanes import NOT_PROVEN, OTHER_TRAFFIC, PROVEN_LANES, SMALL
from gpuipc_bench.machine.mig import heading as mig_heading, is_mig, refused_line
from gpuipc_bench.report import wording
from gpuipc_bench.report.findings import (  # noqa: F401 - re-exported
    fallback_lines, handover_line, lane_alarm_lines, neighbour_lines,
)
from gpuipc_bench.report.lines import (  # noqa: F401 - re-exported: the formatting the report modules share
    NBSP, Line, fewest_lines, no_break, size_text, value_span, time_parts, fmt_time, sizes_text, time_span, wrap,
)
from gpuipc_bench.report.wording import fmt_num, link
from gpuipc_bench.results import base_mode

MEASURE_TITLES = {
    "handoff": "hand-off (one message at a time)",
    "stream": "stream (messages queued back to back)",
    "mixed": "measures mixed (a schema-1 file)",
}
SIZE_WIDTH = 13  # the sizes column of a band's lines
HANG = 6  # the indent of a band's continuation lines in the summary
MAX_WARNINGS_LISTED = 2


def band_figure(band: Band, measure: str, among_links: Sequence[tuple[str, str]] = ()) -> str:
    """The choice's figure over a band: time per transfer where call-bound or a hand-off,
    GB/s of a stream at the band's largest size otherwise (with its fraction of the ceiling);
    the largest interval of the choice's median (±); GPU pairs: GB/s as the median of the
    pairs' medians with the range their intervals cover, times over every pair."""
    bound = [d for d in band.decisions if d.call_bound]
    free = [d for d in band.decisions if not d.call_bound]
    pairs = len({d.link for d in band.decisions})
    parts = []
    if bound:
        upto = f" to {size_text(max(d.bytes for d in bound))}" if free else ""
        pm = "" if free and measure == "stream" else " " + _pm(bound)
        parts.append(f"{time_span([d.choice_s[1] for d in bound])}{pm}{upto} (call-bound)")
    if free and measure == "stream":
        top = [d for d in free if d.bytes == max(x.bytes for x in free)]
        gbps = [d.choice_gbps for d in top]
        text = f"{fmt_num(float(np.median(gbps)))}{NBSP}GB/s"
        if pairs > 1:
            ends = [top[0].bytes / t / 1e9 for d in top for t in (d.choice_s[0], d.choice_s[2]) if t > 0]
            text += (f" at {size_text(top[0].bytes)} ({value_span(ends or gbps, fmt_num)} over "
                     f"{len({d.link for d in top})} pairs)")
        else:
            text += f" {_pm(top)} at {size_text(top[0].bytes)}"
        fractions = [d.fraction_of_ceiling for d in top if math.isfinite(d.fraction_of_ceiling)]
        if fractions and top[0].ceiling:
            ceiling = top[0].ceiling.partition("/")[0]
            ceiling = ceiling.partition("@")[0] if pairs > 1 else ceiling  # peer@0>1, peer@1>0: peer
            text += f" = {value_span(fractions, wording.fmt_percent)} of {ceiling}"
        parts.append(text)
    elif free:
        ends = sorted({d.bytes for d in free})
        text = time_span([d.choice_s[1] for d in free if d.bytes in (ends[0], ends[-1])]) + " " + _pm(free)
        hi = [d for d in free if d.bytes == ends[-1]]
        if len(ends) == 1 and ends[0] >= 1 << 20:
            text += f" ({value_span([d.choice_gbps for d in hi], fmt_num)}{NBSP}GB/s)"
        parts.append(text)
    text = "; ".join(parts) + (f" over {pairs} pairs" if pairs > 1 and not (free and measure == "stream") else "")
    if 0 < pairs < len(among_links):
        text += " on " + ", ".join(f"{s}→{d}" for s, d in sorted({d.link for d in band.decisions}))
    once = sorted({d.link for d in band.unconfirmed})
    if once:  # a pair whose own choice was faster in one process set: not named as differing (bands.py)
        text += f" ({', '.join(f'{s}→{d}' for s, d in once)} differs in one process set only)"
    if band.unmeasured:
        text += f" (not measured at {size_list(band.unmeasured)})"
    if band.measured_to is not None:
        text += f" (not measured above {size_text(band.measured_to)})"
    return text


def _pm(decisions: Sequence[Decision]) -> str:
    """The widest interval of the choices' medians, '±0.4%' (their range below 6 samples)."""
    widths = [wording.halfwidth(*d.choice_s) for d in decisions]
    widths = [w for w in widths if math.isfinite(w)]
    return wording.fmt_pm(1 - max(widths), 1, 1) if widths else ""


def size_list(sizes: Sequence[int], among: Sequence[int] | None = None) -> str:
    """'16 B, 256 B' / '16, 256 B' / '1–4 KiB, 1 MiB': sizes, consecutive ones (in `among`) as runs."""
    order = sorted(set(among or ()) | set(sizes))
    index = {b: i for i, b in enumerate(order)}
    runs: list[list[int]] = []
    for b in sorted(set(sizes)):
        if runs and among is not None and index[b] == index[runs[-1][-1]] + 1:
            runs[-1].append(b)
        else:
            runs.append([b])
    texts = [sizes_text(r[0], r[-1]) for r in runs]
    units = {t.split(NBSP)[-1] for t in texts}
    if len(texts) > 1 and len(units) == 1 and all(t.count(NBSP) == 1 for t in texts):
        return f"{', '.join(t.split(NBSP)[0] for t in texts)}{NBSP}{units.pop()}"
    return ", ".join(texts)


def labels(names: Sequence[str], most: int = 3) -> str:
    """'ipc/sm, mempool/ce,sm, vmm/sm': the variants of one path together; beyond `most`
    paths, how many more."""
    by_path: dict[str, list[str]] = {}
    for name in names:
        path, _, variant = name.partition("/")
        by_path.setdefault(path, []).append(variant)
    shown = [f"{path}/{','.join(variants)}" for path, variants in by_path.items()]
    return ", ".join(shown[:most]) + (f" +{len(shown) - most}" if len(shown) > most else "")


def _sizes_at(at: Sequence[int], band: Band) -> str:
    """' (16, 256 MiB)', ' (256 KiB–64 MiB)': where in a band something holds ('' everywhere;
    ' (4 of 9 sizes)' beyond two runs of sizes)."""
    at = sorted(set(at))
    if len(at) == len(band.sizes):
        return ""
    text = size_list(at, band.sizes)
    return f" ({text})" if text.count(",") < 2 else f" ({len(at)} of {len(band.sizes)} sizes)"


LANE_NAMES = {"nvlink": "NVLink", "pcie": "PCIe", "nvlink+pcie": "NVLink and PCIe", "none": "none"}
LANE_NOT_VERIFIED = {NOT_PROVEN: "no counter here", OTHER_TRAFFIC: "other traffic", SMALL: "too few bytes"}


def lane_notes(decisions: Sequence[Decision]) -> tuple[str, ...]:
    """What the counters said of the lane of a band's choices, long then short ('over NVLink,
    verified by the counters', 'lane not verified: no counter here'); () where no decision has a
    lane (a file written before the counters: its lines stay as they were)."""
    seen = [d.lane for d in decisions if d.lane]
    if not seen:
        return ()
    proven = [lane for lane in seen if lane in PROVEN_LANES]
    if not proven:
        why = LANE_NOT_VERIFIED.get(lane_of(seen), "")
        return (f"lane not verified: {why}" if why else "lane not verified", "lane not verified")
    crossed = [LANE_NAMES[lane] for lane in dict.fromkeys(proven) if lane != "none"]
    text = "over " + " or ".join(crossed + (["none"] if "none" in proven else [])) if crossed else "no lane crossed"
    at = f" at {len(proven)} of {len(decisions)} sizes" if len(proven) < len(decisions) else ""
    return (f"{text}, verified by the counters{at}", f"{text}, counted{at}")


def band_lines(band: Band, measure: str, setup: dict[str, SetupCost], width: int = SIZE_WIDTH,
               mentioned: set[str] | None = None, links: Sequence[tuple[str, str]] = (),
               note: str | None = None) -> list[Line]:
    """The two lines of a band (the report's): its sizes, mechanism and figure (and the lane its
    bytes took, `note`: lane_notes' first where None); the choice, what is the same (≈) or
    cannot be told from it (≈?), the next mechanism and how much slower it is. `width`: the
    sizes column's; `mentioned`: the costs already said (said once); `links`: the section's
    GPU pairs."""
    if note is None:
        note = next(iter(lane_notes(band.decisions)), "")
    d = band.first
    members = band_members(band)
    name = d.cls if d.cls != band.pick else band.pick
    apis = f" ({len(members)} APIs)" if len(members) > 1 else ""
    figure = band_figure(band, measure, links) + (f", {note}" if note else "")
    first = Line(f"  {band_span(band):<{width - 2}} {name}{apis}: {figure}", width + 2)
    why, cost = choice_reasons(band, members, mentioned)
    rest = [f"→ {band.pick}" + (f" ({why})" if why else "") + (f", needs {cost}" if cost else ""),
            *other_clauses(band, members)]
    return [first, Line(" " * width + " · ".join(rest), width + 2)]


def summary_band_line(band: Band, measure: str, width: int, mentioned: set[str],
                      links: Sequence[tuple[str, str]] = (), note: str = "", form: Form | None = None) -> Line:
    """A band's one logical line in the summary: its sizes, the API to use (with its mechanism
    at the mechanism's first mention in the summary, `mentioned`, and why where that is said),
    its figure with its interval (and `note`, the lane), what it needs (said once), what is
    the same (≈) or undecided (≈?), and the next class by its fastest API and how much slower.
    `form`: what a summary too long for one screen leaves out (Form)."""
    form = form or Form()
    d = band.first
    members = band_members(band)
    named = form.mechanisms and d.cls not in (band.pick, "") and f"class:{d.cls}" not in mentioned
    if named:
        mentioned.add(f"class:{d.cls}")
    why, cost = choice_reasons(band, members, mentioned)
    said = "; ".join(x for x in (d.cls if named else "", why if form.asides else "") if x)
    figure = band_figure(band, measure, links) + (f", {note}" if note else "") + (f", needs {cost}" if cost else "")
    text = f"  {band_span(band):<{width - 2}} {band.pick}" + (f" ({said})" if said else "") + f": {figure}"
    rest = other_clauses(band, members, by_api=True)
    shown = rest if form.asides else [x for x in rest if x.startswith("next ")]
    return Line(" · ".join([text, *shown]), HANG)


def band_span(band: Band) -> str:
    """'4 B–4 MiB*': a band's sizes, '*' where some are L2-resident."""
    return sizes_text(band.lo, band.hi) + ("*" if any(x.l2_resident for x in band.decisions) else "")


def band_members(band: Band) -> list[str]:
    """The APIs of the choice's mechanism usable over the band."""
    return list(band.pool) or sorted({m for x in band.decisions for m in x.members if _in_class(band.pick, x)})


def choice_reasons(band: Band, members: Sequence[str], mentioned: set[str] | None) -> tuple[str, str]:
    """Why the choice among its class's APIs ('cheapest set-up': said where it is not the
    obvious, and once a summary, `mentioned`) and what it costs besides the copy (once a
    summary); '' where not said."""
    d = band.first
    why = band.why or (d.why if d.choice == band.pick else "cheapest set-up")
    said = len(members) > 1 and why not in ("fastest", "declared first") and (
        mentioned is None or f"why:{why}" not in mentioned)
    cost = d.cost if d.cost and (mentioned is None or d.cost not in mentioned) else ""
    if mentioned is not None:
        mentioned.update(x for x in (f"why:{why}" if said else "", cost) if x)
    return (why if said else ""), cost


def other_clauses(band: Band, members: Sequence[str], by_api: bool = False) -> list[str]:
    """What else the band's line says after its choice: the other mechanisms' APIs as good
    somewhere in the band (≈ where always shown the same, ≈? where undecided at some size,
    with the sizes where they are as good, '' everywhere; of other mechanisms: the line is
    about mechanisms, the choice names the API of its own), and the next class (by its
    mechanism's name, or by its fastest API: `by_api`) with how much slower it is."""
    d = band.first
    choice = band.pick
    rest = []
    others = sorted({m for x in band.decisions for m in x.tied} - {choice} - set(members))
    # and not the next class's fastest API somewhere: the next clause gives its ratios
    nexts = [x for x in band.decisions if x.next and math.isfinite(x.ratio) and not set(x.next_members) & set(members)]
    others = [m for m in others if _mechanism_of(m) != _mechanism_of(choice)
              and m not in {x.next_members[0] for x in nexts}]
    undecided = {m for x in band.decisions for m in x.close}
    for sign, found in (("≈", [m for m in others if m not in undecided]),
                        ("≈?", [m for m in others if m in undecided])):
        if found:
            at = [x.bytes for x in band.decisions if set(found) & set(x.tied)]
            rest.append(f"{sign} {labels(found)}{_sizes_at(at, band)}")
    # the next class at each size, unless it holds one of the band's own APIs (split from them by noise there)
    if nexts:
        last = max(nexts, key=lambda x: x.bytes)
        alike = [x for x in nexts if _next_key(x) == _next_key(last)]
        same = [x.ratio for x in alike]
        fastest = list(dict.fromkeys(x.next_members[0] for x in alike))
        # by its fastest API where one is at every size (else by the mechanism, as the report names it)
        name = fastest[0] if by_api and len(fastest) == 1 else \
            _next_name(last, d.cls, {_mechanism_of(m) for m in others})
        span = ratio_span(same)
        bounds = [x.within for x in alike if math.isfinite(x.within)]
        if span == "≈" and bounds:  # ahead of the choice, within delta: how close the samples put them
            span = f"within {wording.fmt_percent(max(bounds))}"
        rest.append(f"next {name} {span}")
    return rest


def _next_name(d: Decision, cls: str, tied: set[str] = frozenset()) -> str:
    """The next class by its mechanism's name, or by its fastest member where that name is the
    band's own (the same copy, split from it beyond delta: push against pull) or one the line
    already names as the same or undecided somewhere (`tied`: their mechanisms)."""
    named = d.next in (cls, d.cls) or d.next == d.next_members[0] or d.next in tied
    return d.next_members[0] if named else str(d.next)


def _next_key(d: Decision) -> tuple[str, str]:
    """The next class's name and its fastest member's direction (push or pull)."""
    path, _, variant = d.next_members[0].partition("/") if d.next_members else ("", "", "")
    return (str(d.next), mechanism(path, variant).direction)


def ratio_span(ratios: Sequence[float]) -> str:
    """'1.03–1.15×'; a ratio below 1 (never the case when it is taken against the winning
    class's fastest member) reads '≈' rather than a next faster than the choice."""
    shown = [r for r in ratios if r >= 1]
    if not shown:
        return "≈"
    return f"{value_span(shown, fmt_num)}×"


def _mechanism_of(label: str) -> str:
    path, _, variant = label.partition("/")
    return mechanism(path, variant).name


def _in_class(choice: str, d: Decision) -> bool:
    return choice in d.members or choice == d.choice


def differ_lines(band: Band, measure: str, width: int = SIZE_WIDTH) -> list[Line]:
    """A line per GPU pair that chose otherwise in a band of several pairs: where, its choice
    and figure, and how much slower the band's choice is there (or that it was not measured)."""
    by_link: dict[tuple[str, str], list[Decision]] = {}
    for d in band.differ:
        by_link.setdefault(d.link, []).append(d)
    among = sorted({d.bytes for d in (*band.decisions, *band.differ)})
    out = []
    for (src, dst), found in by_link.items():
        choices = list(dict.fromkeys(d.choice for d in found))
        if measure == "stream" and not any(d.call_bound for d in found):
            figure = f"{value_span([d.choice_gbps for d in found], fmt_num)}{NBSP}GB/s"
        else:
            figure = time_span([d.choice_s[1] for d in found])
        ratios = [d.median_of(band.pick) / d.choice_s[1] for d in found if d.choice_s[1] > 0]
        ratios = [r for r in ratios if math.isfinite(r)]
        there = f"{band.pick} {value_span(ratios, fmt_num)}× there" if ratios else ""
        if len(ratios) < len(found):
            there += ("; " if there else "") + f"{band.pick} not measured"
        where = f"GPU {src} → {dst}" if is_gpu(src) and is_gpu(dst) else link(src, dst)
        out.append(Line(f"{' ' * width}{where} differs at {size_list([d.bytes for d in found], among)}: "
                        f"{labels(choices)} {figure} ({there})", width + 2))
    return out


def section_title(section: Section, meta: Mapping[str, str] | None = None) -> str:
    """The full title of a section (the report's): its link or class of GPU pairs, sharing
    mode and measure."""
    (src, dst), *_ = section.links
    where = link_heading(section, meta) if section.grouped or is_mig(src) else link(src, dst)
    return " · ".join([where, section_subtitle(section)])


def link_heading(section: Section, meta: Mapping[str, str] | None = None) -> str:
    """'GPU 0 → GPU 0 · same GPU', '2 GPU pairs over NV18 (0→1, 1→0)', 'GPU 0 → GPU 1 · NV18',
    'MIG 1g.10gb A → MIG 1g.10gb B · across instances of GPU 0' (from the header, `meta`)."""
    if not section.grouped:
        (src, dst), = section.links
        mig = mig_heading(src, dst, meta or {})
        if mig is not None:
            return mig
    if section.grouped:
        listed = f" ({', '.join(f'{s}→{d}' for s, d in section.links)})" if len(section.links) <= 4 else ""
        over = f" over {section.link_class}" if section.link_class else ""
        return f"{len(section.links)} GPU pairs{over}{listed}"
    (src, dst), = section.links
    if src == dst and is_gpu(src):
        return f"{link(src, dst)} · same GPU"
    return link(src, dst) + (f" · {section.link_class}" if section.link_class else "")


def section_subtitle(section: Section, mentioned: set[str] | None = None) -> str:
    """'time-sliced · hand-off (one message at a time)': the measure's gloss said once a
    summary (`mentioned`), every time without it."""
    parts = [section.sharing] if section.sharing not in ("", "none") else []
    if not section.primary:
        return " · ".join(parts + [section.measure]) + ", where it changes the choice"
    title = MEASURE_TITLES.get(section.measure, section.measure)
    if mentioned is not None:
        if f"measure:{section.measure}" in mentioned:
            title = title.partition(" (")[0]
        mentioned.add(f"measure:{section.measure}")
    return " · ".join(parts + [title])


# --------------------------------------------------------------------------- the other lines


def setup_line(setup: Sequence[SetupCost], named: set[str] | None = None, width: int = 80) -> Line | None:
    """Each path's median set-up cost per buffer, cheapest first: the paths `named` in the
    answer's lines (every path without it; the report has them all); '(median)' left out where
    it would take the line past `width`."""
    setup = [c for c in setup if named is None or c.path in named]
    if not setup:
        return None
    parts = []
    for cost in sorted(setup, key=lambda c: c.median_s):
        text = f"{cost.path} {fmt_time(cost.median_s)}"
        if cost.size_dependent:
            text = f"{cost.path} {fmt_time(cost.min_s)}–{fmt_time(cost.median_s)} by size"
        if cost.samples < 3:
            text += f" (n={cost.samples})"
        parts.append(text)
    text = "SET-UP per buffer (median): " + " · ".join(parts)
    return Line(text if len(text) + 2 <= width else "SET-UP per buffer: " + " · ".join(parts), 2)


def confidence_line(decisions: Sequence[Decision], width: int = 80) -> Line | None:
    """How sure the choices are against the next class: faster beyond delta (the whole ratio
    interval), of which with every sample apart; the same; within X% (an equivalence bound of
    at most stats.WITHIN_MAX, X the largest); undecided (and where, when that fits the line)."""
    if not decisions:
        return None
    n = len(decisions)
    separated = sum(d.separated for d in decisions)
    faster = sum(d.outcome == FASTER for d in decisions)
    same = [d for d in decisions if d.outcome == SAME]
    within = [d for d in decisions if d.outcome == WITHIN]
    undecided = [d for d in decisions if d.outcome == UNDECIDED]
    text = f"CONFIDENCE: {faster}/{n} faster"
    if faster:
        text += f" ({separated} all samples apart)"
    if same:
        text += f", {len(same)} the same"
    if within:
        bound = max((d.within for d in within if math.isfinite(d.within)), default=math.nan)
        text += f", {len(within)} within {wording.fmt_percent(bound)}"
    where = ""
    if undecided:
        at: dict[str, list[int]] = {}
        for d in undecided:
            at.setdefault(d.measure, []).append(d.bytes)
        listed = [f"{m} {', '.join(size_text(b) for b in sorted(set(x)))}" if len(set(x)) <= 3
                  else f"{m} {len(set(x))} sizes" for m, x in at.items()]
        text += f", {len(undecided)} undecided"
        where = f" ({'; '.join(listed)})"
    fewest = min(d.samples for d in decisions)
    coverage = f"; from {fewest} samples a range covers the median {range_coverage(fewest):.1%} of the time" \
        if fewest < 6 else ""
    # where the undecided are, said where it takes the line onto no more screen lines
    return fewest_lines([text + where + coverage + ".", text + coverage + "."], 2, width)


def _figure_warnings(ws: Sequence[StabilityWarning]) -> str:
    """'ipc/sm 16 MiB handoff (two states 4.6% apart; ±6%)': a figure once, with every cause."""
    w = ws[0]
    what = "; ".join(wording.warning_short(x).split(",")[0] for x in ws)
    return f"{w.path}/{w.variant} {wording.format_size(int(w.bytes))} {w.measure} ({what})"


def warnings_line(relevant: Sequence[StabilityWarning], total: int, width: int = 80,
                  decided: bool = True) -> Line | None:
    """The warnings that could change a line: how many, and the first figures with theirs
    (as many of MAX_WARNINGS_LISTED as fit one screen line); with no decision (`decided`
    False) only how many there are."""
    if not total:
        return None
    if not decided:
        return Line(f"{wording.plural(total, 'warning')} on these figures (the report lists them).", 2, "dim")
    if not relevant:
        return Line(f"{wording.plural(total, 'warning')}, none could change a line of this answer.", 2, "dim")
    figures: dict[tuple, list[StabilityWarning]] = {}
    for w in relevant:
        figures.setdefault(w.figure, []).append(w)

    def text(k: int) -> str:
        if not k:
            return (f"! {len(relevant)} of {wording.plural(total, 'warning')} could change a line, on "
                    f"{wording.plural(len(figures), 'figure')} (the report names them).")
        listed = ", ".join(_figure_warnings(ws) for ws in list(figures.values())[:k])
        more = len(figures) - k
        return (f"! {len(relevant)} of {wording.plural(total, 'warning')} could change a line: {listed}"
                + (f", {more} more figure{'s' if more > 1 else ''}" if more > 0 else "") + ".")

    fits = [k for k in range(min(MAX_WARNINGS_LISTED, len(figures)), -1, -1) if len(text(k)) <= width]
    return Line(text(fits[0] if fits else MAX_WARNINGS_LISTED), 2, "yellow")


ONE_GPU_LINES = 25  # the summary's screen lines at 80 columns: one GPU, both sharing modes
NODE_LINES = 30  # any node of several GPUs (a heading per link class, not per pair)
CHECK_GPU_LINES = 5  # each further GPU measured on itself alone
NEIGHBOUR_LINES = 2  # each busy-neighbour mode's line


@dataclasses.dataclass(frozen=True)
class Form:
    """What the summary says beyond each band's sizes, choice, figure and runner-up: the
    sections within a GPU or to the host in full (not `brief`: on a node of several GPUs they
    may be said in one line per link, brief_line), the mechanism at its first mention, what
    is the same (≈) or undecided (≈?) and why the choice among its mechanism's APIs."""

    brief: bool = False
    mechanisms: bool = True
    asides: bool = True  # ≈, ≈? and why the choice among its class's APIs


def summary_lines(analysis: RunAnalysis, source: str | None, width: int) -> list[tuple[str, str]]:
    """The one-screen answer as (text, style) screen lines at `width` columns: in full where
    it fits its budget (NODE_LINES on a node with GPU pairs, ONE_GPU_LINES otherwise), else in
    the first of the shorter forms that fits (or the shortest): on a node, the links within
    a GPU or to the host in brief (each band's choice and sizes: the node's question is its
    pairs), then without the mechanisms' names, then without what ties (the report has all)."""
    node = any(s.cross_gpu for s in analysis.answer.sections)
    forms = [Form(), *([Form(brief=True)] if node else []), Form(brief=node, mechanisms=False),
             Form(brief=node, mechanisms=False, asides=False)]
    budget = line_budget(analysis)
    for form in forms:
        lines = answer_lines(analysis, source, width, form)
        if len(lines) <= budget * 80 // width:  # the budgets are for 80 columns
            break
    return lines


def line_budget(analysis: RunAnalysis) -> int:
    """The summary's screen lines at 80 columns: NODE_LINES with GPU pairs; else ONE_GPU_LINES,
    CHECK_GPU_LINES more for each further GPU with links of its own (`check --preset health`
    measures each GPU on itself) and NEIGHBOUR_LINES more for each busy-neighbour mode."""
    sections = analysis.answer.sections
    if any(s.cross_gpu for s in sections):
        return NODE_LINES
    gpus = {s.links[0][0] for s in sections if is_gpu(s.links[0][0])}
    busy = {c.mode for c in neighbour_costs(analysis.summary)}
    return ONE_GPU_LINES + CHECK_GPU_LINES * max(len(gpus) - 1, 0) + NEIGHBOUR_LINES * len(busy)


def answer_lines(analysis: RunAnalysis, source: str | None, width: int, form: Form = Form()) -> list[tuple[str, str]]:
    """The one-screen answer's screen lines in `form`."""
    brief = form.brief
    answer = analysis.answer
    name = source or "RUN.csv"
    lines = [Line(wording.machine_line(analysis.meta, width, "gpuipc-bench · "), 0, "bold")]
    partial = wording.partial_note(analysis.meta)
    if partial:
        lines.append(Line("! " + partial, 2, "bold red"))
    if not answer.sections:
        host = host_lines(analysis.summary)
        if host:
            lines += host
        else:
            summary = analysis.summary
            measured = summary[(summary["path"] != "ceiling") & (summary["metric"] != "setup")]
            names = list(dict.fromkeys(f"{p}/{v}" for p, v in zip(measured["path"], measured["variant"])))
            shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
            lines.append(Line(NO_DECISION + (f" Measured: {shown}." if names else ""), 0))
    else:
        l2 = any(d.l2_resident for d in answer.shown)
        lines.append(Line(LEGEND + (", * partly L2." if l2 else "."), 0, "dim"))
    # A mode with a busy neighbour ('mps+copy') is summed up by its BUSY NEIGHBOUR line: its own
    # decisions are in the report, not on this screen
    sections = [section for section in answer.sections if base_mode(section.sharing) == section.sharing]
    full = [s for s in sections if s.cross_gpu or not brief]
    heading, mentioned = None, set()
    for section in sections:
        here = link_heading(section, analysis.meta)
        if section not in full:
            if here != heading:
                lines.append(brief_line([s for s in sections if s not in full and link_heading(
                    s, analysis.meta) == here], here))
                heading = here
            continue
        title = section_subtitle(section, mentioned)
        if here != heading:  # a heading per link or class of GPU pairs, with its first title where it fits
            combined = f"{here} · {title}"
            lines += [Line(combined, 2, "bold")] if len(combined) <= width else \
                [Line(here, 2, "bold"), Line(" " + title, 3, "bold")]
            heading = here
        else:
            lines.append(Line(" " + title, 3, "bold"))
        column = max(len(band_span(b)) for b in section.bands) + 2  # the section's sizes column
        for band in section.bands:
            note = fitting_note(band, section, column, mentioned, width, form)
            lines.append(summary_band_line(band, section.measure, column, mentioned, section.links, note, form))
            lines += differ_lines(band, section.measure, HANG - 2)
    handover = [h for h in answer.handover if base_mode(h.sharing) == h.sharing]
    if handover:
        lines.append(handover_line(handover, width))
    lines += neighbour_lines(neighbour_costs(analysis.summary))
    lines += fallback_lines(analysis) + lane_alarm_lines(analysis)
    lines += [Line("! " + x, 2, "bold yellow") for x in [refused_line(analysis.meta)] if x]
    lines += [x for x in (setup_line(answer.setup, _consulted(sections), width),
                          confidence_line(answer.decisions, width),
                          warnings_line(answer.relevant, len(analysis.warnings), width, bool(sections)))
              if x is not None]
    lines.append(fewest_lines([f"every table and warning: gpuipc-bench report {name}",
                               f"in full: gpuipc-bench report {name}"], 2, width, long_words=True))
    return wrap(lines, width)


LEGEND = "API to use per size; ≈ the same, ≈? undecided, next: the runner-up"


def brief_line(sections: Sequence[Section], heading: str) -> Line:
    """A link's answer in brief: each sharing mode's and measure's choices with their sizes
    ('time-sliced hand-off ipc/ce 16–256 MiB, ...'), the figures left to the report."""
    parts, sharing = [], None
    for section in sections:
        mode = f"{section.sharing} " if section.sharing not in ("", "none", sharing) else ""
        sharing = section.sharing
        measure = {"handoff": "hand-off"}.get(section.measure, section.measure)
        parts.append(f"{mode}{measure} " + ", ".join(f"{b.pick} {band_span(b)}" for b in section.bands))
    return Line(f"{heading} (figures: the report) · " + " · ".join(parts), 2)


def fitting_note(band: Band, section: Section, column: int, mentioned: set[str], width: int,
                 form: Form | None = None) -> str:
    """The longest of a band's lane notes that takes its line onto no more screen lines than it
    has without one ('' where none fits: the report and the JSON still say it): the summary's
    line budget does not grow with the counters."""
    def count(note: str) -> int:
        line = summary_band_line(band, section.measure, column, set(mentioned), section.links, note, form)
        return len(wrap([line], width))

    notes = lane_notes(band.decisions)
    if not notes:
        return ""
    bare = count("")
    return next((note for note in notes if count(note) <= bare), "")


def _consulted(found: Sequence[Section]) -> set[str]:
    """The paths whose set-up the choice rule weighs: the bands' choices and the members of
    their pools with no dependency (a dependency rules a member out before its set-up counts)."""
    out = set()
    for section in found:
        for band in section.bands:
            out.update(x for x in (band.pick, *band.pool) if x == band.pick or not needs_of(x))
    return {label.partition("/")[0] for label in out}


def _named(found: Sequence[Section]) -> set[str]:
    """The paths a summary's band lines name (choices, members, the same, undecided, next)."""
    out = set()
    for section in found:
        for band in section.bands:
            out.add(band.pick)
            for d in (*band.decisions, *band.differ):
                out.update((d.choice, *d.members, *d.same, *d.close, *d.next_members))
    return {label.partition("/")[0] for label in out}


HOST_FIGURES = (  # the host baseline's figures a run without a GPU can show: (path, variant, metric, what)
    ("host", "pingpong", "latency", "a message one way (ping-pong)"),
    ("host", "shared-buffer", "bandwidth", "a hand-off through shared memory"),
    ("barrier", "shm", "latency", "one crossing of the shared-memory barrier"),
)
WHAT_A_GPU_ADDS = ("With a GPU the run also measures the ways to move GPU memory between processes (staging "
                   "through the host, CUDA IPC, mapped host memory, peer access, NCCL, NVSHMEM, torch) against "
                   "these host figures and names the fastest at each size.")


def host_lines(summary) -> list[Line]:
    """What a run without a GPU measured: the host baseline's figures (each median with its
    interval, at its smallest and largest size) and what a GPU would add; [] when the run holds
    none of them."""
    out = []
    for path, variant, metric, what in HOST_FIGURES:
        rows = summary[(summary["path"] == path) & (summary["variant"] == variant) & (summary["metric"] == metric)
                       & (summary["workers"] == 2)].sort_values("bytes")
        if rows.empty:
            continue
        ends = [rows.iloc[0]] if len(rows) == 1 else [rows.iloc[0], rows.iloc[-1]]
        parts = []
        for r in ends:
            lo, hi = (r["ci_lo_s"], r["ci_hi_s"]) if math.isfinite(r["ci_lo_s"]) else (r["min_s"], r["max_s"])
            at = f" at {size_text(int(r['bytes']))}" if int(r["bytes"]) > 0 else ""
            parts.append(f"{fmt_time(r['median_s'])} [{time_span([lo, hi])}]{at}")
        out.append(Line(f"  {what}: " + ", ".join(parts), 4))
    if not out:
        return []
    return [Line("No GPU path was measured; two CPU processes here took (median [95% interval]):", 0),
            *out, Line(WHAT_A_GPU_ADDS, 0)]


NO_DECISION = ("No link has two paths between the same two processes to compare (staging, ipc, mmap, peer: "
               "two workers, the same sharing mode and measure).")
