"""The results table and its CSV file (schema version 2).

One row per sample, tidy long format (see COLUMNS). The CSV carries the machine
facts with it, so a file pasted into an issue stands alone:

    # gpuipc-bench results
    # schema_version: 1
    # host: node17
    # gpu.0.name: NVIDIA H100 80GB HBM3
    scenario,path,variant,metric,...
    ipc,ipc,ce,bandwidth,...

Metadata is a flat str -> str dict, one `# key: value` line each; backslashes,
newlines and carriage returns in values are escaped as \\\\, \\n and \\r, other
control characters as \\xHH.
A run's file is written atomically (temp file in the same folder, fsync, rename) at its
start and after every scenario, and each row is appended (and flushed) as it arrives
in between, so a killed run keeps every sample it had sent and its header says the run
is partial. Only a regular file is ever replaced; a symlink is followed. A reader
drops the torn last line a kill in the middle of an append can leave in a partial file.

Schema history (read_results reads every version; rows come out in the newest form):
  1  first release (2026-11).
  2  columns `measure` (stream | handoff | pingpong | '') and `l2_resident`; kernel-copy
     ceilings named '<kind>-sm@...' next to the copy-engine '<kind>@...'; setup rows
     repeated (iteration 0..n-1); path facts in the header ('# path.<name>: ...').
     A schema-1 file reads with measure 'handoff' for staging and host bandwidth rows
     (they handed every transfer over), 'stream' for the other bandwidth rows,
     'pingpong' for latency rows, and l2_resident unknown (empty).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np

if TYPE_CHECKING:  # pandas is imported where a frame is made: `run` and `list` start faster
    import pandas as pd

from gpuipc_bench.errors import BenchError, NewerSchemaError, ResultsFormatError

SCHEMA_VERSION = 2
MAGIC = "# gpuipc-bench results"

COLUMNS: tuple[str, ...] = (
    "scenario",  # scenario module name, e.g. 'ipc'
    "path",  # staging, ipc, mmap, peer, host, barrier, ceiling
    "variant",  # pinned, ce, sm, push, ...; ceiling rows: 'd2d@0', 'd2d-sm@0', 'peer@0>1'; setup rows: the operation
    "measure",  # stream | handoff | pingpong | '' (setup rows); see MEASURES
    "metric",  # bandwidth | latency | setup
    "src",  # '0', '1', ... or 'host'
    "dst",
    "bytes",  # bytes moved by one transfer
    "iteration",  # 0-based sample index
    "batch",  # transfers timed together in this sample
    "seconds",  # per transfer (sample time / batch); latency: one-way; setup: the operation
    "bandwidth_gbps",  # bytes / seconds / 1e9, one direction; NaN unless metric is bandwidth
    "verified",  # True/False; empty (NA) for setup rows
    "workers",  # processes in the run
    "sharing",  # exclusive, time-sliced, mps, mig, none
    "ceiling",  # the variant of the ceiling rows this row is compared with; '' if none
    "l2_resident",  # True: this sample's source and destination rings fit the GPU's L2 together; empty: n/a
)

METRICS: tuple[str, ...] = ("bandwidth", "latency", "setup")
# How a figure was taken:
#   stream    transfers queued back to back after one hand-off: pipelined throughput (GB/s)
#   handoff   every transfer signalled from producer to consumer, the consumer's copy ordered
#             after it: the time per transfer a program pays (and the GB/s that gives)
#   pingpong  round trip / 2 (latency rows)
#   ''        setup rows (one operation, timed alone)
MEASURES: tuple[str, ...] = ("stream", "handoff", "pingpong", "")

STR_COLUMNS = ("scenario", "path", "variant", "measure", "metric", "src", "dst", "sharing", "ceiling")
INT_COLUMNS = ("bytes", "iteration", "batch", "workers")
FLOAT_COLUMNS = ("seconds", "bandwidth_gbps")
BOOL_COLUMNS = ("verified", "l2_resident")

_DEFAULTS: dict[str, Any] = {
    "scenario": "",
    "path": "",
    "variant": "",
    "measure": "",
    "metric": "bandwidth",
    "src": "",
    "dst": "",
    "bytes": 0,
    "iteration": 0,
    "batch": 1,
    "seconds": math.nan,
    "bandwidth_gbps": None,  # None: computed for bandwidth rows, NaN otherwise
    "verified": None,
    "workers": 1,
    "sharing": "none",
    "ceiling": "",
    "l2_resident": None,
}

_META_KEY_RE = re.compile(r"^[^\s:#][^:\n\r]*$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


# --------------------------------------------------------------------------- rows


def new_row(**fields: Any) -> dict[str, Any]:
    """One result row with every column, in COLUMNS order.

    `seconds` is required. Unknown keys, an unknown metric, a non-integral byte count and the like raise
    ValueError (a bug in the scenario, not a user error). `src`/`dst` may be given
    as device indices (0 -> '0'). For metric 'bandwidth', bandwidth_gbps is computed
    from bytes / seconds when not given.
    """
    unknown = sorted(set(fields) - set(COLUMNS))
    if unknown:
        raise ValueError(f"unknown result column(s): {', '.join(unknown)} (known: {', '.join(COLUMNS)})")
    row = {**_DEFAULTS, **fields}

    for col in STR_COLUMNS:
        value = row[col]
        row[col] = "" if value is None else str(value)
        if _CONTROL_RE.search(row[col]):
            raise ValueError(f"{col} must be one line of printable text, not {row[col]!r}")
    if row["metric"] not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {row['metric']!r}")
    if row["measure"] not in MEASURES:
        raise ValueError(f"measure must be one of {', '.join(m or repr(m) for m in MEASURES)}, "
                         f"not {row['measure']!r}")
    for col in INT_COLUMNS:
        row[col] = _as_int(col, row[col])
    if row["batch"] < 1:
        raise ValueError(f"batch must be at least 1, not {row['batch']}")
    if row["iteration"] < 0 or row["bytes"] < 0 or row["workers"] < 0:
        raise ValueError("bytes, iteration and workers must not be negative")
    row["seconds"] = _as_float("seconds", row["seconds"])
    if math.isnan(row["seconds"]):
        raise ValueError("seconds is required (per transfer; latency: one-way; setup: the operation)")

    gbps = row["bandwidth_gbps"]
    if row["metric"] == "bandwidth":
        if gbps is None or (isinstance(gbps, float) and math.isnan(gbps)):
            seconds = row["seconds"]
            gbps = row["bytes"] / seconds / 1e9 if seconds > 0 and math.isfinite(seconds) else math.nan
        row["bandwidth_gbps"] = _as_float("bandwidth_gbps", gbps)
    else:
        if gbps is not None and not (isinstance(gbps, float) and math.isnan(gbps)):
            raise ValueError(f"bandwidth_gbps is only for bandwidth rows, not {row['metric']} rows")
        row["bandwidth_gbps"] = math.nan

    for col in BOOL_COLUMNS:
        flag = row[col]
        if flag is not None and not _is_na(flag):
            if not isinstance(flag, (bool, np.bool_)):
                raise ValueError(f"{col} must be True, False or None, not {flag!r}")
            flag = bool(flag)
        row[col] = None if _is_na(flag) else flag
    return {col: row[col] for col in COLUMNS}


def _as_int(col: str, value: Any) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{col} must be an integer, not {value!r}")
    try:
        out = int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{col} must be an integer, not {value!r}") from None
    if out != value:
        raise ValueError(f"{col} must be a whole number, not {value!r}")
    return out


def _as_float(col: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{col} must be a number, not {value!r}") from None


def _pd():
    import pandas

    return pandas


def _is_na(value: Any) -> bool:
    """pandas.NA, without importing pandas."""
    return type(value).__name__ == "NAType"


def empty_frame() -> pd.DataFrame:
    """A results frame with no rows and the right columns and dtypes."""
    return typed_frame(_pd().DataFrame({col: [] for col in COLUMNS}))


def typed_frame(df: pd.DataFrame) -> pd.DataFrame:
    """Give the COLUMNS their dtypes (str, int64, float64, nullable boolean) and order;
    extra columns are kept after them, unchanged."""
    out = _pd().DataFrame(index=range(len(df)))
    values = df.reset_index(drop=True)
    for col in STR_COLUMNS:
        out[col] = values[col].fillna("").astype(str) if len(values) else _pd().Series([], dtype=str)
    for col in INT_COLUMNS:
        out[col] = values[col].astype("int64")
    for col in FLOAT_COLUMNS:
        out[col] = values[col].astype("float64")
    for col in BOOL_COLUMNS:
        out[col] = values[col].astype("boolean")
    extra = [c for c in values.columns if c not in COLUMNS]
    out = out[list(COLUMNS)]
    for col in extra:
        out[col] = values[col]
    return out


# --------------------------------------------------------------------------- writing


class ResultsFile:
    """The results of one run, in `path`: rewritten whole by write(), rows appended by add().

    rf = ResultsFile(Path("run.csv"), {"host": "node17", ...})
    rf.write(partial=True, status="running")   # the header; from now on rows are appended
    rf.add(rows)                                 # as they arrive: appended and flushed
    rf.write(partial=False); rf.close()          # at the end: the final header, atomically
    """

    def __init__(self, path: Path, metadata: Mapping[str, str] | None = None):
        self.path = Path(path)
        self.metadata: dict[str, str] = {}
        for key, value in (metadata or {}).items():
            self.set_meta(key, value)
        self._rows: list[dict[str, Any]] = []
        self._append: Any = None  # the written file, open for appending rows

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append rows (dicts as made by new_row; they are checked again); once the file has
        been written, they are appended to it and flushed at once."""
        new = [new_row(**row) for row in rows]
        self._rows.extend(new)
        if self._append is not None and new:
            self._append.write(format_rows(new))
            self._append.flush()

    def set_meta(self, key: str, value: Any) -> None:
        key = str(key).strip()
        if not _META_KEY_RE.match(key):
            raise ValueError(f"bad metadata key {key!r}: keys are one line, without ':', not starting with '#'")
        self.metadata[key] = str(value)

    @property
    def frame(self) -> pd.DataFrame:
        if not self._rows:
            return empty_frame()
        return typed_frame(_pd().DataFrame.from_records(self._rows, columns=list(COLUMNS)))

    def __len__(self) -> int:
        return len(self._rows)

    def write(self, partial: bool, status: str = "complete") -> None:
        """Write everything measured so far, atomically; `partial` says the run did not finish.
        Rows added later are appended to what this wrote."""
        self.set_meta("partial", "true" if partial else "false")
        self.set_meta("status", status)
        self.close()
        target = write_results(self.path, self.frame, self.metadata)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
        self._append = os.fdopen(fd, "w", encoding="utf-8", newline="")

    def close(self) -> None:
        """Stop appending (the file stays as written). Idempotent."""
        if self._append is not None:
            try:
                self._append.close()
            finally:
                self._append = None


def format_rows(rows: Iterable[Mapping[str, Any]]) -> str:
    """CSV lines for rows made by new_row, in COLUMNS order, as format_results writes them."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for row in rows:
        writer.writerow([_cell_text(row[col]) for col in COLUMNS])
    return out.getvalue()


def _cell_text(value: Any) -> str:
    if value is None or _is_na(value) or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def write_results(path: Path, df: pd.DataFrame, metadata: Mapping[str, str]) -> Path:
    """Write `df` with `metadata` as a results CSV, atomically; returns the file written.

    A symlink is followed (its target is written). Only a regular file is ever replaced:
    a device, a FIFO or anything else there raises BenchError and is left alone. The text
    goes to a temp file in the same folder, is flushed and fsynced, then renamed over the
    target; on any failure the temp file is removed and the target is left as it was.
    """
    target = Path(os.path.realpath(path))
    _refuse_unless_regular(Path(path), target)
    text = format_results(df, metadata)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp_name, 0o666 & ~_umask())
        _refuse_unless_regular(Path(path), target)  # again: it may have changed while we wrote
        os.replace(tmp_name, target)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    _fsync_dir(target.parent)
    return target


def _refuse_unless_regular(path: Path, target: Path) -> None:
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        shown = f"{path} (which leads to {target})" if path != target else str(path)
        raise BenchError(f"{shown} is not a regular file; not replacing it with the results")


def format_results(df: pd.DataFrame, metadata: Mapping[str, str]) -> str:
    """The CSV text: the '#' header lines, then the table."""
    lines = [MAGIC, f"# schema_version: {SCHEMA_VERSION}"]
    for key, value in metadata.items():
        if key == "schema_version":
            continue  # always ours, written above
        if not _META_KEY_RE.match(str(key)):
            raise ValueError(f"bad metadata key {key!r}")
        lines.append(f"# {key}: {_escape(str(value))}")
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"results frame lacks column(s): {', '.join(missing)}")
    ordered = df[list(COLUMNS) + [c for c in df.columns if c not in COLUMNS]]
    table = ordered.to_csv(index=False, lineterminator="\n", na_rep="")
    return "\n".join(lines) + "\n" + table


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {"n": "\n", "r": "\r", "\\": "\\"}


def _escape(value: str) -> str:
    """Backslash, newline and carriage return as \\\\, \\n, \\r; other control characters as \\xHH."""
    return re.sub(
        r"[\\\x00-\x1f\x7f]",
        lambda m: _ESCAPES.get(m.group(0)) or f"\\x{ord(m.group(0)):02x}",
        value,
    )


def _unescape(value: str) -> str:
    def one(m: re.Match) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        return _UNESCAPES.get(m.group(2), m.group(2))

    return re.sub(r"\\(?:x([0-9a-fA-F]{2})|(.))", one, value)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- reading


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
        raise bad(f"cannot parse the table: {message}") from None
    return df, metadata


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
        raise bad(f"is {st.st_size} bytes, larger than any results file ({MAX_RESULTS_BYTES} bytes at most)")
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
                    raise bad(f"is larger than any results file ({MAX_RESULTS_BYTES} bytes at most)")
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
_ADDED_IN = {2: ("measure", "l2_resident")}


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
        converted[col] = column(col, _int_cell(1 if col == "batch" else 0))
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
        frame = frame.astype({c: "int64" for c in INT_COLUMNS} | {c: "float64" for c in FLOAT_COLUMNS})
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


def _float_cell(required: bool = False, positive: bool = False):
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
            raise _BadCell(f"{value.strip()} is not a time (a finite number of seconds, more than 0)")
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
