"""The fast path of reading a results table: pandas' C tokenizer, then each column converted
and checked as a whole (numpy), a chunk of rows at a time, straight from the file's bytes.

It gives exactly what table.parse_table gives, or None where it cannot vouch for that: any
quote or carriage return (csv.reader's quoting and line-end rules are its own), a line that
is neither empty nor exactly one field per column, a line starting with a blank (pandas drops
those blanks where the line straddles its read buffer), a field over csv's size limit, a
byte order mark, or any cell the per-cell rules refuse. The caller then runs
table.parse_table, which also words the error. Cells are converted by table.py's own
converters, once per distinct value, except where a whole-column numpy conversion is the same
operation: floats (numpy converts a str with float()) and integers spelt as str(int) spells
them (any other spelling goes through the converter).
"""

from __future__ import annotations

import csv
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuipc_bench.results.rows import (
    BOOL_COLUMNS, COLUMNS, FILLED, INT_COLUMNS, INT_LEAST, MEASURES, METRICS, OPTIONAL_COLUMNS, STR_COLUMNS,
    pandas_module, typed_frame,
)
from gpuipc_bench.results.table import (
    ADDED_IN, BadCell, bool_cell, choice_cell, float_cell, int_cell, optional_int_cell,
)

if TYPE_CHECKING:
    import pandas as pd

CHUNK_ROWS = 1 << 18  # rows tokenized and converted at a time: the cells of one chunk only are ever strings
_BLOCK = 1 << 24  # bytes of the layout check at a time
_NL, _COMMA, _SPACE, _TAB = 10, 44, 32, 9


def parse_vectorised(raw: bytes, start: int, version: int, partial: bool = False) -> pd.DataFrame | None:
    """The table whose column header line starts at byte `start` of `raw` (the whole file), as
    table.parse_table would give it; None where that is not certain (see the module)."""
    end = len(raw)
    if partial and not raw.endswith(b"\n"):
        end = raw.rfind(b"\n", start) + 1  # a kill in the middle of an append: drop the torn line
    if raw.find(b'"', start, end) >= 0 or raw.find(b"\r", start, end) >= 0:
        return None
    header_end = raw.find(b"\n", start, end)
    if header_end < 0:
        return None
    header = [name.strip() for name in raw[start:header_end].decode("utf-8").split(",")]
    later = {c for v, cols in ADDED_IN.items() if v > version for c in cols} | set(OPTIONAL_COLUMNS)
    if len(set(header)) < len(header) or any(c not in header and c not in later and c not in FILLED for c in COLUMNS):
        return None  # parse_table says which columns
    first = header_end + 1
    records = _records(raw, start, end, len(header)) - 1  # the column header line is one
    if records < 1 or raw.find(b"\xef\xbb\xbf", first, end) >= 0:  # none (quick either way); a BOM pandas may eat
        return None
    try:
        parts = [_convert(chunk, header, later) for chunk in _chunks(raw, first, end, len(header))]
    except BadCell:
        return None
    if sum(len(p["seconds"]) for p in parts) != records:
        return None
    return _frame(parts, header)


def _records(raw: bytes, start: int, end: int, fields: int) -> int:
    """How many records bytes start..end hold, or 0 unless every line is empty or exactly
    `fields` fields not starting with a blank, none longer than csv's field size limit."""
    limit = csv.field_size_limit()
    count = 0
    pos = start
    while pos < end:
        stop = end if end - pos <= _BLOCK else raw.rfind(b"\n", pos, pos + _BLOCK) + 1
        if stop <= pos:  # one line longer than a block: rare enough for the per-cell parser
            return 0
        data = np.frombuffer(raw, dtype=np.uint8, count=stop - pos, offset=pos)
        newlines = np.flatnonzero(data == _NL)
        starts = np.concatenate(([0], newlines + 1))
        ends = np.concatenate((newlines, [len(data)]))
        commas = np.flatnonzero(data == _COMMA)
        per_line = np.searchsorted(commas, ends) - np.searchsorted(commas, starts)
        used = ends > starts  # csv.reader skips an empty line, as pandas does
        if (per_line[used] != fields - 1).any():
            return 0
        if np.isin(data[starts[used]], (_SPACE, _TAB)).any():
            return 0
        bounds = np.concatenate(([-1], np.flatnonzero((data == _COMMA) | (data == _NL)), [len(data)]))
        if np.diff(bounds).max() - 1 >= limit:
            return 0
        count += int(used.sum())
        pos = stop
    return count


class _Bytes:
    """Bytes start..end of `raw` as a file, for pandas, without copying them."""

    def __init__(self, raw: bytes, start: int, end: int):
        self.view = memoryview(raw)[start:end]
        self.pos = 0

    def read(self, size: int = -1) -> bytes:
        stop = len(self.view) if size is None or size < 0 else min(len(self.view), self.pos + size)
        out = bytes(self.view[self.pos:stop])
        self.pos = stop
        return out

    def __iter__(self):  # pandas takes an object with read() and __iter__ for a file
        return iter(())


def _chunks(raw: bytes, start: int, end: int, fields: int):
    """Every cell as a str (dtype object), CHUNK_ROWS rows at a time; blank lines skipped."""
    return pandas_module().read_csv(
        _Bytes(raw, start, end), header=None, names=list(range(fields)), index_col=False, dtype=object,
        na_filter=False, keep_default_na=False, quoting=csv.QUOTE_NONE, skip_blank_lines=True, engine="c",
        chunksize=CHUNK_ROWS, encoding="utf-8",
    )


def _convert(chunk: pd.DataFrame, header: list[str], later: set[str]) -> dict[str, Any]:
    """One chunk's columns, converted and checked as table.parse_table does (the same
    converters); BadCell for any cell it refuses."""
    n = len(chunk)
    raw = {name: chunk[i].to_numpy(dtype=object) for i, name in enumerate(header)}
    for col in sorted(later - set(header)):
        raw[col] = np.full(n, "", dtype=object)
    if "measure" in later and "measure" not in header:
        raw["measure"] = _v1_measures(raw["path"], raw["metric"])
    if "seq" in later and "seq" not in header:
        raw["seq"] = np.full(n, "-1", dtype=object)
    for col, cell in FILLED.items():
        if col not in header:
            raw[col] = np.full(n, cell, dtype=object)

    out: dict[str, Any] = {col: raw[col] for col in STR_COLUMNS}
    _distinct(raw["measure"], choice_cell(MEASURES))
    _distinct(raw["metric"], choice_cell(METRICS))
    for col in INT_COLUMNS:
        out[col] = _ints(raw[col], INT_LEAST.get(col, 0))
    out["mps_thread_pct"] = _masked(raw["mps_thread_pct"], optional_int_cell(1, 100), None, np.int64)
    out["sm_clock_mhz"] = _floats(raw["sm_clock_mhz"], positive=True)
    for col in OPTIONAL_COLUMNS[1:]:
        out[col] = _floats(raw[col])
    out["seconds"] = _floats(raw["seconds"], required=True, positive=True)
    gbps = out["bandwidth_gbps"] = _floats(raw["bandwidth_gbps"])
    bandwidth = raw["metric"] == "bandwidth"
    if not (np.isfinite(gbps[bandwidth]) & (gbps[bandwidth] >= 0)).all():
        raise BadCell("a bandwidth row without a bandwidth")
    for col in BOOL_COLUMNS:
        out[col] = _masked(raw[col], bool_cell, pandas_module().NA, bool)
    for col in header:
        if col not in COLUMNS:
            out[col] = raw[col]
    return out


def _distinct(cells: np.ndarray, convert) -> tuple[list, np.ndarray]:
    """convert() of each distinct cell (once each: most columns hold a few values), and
    each cell's index into them."""
    codes, values = pandas_module().factorize(cells)
    return [convert(v) for v in values], codes


def _masked(cells: np.ndarray, convert, missing, dtype) -> tuple[np.ndarray, np.ndarray]:
    """convert() of every cell as (values, mask) of a nullable array; mask: convert gave `missing`."""
    converted, codes = _distinct(cells, convert)
    mask = np.array([v is missing for v in converted], dtype=bool)
    values = np.array([0 if v is missing else v for v in converted], dtype=dtype)
    return values[codes], mask[codes]


def _ints(cells: np.ndarray, least: int) -> np.ndarray:
    """table.int_cell(least) of every cell. numpy converts a str cell with int(); a cell as
    long as str() of its number is that number's digits and nothing else (int() takes a sign,
    blanks, underscores and leading zeros besides, each a character more), which the per-cell
    rule takes as int(cell) too; only the other cells go through it."""
    convert = int_cell(least)
    try:
        numbers = cells.astype(np.int64)
    except (ValueError, OverflowError, TypeError):
        converted, codes = _distinct(cells, convert)
        return np.array(converted, dtype=np.int64)[codes]
    written = 1 + (numbers < 0)  # len(str(number)), without making the strings
    for power in range(1, 19):
        written += np.abs(numbers) >= 10 ** power
    lengths = np.fromiter(map(len, cells), dtype=np.int64, count=len(cells))
    odd = np.flatnonzero(lengths != written)
    if len(odd):
        numbers[odd] = [convert(cells[i]) for i in odd]
    if (numbers < least).any():
        raise BadCell(f"less than {least}")
    return numbers


def _floats(cells: np.ndarray, required: bool = False, positive: bool = False) -> np.ndarray:
    """table.float_cell of every cell: numpy converts a str cell with float() itself; an
    empty cell is NaN (refused where required). Where float() refuses a cell (a blank one
    included), the whole column goes through the per-cell rule."""
    empty = cells == ""
    if required and empty.any():
        raise BadCell("empty value")
    try:
        numbers = np.where(empty, "nan", cells).astype(np.float64)
    except (ValueError, TypeError):
        converted, codes = _distinct(cells, float_cell(required=required, positive=positive))
        return np.array(converted, dtype=np.float64)[codes]
    if positive and not (empty | (np.isfinite(numbers) & (numbers > 0))).all():
        raise BadCell("not more than 0")
    return numbers


def _v1_measures(path: np.ndarray, metric: np.ndarray) -> np.ndarray:
    """table._v1_measure of every row."""
    handoff = np.isin(path, ("staging", "host"))
    measure = np.where(metric == "bandwidth", np.where(handoff, "handoff", "stream"), "")
    return np.where(metric == "latency", "pingpong", measure).astype(object)


def _frame(parts: list[dict[str, Any]], header: list[str]) -> pd.DataFrame:
    """The chunks' columns joined (each chunk's freed as it is joined), with typed_frame's dtypes."""
    pd = pandas_module()
    columns = list(COLUMNS) + [c for c in header if c not in COLUMNS]
    joined: dict[str, Any] = {}
    for col in columns:
        pieces = [p.pop(col) for p in parts]
        if col == "mps_thread_pct" or col in BOOL_COLUMNS:
            values = np.concatenate([v for v, _ in pieces])
            mask = np.concatenate([m for _, m in pieces])
            kind = pd.arrays.IntegerArray if col == "mps_thread_pct" else pd.arrays.BooleanArray
            joined[col] = kind(values, mask)
        elif col in COLUMNS:
            joined[col] = np.concatenate(pieces)
        else:  # an unknown column stays object, as parse_table keeps it (not pandas' inferred str)
            joined[col] = pd.Series(np.concatenate(pieces), dtype=object, copy=False)
        del pieces
    return typed_frame(pd.DataFrame(joined, columns=columns, copy=False))
