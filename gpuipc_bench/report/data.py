"""The data exporters: the summary as CSV, and everything (summary, verdict, break-even,
warnings, comparison) as JSON, with the same numbers the other reports show: each median
with its 95% interval, the spread, the flags."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence

import pandas as pd

from gpuipc_bench.analysis import RunAnalysis
from gpuipc_bench.report import wording


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
    return {
        "file": str(source),
        "metadata": dict(analysis.meta),
        "summary": records(analysis.summary),
        "min_effect": analysis.min_effect,
        "rankings": [plain(dataclasses.asdict(r)) for r in analysis.rankings],
        "break_even": [plain(dataclasses.asdict(b)) for b in analysis.break_even],
        "warnings": [plain(dataclasses.asdict(w)) | {"says": wording.WARNINGS[w.cause][0]}
                     for w in analysis.warnings],
    }


def render_json(analyses: Sequence[RunAnalysis], sources: Sequence[str], comparison: pd.DataFrame | None) -> str:
    """Every run: file, metadata, summary rows, rankings, break-evens, warnings; with several
    runs the comparison (ratios against run 1, with the range the intervals allow) and the
    machine differences."""
    doc = {"tool": "gpuipc-bench", "runs": [run_record(a, s) for a, s in zip(analyses, sources)]}
    if comparison is not None:
        doc["comparison"] = records(comparison)
        doc["machine_differences"] = wording.machine_differences([a.meta for a in analyses])
    return json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False)
