"""Summary statistics and stability warnings, on hand-made frames."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from gpuipc_bench.results import empty_frame, new_row, typed_frame
from gpuipc_bench.stats import SUMMARY_COLUMNS, StabilityWarning, stability_warnings, summarize

MIB = 1 << 20


def frame(rows: list[dict]) -> pd.DataFrame:
    return typed_frame(pd.DataFrame.from_records(rows))


def samples(seconds, **fields) -> list[dict]:
    base = dict(scenario="ipc", path="ipc", variant="ce", src=0, dst=0, bytes=MIB, workers=2,
                sharing="time-sliced", verified=True)
    base.update(fields)
    return [new_row(iteration=i, seconds=s, **base) for i, s in enumerate(seconds)]


def ceiling(gbps, nbytes=MIB, variant="d2d@0") -> list[dict]:
    return [
        new_row(scenario="ceiling", path="ceiling", variant=variant, src=0, dst=0, bytes=nbytes,
                iteration=i, seconds=nbytes / g / 1e9, bandwidth_gbps=g, verified=True,
                workers=1, sharing="exclusive")
        for i, g in enumerate(gbps)
    ]


IPC_SECONDS = [10e-6, 11e-6, 12e-6, 13e-6, 30e-6, 9e-6, 10.5e-6]


def test_summarize_numbers_on_a_hand_made_frame():
    df = frame(samples(IPC_SECONDS, ceiling="d2d@0") + ceiling([100.0, 200.0, 300.0]))
    summary = summarize(df)
    assert list(summary.columns) == list(SUMMARY_COLUMNS)
    ipc = summary[summary["path"] == "ipc"].iloc[0]

    secs = np.array(IPC_SECONDS)
    gbps = MIB / secs / 1e9
    assert ipc["samples"] == 7
    assert ipc["median_s"] == pytest.approx(11e-6)
    assert ipc["p5_s"] == pytest.approx(np.percentile(secs, 5))
    assert ipc["p95_s"] == pytest.approx(np.percentile(secs, 95))
    assert ipc["iqr_s"] == pytest.approx(np.percentile(secs, 75) - np.percentile(secs, 25))
    assert ipc["cv"] == pytest.approx(secs.std(ddof=1) / secs.mean())
    assert ipc["median_gbps"] == pytest.approx(np.median(gbps))
    assert ipc["p5_gbps"] == pytest.approx(np.percentile(gbps, 5))
    assert ipc["p95_gbps"] == pytest.approx(np.percentile(gbps, 95))
    assert bool(ipc["verified"]) is True
    assert ipc["ceiling_gbps"] == pytest.approx(200.0)
    assert ipc["fraction_of_ceiling"] == pytest.approx(np.median(gbps) / 200.0)


def test_ceiling_is_matched_by_variant_and_size_only():
    df = frame(
        samples([1e-5] * 5, ceiling="d2d@0")
        + samples([1e-3] * 5, bytes=64 * MIB, ceiling="d2d@0")
        + ceiling([50.0] * 3, variant="h2d@0")  # another ceiling: ignored
        + ceiling([80.0] * 3, nbytes=64 * MIB)  # same ceiling, other size
    )
    summary = summarize(df)
    ipc = summary[summary["path"] == "ipc"].set_index("bytes")
    assert math.isnan(ipc.loc[MIB, "ceiling_gbps"])
    assert math.isnan(ipc.loc[MIB, "fraction_of_ceiling"])
    assert ipc.loc[64 * MIB, "ceiling_gbps"] == pytest.approx(80.0)
    ceilings = summary[summary["path"] == "ceiling"]
    assert ceilings["ceiling_gbps"].isna().all()


def test_latency_and_setup_rows_have_no_bandwidth():
    df = frame(
        samples([2e-6, 2.1e-6, 2.2e-6, 2e-6, 2e-6], metric="latency", bytes=8, variant="host-driven")
        + [new_row(scenario="ipc", path="ipc", variant="ipc_open_cold", metric="setup", bytes=MIB,
                   seconds=1.4e-4, src=0, dst=0, workers=2, sharing="time-sliced")]
    )
    summary = summarize(df)
    assert summary["median_gbps"].isna().all()
    setup = summary[summary["metric"] == "setup"].iloc[0]
    assert setup["samples"] == 1 and setup["median_s"] == pytest.approx(1.4e-4)
    assert pd.isna(setup["verified"])
    assert math.isnan(setup["cv"])
    latency = summary[summary["metric"] == "latency"].iloc[0]
    assert latency["median_s"] == pytest.approx(2e-6)


def test_verified_is_false_when_any_sample_failed():
    rows = samples([1e-5] * 5)
    rows[3]["verified"] = False
    assert bool(summarize(frame(rows)).iloc[0]["verified"]) is False


def test_groups_are_kept_apart_and_ordered_by_path_variant_bytes():
    df = frame(
        ceiling([100.0] * 5)
        + samples([1e-5] * 5, bytes=64 * MIB, variant="sm")
        + samples([1e-5] * 5, bytes=MIB, variant="sm")
        + samples([1e-5] * 5, bytes=MIB, variant="ce")
        + samples([1e-5] * 5, bytes=MIB, variant="ce", src=1, dst=0)
        + samples([1e-5] * 5, scenario="staging", path="staging", variant="pinned")
    )
    summary = summarize(df)
    assert list(zip(summary["path"], summary["variant"], summary["bytes"], summary["src"])) == [
        ("staging", "pinned", MIB, "0"),
        ("ipc", "sm", MIB, "0"),
        ("ipc", "sm", 64 * MIB, "0"),
        ("ipc", "ce", MIB, "0"),
        ("ipc", "ce", MIB, "1"),
        ("ceiling", "d2d@0", MIB, "0"),
    ]
    assert (summary["samples"] == 5).all()


def test_empty_frame_gives_empty_summary_with_columns():
    summary = summarize(empty_frame())
    assert summary.empty and list(summary.columns) == list(SUMMARY_COLUMNS)
    assert stability_warnings(empty_frame(), summary) == []


# --------------------------------------------------------------------------- warnings


def test_steady_samples_give_no_warning():
    df = frame(samples([10e-6, 10.1e-6, 9.9e-6, 10e-6, 10.2e-6, 9.8e-6]))
    assert stability_warnings(df, summarize(df)) == []


def test_high_cv_warns_with_its_value():
    secs = [10e-6, 12e-6, 8e-6, 14e-6, 9e-6, 11e-6]
    df = frame(samples(secs))
    warnings = stability_warnings(df, summarize(df))
    cv = np.std(secs, ddof=1) / np.mean(secs)
    assert cv > 0.10
    assert warnings == [
        StabilityWarning("ipc", "ipc", "ce", MIB, f"unstable: CV {cv:.0%}",
                         "try more --iterations or a quieter machine", metric="bandwidth", src="0", dst="0")
    ]
    assert warnings[0].message == "unstable: CV 20%"


def test_few_samples_warn():
    df = frame(samples([10e-6, 10e-6, 10e-6]))
    (w,) = stability_warnings(df)
    assert (w.message, w.hint) == ("only 3 samples", "try --iterations 20")
    (w,) = stability_warnings(frame(samples([10e-6])))
    assert w.message == "only 1 sample"


def warmup_warnings(rows: list[dict]) -> list[StabilityWarning]:
    return [w for w in stability_warnings(frame(rows)) if w.hint == "try more --warmup"]


def test_slow_first_sample_warns_about_warmup():
    (w,) = warmup_warnings(samples([17e-6] + [10e-6] * 15))
    assert w.message == "first sample 1.7x slower than the rest"


def test_first_sample_means_lowest_iteration_not_first_row():
    rows = samples([17e-6] + [10e-6] * 15)
    rows.reverse()
    assert len(warmup_warnings(rows)) == 1
    assert warmup_warnings(samples([14e-6] + [10e-6] * 15)) == []  # 1.4x: under the 1.5x threshold
    assert warmup_warnings(samples([10e-6] * 15 + [17e-6])) == []  # a slow last sample is not warm-up


def test_setup_rows_never_warn():
    rows = [new_row(path="ipc", variant="ipc_open_cold", metric="setup", seconds=s, iteration=i)
            for i, s in enumerate([5e-3, 1e-4])]
    assert stability_warnings(frame(rows)) == []
