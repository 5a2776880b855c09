"""The table of a results file, parsed the straightforward way: csv.reader, then every cell
converted and checked on its own. This is the definition of a valid table and of each error's
wording (the line and column of the first bad cell); vectorised.py is the fast path, which
hands any table it cannot prove valid back to this one."""

from __future__ import annotations

import csv
import io
import math
import re
from typing import TYPE_CHECKING, Any

from gpuipc_bench.results.rows import (
    BOOL_COLUMNS, COLUMNS, FILLED, FLOAT_COLUMNS, INT_COLUMNS, INT_LEAST, MEASURES, METRICS, OPTIONAL_COLUMNS,
    SCHEMA_VERSION, STR_COLUMNS, pandas_module, typed_frame,
)

if TYPE_CHECKING:
    import pandas as pd


# Columns each schema version added, with how to fill them in an older file (the schema's history
# is in gpuipc_bench.results).
ADDED_IN = {2: ("measure", "l2_resident"), 3: ("mps_thread_pct", "transport", "node", "seq", "sm_clock_mhz")}


def parse_table(body: str, bad, first_line: int = 1, version: int = SCHEMA_VERSION,
                partial: bool = False) -> pd.DataFrame:
    """The table `body` (from its column header line, line `first_line` of the file), every
    cell checked; the first bad one raises bad("line N, column C: ...")."""
    if partial and not body.endswith("\n"):
        body = body[:body.rfind("\n") + 1]  # a kill in the middle of an append: drop the torn line
    reader = csv.reader(io.StringIO(body, newline=""), strict=True)
    header = next(reader)
    header = [name.strip() for name in header]
    dupes = sorted({name for name in header if header.count(name) > 1})
    if dupes:
        raise bad(f"duplicate column(s): {', '.join(dupes)}")
    later = {c for v, cols in ADDED_IN.items() if v > version for c in cols} | set(OPTIONAL_COLUMNS)
    missing = [c for c in COLUMNS if c not in header and c not in later and c not in FILLED]
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
    raw = pandas_module().DataFrame(records, columns=header, dtype=object) if records else pandas_module().DataFrame(
        {name: pandas_module().Series([], dtype=object) for name in header}
    )

    for col in sorted(later - set(header)):
        raw[col] = [""] * len(raw)
    if "measure" in later and "measure" not in header:
        raw["measure"] = [_v1_measure(p, m) for p, m in zip(raw["path"], raw["metric"])]
    if "seq" in later and "seq" not in header:
        raw["seq"] = ["-1"] * len(raw)  # unknown
    for col, cell in FILLED.items():
        if col not in header:
            raw[col] = [cell] * len(raw)

    def column(col: str, convert) -> list:
        out = []
        for value, line in zip(raw[col], lines):
            try:
                out.append(convert(value))
            except BadCell as exc:
                raise bad(f"line {line}, column {col}: {exc}") from None
        return out

    converted: dict[str, Any] = {}
    for col in STR_COLUMNS:
        converted[col] = raw[col].astype(object)
    column("measure", choice_cell(MEASURES))
    column("metric", choice_cell(METRICS))
    for col in INT_COLUMNS:
        converted[col] = column(col, int_cell(INT_LEAST.get(col, 0)))
    converted["mps_thread_pct"] = column("mps_thread_pct", optional_int_cell(1, 100))
    converted["sm_clock_mhz"] = column("sm_clock_mhz", float_cell(positive=True, what="a clock in MHz"))
    for col in OPTIONAL_COLUMNS[1:]:
        converted[col] = column(col, float_cell(what="a byte count"))
    converted["seconds"] = column("seconds", float_cell(required=True, positive=True))
    converted["bandwidth_gbps"] = column("bandwidth_gbps", float_cell())
    for line, metric, gbps in zip(lines, raw["metric"], converted["bandwidth_gbps"]):
        if metric == "bandwidth" and not (math.isfinite(gbps) and gbps >= 0):
            raise bad(f"line {line}, column bandwidth_gbps: {gbps!r} is not a bandwidth (a bandwidth row "
                      "needs a finite number, 0 or more)")
    for col in BOOL_COLUMNS:
        converted[col] = column(col, bool_cell)
    for col in header:
        if col not in COLUMNS:
            converted[col] = raw[col].astype(object)
    frame = pandas_module().DataFrame(converted, columns=list(COLUMNS) + [c for c in header if c not in COLUMNS])
    if not records:
        frame = frame.astype({c: "int64" for c in INT_COLUMNS} | {c: "float64" for c in FLOAT_COLUMNS}
                             | {"mps_thread_pct": "Int64"})
    return typed_frame(frame)


class BadCell(ValueError):
    """What is wrong with one cell; read_results adds the file, the line and the column."""


_INT_RE = re.compile(r"^\s*[+-]?\d+\s*$")
_TRUE = {"true", "1", "yes"}
_FALSE = {"false", "0", "no"}


def choice_cell(allowed: tuple[str, ...]):
    def convert(value: str) -> str:
        if value not in allowed:
            raise BadCell(f"{value!r} is not one of {', '.join(repr(a) for a in allowed)}")
        return value

    return convert


def int_cell(least: int):
    def convert(value: str) -> int:
        if not _INT_RE.match(value) or len(value.strip()) > 19:
            raise BadCell(f"{value!r} is not an integer")
        number = int(value)
        if number < least:
            raise BadCell(f"{number} is less than {least}")
        return number

    return convert


def optional_int_cell(least: int, most: int):
    def convert(value: str) -> Any:
        if not value.strip():
            return None
        number = int_cell(least)(value)
        if number > most:
            raise BadCell(f"{number} is more than {most}")
        return number

    return convert


def float_cell(required: bool = False, positive: bool = False,
                what: str = "a time (a finite number of seconds, more than 0)"):
    def convert(value: str) -> float:
        if not value.strip():
            if required:
                raise BadCell("empty value")
            return math.nan
        try:
            number = float(value)
        except ValueError:
            raise BadCell(f"{value!r} is not a number") from None
        if positive and not (math.isfinite(number) and number > 0):
            raise BadCell(f"{value.strip()} is not {what}")
        return number

    return convert


def bool_cell(value: str) -> Any:
    text = value.strip().lower()
    if not text:
        return pandas_module().NA
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise BadCell(f"{value!r} is not True or False")


def _v1_measure(path: str, metric: str) -> str:
    """The measure of a schema-1 row: staging and host handed every transfer over; the other
    bandwidth rows were batches after one hand-off; latency rows were ping-pongs."""
    if metric == "latency":
        return "pingpong"
    if metric == "bandwidth":
        return "handoff" if path in ("staging", "host") else "stream"
    return ""
