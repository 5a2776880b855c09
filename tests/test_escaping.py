"""Text from a results CSV is data: escape sequences, bells, carriage returns and bidirectional
overrides in its fields and header are shown escaped in every format, and Markdown's and HTML's
active characters are escaped in Markdown cells."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from conftest import ROOT, invoke
from gpuipc_bench.results import read_results
from gpuipc_bench.results.text import printable

EVIL = "\x1b[2J\x1b[31mRED\x1b[0m\x07\r<script>x</script>*bold*|`z`\x1b]0;pwned\x07\u202e"
CELL = EVIL.replace("\r", "")  # a carriage return inside a quoted cell is refused by the parser
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]")


@pytest.fixture(scope="module")
def evil_csv(tmp_path_factory):
    """A committed run with EVIL in the variant and node of every row, in the header's host
    and a note, and in an extra column's name."""
    lines = (ROOT / "results" / "h200x2-nccl-two-way.csv").read_text().splitlines(True)
    head = [line for line in lines if line.startswith("#")]
    head = [f"# host: {EVIL}\n" if line.startswith("# host:") else line for line in head]
    head.append(f"# note.nccl.evil: {EVIL}\n")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    rows = list(csv.reader(io.StringIO("".join(line for line in lines if not line.startswith("#")))))
    columns = rows[0]
    writer.writerow(columns + [f"extra{CELL}"])
    for row in rows[1:]:
        row[columns.index("variant")] += CELL
        row[columns.index("node")] = CELL
        writer.writerow(row + ["x"])
    path = tmp_path_factory.mktemp("evil") / "evil.csv"
    path.write_text("".join(head) + out.getvalue())
    return path


def test_printable_shows_control_characters_escaped():
    assert printable("a\x1b[2Jb\x07c\rd\u202ee\tf\ng") == "a\\x1b[2Jb\\x07c\\x0dd\\u202ee\tf\ng"
    assert printable("plain · µs → GPU 1") == "plain · µs → GPU 1"


def test_reading_escapes_every_text_field_and_the_header(evil_csv):
    frame, meta = read_results(evil_csv)
    assert not RAW_CONTROL.search(meta["host"]) and "\\x1b[2J" in meta["host"]
    assert not RAW_CONTROL.search(meta["note.nccl.evil"])
    for column in ("variant", "node"):
        assert not frame[column].astype(str).str.contains(RAW_CONTROL).any()
    assert not any(RAW_CONTROL.search(str(c)) for c in frame.columns)


@pytest.mark.parametrize("args", [(), ("--summary",), ("--detailed",)])
def test_the_terminal_report_sends_no_control_character(evil_csv, args, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out = invoke("report", str(evil_csv), *args)
    assert code == 0, out
    assert not RAW_CONTROL.search(out), [line for line in out.splitlines() if RAW_CONTROL.search(line)][:3]
    assert "\\x1b[2J" in out  # shown, not obeyed


def test_markdown_escapes_markup_and_control_characters(evil_csv):
    code, out = invoke("report", str(evil_csv), "--format", "markdown")
    assert code == 0, out
    assert not RAW_CONTROL.search(out)
    assert "<script>" not in out and "*bold*" not in out
    assert "\\<script\\>" in out and "\\*bold\\*" in out and "\\|" in out


def test_json_carries_no_raw_control_character(evil_csv):
    code, out = invoke("report", str(evil_csv), "--format", "json")
    assert code == 0, out
    assert not RAW_CONTROL.search(out)
    json.loads(out)


def test_an_escape_written_as_backslash_x_in_the_header_stays_text(tmp_path):
    """The header's '\\x1b' (how the writer escapes it) is unescaped on reading: shown, not obeyed."""
    lines = (ROOT / "results" / "h200x2-nccl-two-way.csv").read_text().splitlines(True)
    path = tmp_path / "escaped.csv"
    path.write_text("".join("# host: \\x1b[2Jevil\n" if line.startswith("# host:") else line for line in lines))
    frame, meta = read_results(path)
    assert meta["host"] == "\\x1b[2Jevil"
    code, out = invoke("report", str(path), "--summary")
    assert code == 0 and not RAW_CONTROL.search(out), out
