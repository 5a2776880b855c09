"""The summary, the stability warnings and the comparison of runs, on hand-made frames."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from gpuipc_bench import robust
from gpuipc_bench.analysis import (
    ABOVE_ITS_CEILING,
    BIMODAL,
    FAILED_VERIFICATION,
    FEW_SAMPLES,
    SLOW_FIRST_SAMPLE,
    SUMMARY_COLUMNS,
    WIDE_INTERVAL,
    analyse,
    compare,
    samples_by_condition,
    stability_warnings,
    summarize,
)
from gpuipc_bench.results import empty_frame, new_row, typed_frame

MIB = 1 << 20


def frame(rows: list[dict]) -> pd.DataFrame:
    return typed_frame(pd.DataFrame.from_records(rows))


def samples(seconds, **fields) -> list[dict]:
    base = {"scenario": "ipc", "path": "ipc", "variant": "ce", "measure": "stream", "src": 0, "dst": 0, "bytes": MIB,
            "workers": 2, "sharing": "time-sliced", "verified": True}
    base.update(fields)
    return [new_row(iteration=i, seconds=s, **base) for i, s in enumerate(seconds)]


def ceiling(gbps, nbytes=MIB, variant="d2d@0", scenario="ipc", sharing="time-sliced") -> list[dict]:
    return [new_row(scenario=scenario, path="ceiling", variant=variant, measure="stream", src=0, dst=0, bytes=nbytes,
                    iteration=i, seconds=nbytes / g / 1e9, verified=True, workers=1, sharing=sharing)
            for i, g in enumerate(gbps)]


def warnings_of(rows: list[dict]):
    df = frame(rows)
    found = samples_by_condition(df)
    return stability_warnings(summarize(df, found), found)


STEADY = [10e-6 * (1 + 0.001 * k) for k in (0, 3, -2, 1, -1, 2, 0, -3, 1, 2)]


# --------------------------------------------------------------------------- summary


def test_summary_has_the_median_its_interval_and_the_robust_spread():
    secs = [10.0e-6, 10.1e-6, 10.2e-6, 10.3e-6, 30e-6, 9.9e-6, 10.15e-6, 10.25e-6]
    df = frame(samples(secs, ceiling="d2d@0") + ceiling([100.0, 200.0, 300.0]))
    summary = summarize(df)
    assert list(summary.columns) == list(SUMMARY_COLUMNS)
    ipc = summary[summary["path"] == "ipc"].iloc[0]
    lo, med, hi = robust.median_ci(secs)
    assert ipc["samples"] == 8
    assert (ipc["ci_lo_s"], ipc["median_s"], ipc["ci_hi_s"]) == pytest.approx((lo, med, hi))
    assert ipc["mad_rel"] == pytest.approx(robust.mad(secs) / med)
    # GB/s is the time's figure inverted, interval ends swapped: the two always agree
    assert ipc["median_gbps"] == pytest.approx(MIB / med / 1e9)
    assert (ipc["ci_lo_gbps"], ipc["ci_hi_gbps"]) == pytest.approx((MIB / hi / 1e9, MIB / lo / 1e9))
    assert ipc["ceiling_gbps"] == pytest.approx(200.0)
    assert ipc["fraction_of_ceiling"] == pytest.approx(ipc["median_gbps"] / 200.0)
    assert bool(ipc["verified"]) and not ipc["bimodal"]


def test_below_six_samples_there_is_no_interval():
    summary = summarize(frame(samples([1e-5, 1.01e-5, 0.99e-5, 1e-5, 1e-5])))
    row = summary.iloc[0]
    assert math.isnan(row["ci_lo_s"]) and math.isnan(row["ci_hi_s"]) and row["median_s"] == pytest.approx(1e-5)
    assert row["unstable"] == ""  # 5 samples within 1%: enough to rank


def test_unstable_says_why():
    few = samples([1e-5] * 2, bytes=4)
    bimodal = samples([1.00e-5] * 8 + [1.10e-5] * 8, bytes=16)
    wide = samples([1e-5 * (1 + 0.2 * math.sin(k)) for k in range(12)], bytes=64)
    summary = summarize(frame(few + bimodal + wide)).set_index("bytes")
    assert summary.loc[4, "unstable"] == FEW_SAMPLES
    assert summary.loc[16, "unstable"] == BIMODAL and bool(summary.loc[16, "bimodal"])
    assert WIDE_INTERVAL in summary.loc[64, "unstable"]


def test_one_stray_sample_moves_neither_the_median_nor_the_interval_much():
    secs = STEADY * 2
    secs[5] = 40e-6  # one sample 4x slower (the CV would be ~60%)
    summary = summarize(frame(samples(secs)))
    row = summary.iloc[0]
    assert row["unstable"] == "" and row["mad_rel"] < 0.01
    assert warnings_of(samples(secs)) == []


def test_ceiling_is_the_same_scenario_and_sharing_mode_never_pooled():
    df = frame(
        samples([1e-5] * 6, ceiling="d2d@0", sharing="mps", scenario="sharing", path="sharing", variant="d2d",
                workers=1)
        + samples([1e-5] * 6, ceiling="d2d@0")
        + ceiling([100.0] * 6, scenario="ipc", sharing="time-sliced")
        + ceiling([300.0] * 6, scenario="sharing", sharing="mps")
        + ceiling([900.0] * 6, scenario="sharing", sharing="time-sliced")
    )
    summary = summarize(df)
    got = dict(zip(summary["path"] + "/" + summary["sharing"], summary["ceiling_gbps"]))
    assert got["ipc/time-sliced"] == pytest.approx(100.0)
    assert got["sharing/mps"] == pytest.approx(300.0)


def test_ceiling_of_a_ceiling_only_scenario_and_none_at_other_sizes():
    df = frame(samples([1e-5] * 6, ceiling="d2d@0") + samples([1e-3] * 6, bytes=64 * MIB, ceiling="d2d@0")
               + ceiling([80.0] * 6, nbytes=64 * MIB, scenario="ceiling", sharing="exclusive"))
    ipc = summarize(df).query("path == 'ipc'").set_index("bytes")
    assert math.isnan(ipc.loc[MIB, "ceiling_gbps"])
    assert ipc.loc[64 * MIB, "ceiling_gbps"] == pytest.approx(80.0)


def test_aggregates_get_no_ceiling():
    rows = samples([2e-4] * 6, scenario="sharing", path="sharing", variant="d2d-aggregate", bytes=2 * 64 * MIB,
                   ceiling="d2d@0", workers=2)
    df = frame(rows + ceiling([1400.0] * 6, nbytes=2 * 64 * MIB, scenario="sharing")
               + ceiling([1400.0] * 6, nbytes=64 * MIB, scenario="sharing"))
    row = summarize(df).query("path == 'sharing'").iloc[0]
    assert math.isnan(row["ceiling_gbps"]) and math.isnan(row["fraction_of_ceiling"])


def test_conditions_stay_apart_and_in_path_order():
    df = frame(
        ceiling([100.0] * 5)
        + samples([1e-5] * 5, variant="sm")
        + samples([1e-5] * 5, measure="handoff")
        + samples([1e-5] * 5)
        + samples([1e-5] * 5, sharing="mps")
        + samples([1e-5] * 5, scenario="staging", path="staging", variant="pinned", measure="handoff")
    )
    summary = summarize(df)
    assert list(zip(summary["path"], summary["variant"], summary["measure"], summary["sharing"])) == [
        ("staging", "pinned", "handoff", "time-sliced"),
        ("ipc", "sm", "stream", "time-sliced"),
        ("ipc", "ce", "handoff", "time-sliced"),
        ("ipc", "ce", "stream", "mps"),
        ("ipc", "ce", "stream", "time-sliced"),
        ("ceiling", "d2d@0", "stream", "time-sliced"),
    ]


def test_setup_and_latency_rows_have_no_bandwidth_and_an_interval_from_six_samples():
    df = frame(
        samples([2e-6, 2.1e-6, 2.2e-6, 2e-6, 2e-6, 2.05e-6], metric="latency", bytes=8, variant="host-driven",
                measure="pingpong")
        + [new_row(scenario="ipc", path="ipc", variant="ipc_open_cold", metric="setup", bytes=MIB,
                   seconds=s, iteration=i, src=0, dst=0, workers=2) for i, s in enumerate([1.4e-4, 1.5e-4] * 3)]
    )
    summary = summarize(df)
    assert summary["median_gbps"].isna().all() and summary["ci_lo_gbps"].isna().all()
    setup = summary[summary["metric"] == "setup"].iloc[0]
    assert setup["samples"] == 6 and setup["ci_lo_s"] == pytest.approx(1.4e-4) and pd.isna(setup["verified"])


def test_empty_frame_gives_an_empty_summary_with_its_columns():
    summary = summarize(empty_frame())
    assert summary.empty and list(summary.columns) == list(SUMMARY_COLUMNS)
    assert stability_warnings(summary, {}) == []


# --------------------------------------------------------------------------- warnings


def test_steady_samples_give_no_warning():
    assert warnings_of(samples(STEADY)) == []


def test_warnings_name_their_cause_and_value():
    rows = (samples([1e-5] * 2, bytes=4)
            + samples([1.00e-5] * 8 + [1.10e-5] * 8, bytes=16)
            + samples([17e-6] + [10e-6] * 15, bytes=64)
            + samples(STEADY, bytes=256, verified=False))
    rows[-1]["verified"] = False
    found = {(w.cause, w.bytes): w for w in warnings_of(rows)}
    assert found[(FEW_SAMPLES, 4)].value == 2
    # two states, described: how far apart and how the samples split between them
    assert found[(BIMODAL, 16)].value == pytest.approx(0.10) and found[(BIMODAL, 16)].share == pytest.approx(0.5)
    assert found[(SLOW_FIRST_SAMPLE, 64)].value == pytest.approx(1.7)
    assert (FAILED_VERIFICATION, 256) in found
    causes = [w.cause for w in warnings_of(rows)]
    assert causes == sorted(causes, key=[FAILED_VERIFICATION, ABOVE_ITS_CEILING, BIMODAL, WIDE_INTERVAL,
                                         FEW_SAMPLES, SLOW_FIRST_SAMPLE].index)


def test_a_figure_above_its_ceiling_warns():
    rows = samples([MIB / 120e9] * 6, ceiling="d2d@0") + ceiling([100.0] * 6)
    (w,) = warnings_of(rows)
    assert w.cause == ABOVE_ITS_CEILING and w.value == pytest.approx(1.2)


def test_setup_rows_of_one_sample_warn_but_never_about_warm_up():
    rows = [new_row(path="ipc", variant="ipc_open_cold", metric="setup", seconds=s, iteration=i)
            for i, s in enumerate([5e-3, 1e-4])]
    causes = [w.cause for w in warnings_of(rows)]
    assert FEW_SAMPLES in causes and SLOW_FIRST_SAMPLE not in causes


def test_a_setup_operation_timed_fewer_than_nine_times_is_not_called_a_wide_interval():
    # its "95% interval" would be its range: one slow cold call is not instability
    six = [new_row(path="ipc", variant="ipc_open_cold", metric="setup", seconds=s, iteration=i)
           for i, s in enumerate([3e-4, 1e-4, 1e-4, 1.02e-4, 0.99e-4, 1e-4])]
    assert warnings_of(six) == []
    nine = [new_row(path="ipc", variant="ipc_open_cold", metric="setup", seconds=s, iteration=i)
            for i, s in enumerate([1e-4 * (1 + 0.1 * k) for k in range(9)])]
    assert [w.cause for w in warnings_of(nine)] == [WIDE_INTERVAL]


# --------------------------------------------------------------------------- comparing runs


def summary_of(rows):
    return summarize(frame(rows))


def test_compare_gives_ratios_with_the_range_the_intervals_allow():
    first = summary_of(samples(STEADY))
    faster = summary_of(samples([s / 2 for s in STEADY]))
    out = compare([first, faster])
    (row,) = out.itertuples()
    assert row.ratio == pytest.approx(2.0)  # GB/s doubled
    assert row.ratio_lo < 2.0 < row.ratio_hi and row.ratio_lo > 1.9


def test_compare_keeps_time_sliced_and_mps_apart():
    run1 = summary_of(samples(STEADY, sharing="time-sliced") + samples([s * 2 for s in STEADY], sharing="mps"))
    run2 = summary_of(samples(STEADY, sharing="time-sliced") + samples(STEADY, sharing="mps"))
    out = compare([run1, run2]).set_index("sharing")
    assert len(out) == 2
    assert out.loc["time-sliced", "ratio"] == pytest.approx(1.0)
    assert out.loc["mps", "ratio"] == pytest.approx(2.0)


def test_compare_keeps_measures_and_worker_counts_apart_and_one_sided_rows():
    run1 = summary_of(samples(STEADY) + samples(STEADY, measure="handoff") + samples(STEADY, workers=4))
    run2 = summary_of(samples(STEADY) + samples(STEADY, variant="sm"))
    out = compare([run1, run2])
    assert len(out) == 4
    assert out["other_s"].isna().sum() == 2 and out["base_s"].isna().sum() == 1


def test_compare_needs_two_runs():
    with pytest.raises(ValueError):
        compare([summary_of(samples(STEADY))])


def test_analyse_reads_the_schema_and_the_path_facts():
    df = frame(samples(STEADY))
    assert analyse(df, {"schema_version": "1"}).schema == 1
    analysis = analyse(df, {"schema_version": "2"})
    assert analysis.schema == 2 and analysis.paths["staging"].role == "baseline"
    assert len(analysis.summary) == 1 and analysis.warnings == []
    assert analysis.answer.decisions == ()  # one figure: nothing to compare
    assert np.array_equal(next(iter(analysis.samples.values())), np.array(STEADY))


@pytest.mark.parametrize("joint, bound", [("+", 1 / (1 / 50.0 + 1 / 40.0)), ("|", 40.0)])
def test_a_two_hop_ceiling_is_its_hops_in_sequence_or_the_slower_hop(joint, bound):
    """'a+b': the hops run one after the other (one whole message in flight); 'a|b': they may
    overlap (chunks, or several messages in flight)."""
    rows = (samples([1e-5] * 6, scenario="staging", path="staging", variant="pinned", measure="handoff",
                    ceiling=f"d2h@0{joint}h2d@0")
            + ceiling([50.0] * 6, variant="d2h@0", scenario="staging")
            + ceiling([40.0] * 6, variant="h2d@0", scenario="staging"))
    row = summarize(frame(rows)).query("path == 'staging'").iloc[0]
    assert row["ceiling_gbps"] == pytest.approx(bound)
