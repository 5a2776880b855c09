"""`report` on a large file: the vectorised reader, the per-condition summary and robust's
numpy path against the straightforward code they replace (the per-cell reader, a groupby loop,
robust's plain loops), a file over the size limit refused before it is read, and one of about
100k rows read whole. No timing is asserted: each test
fails where the fast code gives anything other than the slow one."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, assert_refused, invoke
from gpuipc_bench import robust
from gpuipc_bench.analysis import CONDITION_KEYS, condition, samples_by_condition, summarize
from gpuipc_bench.analysis.conditions import key_value
from gpuipc_bench.analysis.summary import l2_flags
from gpuipc_bench.cli import cli
from gpuipc_bench.errors import ResultsFormatError
from gpuipc_bench.results import COLUMNS, MAGIC, read_results, vectorised

DATA = Path(__file__).parent / "data"


# --------------------------------------------------------------------------- the reader


def read_both(path: Path, monkeypatch) -> tuple[object, object, bool]:
    """read_results(path) as it reads (vectorised where it can) and with the per-cell parser
    only: each a (frame, metadata) or the ResultsFormatError's text; and whether the
    vectorised parser took the table."""
    real = vectorised.parse_vectorised
    taken = []

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        taken.append(out is not None)
        return out

    def outcome():
        try:
            return read_results(path)
        except ResultsFormatError as exc:
            return str(exc)

    with monkeypatch.context() as m:
        m.setattr(vectorised, "parse_vectorised", spy)
        fast = outcome()
    with monkeypatch.context() as m:
        m.setattr(vectorised, "parse_vectorised", lambda *args, **kwargs: None)
        slow = outcome()
    return fast, slow, any(taken)


def assert_same(fast, slow) -> None:
    if isinstance(slow, str) or isinstance(fast, str):
        assert fast == slow
        return
    pd.testing.assert_frame_equal(fast[0], slow[0], check_exact=True)
    assert list(fast[0].dtypes) == list(slow[0].dtypes)
    assert fast[1] == slow[1]


def results_text(schema: int, header: list[str], rows: list[list[str]], partial: bool = False,
                 tail: str = "") -> str:
    lines = [MAGIC, f"# schema_version: {schema}", "# host: n0", f"# partial: {'true' if partial else 'false'}",
             ",".join(header)]
    return "\n".join(lines + [",".join(r) for r in rows]) + "\n" + tail


def row(**cells: str) -> list[str]:
    base = {"scenario": "ipc", "path": "ipc", "variant": "ce", "measure": "stream", "metric": "bandwidth",
            "src": "0", "dst": "0", "bytes": "4096", "iteration": "0", "batch": "10", "seconds": "2.5e-06",
            "bandwidth_gbps": "1.6384", "verified": "True", "workers": "2", "sharing": "exclusive",
            "ceiling": "d2d@0", "l2_resident": "", "mps_thread_pct": "", "transport": "", "node": "n1",
            "seq": "0", "sm_clock_mhz": "", "replica": "1", "lane": "", "lane_nvlink_bytes": "",
            "lane_pcie_bytes": "", "note": "x"}
    base.update(cells)
    return [base[c] for c in [*COLUMNS, "note"]]


# Cells every way the per-cell rules take them: empty, NaN, signs, leading zeros, blanks,
# underscores, other scripts' digits, every spelling of a flag; then a blank line and a torn one.
EDGE_ROWS = [
    row(),
    row(bytes="+4096", iteration="-0", seq="+8", verified="", l2_resident="1", note=""),
    row(bytes="004096", iteration="٣", seconds=" 2.5e-06 ", verified="false", l2_resident="no"),
    row(bytes=" 4096 ", seconds="2_5e-07", bandwidth_gbps="16.384", verified="YES", sm_clock_mhz="1980"),
    row(metric="latency", measure="pingpong", bandwidth_gbps="", ceiling="", verified=" true ",
        sm_clock_mhz="1.98e3"),
    row(metric="latency", measure="pingpong", bandwidth_gbps="nan", sharing="mps", mps_thread_pct="25"),
    row(metric="latency", measure="pingpong", bandwidth_gbps="-inf", sharing="mps", mps_thread_pct=" 50 "),
    row(metric="setup", measure="", variant="ipc_open", bandwidth_gbps="", verified="", transport="P2P/CUMEM"),
    row(node="ünïcode-node", seq="-1", iteration="12", verified="0", bytes="67108864", batch="1", replica="2"),
]


@pytest.mark.parametrize("rows_per_chunk", [2, vectorised.CHUNK_ROWS])
def test_the_vectorised_reader_gives_the_per_cell_readers_frame(tmp_path, monkeypatch, rows_per_chunk):
    monkeypatch.setattr(vectorised, "CHUNK_ROWS", rows_per_chunk)  # several chunks joined, or one
    path = tmp_path / "edge.csv"
    text = results_text(3, [*COLUMNS, "note"], EDGE_ROWS[:4] + [[]] + EDGE_ROWS[4:])
    path.write_text(text.replace("\n\n", "\n\n\n"), encoding="utf-8")
    fast, slow, taken = read_both(path, monkeypatch)
    assert taken, "the vectorised reader handed a valid table back"
    assert_same(fast, slow)
    frame = fast[0]
    assert frame["bytes"].tolist()[:4] == [4096] * 4 and frame["iteration"].tolist()[2] == 3
    assert frame["sm_clock_mhz"].isna().sum() == 7 and frame["mps_thread_pct"].tolist()[5:7] == [25, 50]


def test_the_vectorised_reader_reads_older_schemas_and_partial_files(tmp_path, monkeypatch):
    old = [c for c in COLUMNS if c not in ("mps_thread_pct", "transport", "node", "seq", "sm_clock_mhz")]
    rows = [[r[list(COLUMNS).index(c)] for c in old] for r in EDGE_ROWS]
    cases = {
        "v2.csv": results_text(2, old, rows),
        "v1.csv": results_text(1, [c for c in old if c not in ("measure", "l2_resident")],
                               [[r[old.index(c)] for c in old if c not in ("measure", "l2_resident")]
                                for r in rows]),
        "partial.csv": results_text(3, [*COLUMNS, "note"], EDGE_ROWS, partial=True, tail="ipc,ipc,c"),
    }
    for name, text in cases.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
        fast, slow, taken = read_both(tmp_path / name, monkeypatch)
        assert taken, name
        assert_same(fast, slow)
    for name in ("small_run.csv", "small_run_v1.csv"):
        fast, slow, taken = read_both(DATA / name, monkeypatch)
        assert taken, name
        assert_same(fast, slow)


@pytest.mark.parametrize("change", [
    lambda t: t.replace("\n", "\r\n"),  # csv.reader's own line ends
    lambda t: t.replace(",d2d@0,", ',"d2d@0",', 1),  # quoting
    lambda t: t.replace("\nipc,ipc,ce,stream", "\n ipc,ipc,ce,stream", 1),  # a line starting with a blank
    lambda t: t.replace("\nipc,ipc,ce,stream", "\n  \nipc,ipc,ce,stream", 1),  # a blank line that is not empty
    lambda t: t.replace(",True,", ",True,extra,", 1),  # a ragged line
    lambda t: t.replace("\nipc,", "\n\ufeffipc,", 1),  # a byte order mark in the table
    lambda t: t.replace(",4096,", ",4096.0,", 1),  # bad cells, one per kind of column
    lambda t: t.replace(",4096,", ",1_024,", 1),
    lambda t: t.replace(",4096,", ",00000000000000004096,", 1),
    lambda t: t.replace(",2.5e-06,", ",,", 1),
    lambda t: t.replace(",2.5e-06,", ",-2.5e-06,", 1),
    lambda t: t.replace(",1.6384,", ",,", 1),
    lambda t: t.replace(",True,", ",maybe,", 1),
    lambda t: t.replace(",stream,", ",streams,", 1),
    lambda t: t.split("\nipc,")[0] + "\n",  # no records (the per-cell parser is as quick)
    lambda t: t + "ipc,ipc,ce",  # a torn last line in a file that is not partial
])
def test_what_the_vectorised_reader_cannot_vouch_for_is_read_per_cell(tmp_path, monkeypatch, change):
    path = tmp_path / "odd.csv"
    path.write_text(change(results_text(3, [*COLUMNS, "note"], EDGE_ROWS[:1] + EDGE_ROWS)), encoding="utf-8")
    fast, slow, taken = read_both(path, monkeypatch)
    assert_same(fast, slow)  # the frame or the error, word for word


def test_lines_starting_with_blanks_are_read_per_cell(tmp_path, monkeypatch):
    """pandas' tokenizer drops the blanks starting a line where the line straddles its read
    buffer (a few lines in a MB of such lines); csv.reader keeps them: such a table is never
    the vectorised parser's."""
    path = tmp_path / "blanks.csv"
    rows = [row(scenario=" " * 60 + "ipc", iteration=str(i)) for i in range(6000)]
    path.write_text(results_text(3, [*COLUMNS, "note"], rows), encoding="utf-8")
    fast, slow, taken = read_both(path, monkeypatch)
    assert not taken
    assert_same(fast, slow)
    assert set(fast[0]["scenario"]) == {" " * 60 + "ipc"}


INT_CELLS = ["0", "1", "7", "+7", "007", "٧", " 7", "7 ", "1_0", "-1", "-0", "", "x", "1.0", "99999999999999999999",
             "00000000000000000001"]
FLOAT_CELLS = ["1e-06", "2.5", " 3.5", "4_0.5", "nan", "inf", "-inf", "", "  ", "0", "-1", "abc", "1e400"]
FLAG_CELLS = ["True", "False", "true", "0", "1", "yes", "NO", "", " ", "maybe"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(st.fixed_dictionaries({
    "scenario": st.sampled_from(["ipc", "", "ü", " ipc", '"q"']),
    "measure": st.sampled_from(["stream", "handoff", "pingpong", "", "bogus"]),
    "metric": st.sampled_from(["bandwidth", "latency", "setup", "nope"]),
    "bytes": st.sampled_from(INT_CELLS), "iteration": st.sampled_from(INT_CELLS),
    "batch": st.sampled_from(INT_CELLS), "seq": st.sampled_from(INT_CELLS),
    "seconds": st.sampled_from(FLOAT_CELLS), "bandwidth_gbps": st.sampled_from(FLOAT_CELLS),
    "sm_clock_mhz": st.sampled_from(FLOAT_CELLS),
    "verified": st.sampled_from(FLAG_CELLS), "l2_resident": st.sampled_from(FLAG_CELLS),
    "mps_thread_pct": st.sampled_from(["", "1", "100", "0", "101", "+50", " 25 "]),
}), min_size=1, max_size=7))
def test_fuzz_the_vectorised_reader_agrees_with_the_per_cell_one(tmp_path, monkeypatch, cells):
    monkeypatch.setattr(vectorised, "CHUNK_ROWS", 3)
    path = tmp_path / "fuzz.csv"
    path.write_text(results_text(3, [*COLUMNS, "note"], [row(**c) for c in cells]), encoding="utf-8")
    fast, slow, _ = read_both(path, monkeypatch)
    assert_same(fast, slow)


TEXT = st.text(st.characters(blacklist_characters=',\n\r"\x00', blacklist_categories=("Cs",)), max_size=6)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(st.fixed_dictionaries({"scenario": TEXT, "variant": TEXT, "node": TEXT, "note": TEXT}),
                      min_size=1, max_size=7))
def test_fuzz_text_cells_are_split_as_csv_reader_splits_them(tmp_path, monkeypatch, cells):
    """Any text but the separators themselves (a quote or a carriage return is csv.reader's)."""
    path = tmp_path / "text.csv"
    path.write_text(results_text(3, [*COLUMNS, "note"], [row(**c) for c in cells]), encoding="utf-8")
    fast, slow, _ = read_both(path, monkeypatch)
    assert_same(fast, slow)


# --------------------------------------------------------------------------- the summary


def reference_samples(df: pd.DataFrame) -> dict[tuple, np.ndarray]:
    """samples_by_condition as it was: a groupby loop over the frame sorted by iteration."""
    out = {}
    ordered = df.sort_values("iteration", kind="stable")
    for key, group in ordered.groupby(list(CONDITION_KEYS), sort=False, dropna=False):
        out[tuple(key_value(k) for k in key)] = group["seconds"].to_numpy(dtype=float)
    return out


def reference_flags(df: pd.DataFrame) -> dict[tuple, tuple]:
    """Each condition's (verified, l2_resident) as summarize aggregated them: a function per group."""
    def every(flags):
        known = flags.dropna()
        return pd.NA if known.empty else bool(known.astype(bool).all())

    def mostly(flags):
        known = flags.dropna()
        return pd.NA if known.empty else bool(known.astype(bool).mean() >= 0.5)

    groups = df.groupby(list(CONDITION_KEYS), sort=False, dropna=False)
    verified, resident = groups["verified"].agg(every), groups["l2_resident"].agg(mostly)
    return {tuple(key_value(k) for k in key): (v, r) for (key, v), r in zip(verified.items(), resident)}


def crafted_frame(seed: int) -> pd.DataFrame:
    """Conditions interleaved, iterations shuffled and repeated (two nodes' copies), flags mixed
    with NA: the order of first appearance differs before and after sorting by iteration."""
    frame, _ = read_results(DATA / "small_run.csv")
    rng = np.random.default_rng(seed)
    copies = [frame.assign(iteration=frame["iteration"] + k * rng.integers(0, 2)) for k in range(3)]
    big = pd.concat(copies, ignore_index=True).iloc[rng.permutation(len(frame) * 3)].reset_index(drop=True)
    flags = pd.array(rng.choice([True, False, None], size=len(big), p=[0.6, 0.2, 0.2]).tolist(), dtype="boolean")
    big["verified"] = flags
    big["l2_resident"] = pd.array(rng.choice([True, False, None], size=len(big)).tolist(), dtype="boolean")
    big.loc[big["variant"] == big["variant"].iloc[0], "l2_resident"] = pd.NA  # a condition none says
    return big


@pytest.mark.parametrize("seed", range(5))
def test_the_summary_per_condition_equals_the_groupby_loop(seed):
    df = crafted_frame(seed)
    found, expected = samples_by_condition(df), reference_samples(df)
    assert list(found) == list(expected)  # the same conditions, in the same order
    for key in expected:
        np.testing.assert_array_equal(found[key], expected[key])
    summary = summarize(df, meta={"schema_version": "3"})
    flags = reference_flags(df)
    assert len(summary) == len(flags)
    for r in summary.itertuples(index=False):
        verified, resident = flags[condition(r)]
        assert (r.verified is pd.NA and verified is pd.NA) or r.verified == verified
        assert (r.l2_resident is pd.NA and resident is pd.NA) or r.l2_resident == resident


@pytest.mark.parametrize("name", ["h100x2-nvlink-default.csv", "h100-default.csv", "h200-default.csv"])
def test_the_l2_flag_of_an_older_file_equals_the_per_sample_rule(name):
    from gpuipc_bench.analysis.summary import _sides
    from gpuipc_bench.gpu.memory import l2_resident_ring

    frame, meta = read_results(ROOT / "results" / name)
    l2 = {k.split(".")[1]: int(v) for k, v in meta.items() if k.startswith("gpu.") and k.endswith(".l2_bytes")}
    assert l2 and int(meta["schema_version"]) < 3
    expected = []
    for src, dst, nbytes, batch, scenario, metric in zip(frame["src"], frame["dst"], frame["bytes"], frame["batch"],
                                                         frame["scenario"], frame["metric"]):
        gpus = [d for d in (src, dst) if d.isdigit()]
        if metric != "bandwidth" or not gpus or gpus[0] not in l2:
            expected.append(pd.NA)
        else:
            slots = 1 if scenario == "sharing" else int(batch)
            expected.append(l2_resident_ring(int(nbytes), slots, l2[gpus[0]], sides=_sides(src, dst)))
    found = l2_flags(frame, meta)["l2_resident"]
    pd.testing.assert_extension_array_equal(found.array, pd.array(expected, dtype="boolean"))


# --------------------------------------------------------------------------- robust's numpy path


def plain(monkeypatch, function, *args):
    with monkeypatch.context() as m:
        m.setattr(robust, "_NUMPY_FROM", 10 ** 9)
        return function(*args)


def same_value(a, b) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b and type(a) is type(b) and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(
    st.floats(min_value=1e-7, max_value=1e-3), st.sampled_from([0.0, -0.0, 1e-5, 2e-5, math.nan, math.inf, None]),
), min_size=robust._NUMPY_FROM - 2, max_size=300), as_array=st.booleans())
def test_fuzz_robust_numpy_path_gives_the_plain_loops_figures(monkeypatch, values, as_array):
    data = np.array([math.nan if v is None else v for v in values]) if as_array else values
    for function in (robust.median, robust.median_ci, robust.mad, robust.two_states, robust.bimodal):
        assert same_value(function(data), plain(monkeypatch, function, data)), function.__name__
    assert robust._finite(data) == plain(monkeypatch, robust._finite, data)


def test_two_states_of_many_samples_are_found_as_the_loop_finds_them(monkeypatch):
    rng = np.random.default_rng(7)
    values = np.concatenate([rng.normal(10.0, 0.001, 700), rng.normal(10.3, 0.001, 300)])  # a 3% step
    found = robust.two_states(values)
    assert found is not None and found == plain(monkeypatch, robust.two_states, values)
    assert found[1] == 0.7


def test_the_numpy_sort_keeps_signed_zeros_in_their_order(monkeypatch):
    """sorted() is stable and -0.0 == 0.0: the numpy path must sort stably too, or the list
    (and a median of zeros) comes out with other signs."""
    rng = np.random.default_rng(3)
    values = rng.permutation(np.array([0.0, -0.0] * 150 + list(rng.uniform(-1, 1, 100)))).tolist()
    assert [repr(x) for x in robust._finite(values)] == [repr(x) for x in plain(monkeypatch, robust._finite, values)]


def test_ci_rank_is_the_binomial_sum_of_math_comb():
    def direct(n, confidence):
        alpha, cdf, best = (1 - confidence) / 2, 0.0, None
        for k in range(n):
            cdf += math.comb(n, k) / 2 ** n
            if cdf > alpha:
                break
            best = k + 1
        return best

    for n in [*range(0, 80), 500, 2240]:
        for confidence in (0.9, 0.95, 0.99):
            assert robust.ci_rank(n, confidence) == direct(n, confidence), (n, confidence)


# --------------------------------------------------------------------------- end to end


def test_a_large_file_reports_the_same_through_the_fast_and_the_plain_code(tmp_path, monkeypatch):
    """scripts/make_large_results.py's file (small_run.csv 40 times over: 40 times the samples
    per condition) gives the same JSON report read and summed up the fast way or the plain way."""
    big = tmp_path / "big.csv"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_large_results.py"), str(big), "--copies", "40",
                    "--source", str(DATA / "small_run.csv")], check=True, capture_output=True)
    frame, meta = read_results(big)
    assert len(frame) == 92 * 40 and frame["node"].nunique() == 40 and "synthetic" in meta["command"]

    def report() -> str:
        result = CliRunner().invoke(cli, ["report", str(big), "--format", "json"])
        assert result.exit_code == 0, result.output
        return result.output

    fast = report()
    monkeypatch.setattr(vectorised, "parse_vectorised", lambda *args, **kwargs: None)
    monkeypatch.setattr(robust, "_NUMPY_FROM", 10 ** 9)
    assert fast == report()
    assert json.loads(fast)["runs"][0]["summary"][0]["samples"] >= 5 * 40


# --------------------------------------------------------------------------- the size limit, a large file read whole


def test_a_results_file_over_the_limit_is_refused_before_reading(no_work, monkeypatch):
    import gpuipc_bench.results.reading as results

    big = no_work / "big.txt"
    with open(big, "wb") as fh:  # sparse: the size, not the bytes
        fh.write(b"# gpuipc-bench results\n")
        fh.truncate(results.MAX_RESULTS_BYTES + 1)

    def no_read(*args, **kwargs):
        raise AssertionError("read a file it should have refused by its size")

    monkeypatch.setattr(results, "_parse_table", no_read)
    assert_refused(*invoke("report", str(big)), "big.txt", "larger than")


def test_a_large_results_file_is_read_whole(tmp_path):
    """About 100k rows (a run of the thorough sweep is a few thousand), read whole by the
    vectorised reader. How fast is a benchmark's question, not a test's: measured with
    scripts/make_large_results.py (260 MB in 9.2 s at 0.92 GB on a 2-core machine, was 109 s
    at 6.1 GB); the tests above check it reads what the per-cell parser reads."""
    text = (DATA / "small_run.csv").read_text(encoding="utf-8")
    header, _, body = text.partition("\nscenario,")
    head, rows = "scenario," + body.split("\n", 1)[0], body.split("\n", 1)[1]
    copies = max(1, 100_000 // max(1, rows.count("\n")))
    big = tmp_path / "big.csv"
    big.write_text(header + "\n" + head + "\n" + rows * copies, encoding="utf-8")
    frame, _ = read_results(big)
    assert len(frame) == rows.count("\n") * copies
