"""The data exporters: the summary as CSV, and everything (summary, decisions, break-even,
warnings, comparison) as JSON, with the same numbers the other reports show: each median
with its 95% interval, the spread, the flags. The JSON `decisions` are the answer's
(analysis/model.py) serialised, one per link, sharing mode, measure and size."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence

import pandas as pd

from gpuipc_bench.analysis.compare import DecisionChange
from gpuipc_bench.analysis.model import RunAnalysis, link_class
from gpuipc_bench.analysis.verdict import Decision
from gpuipc_bench.report import wording
from gpuipc_bench.report.causes import cause_of


def summary_records(analyses: Sequence[RunAnalysis], sources: Sequence[str]) -> pd.DataFrame:
    """Every run's summary (analysis.SUMMARY_COLUMNS) in one table, the file it came from first."""
    parts = []
    for analysis, source in zip(analyses, sources):
        summary = analysis.summary.copy()
        summary.insert(0, "file", str(source))
        parts.append(summary)
    return pd.concat(parts, ignore_index=True)


def render_csv(analyses: Sequence[RunAnalysis], sources: Sequence[str]) -> str:
    return summary_records(analyses, sources).to_csv(index=False, lineterminator="\n", na_rep="")


def plain(value):
    """JSON-ready: NaN/NA -> None, numpy scalars -> Python, tuples -> lists, dict keys -> str."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or value is pd.NA:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def records(frame: pd.DataFrame) -> list[dict]:
    return [plain(dict(zip(frame.columns, row))) for row in frame.itertuples(index=False, name=None)]


def run_record(analysis: RunAnalysis, source: str) -> dict:
    relevant = set(analysis.answer.relevant)
    return {
        "file": str(source),
        "metadata": dict(analysis.meta),
        "summary": records(analysis.summary),
        "min_effect": analysis.min_effect,
        "decisions": decision_records(analysis),
        "setup": [plain(dataclasses.asdict(c)) for c in analysis.answer.setup],
        "break_even": [plain(dataclasses.asdict(b)) for b in analysis.break_even],
        "warnings": [plain(dataclasses.asdict(w)) | {"says": cause_of(w.cause).title,
                                                      "could_change_the_answer": w in relevant}
                     for w in analysis.warnings],
        "transport_fallbacks": [plain(dataclasses.asdict(f)) | {"fraction": plain(f.fraction),
                                                                "says": wording.fallback_text(f)}
                                for f in analysis.fallbacks],
    }


def decision_records(analysis: RunAnalysis) -> list[dict]:
    """Every decision (decision_record), with where the answer puts it: `link_class` (the
    NVML link of its GPU pair, '' within one GPU or unknown), `pairs` (the GPU pairs whose
    decisions the answer pools with it, as [src, dst]; its own link alone when not grouped),
    `class_choice` (the choice of the answer's band at its size, null where the answer shows
    no line for it) and `differs` (the answer names its pair as choosing otherwise)."""
    placed: dict[tuple, tuple[str, bool]] = {}
    sections = {}
    for section in analysis.answer.sections:
        sections.update({(*link, section.sharing, section.measure): section for link in section.links})
        for band in section.bands:
            placed.update({_key(d): (band.pick, False) for d in band.decisions + band.others})
            placed.update({_key(d): (band.pick, True) for d in band.differ})
    out = []
    for d in analysis.answer.decisions:
        choice, differs = placed.get(_key(d), (None, False))
        section = sections.get(_key(d)[:4])
        out.append(decision_record(d) | {
            "link_class": link_class(analysis.meta, d.src, d.dst),
            "pairs": [list(k) for k in section.links] if section is not None else [[d.src, d.dst]],
            "class_choice": choice, "differs": differs})
    return out


def _key(d: Decision) -> tuple:
    return (d.src, d.dst, d.sharing, d.measure, d.bytes)


def decision_record(d: Decision) -> dict:
    """One decision for scripts, one question per field: link, sharing, measure, bytes;
    `outcome`: the choice against the next class ('faster': the whole ratio interval beyond
    1 + delta; 'within': the interval reaches no further than `within` from 1; 'undecided';
    'same': no next class, something ties with the choice); `class` (the choice's mechanism),
    `members` (every path/variant in its class, the choice among them), `choice`, `why`;
    `next` (the next class, null when none), `ratio` (next's median time over the choice's,
    ratio_lo..ratio_hi its Hodges-Lehmann interval, spanning each process set's where both were
    measured by two or more); `same`: the figures of other classes
    shown the same as the choice (its ties, whatever the outcome); `undecided`: those the
    samples cannot tell from it besides the next class; `within`: the equivalence bound (a
    fraction) where the outcome is same or within; `states`: the choice's two scheduler states
    (fast_s, slow_s: their medians; fast_share: the share of the samples in the fast state),
    null in one; `replicas`: the process sets behind the choice (2: measured again on a fresh
    set by the resampling pass, harness.resample; 1: the first pass only). The choice is its
    band's (model.py); then the figures behind it. `lane`: the lane the choice's
    bytes took by NVML's counters (analysis/lanes.py: 'nvlink', 'pcie', 'none', 'unproven',
    ...), null where its rows carry none."""
    states = None if d.states is None else {"fast_s": d.states.fast_s, "slow_s": d.states.slow_s,
                                            "fast_share": d.states.fast_share}
    return plain({
        "src": d.src, "dst": d.dst, "sharing": d.sharing, "measure": d.measure, "bytes": d.bytes,
        "outcome": d.outcome, "class": d.cls, "members": list(d.members), "choice": d.choice, "why": d.why,
        "next": d.next if d.next is None or d.next != d.cls else d.next_members[0],
        "next_members": list(d.next_members), "ratio": d.ratio, "ratio_lo": d.ratio_lo, "ratio_hi": d.ratio_hi,
        "same": list(d.same), "undecided": list(d.close), "within": d.within, "states": states,
        "replicas": d.replicas, "choice_s": d.choice_s[1],
        "choice_lo_s": d.choice_s[0], "choice_hi_s": d.choice_s[2], "choice_gbps": d.choice_gbps,
        "call_bound": d.call_bound, "l2_resident": d.l2_resident, "samples": d.samples, "separated": d.separated,
        "delta": d.delta, "cost": d.cost or None, "lane": d.lane or None,
    })


def change_record(c: DecisionChange) -> dict:
    return plain(dataclasses.asdict(c))


def render_json(analyses: Sequence[RunAnalysis], sources: Sequence[str], comparison: pd.DataFrame | None,
                changes: Sequence[DecisionChange] = ()) -> str:
    """Every run: file, metadata, summary rows, decisions, set-up costs, break-evens,
    warnings; with several runs the comparison (ratios against run 1, with the range the
    intervals allow), the decisions that changed and the machine differences."""
    doc = {"tool": "gpuipc-bench", "runs": [run_record(a, s) for a, s in zip(analyses, sources)]}
    if comparison is not None:
        doc["comparison"] = records(comparison)
        doc["decision_changes"] = [change_record(c) for c in changes]
        doc["machine_differences"] = wording.machine_differences([a.meta for a in analyses])
    return json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False)
