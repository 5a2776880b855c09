"""The low-clock warning: an SM-bound figure whose group started timing with the SM
clock under 90% of the GPU's application clock is flagged, with the share; a copy-engine figure
is not (its speed does not follow the SM clock); without clocks in the header, nothing."""

from __future__ import annotations

from pathlib import Path

from gpuipc_bench.analysis.model import analyse
from gpuipc_bench.analysis.warnings import LOW_CLOCK, application_clocks, clock_warnings, sm_bound
from gpuipc_bench.report.wording import warning_lines
from gpuipc_bench.results import read_results

RUN = Path(__file__).resolve().parents[1] / "results" / "h200x2-nvshmem-pair.csv"


def _throttled():
    frame, meta = read_results(RUN)
    slow = (frame["bytes"] == 256 << 20) & frame["variant"].isin(["device-put", "put"])
    frame.loc[slow, "sm_clock_mhz"] = 1400.0
    return frame, meta


def test_which_variants_an_sm_moves():
    assert all(map(sm_bound, ["sm", "push", "zero-copy", "device-put", "device-putsig", "d2d-sm@0",
                              "peer-sm@0>1/producer"]))
    assert not any(map(sm_bound, ["ce", "put", "get", "pinned", "pinned-hostsync", "d2d@0", "peer@0>1/producer",
                                  "ce-pingpong", "write-from-dram", "sharing"]))


def test_a_throttled_sm_figure_is_flagged_and_a_copy_engine_one_is_not():
    frame, meta = _throttled()
    assert application_clocks(meta) == {"0": 1980.0, "1": 1980.0}
    found = clock_warnings(frame, meta)
    assert [(w.variant, w.bytes) for w in found] == [("device-put", 256 << 20)]
    assert abs(found[0].value - 1400 / 1980) < 1e-9 and found[0].cause == LOW_CLOCK
    text = " ".join(" ".join(line) for line in warning_lines(found))
    assert "SM clock" in text and "nvshmem/device-put 256 MiB" in text and "71% of its application clock" in text


def test_the_run_as_measured_has_no_low_clock_and_the_analysis_carries_it():
    frame, meta = read_results(RUN)
    assert clock_warnings(frame, meta) == []  # 1980 MHz throughout on that H200 pair
    assert [w.cause for w in analyse(*_throttled()).warnings].count(LOW_CLOCK) == 1


def test_without_the_application_clock_nothing_is_said():
    frame, meta = _throttled()
    meta = {k: v for k, v in meta.items() if not k.endswith(".clocks")}
    assert clock_warnings(frame, meta) == []
