"""Writing a results file: atomically (temp file, fsync, rename), with its '#' header, and
rows appended as they arrive (ResultsFile)."""

from __future__ import annotations

import csv
import datetime
import io
import math
import os
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from gpuipc_bench.errors import BenchError
from gpuipc_bench.results.rows import (
    COLUMNS, MAGIC, SCHEMA_VERSION, empty_frame, is_na, new_row, pandas_module, typed_frame,
)

if TYPE_CHECKING:
    import pandas as pd

_META_KEY_RE = re.compile(r"^[^\s:#][^:\n\r]*$")


class ResultsWriteError(BenchError):
    """Writing the results file failed (a full disk, an I/O error). `path`: the file, `reason`: the
    system's words ('No space left on device')."""

    def __init__(self, path: Path, error: OSError):
        self.path = Path(path)
        self.reason = error.strerror or str(error)
        super().__init__(f"{path}: {self.reason}")


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def default_results_path(prefix: str = "") -> Path:
    """results/<prefix><UTC time to the second>-<host>.csv: the name a run or a check writes to
    without --out (claim_free_name makes it unique)."""
    stamp = utc_now().strftime("%Y%m%dT%H%M%SZ")
    return Path("results") / f"{prefix}{stamp}-{socket.gethostname()}.csv"


def create_new(path: Path) -> None:
    """Create `path` as an empty file, exclusively (O_CREAT|O_EXCL): FileExistsError where it is there."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666))


def claim_free_name(path: Path) -> Path:
    """Create `path` exclusively (O_CREAT|O_EXCL), or, when it exists, the first free one of
    <stem>-2<suffix>, <stem>-3<suffix>, ...; returns the name taken (an empty file, which the
    results then replace). Two runs started in the same second so never share a file. OSError
    (other than the name being taken) propagates."""
    path = Path(path)
    for n in range(1, 10_000):
        candidate = path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")
        try:
            create_new(candidate)
        except FileExistsError:
            continue
        return candidate
    raise BenchError(f"{path}: 10,000 results files of that name exist; give --out")


def claim_name(path: Path, option: str = "--out") -> Path:
    """Create `path` exclusively (O_CREAT|O_EXCL), the name a user gave without --force: it did not
    exist when the options were checked, so a file there now is another run's, started at the same
    time with the same name (both would write it, and one result would be lost): refused, naming
    the option. A symlink is followed (the file it names is claimed; the link stays). Returns `path`
    (an empty file, which the results then replace)."""
    path = Path(path)
    try:
        create_new(Path(os.path.realpath(path)))
    except FileExistsError:
        raise BenchError(f"{option} {path}: another run created this file while this one started; give "
                         "another name (or --force to overwrite it)") from None
    return path


def open_append(path: Path) -> Any:
    """The results file `path`, open for appending rows (never following a symlink)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    return os.fdopen(fd, "w", encoding="utf-8", newline="")


class ResultsFile:
    """The results of one run, in `path`: rewritten whole by write(), rows appended by add().

    rf = ResultsFile(Path("run.csv"), {"host": "node17", ...})
    rf.write(partial=True, status="running")   # the header; from now on rows are appended
    rf.add(rows)                                 # as they arrive: appended and flushed
    rf.write(partial=False); rf.close()          # at the end: the final header, atomically

    A path of None keeps everything in memory and writes nothing (a check's session: check
    writes its own file).
    """

    def __init__(self, path: Path | None, metadata: Mapping[str, str] | None = None, hold_rows: bool = True):
        """`hold_rows`: keep every row in memory (for .frame); False: rows added once the file is
        written live in the file alone, and a later write() copies them from it under the new
        header (a fleet check's rank 0: its memory and work stay linear in the rows)."""
        self.path = Path(path) if path is not None else None
        self.hold_rows = hold_rows
        self._count = 0  # rows added
        self.metadata: dict[str, str] = {}
        for key, value in (metadata or {}).items():
            self.set_meta(key, value)
        self._rows: list[dict[str, Any]] = []
        self._append: Any = None  # the written file, open for appending rows
        self.write_error: ResultsWriteError | None = None  # the first failed write; none is tried after it
        self._written = False  # whether write() has replaced the file with ours
        self._frame: pd.DataFrame | None = None  # the rows as a frame, until rows are added

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Append rows (dicts as made by new_row; they are checked again); once the file has
        been written, they are appended to it and flushed at once."""
        host = self.metadata.get("host", "")
        new = [{**checked, "node": checked["node"] or host} for checked in (new_row(**row) for row in rows)]
        self._count += len(new)
        if self.hold_rows or self._append is None:  # not held: only until the file is written
            self._rows.extend(new)
        if new:
            self._frame = None
        if self._append is not None and new:
            try:
                self._append.write(format_rows(new))
                self._append.flush()
            except OSError as exc:
                self._failed(exc)

    def add_text(self, text: str, count: int) -> None:
        """Append `count` rows already formatted by format_rows (a node's, made and checked there),
        once the file has been written by a ResultsFile that does not hold its rows."""
        if self.hold_rows or not self._written:
            raise ValueError("add_text: for a written ResultsFile(hold_rows=False) only")
        self._count += count
        if self._append is not None and text:
            try:
                self._append.write(text)
                self._append.flush()
            except OSError as exc:
                self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        """A write failed (a full disk): raise ResultsWriteError once; from then on rows are kept in
        memory only and nothing more is written (the caller sets the file aside)."""
        try:
            self.close()
        except OSError:
            pass  # the buffer it could not flush: the file is closed all the same
        assert self.path is not None  # (rows kept in memory are never written, so never fail)
        self.write_error = ResultsWriteError(self.path, exc)
        raise self.write_error from None

    def set_aside(self) -> Path | None:
        """After a failed write: rename the file to <name>.partial (a rename needs no space), so
        that nothing reads a file cut mid-row as the results; returns the new name, or None when
        there is no file (it was never written, or it cannot be renamed)."""
        self._append = None
        if self.path is None:
            return None
        target = Path(os.path.realpath(self.path))
        partial = target.with_name(target.name + ".partial")
        try:
            if not self._written:  # what is there is not ours (or the empty file claim_free_name made)
                if os.path.getsize(target) == 0:
                    os.unlink(target)
                return None
            os.replace(target, partial)
        except OSError:
            return None
        return partial

    def set_meta(self, key: str, value: Any) -> None:
        key = str(key).strip()
        if not _META_KEY_RE.match(key):
            raise ValueError(f"bad metadata key {key!r}: keys are one line, without ':', not starting with '#'")
        self.metadata[key] = str(value)

    @property
    def frame(self) -> pd.DataFrame:
        """The rows added so far, typed; built once for the final write and the summary after it
        (again only once rows are added). Read it, never change it in place."""
        if not self._rows:
            return empty_frame()
        if self._frame is None:
            self._frame = typed_frame(pandas_module().DataFrame.from_records(self._rows, columns=list(COLUMNS)))
        return self._frame

    def __len__(self) -> int:
        return self._count

    def write(self, partial: bool, status: str = "complete") -> None:
        """Write everything measured so far, atomically; `partial` says the run did not finish.
        Rows added later are appended to what this wrote."""
        self.set_meta("partial", "true" if partial else "false")
        self.set_meta("status", status)
        if self.write_error is not None:
            raise self.write_error
        if self.path is None:
            return
        try:
            self.close()
            if self._written and not self.hold_rows:
                target = _rewrite_header(self.path, self.metadata)
            else:
                target = write_results(self.path, self.frame, self.metadata)
                if not self.hold_rows:  # from now on they live in the file
                    self._rows, self._frame = [], None
            self._written = True
            self._append = open_append(target)
        except OSError as exc:
            self._failed(exc)

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
    if value is None or is_na(value) or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def write_results(path: Path, df: pd.DataFrame, metadata: Mapping[str, str]) -> Path:
    """Write `df` with `metadata` as a results CSV, atomically; returns the file written.

    A symlink is followed (its target is written). Only a regular file is ever replaced:
    a device, a FIFO or anything else there raises BenchError and is left alone. The text
    goes to a temp file in the same folder, is flushed and fsynced, then renamed over the
    target; on any failure the temp file is removed and the target is left as it was.
    """
    text = format_results(df, metadata).encode("utf-8")
    return _replace_atomically(path, lambda fh, target: fh.write(text))


def _rewrite_header(path: Path, metadata: Mapping[str, str]) -> Path:
    """The results file `path` with a new header, its rows copied from it as they are (streamed,
    never parsed), atomically as write_results writes; returns the file written."""
    header = format_results(empty_frame(), metadata).encode("utf-8")

    def copy(fh, target: Path) -> None:
        fh.write(header)
        with open(target, "rb") as old:
            for line in old:  # past the old header and its column line
                if not line.startswith(b"#"):
                    break
            shutil.copyfileobj(old, fh, 1 << 20)

    return _replace_atomically(path, copy)


def _replace_atomically(path: Path, fill) -> Path:
    """`fill(binary file, target)` writes a temp file beside `path`'s target (a symlink followed),
    flushed and fsynced, then renamed over a regular file or nothing (anything else: BenchError,
    left alone); on any failure the temp file goes and the target stays as it was."""
    target = Path(os.path.realpath(path))
    _refuse_unless_regular(Path(path), target)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fill(fh, target)
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
    if metadata.get("host") and (ordered["node"] == "").any():  # the node: the header's host unless a row says
        ordered = ordered.assign(node=ordered["node"].where(ordered["node"] != "", metadata["host"]))
    table = ordered.to_csv(index=False, lineterminator="\n", na_rep="")
    return "\n".join(lines) + "\n" + table


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r"}
UNESCAPES = {"n": "\n", "r": "\r", "\\": "\\"}


def _escape(value: str) -> str:
    """Backslash, newline and carriage return as \\\\, \\n, \\r; other control characters as \\xHH."""
    return re.sub(
        r"[\\\x00-\x1f\x7f]",
        lambda m: _ESCAPES.get(m.group(0)) or f"\\x{ord(m.group(0)):02x}",
        value,
    )



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
