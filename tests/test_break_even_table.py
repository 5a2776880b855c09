"""The break-even table of a run in two sharing modes: a row per path, link and mode, the mode
named in the row (the same path twice with different answers is never ambiguous)."""

from __future__ import annotations

import json

from conftest import ROOT, invoke

BOTH_MODES = str(ROOT / "results" / "h100-both-modes-default.csv")


def break_even_rows(markdown: str) -> list[list[str]]:
    lines = markdown.splitlines()
    start = next(i for i, line in enumerate(lines) if "Break-even against" in line)
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    end = next((i for i in range(first, len(lines)) if not lines[i].startswith("|")), len(lines))
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines[first:end]]


def test_each_row_names_its_sharing_mode_and_no_row_repeats():
    code, out = invoke("report", BOTH_MODES, "--format", "markdown")
    assert code == 0, out
    rows = break_even_rows(out)
    assert rows[0][0].startswith("path · sharing")
    body = rows[2:]
    assert body and all(" · mps" in r[0] or " · time-sliced" in r[0] for r in body)
    keys = [(r[0], r[1]) for r in body]
    assert len(keys) == len(set(keys)), "a path and link listed twice without a tell"
    code, data = invoke("report", BOTH_MODES, "--format", "json")
    modes = {item["sharing"] for item in json.loads(data)["runs"][0]["break_even"]}
    assert {"mps", "time-sliced"} <= modes
