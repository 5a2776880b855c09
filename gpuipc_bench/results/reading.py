"""Reading a results file of any schema version, refusing what cannot be one before reading
it whole; every problem is one ResultsFormatError line naming the file."""

from __future__ import annotations

import csv
import io
import math
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuipc_bench.errors import NewerSchemaError, ResultsFormatError
from gpuipc_bench.results.rows import (
    BOOL_COLUMNS, COLUMNS, FLOAT_COLUMNS, INT_COLUMNS, MAGIC, MEASURES, METRICS, SCHEMA_VERSION, STR_COLUMNS, _pd,
    typed_frame,
)
from gpuipc_bench.results.writing import _UNESCAPES

from gpuipc_bench.sizes import format_size

if TYPE_CHECKING:
    import pandas as pd


def read_results(path: Path | str) -> tuple[pd.DataFrame, dict[str, str]]:
    """Read a results CSV: (typed frame, metadata). Any problem with the file raises
    ResultsFormatError, one line, naming the file. Zero rows is valid; unknown extra
    columns are kept (as strings)."""
    path = Path(path)

    def bad(reason: str) -> ResultsFormatError:
        return ResultsFormatError(f"{path}: {reason}")

    raw = _read_bounded(path, bad)
    if not raw.strip():
        raise bad("the file is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad("not a gpuipc-bench results file (binary data, not UTF-8 text)") from None
    if "\x00" in text:
        raise bad("not a gpuipc-bench results file (binary data: it contains NUL bytes)")
    text = text.removeprefix("\ufeff")

    lines = text.split("\n")
    first = lines[0].rstrip()
    if first != MAGIC:
        shown = first if len(first) <= 60 else first[:57] + "..."
        raise bad(f"not a gpuipc-bench results file (first line is {shown!r}, expected {MAGIC!r})")

    metadata: dict[str, str] = {}
    body_start = len(lines)
    for i in range(1, len(lines)):
        line = lines[i].rstrip("\r")
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep and key.strip():
                metadata[key.strip()] = _unescape(value[1:] if value.startswith(" ") else value)
            continue  # a '#' line without 'key: value' is a comment
        if not line.strip():
            continue
        body_start = i
        break

    version = _check_schema(metadata, bad)
    body = "\n".join(lines[body_start:])
    if not body.strip():
        raise bad("no column header line after the metadata (the file is truncated)")
    try:
        df = _parse_table(body, bad, first_line=body_start + 1, version=version,
                          partial=metadata.get("partial") == "true")
    except ResultsFormatError:
        raise
    except (csv.Error, ValueError, TypeError, OverflowError, IndexError, KeyError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        if "end of data" in message:  # a quoted field that never closes: the last line was cut
            message += " (the file may be truncated)"
        raise bad(f"cannot parse the table: {message}") from None
    return df, metadata


def _unescape(value: str) -> str:
    def one(m: re.Match) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        return _UNESCAPES.get(m.group(2), m.group(2))

    return re.sub(r"\\(?:x([0-9a-fA-F]{2})|(.))", one, value)


MAX_RESULTS_BYTES = 1 << 30  # far more than any run writes; a larger file is not ours
_HEAD_BYTES = 512


def _read_bounded(path: Path, bad) -> bytes:
    """The bytes of a results file, refusing before reading it whole what cannot be one: not
    a regular file (a device, a FIFO: never opened), larger than MAX_RESULTS_BYTES, or not
    starting with the magic line. Read in bounded chunks, so that a file that grows while
    it is read stops at the limit."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise bad("no such file") from None
    except OSError as exc:
        raise bad(f"cannot read it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(st.st_mode):
        raise bad("is a directory, not a results file")
    if not stat.S_ISREG(st.st_mode):
        raise bad("is not a regular file (a device, a pipe or a socket), so not a results file")
    if st.st_size > MAX_RESULTS_BYTES:
        raise bad(f"is {format_size(st.st_size)}, larger than any results file "
                  f"({format_size(MAX_RESULTS_BYTES)} at most)")
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD_BYTES)
            problem = _head_problem(head)
            if problem:
                raise bad(problem)
            chunks = [head]
            total = len(head)
            while chunk := fh.read(1 << 20):
                total += len(chunk)
                if total > MAX_RESULTS_BYTES:
                    raise bad(f"is larger than any results file ({format_size(MAX_RESULTS_BYTES)} at most)")
                chunks.append(chunk)
    except IsADirectoryError:
        raise bad("is a directory, not a results file") from None
    except OSError as exc:
        raise bad(f"cannot read it ({exc.strerror or exc})") from None
    return b"".join(chunks)


def _head_problem(head: bytes) -> str | None:
    """Why a file starting with `head` cannot be a results file, or None if it may be one."""
    if b"\x00" in head:
        return "not a gpuipc-bench results file (binary data: it contains NUL bytes)"
    start = head.removeprefix(b"\xef\xbb\xbf")
    magic = MAGIC.encode()
    if not start.strip() or start[:len(magic)] == magic[:len(start)]:
        return None
    shown = start.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", "replace")
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"not a gpuipc-bench results file (first line is {shown!r}, expected {MAGIC!r})"


def _check_schema(metadata: dict[str, str], bad) -> int:
    version_text = metadata.get("schema_version")
    if version_text is None:
        raise bad("no '# schema_version:' line in the header")
    try:
        version = int(version_text.strip())
    except ValueError:
        raise bad(f"schema_version {version_text!r} is not a number") from None
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(str(bad(
            f"written by a newer gpuipc-bench (schema {version}); this one reads schema {SCHEMA_VERSION} "
            "(pip install -U gpuipc-bench)"
        )))
    if version < 1:
        raise bad(f"unknown schema_version {version}")
    return version


# Columns each schema version added, with how to fill them in an older file (see the history above).
_ADDED_IN = {2: ("measure", "l2_resident"), 3: ("mps_thread_pct", "transport", "node", "seq", "sm_clock_mhz")}


def _parse_table(body: str, bad, first_line: int = 1, version: int = SCHEMA_VERSION,
                 partial: bool = False) -> pd.DataFrame:
    if partial and not body.endswith("\n"):
        body = body[:body.rfind("\n") + 1]  # a kill in the middle of an append: drop the torn line
    reader = csv.reader(io.StringIO(body, newline=""), strict=True)
    header = next(reader)
    header = [name.strip() for name in header]
    dupes = sorted({name for name in header if header.count(name) > 1})
    if dupes:
        raise bad(f"duplicate column(s): {', '.join(dupes)}")
    later = {c for v, cols in _ADDED_IN.items() if v > version for c in cols}
    missing = [c for c in COLUMNS if c not in header and c not in later]
    if missing:
        raise bad(f"missing column(s): {', '.join(missing)}")
    records: list[list[str]] = []
    lines: list[int] = []  # the file's line number of each record
    for record in reader:
        if not record:
            continue  # blank line
        line = first_line - 1 + reader.line_num
        if len(record) != len(header):
            raise bad(f"line {line}: {len(record)} fields, expected {len(header)} (the file may be truncated)")
        records.append(record)
        lines.append(line)
    raw = _pd().DataFrame(records, columns=header, dtype=object) if records else _pd().DataFrame(
        {name: _pd().Series([], dtype=object) for name in header}
    )

    for col in sorted(later - set(header)):
        raw[col] = [""] * len(raw)
    if "measure" in later and "measure" not in header:
        raw["measure"] = [_v1_measure(p, m) for p, m in zip(raw["path"], raw["metric"])]
    if "seq" in later and "seq" not in header:
        raw["seq"] = ["-1"] * len(raw)  # unknown

    def column(col: str, convert) -> list:
        out = []
        for value, line in zip(raw[col], lines):
            try:
                out.append(convert(value))
            except _BadCell as exc:
                raise bad(f"line {line}, column {col}: {exc}") from None
        return out

    converted: dict[str, Any] = {}
    for col in STR_COLUMNS:
        converted[col] = raw[col].astype(object)
    column("measure", _choice(MEASURES))
    column("metric", _choice(METRICS))
    for col in INT_COLUMNS:
        converted[col] = column(col, _int_cell({"batch": 1, "seq": -1}.get(col, 0)))
    converted["mps_thread_pct"] = column("mps_thread_pct", _optional_int_cell(1, 100))
    converted["sm_clock_mhz"] = column("sm_clock_mhz", _float_cell(positive=True, what="a clock in MHz"))
    converted["seconds"] = column("seconds", _float_cell(required=True, positive=True))
    converted["bandwidth_gbps"] = column("bandwidth_gbps", _float_cell())
    for line, metric, gbps in zip(lines, raw["metric"], converted["bandwidth_gbps"]):
        if metric == "bandwidth" and not (math.isfinite(gbps) and gbps >= 0):
            raise bad(f"line {line}, column bandwidth_gbps: {gbps!r} is not a bandwidth (a bandwidth row "
                      "needs a finite number, 0 or more)")
    for col in BOOL_COLUMNS:
        converted[col] = column(col, _bool_cell)
    for col in header:
        if col not in COLUMNS:
            converted[col] = raw[col].astype(object)
    frame = _pd().DataFrame(converted, columns=list(COLUMNS) + [c for c in header if c not in COLUMNS])
    if not records:
        frame = frame.astype({c: "int64" for c in INT_COLUMNS} | {c: "float64" for c in FLOAT_COLUMNS}
                             | {"mps_thread_pct": "Int64"})
    return typed_frame(frame)


class _BadCell(ValueError):
    """What is wrong with one cell; read_results adds the file, the line and the column."""


_INT_RE = re.compile(r"^\s*[+-]?\d+\s*$")
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def _choice(allowed: tuple[str, ...]):
    def convert(value: str) -> str:
        if value not in allowed:
            raise _BadCell(f"{value!r} is not one of {', '.join(repr(a) for a in allowed)}")
        return value

    return convert


def _int_cell(least: int):
    def convert(value: str) -> int:
        if not _INT_RE.match(value) or len(value.strip()) > 19:
            raise _BadCell(f"{value!r} is not an integer")
        number = int(value)
        if number < least:
            raise _BadCell(f"{number} is less than {least}")
        return number

    return convert


def _optional_int_cell(least: int, most: int):
    def convert(value: str) -> Any:
        if not value.strip():
            return None
        number = _int_cell(least)(value)
        if number > most:
            raise _BadCell(f"{number} is more than {most}")
        return number

    return convert


def _float_cell(required: bool = False, positive: bool = False,
                what: str = "a time (a finite number of seconds, more than 0)"):
    def convert(value: str) -> float:
        if not value.strip():
            if required:
                raise _BadCell("empty value")
            return math.nan
        try:
            number = float(value)
        except ValueError:
            raise _BadCell(f"{value!r} is not a number") from None
        if positive and not (math.isfinite(number) and number > 0):
            raise _BadCell(f"{value.strip()} is not {what}")
        return number

    return convert


def _bool_cell(value: str) -> Any:
    text = value.strip().lower()
    if not text:
        return _pd().NA
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise _BadCell(f"{value!r} is not True or False")


def _v1_measure(path: str, metric: str) -> str:
    """The measure of a schema-1 row: staging and host handed every transfer over; the other
    bandwidth rows were batches after one hand-off; latency rows were ping-pongs."""
    if metric == "latency":
        return "pingpong"
    if metric == "bandwidth":
        return "handoff" if path in ("staging", "host") else "stream"
    return ""
