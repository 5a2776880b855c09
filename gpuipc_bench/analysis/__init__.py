"""The numbers over a results table, computed once; nothing here words or lays out (report/).

  conditions.py  what identifies a figure; links, labels, ceiling keys (the shared vocabulary)
  summary.py     one row per condition: median, interval, range, spread, ceiling, L2, call-bound
  stats.py       two figures compared: faster, same or undecided
  mechanisms.py  what each path/variant does to move the bytes (the names of classes)
  classes.py     figures that are one copy reached through different APIs, and the one to use
  verdict.py     the candidates and the decision at one size
  breakeven.py   from which size a set-up cost pays off against staging
  warnings.py    what may make a figure untrustworthy
  lanes.py       a figure's lane from its rows' counters, the lane it should take (the wrong-lane alarm)
  compare.py     runs against each other: figures and decisions
  model.py       one run analysed once (analyse -> RunAnalysis, its Answer)
"""

from __future__ import annotations

from gpuipc_bench.analysis.compare import COMPARE_KEYS, DecisionChange, compare, compare_decisions
from gpuipc_bench.analysis.conditions import (
    ABOVE_CEILING,
    CONDITION_KEYS,
    condition,
    is_gpu,
    label,
    link_rank,
)
from gpuipc_bench.analysis.model import Answer, Band, RunAnalysis, Section, SetupCost, analyse
from gpuipc_bench.analysis.summary import (
    BIMODAL,
    FEW_SAMPLES,
    MAX_INTERVAL,
    MIN_SAMPLES,
    SUMMARY_COLUMNS,
    WIDE_INTERVAL,
    interval_halfwidth,
    samples_by_condition,
    summarize,
)
from gpuipc_bench.analysis.verdict import Decision, candidates
from gpuipc_bench.analysis.warnings import (
    ABOVE_ITS_CEILING,
    FAILED_VERIFICATION,
    SLOW_FIRST_SAMPLE,
    WARNING_CAUSES,
    StabilityWarning,
    stability_warnings,
)

__all__ = [
    "ABOVE_CEILING", "ABOVE_ITS_CEILING", "BIMODAL", "COMPARE_KEYS", "CONDITION_KEYS", "FAILED_VERIFICATION",
    "FEW_SAMPLES", "MAX_INTERVAL", "MIN_SAMPLES", "SLOW_FIRST_SAMPLE", "SUMMARY_COLUMNS", "WARNING_CAUSES",
    "WIDE_INTERVAL", "Answer", "Band", "Decision", "DecisionChange", "RunAnalysis", "Section", "SetupCost",
    "StabilityWarning", "analyse", "candidates", "compare", "compare_decisions", "condition", "interval_halfwidth",
    "is_gpu", "label", "link_rank", "samples_by_condition", "stability_warnings", "summarize",
]
