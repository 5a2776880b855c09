"""Reading a results file of any schema version, refusing what cannot be one before reading
it whole; every problem is one ResultsFormatError line naming the file.

The file is kept as bytes: only the header lines are decoded one by one, and the table is parsed
from the bytes by vectorised.py (table.py's per-cell parser where the fast one cannot vouch for
the table), so a large file is not held as text, lines and cells besides."""

from __future__ import annotations

import codecs
import csv
import gzip
import os
import re
import stat
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from gpuipc_bench.errors import NewerSchemaError, ResultsFormatError
from gpuipc_bench.results.text import CONTROL_BYTES, printable
from gpuipc_bench.results.rows import MAGIC, SCHEMA_VERSION
from gpuipc_bench.results.table import parse_table
from gpuipc_bench.results.writing import UNESCAPES

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
    if not raw or raw.isspace():  # raw.strip() without copying the file
        raise bad("the file is empty")
    if not _is_utf8(raw):
        raise bad("not a gpuipc-bench results file (binary data, not UTF-8 text)")
    if b"\x00" in raw:
        raise bad("not a gpuipc-bench results file (binary data: it contains NUL bytes)")

    # The lines up to the table, decoded one at a time (the bytes of a line of valid UTF-8
    # split at b"\n" are its text: "\n" is one byte in UTF-8).
    def line_at(pos: int) -> tuple[str, int | None]:
        end = raw.find(b"\n", pos)
        return (raw[pos:].decode("utf-8"), None) if end < 0 else (raw[pos:end].decode("utf-8"), end + 1)

    first, pos = line_at(3 if raw.startswith(codecs.BOM_UTF8) else 0)
    first = first.rstrip()
    if first != MAGIC:
        shown = first if len(first) <= 60 else first[:57] + "..."
        raise bad(f"not a gpuipc-bench results file (first line is {shown!r}, expected {MAGIC!r})")

    metadata: dict[str, str] = {}
    body_pos, body_line, number = None, 0, 1
    while pos is not None:
        line, next_pos = line_at(pos)
        line = line.rstrip("\r")
        number += 1
        if line.startswith("#"):
            key, sep, value = line[1:].partition(":")
            if sep and key.strip():
                metadata[key.strip()] = _unescape(value[1:] if value.startswith(" ") else value)
        elif line.strip():  # a '#' line without 'key: value' is a comment; blank lines are skipped
            body_pos, body_line = pos, number
            break
        pos = next_pos

    version = _check_schema(metadata, bad)
    if body_pos is None:
        raise bad("no column header line after the metadata (the file is truncated)")
    try:
        df = _parse_table(raw, body_pos, bad, first_line=body_line, version=version,
                          partial=metadata.get("partial") == "true")
    except ResultsFormatError:
        raise
    except (csv.Error, ValueError, TypeError, OverflowError, IndexError, KeyError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        if "end of data" in message:  # a quoted field that never closes: the last line was cut
            message += " (the file may be truncated)"
        raise bad(f"cannot parse the table: {message}") from None
    # Text that is someone's file's, shown, never obeyed: the header's values (unescaped above, so a
    # written '\x1b' is an escape character by now) always; the table when its bytes hold a control
    metadata = {printable(key): printable(value) for key, value in metadata.items()}
    if CONTROL_BYTES.search(raw):
        df = df.rename(columns=printable)
        for column in df.columns:
            if df[column].dtype.kind not in "biufcmM":  # text, not numbers, flags or times
                df[column] = df[column].map(lambda v: printable(v) if isinstance(v, str) else v)
    return df, metadata


def _parse_table(raw: bytes, start: int, bad, first_line: int = 1, version: int = SCHEMA_VERSION,
                 partial: bool = False) -> pd.DataFrame:
    """The table from byte `start` of the file on (its column header line is line `first_line`):
    parsed vectorised, or, where the fast parser cannot vouch for every cell (a bad cell, a
    quote, a ragged line), by the per-cell parser, which also words what is wrong."""
    from gpuipc_bench.results.vectorised import parse_vectorised

    frame = parse_vectorised(raw, start, version=version, partial=partial)
    if frame is not None:
        return frame
    return parse_table(raw[start:].decode("utf-8"), bad, first_line=first_line, version=version, partial=partial)


def _is_utf8(raw: bytes) -> bool:
    """Whether the bytes are UTF-8 text: decoded in slices, so the file is never held as text too."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    view = memoryview(raw)
    step = 1 << 24
    try:
        for i in range(0, len(raw), step):
            decoder.decode(view[i:i + step])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _unescape(value: str) -> str:
    def one(m: re.Match) -> str:
        if m.group(1):
            return chr(int(m.group(1), 16))
        return UNESCAPES.get(m.group(2), m.group(2))

    return re.sub(r"\\(?:x([0-9a-fA-F]{2})|(.))", one, value)


MAX_RESULTS_BYTES = 1 << 30  # far more than any run writes; a larger file is not ours
_HEAD_BYTES = 512
GZIP_MAGIC = b"\x1f\x8b"


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
        with open(path, "rb") as raw:
            packed = raw.read(len(GZIP_MAGIC)) == GZIP_MAGIC
            raw.seek(0)
            # a file shared gzipped (an issue takes a .csv.gz; five runs' samples shrink about 6x) is
            # read through gzip, bounded by what it unpacks to, not by its size on disk
            with gzip.GzipFile(fileobj=raw) if packed else raw as fh:
                head = fh.read(_HEAD_BYTES)
                problem = _head_problem(head)
                if problem:
                    raise bad(problem)
                chunks = [head]
                total = len(head)
                while chunk := fh.read(1 << 20):
                    total += len(chunk)
                    if total > MAX_RESULTS_BYTES:
                        raise bad(f"{'unpacks to more' if packed else 'is larger'} than any results file "
                                  f"({format_size(MAX_RESULTS_BYTES)} at most)")
                    chunks.append(chunk)
    except IsADirectoryError:
        raise bad("is a directory, not a results file") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise bad(f"a damaged gzip file ({exc})") from None
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
            "(git pull in the checkout, then pip install -e .)"
        )))
    if version < 1:
        raise bad(f"unknown schema_version {version}")
    return version
