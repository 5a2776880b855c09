"""The results CSV: rows, round trip, atomic writes, and every way a file can be bad."""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuipc_bench import results
from gpuipc_bench.errors import BenchError, ResultsFormatError
from gpuipc_bench.results import COLUMNS, MAGIC, SCHEMA_VERSION, ResultsFile, new_row, read_results
from gpuipc_bench.results.text import printable

DATA = Path(__file__).parent / "data"


def sample_rows() -> list[dict]:
    return [
        new_row(scenario="ipc", path="ipc", variant="ce", src=0, dst=0, bytes=4096, iteration=0,
                batch=100, seconds=2.4e-6, verified=True, workers=2, sharing="time-sliced", ceiling="d2d@0"),
        new_row(scenario="ipc", path="ipc", variant="ce", src=0, dst=0, bytes=4096, iteration=1,
                batch=100, seconds=2.5e-6, verified=False, workers=2, sharing="time-sliced", ceiling="d2d@0"),
        new_row(scenario="ipc", path="ipc", variant="host-driven", metric="latency", src="0", dst="0",
                bytes=8, seconds=9.1e-6, verified=True, workers=2, sharing="time-sliced"),
        new_row(scenario="ipc", path="ipc", variant="ipc_open_cold", metric="setup", src="0", dst="1",
                bytes=1 << 26, seconds=0.142e-3, workers=2, sharing="exclusive"),
        new_row(scenario="peer", path="ceiling", variant="peer@0>1", src="0", dst="1", bytes=1 << 30,
                seconds=0.02, bandwidth_gbps=53.6870912, verified=True, workers=1),
        new_row(scenario="host", path="host", variant='odd "name", with #hash', src="host", dst="host",
                bytes=1, seconds=1e-7, verified=True, workers=2, sharing="none"),
    ]


META = {
    "tool_version": "0.1.0",
    "host": "node:17 #rack, row 3",
    "gpu.0.name": "NVIDIA H100 80GB HBM3",
    "command": "gpuipc-bench run --sizes 4K,1M --note 'a: b # c'",
    "note": "line one\nline two\r\nback\\slash \\n literal",
    "unicode": "µs → ✓",
    "trailing": "ends with spaces  ",
}


# --------------------------------------------------------------------------- new_row


def test_new_row_fills_defaults_and_computes_bandwidth():
    row = new_row(scenario="ipc", path="ipc", variant="ce", bytes=1_000_000, seconds=1e-4, src=0, dst=1)
    assert list(row) == list(COLUMNS)
    assert row["bandwidth_gbps"] == pytest.approx(10.0)
    assert (row["src"], row["dst"]) == ("0", "1")
    assert row["batch"] == 1 and row["iteration"] == 0
    assert row["verified"] is None and row["ceiling"] == ""


def test_new_row_leaves_bandwidth_empty_for_latency_and_setup():
    for metric in ("latency", "setup"):
        row = new_row(metric=metric, bytes=8, seconds=1e-6)
        assert math.isnan(row["bandwidth_gbps"])


def test_new_row_keeps_given_bandwidth():
    assert new_row(bytes=100, seconds=1.0, bandwidth_gbps=42.0)["bandwidth_gbps"] == 42.0


@pytest.mark.parametrize(
    "fields, needle",
    [
        (dict(seconds=1.0, colour="red"), "colour"),
        (dict(seconds=1.0, metric="throughput"), "metric"),
        (dict(seconds=1.0, bytes=1.5), "bytes"),
        (dict(seconds=1.0, batch=0), "batch"),
        (dict(seconds=1.0, verified="yes"), "verified"),
        (dict(metric="latency", seconds=1.0, bandwidth_gbps=3.0), "bandwidth"),
        (dict(bytes=8), "seconds"),
        (dict(seconds=1.0, variant="two\rlines"), "variant"),
    ],
)
def test_new_row_rejects_bad_fields(fields, needle):
    with pytest.raises(ValueError, match=needle):
        new_row(**fields)


# --------------------------------------------------------------------------- round trip


def test_round_trip_keeps_every_column_type_and_metadata(tmp_path):
    path = tmp_path / "run.csv"
    rf = ResultsFile(path, META)
    rf.add(sample_rows())
    rf.write(partial=False)

    df, meta = read_results(path)
    pd.testing.assert_frame_equal(df, rf.frame)
    assert list(df.columns) == list(COLUMNS)
    assert str(df["bytes"].dtype) == "int64" and str(df["seconds"].dtype) == "float64"
    assert str(df["verified"].dtype) == "boolean"
    assert df["src"].tolist()[:2] == ["0", "0"]  # device indices stay strings
    assert pd.isna(df.loc[3, "verified"]) and math.isnan(df.loc[3, "bandwidth_gbps"])
    assert bool(df.loc[1, "verified"]) is False
    for key, value in META.items():
        assert meta[key] == value
    assert meta["schema_version"] == str(SCHEMA_VERSION)
    assert meta["partial"] == "false" and meta["status"] == "complete"


def test_file_starts_with_magic_and_schema_and_is_one_line_per_meta(tmp_path):
    path = tmp_path / "run.csv"
    rf = ResultsFile(path, META)
    rf.add(sample_rows())
    rf.write(partial=True, status="running")
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == MAGIC
    assert lines[1] == f"# schema_version: {SCHEMA_VERSION}"
    meta_lines = [line for line in lines if line.startswith("# ")]
    assert len(meta_lines) == 2 + len(META) + 2  # magic, schema, ours, partial, status
    assert lines[len(meta_lines)] == ",".join(COLUMNS)


def test_empty_results_file_round_trips(tmp_path):
    path = tmp_path / "empty.csv"
    rf = ResultsFile(path, {"host": "h"})
    assert list(rf.frame.columns) == list(COLUMNS) and rf.frame.empty
    rf.write(partial=True, status="failed: no scenario ran")
    df, meta = read_results(path)
    assert df.empty and list(df.columns) == list(COLUMNS)
    assert meta["status"] == "failed: no scenario ran"


def test_partial_flag_follows_write(tmp_path):
    path = tmp_path / "run.csv"
    rf = ResultsFile(path, {})
    rf.add(sample_rows()[:1])
    rf.write(partial=True, status="running: ipc")
    assert read_results(path)[1]["partial"] == "true"
    assert read_results(path)[1]["status"] == "running: ipc"
    rf.add(sample_rows()[1:])
    rf.write(partial=False)
    df, meta = read_results(path)
    assert meta["partial"] == "false" and meta["status"] == "complete"
    assert len(df) == len(sample_rows())


def test_extra_columns_crlf_and_bom_are_accepted(tmp_path):
    text = (DATA / "small_run.csv").read_text(encoding="utf-8")
    lines = text.rstrip("\n").split("\n")
    header_at = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    lines[header_at] += ",note"
    for i in range(header_at + 1, len(lines)):
        lines[i] += ",x#y"
    path = tmp_path / "extra.csv"
    path.write_bytes(("\ufeff" + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    df, meta = read_results(path)
    assert list(df.columns) == list(COLUMNS) + ["note"]
    assert set(df["note"]) == {"x#y"}
    assert meta["host"] == "dgx-a17"
    reference, _ = read_results(DATA / "small_run.csv")
    pd.testing.assert_frame_equal(df[list(COLUMNS)], reference)


def test_set_meta_rejects_keys_that_cannot_be_one_line():
    rf = ResultsFile(Path("unused.csv"), {})
    for key in ("a:b", "two\nlines", "#x", ""):
        with pytest.raises(ValueError):
            rf.set_meta(key, "v")


# --------------------------------------------------------------------------- atomic writes


def test_write_leaves_no_temp_file(tmp_path):
    rf = ResultsFile(tmp_path / "run.csv", META)
    rf.add(sample_rows())
    rf.write(partial=True, status="running")
    rf.write(partial=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.csv"]


def test_failed_write_keeps_previous_file_and_removes_temp(tmp_path, monkeypatch):
    path = tmp_path / "run.csv"
    rf = ResultsFile(path, META)
    rf.add(sample_rows()[:2])
    rf.write(partial=True, status="running")
    rf.add(sample_rows()[2:])  # appended to the file as they come
    before = path.read_bytes()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(results.writing.os, "replace", broken_replace)
    with pytest.raises(results.ResultsWriteError, match="No space left on device"):  # naming the file
        rf.write(partial=False)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.csv"]


def test_written_file_is_readable_by_others(tmp_path):
    path = tmp_path / "run.csv"
    ResultsFile(path, {}).write(partial=False)
    mask = os.umask(0o022)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


# --------------------------------------------------------------------------- bad files


def valid_text() -> str:
    return (DATA / "small_run.csv").read_text(encoding="utf-8")


def _header_index(text: str) -> int:
    return next(i for i, line in enumerate(text.split("\n")) if not line.startswith("#"))


def _drop_column(text: str, name: str) -> str:
    lines = text.rstrip("\n").split("\n")
    h = _header_index(text)
    idx = lines[h].split(",").index(name)
    for i in range(h, len(lines)):
        cells = lines[i].split(",")
        del cells[idx]
        lines[i] = ",".join(cells)
    return "\n".join(lines) + "\n"


def _replace_schema(text: str, value: str) -> str:
    return re.sub(r"# schema_version: \d+\n", f"# schema_version: {value}\n", text, count=1)


BAD_FILES = {
    "empty": (b"", "empty"),
    "blank": (b"\n\n  \n", "empty"),
    "binary png": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "binary"),
    "nul bytes": (b"# gpuipc-bench results\n\x00\x00\x00", "binary"),
    "plain csv": (b"a,b,c\n1,2,3\n", "not a gpuipc-bench results file"),
    "other comment": (b"# some other tool\n# schema_version: 1\n", "not a gpuipc-bench results file"),
    "newer schema": (_replace_schema(valid_text(), str(SCHEMA_VERSION + 1)).encode(),
                     f"written by a newer gpuipc-bench (schema {SCHEMA_VERSION + 1}); "
                     f"this one reads schema {SCHEMA_VERSION}"),
    "schema not a number": (_replace_schema(valid_text(), "one").encode(), "schema_version"),
    "no schema": (re.sub(r"# schema_version: \d+\n", "", valid_text()).encode(), "schema_version"),
    "header only magic": (b"# gpuipc-bench results\n# schema_version: 1\n", "no column header"),
    "missing column": (_drop_column(valid_text(), "seconds").encode(), "missing column(s): seconds"),
    "truncated row": (valid_text()[: valid_text().rindex("time-sliced")].encode(), "fields"),
    "bad integer": (valid_text().replace(",67108864,0,10,", ",64MiB,0,10,", 1).encode(), "bytes"),
    "bad float": (valid_text().replace(",2.05e-06,", ",fast,", 1).encode(), "seconds"),
    "bad verified": (valid_text().replace(",True,", ",maybe,", 1).encode(), "verified"),
    "bad metric": (valid_text().replace(",bandwidth,", ",throughput,", 1).encode(), "metric"),
    "unterminated quote": ((valid_text() + 'ipc,"ipc,ce\n').encode(), "cannot parse"),
    "too many fields": ((valid_text() + "a," * 20 + "\n").encode(), "fields"),
    "latin-1": ("# gpuipc-bench results\n# host: caf\xe9\n".encode("latin-1"), "binary"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_files_raise_results_format_error_naming_the_file(tmp_path, case):
    content, needle = BAD_FILES[case]
    path = tmp_path / f"bad-{case.replace(' ', '_')}.csv"
    path.write_bytes(content)
    with pytest.raises(ResultsFormatError) as info:
        read_results(path)
    message = str(info.value)
    assert str(path) in message
    assert needle in message
    assert "\n" not in message


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ResultsFormatError, match="no such file") as info:
        read_results(tmp_path / "nope.csv")
    assert "nope.csv" in str(info.value)
    with pytest.raises(ResultsFormatError, match="directory"):
        read_results(tmp_path)


def test_truncated_in_the_middle_of_the_last_row(tmp_path):
    text = valid_text()
    last_line_start = text.rstrip("\n").rindex("\n") + 1
    path = tmp_path / "cut.csv"
    path.write_text(text[: last_line_start + 20], encoding="utf-8")
    with pytest.raises(ResultsFormatError, match="truncated"):
        read_results(path)


# --------------------------------------------------------------------------- fuzz


def _read_or_format_error(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    try:
        df, meta = read_results(path)
    except ResultsFormatError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
    else:
        assert list(df.columns)[: len(COLUMNS)] == list(COLUMNS)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(data=st.binary(max_size=2000))
def test_fuzz_arbitrary_bytes(tmp_path, data):
    _read_or_format_error(tmp_path / "fuzz.csv", data)


@FUZZ
@given(text=st.text(max_size=2000))
def test_fuzz_text_after_a_valid_header(tmp_path, text):
    for prefix in ("", MAGIC + "\n", MAGIC + "\n# schema_version: 1\n",
                   MAGIC + "\n# schema_version: 1\n" + ",".join(COLUMNS) + "\n"):
        _read_or_format_error(tmp_path / "fuzz.csv", (prefix + text).encode("utf-8", "surrogatepass"))


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len(valid_text().encode())),
       pos=st.integers(min_value=0, max_value=len(valid_text().encode()) - 1),
       byte=st.integers(min_value=0, max_value=255))
def test_fuzz_truncated_and_mutated_valid_file(tmp_path, cut, pos, byte):
    data = valid_text().encode("utf-8")
    _read_or_format_error(tmp_path / "fuzz.csv", data[:cut])
    mutated = bytearray(data)
    mutated[pos] = byte
    _read_or_format_error(tmp_path / "fuzz.csv", bytes(mutated))


text_field = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=12)
meta_value = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.lists(
        st.fixed_dictionaries({
            "scenario": text_field, "variant": text_field, "src": text_field, "ceiling": text_field,
            "metric": st.sampled_from(["bandwidth", "latency", "setup"]),
            "bytes": st.integers(0, 1 << 50), "iteration": st.integers(0, 10_000),
            "batch": st.integers(1, 1000),
            "seconds": st.floats(min_value=1e-12, max_value=1e6, allow_nan=False),
            "verified": st.sampled_from([True, False, None]),
        }),
        max_size=8,
    ),
    meta=st.dictionaries(
        st.from_regex(r"[a-z][a-z0-9_.]{0,10}", fullmatch=True).filter(lambda k: k != "schema_version"),
        meta_value, max_size=5,
    ),
)
def test_round_trip_property(tmp_path, rows, meta):
    path = tmp_path / "prop.csv"
    rf = ResultsFile(path, meta)
    rf.add(new_row(**r) for r in rows)
    rf.write(partial=False)
    df, back = read_results(path)
    # Exactly, but for control characters (bidirectional overrides too), which read back shown escaped
    text = ["scenario", "variant", "src", "ceiling"]
    pd.testing.assert_frame_equal(df.drop(columns=text), rf.frame.drop(columns=text))
    for column in text:
        assert df[column].tolist() == [printable(v) for v in rf.frame[column].tolist()]
    for key, value in meta.items():
        if key not in ("partial", "status"):
            assert back[key] == printable(value)


# --------------------------------------------------------------------------- truncation never lies


def _original_frame():
    return read_results(DATA / "small_run.csv")[0]


def _row_ends(data: bytes) -> list[int]:
    """Byte offsets just after each table row of the reference file (after its newline)."""
    header = data.index(b"\nscenario,") + 1  # the column line (the file's schema, not necessarily ours)
    first_row = data.index(b"\n", header) + 1
    ends, at = [], first_row
    while (nl := data.find(b"\n", at)) != -1:
        ends.append(nl + 1)
        at = nl + 1
    return ends


def test_truncation_at_each_row_end_keeps_exactly_the_rows_before(tmp_path):
    data = (DATA / "small_run.csv").read_bytes()
    original = _original_frame()
    ends = _row_ends(data)
    assert len(ends) == len(original) > 5
    path = tmp_path / "cut.csv"
    for k, end in enumerate(ends, start=1):
        path.write_bytes(data[:end])
        df, _ = read_results(path)
        pd.testing.assert_frame_equal(df, original.iloc[:k].reset_index(drop=True))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=len((DATA / "small_run.csv").read_bytes())))
def test_fuzz_truncation_never_changes_a_kept_row(tmp_path, cut):
    """A file cut anywhere is refused, or reads as the rows before the cut, of which only the
    last may be shortened, and then only in its last column (free text, nothing to check it by)."""
    data = (DATA / "small_run.csv").read_bytes()
    path = tmp_path / "cut.csv"
    path.write_bytes(data[:cut])
    try:
        df, _ = read_results(path)
    except ResultsFormatError as exc:
        assert str(path) in str(exc)
        return
    original = _original_frame()
    k = len(df)
    assert k <= len(original)
    if k == 0:
        return
    pd.testing.assert_frame_equal(df.iloc[: k - 1], original.iloc[: k - 1])
    last, whole = df.iloc[k - 1], original.iloc[k - 1]
    for col in COLUMNS[:-1]:
        a, b = last[col], whole[col]
        assert (pd.isna(a) and pd.isna(b)) if pd.isna(a) or pd.isna(b) else a == b, col
    assert str(whole[COLUMNS[-1]]).startswith(str(last[COLUMNS[-1]]))


def test_schema_1_files_read_with_the_measure_derived_and_l2_unknown():
    v1, _ = read_results(DATA / "small_run_v1.csv")
    v2, _ = read_results(DATA / "small_run.csv")
    assert list(v1.columns) == list(COLUMNS)
    bandwidth = v1["metric"] == "bandwidth"
    staging = v1["path"] == "staging"
    assert set(v1.loc[bandwidth & staging, "measure"]) == {"handoff"}
    assert set(v1.loc[bandwidth & ~staging & (v1["path"] != "host"), "measure"]) == {"stream"}
    assert set(v1.loc[v1["metric"] == "latency", "measure"]) == {"pingpong"}
    assert v1["l2_resident"].isna().all()
    pd.testing.assert_frame_equal(v1, v2)  # the committed schema-2 copy was written from it


def test_a_row_refuses_an_unknown_measure():
    with pytest.raises(ValueError, match="measure"):
        new_row(seconds=1.0, measure="burst")


# --------------------------------------------------------------------------- faults


def test_rows_are_appended_as_they_come_and_a_torn_last_line_is_dropped(tmp_path):
    """A SIGKILL keeps every row added since the last full write; a kill in the middle of an
    append leaves a torn last line, which a reader of a partial file drops."""
    path = tmp_path / "run.csv"
    rf = ResultsFile(path, META)
    rf.write(partial=True, status="running")
    rows = sample_rows()
    rf.add(rows[:3])
    frame, meta = read_results(path)  # no final write: what a SIGKILL leaves
    assert len(frame) == 3 and meta["partial"] == "true" and meta["status"] == "running"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write("ceiling,ceiling,d2d@0,stream,bandw")  # torn
    assert len(read_results(path)[0]) == 3
    rf.add(rows[3:4])  # appends after the torn text: that line is now whole but wrong
    with pytest.raises(ResultsFormatError, match="line"):
        read_results(path)
    rf.write(partial=False)  # the final write puts everything right
    rf.close()
    assert len(read_results(path)[0]) == 4


def test_a_torn_line_in_a_complete_file_is_an_error(tmp_path):
    path = tmp_path / "run.csv"
    rf = ResultsFile(path, META)
    rf.add(sample_rows())
    rf.write(partial=False)
    rf.close()
    path.write_text(path.read_text()[:-10])
    with pytest.raises(ResultsFormatError, match="the file may be truncated"):
        read_results(path)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_only_a_regular_file_is_ever_replaced(tmp_path, kind):
    path = tmp_path / "run.csv"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs root")
    with pytest.raises(BenchError, match="is not a regular file; not replacing it"):
        ResultsFile(path, META).write(partial=False)
    mode = os.lstat(path).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISCHR(mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.csv"], "no temp file left"


def test_a_symlink_is_followed_not_replaced(tmp_path):
    target = tmp_path / "data" / "real.csv"
    target.parent.mkdir()
    link = tmp_path / "run.csv"
    link.symlink_to(target)
    rf = ResultsFile(link, META)
    rf.write(partial=True, status="running")
    rf.add(sample_rows()[:2])
    rf.write(partial=False)
    rf.close()
    assert link.is_symlink() and len(read_results(target)[0]) == 2


def test_the_reader_refuses_what_cannot_be_a_results_file_before_reading_it(tmp_path, monkeypatch):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    with pytest.raises(ResultsFormatError, match="not a regular file"):
        read_results(fifo)  # would block for ever if it were opened
    monkeypatch.setattr(results.reading, "MAX_RESULTS_BYTES", 100)
    big = tmp_path / "big.csv"
    big.write_text("# gpuipc-bench results\n" + "#\n" * 100)
    with pytest.raises(ResultsFormatError, match="larger than any results file"):
        read_results(big)


def test_a_gzipped_file_reads_as_the_file_itself(tmp_path):
    import gzip

    path = tmp_path / "run.csv"
    rf = ResultsFile(path, META)
    rf.add(sample_rows())
    rf.write(partial=False)
    packed = tmp_path / "run.csv.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    df, meta = read_results(packed)
    plain_df, plain_meta = read_results(path)
    pd.testing.assert_frame_equal(df, plain_df)
    assert meta == plain_meta


def test_a_gzipped_file_is_bounded_by_what_it_unpacks_to_and_checked_like_any(tmp_path, monkeypatch):
    import gzip

    whole = ("# gpuipc-bench results\n" + "#\n" * 1000).encode()
    damaged = tmp_path / "cut.csv.gz"
    damaged.write_bytes(gzip.compress(whole)[:-12])
    with pytest.raises(ResultsFormatError, match=r"cut.csv.gz: a damaged gzip file"):
        read_results(damaged)
    other = tmp_path / "other.csv.gz"
    other.write_bytes(gzip.compress(b"hello\n"))
    with pytest.raises(ResultsFormatError, match="not a gpuipc-bench results file .first line is 'hello'"):
        read_results(other)
    monkeypatch.setattr(results.reading, "MAX_RESULTS_BYTES", 100)
    bomb = tmp_path / "bomb.csv.gz"
    bomb.write_bytes(gzip.compress(whole))  # about 40 bytes on disk, 2 kB unpacked
    assert bomb.stat().st_size < 100
    with pytest.raises(ResultsFormatError, match="unpacks to more than any results file"):
        read_results(bomb)


# --------------------------------------------------------------------------- schema 3

SCHEMA_3 = ("mps_thread_pct", "transport", "node", "seq", "sm_clock_mhz")


def test_schema_3_columns_round_trip_with_their_types(tmp_path):
    rows = [
        new_row(scenario="ipc", path="ipc", variant="ce", bytes=4096, seconds=2e-6, sharing="mps",
                mps_thread_pct=50, seq=0, sm_clock_mhz=1980.0, node="gpu-a"),
        new_row(scenario="nccl", path="nccl", variant="sendrecv", bytes=4096, seconds=3e-6, transport="P2P/CUMEM",
                seq=1),
        new_row(scenario="host", path="host", variant="shared-buffer", bytes=64, seconds=1e-7),
    ]
    path = tmp_path / "run.csv"
    rf = ResultsFile(path, {"host": "node17"})
    rf.add(rows)
    rf.write(partial=False)
    df, _ = read_results(path)
    pd.testing.assert_frame_equal(df, rf.frame)
    assert list(df.columns) == list(COLUMNS) and set(SCHEMA_3) <= set(COLUMNS)
    assert str(df["mps_thread_pct"].dtype) == "Int64" and str(df["seq"].dtype) == "int64"
    assert str(df["sm_clock_mhz"].dtype) == "float64"
    assert df["mps_thread_pct"].tolist()[0] == 50 and df["mps_thread_pct"][1:].isna().all()
    assert df["transport"].tolist() == ["", "P2P/CUMEM", ""]
    assert df["node"].tolist() == ["gpu-a", "node17", "node17"]  # the writer fills in the header's host
    assert df["seq"].tolist() == [0, 1, -1]
    assert df["sm_clock_mhz"][0] == 1980.0 and df["sm_clock_mhz"][1:].isna().all()


def test_every_new_row_call_of_schema_2_still_works():
    row = new_row(scenario="ipc", path="ipc", variant="ce", bytes=4096, seconds=2e-6)
    assert (row["mps_thread_pct"], row["transport"], row["node"], row["seq"]) == (None, "", "", -1)
    assert math.isnan(row["sm_clock_mhz"])


@pytest.mark.parametrize("fields,needle", [
    (dict(sharing="time-sliced", mps_thread_pct=50), "only for rows shared under MPS"),
    (dict(sharing="mps", mps_thread_pct=0), "1 to 100"),
    (dict(sharing="mps", mps_thread_pct=101), "1 to 100"),
    (dict(seq=-2), "seq"),
    (dict(sm_clock_mhz=-5.0), "sm_clock_mhz"),
    (dict(transport="a\nb"), "transport"),
])
def test_schema_3_columns_refuse_bad_values(fields, needle):
    with pytest.raises(ValueError, match=needle):
        new_row(scenario="ipc", path="ipc", variant="ce", bytes=64, seconds=1e-6, **fields)


@pytest.mark.parametrize("name", ["small_run.csv", "small_run_v1.csv"])
def test_older_files_read_with_the_schema_3_columns_empty(name):
    df, meta = read_results(DATA / name)
    assert int(meta["schema_version"]) < SCHEMA_VERSION and list(df.columns) == list(COLUMNS)
    assert df["mps_thread_pct"].isna().all() and df["sm_clock_mhz"].isna().all()
    assert (df["transport"] == "").all() and (df["node"] == "").all() and (df["seq"] == -1).all()


@pytest.mark.parametrize("column,cell,needle", [
    ("mps_thread_pct", "200", "more than 100"),
    ("seq", "-7", "less than -1"),
    ("sm_clock_mhz", "fast", "not a number"),
    ("sm_clock_mhz", "-3", "not a clock"),
])
def test_schema_3_cells_are_checked_on_reading(tmp_path, column, cell, needle):
    path = tmp_path / "run.csv"
    rf = ResultsFile(path, {"host": "n"})
    rf.add([new_row(scenario="ipc", path="ipc", variant="ce", bytes=64, seconds=1e-6, sharing="mps",
                    mps_thread_pct=50, seq=3, sm_clock_mhz=1500.0)])
    rf.write(partial=False)
    rf.close()
    header, row = path.read_text().rstrip("\n").split("\n")[-2:]
    cells = row.split(",")
    cells[header.split(",").index(column)] = cell
    path.write_text(path.read_text().replace(row, ",".join(cells)))
    with pytest.raises(ResultsFormatError, match=f"column {column}: .*{needle}"):
        read_results(path)


def test_a_results_file_that_does_not_hold_its_rows_streams_them(tmp_path):
    """hold_rows=False (a fleet check's rank 0): rows live in the file alone, text formatted
    elsewhere is appended as it is, and the final write copies them under the new header."""
    from gpuipc_bench.results.writing import format_rows

    path = tmp_path / "fleet.csv"
    rf = ResultsFile(path, {"host": "h"}, hold_rows=False)
    rf.add(sample_rows()[:1])  # before the first write: held until it
    rf.write(partial=True, status="running")
    rf.add(sample_rows()[1:2])
    rf.add_text(format_rows(new_row(**{**r, "node": "h"}) for r in sample_rows()[2:]), len(sample_rows()) - 2)
    assert rf.frame.empty and len(rf) == len(sample_rows())  # none held
    rf.set_meta("check.nodes", "h")
    rf.write(partial=False)
    rf.close()
    df, meta = read_results(path)
    whole = ResultsFile(tmp_path / "whole.csv", {"host": "h"})
    whole.add(sample_rows())
    pd.testing.assert_frame_equal(df, whole.frame)
    assert meta["check.nodes"] == "h" and meta["status"] == "complete"
    with pytest.raises(ValueError):
        ResultsFile(tmp_path / "held.csv").add_text("", 0)
