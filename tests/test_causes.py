"""The causes of a warning are worded in one registry (report/causes.py): every renderer takes a
cause's words from it, so a new cause is one record there (and its detection in analysis/)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from gpuipc_bench.analysis import WARNING_CAUSES, analyse
from gpuipc_bench.analysis.warnings import StabilityWarning
from gpuipc_bench.report import answer, causes, data, document, markdown, terminal, wording
from gpuipc_bench.report.causes import CAUSES, Cause
from gpuipc_bench.results import read_results

SMALL = Path(__file__).parent / "data" / "small_run.csv"
DUMMY = Cause("dummy-cause", "a dummy title", "the dummy's advice", short="dummy words",
              with_value="dummy at {value}", value=lambda w: f"{w.value:.2f} dummies")


@pytest.fixture
def dummy(monkeypatch) -> StabilityWarning:
    """A warning of a cause that only the registry knows."""
    monkeypatch.setitem(causes.CAUSES, DUMMY.key, DUMMY)
    return StabilityWarning(DUMMY.key, "ipc", "ipc", "push", 4096, measure="handoff", src="0", dst="0",
                            sharing="none", value=3.0)


def test_every_detected_cause_has_its_words():
    assert set(CAUSES) == set(WARNING_CAUSES)
    for cause in CAUSES.values():
        assert cause.title and cause.advice and cause.short


def test_a_new_cause_is_worded_from_the_registry_alone(dummy):
    assert wording.warning_value(dummy) == "3.00 dummies"
    assert wording.warning_short(dummy) == "dummy at 3.00 dummies"
    assert wording.warning_short(StabilityWarning(DUMMY.key, "ipc", "ipc", "push", 4096)) == "dummy words"
    assert wording.warnings_count([dummy, dummy]) == "2 warnings: 2 dummy words"
    [(title, subjects, hint)] = wording.warning_lines([dummy])
    assert title == "a dummy title (1 figure)"
    assert subjects == "ipc/push 4 KiB 3.00 dummies"
    assert hint == "the dummy's advice"
    line = answer.warnings_line([dummy], 1, width=200)
    assert line is not None and "dummy at 3.00 dummies" in line.text


def test_every_renderer_words_a_new_cause_from_the_registry(dummy):
    analysis = analyse(*read_results(SMALL))
    analysis.warnings = [dummy]
    doc = document.build_report(analysis, "small_run.csv")
    console = Console(record=True, width=120, color_system=None, file=io.StringIO())
    terminal.render_report(doc, console)
    shown = console.export_text()
    assert "a dummy title (1 figure)" in shown and "the dummy's advice" in shown
    text = markdown.fit(markdown.sections(doc, analysis))
    assert "a dummy title (1 figure)" in text and "the dummy's advice" in text
    [record] = json.loads(json.dumps(data.run_record(analysis, "small_run.csv")))["warnings"]
    assert record["cause"] == DUMMY.key and record["says"] == "a dummy title"


def test_a_cause_without_words_is_named_by_its_key():
    w = StabilityWarning("unknown-cause", "ipc", "ipc", "push", 4096, value=math.pi)
    assert wording.warning_short(w) == "unknown-cause"
    assert wording.warning_value(w) == ""
