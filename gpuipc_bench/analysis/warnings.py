"""What may make a figure untrustworthy, as data (StabilityWarning: a cause and the figure it
concerns); report/causes.py words each cause once. Whether a warning could change a line
of the answer is the model's to say (model.py): the summary shows only those.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

import numpy as np
import pandas as pd

from gpuipc_bench import robust
from gpuipc_bench.analysis.conditions import ABOVE_CEILING, condition, records
from gpuipc_bench.analysis.lanes import expected_lane, lanes_by_group, wrong_lane
from gpuipc_bench.analysis.summary import BIMODAL, FEW_SAMPLES, WIDE_INTERVAL, interval_halfwidth
from gpuipc_bench.machine.lanes import PROVEN_LANES

# Causes of a warning (report/causes.py words each one once).
SLOW_FIRST_SAMPLE = "slow-first-sample"
FAILED_VERIFICATION = "failed-verification"
ABOVE_ITS_CEILING = "above-ceiling"
LOW_CLOCK = "low-clock"
WRONG_LANE = "wrong-lane"
WARNING_CAUSES = (FAILED_VERIFICATION, WRONG_LANE, ABOVE_ITS_CEILING, LOW_CLOCK, BIMODAL, WIDE_INTERVAL,
                  FEW_SAMPLES, SLOW_FIRST_SAMPLE)
MAX_FIRST_SAMPLE_RATIO = 1.5  # the first sample this much slower than the rest: warm-up missing


@dataclasses.dataclass(frozen=True)
class StabilityWarning:
    """A figure that may not be trustworthy: why (`cause`, one of WARNING_CAUSES), which figure,
    and the number behind it (`value`: the interval's half-width, the sample count, the
    first sample's ratio to the rest, the fraction of the ceiling, how far apart two states
    are; NaN where none; `share`: the lower state's share of the samples)."""

    cause: str
    scenario: str
    path: str
    variant: str
    bytes: int
    metric: str = "bandwidth"
    measure: str = ""
    src: str = ""
    dst: str = ""
    workers: int = 2
    sharing: str = ""
    value: float = math.nan
    share: float = math.nan

    @property
    def figure(self) -> tuple:
        """What identifies the figure among a run's (with its measure and link)."""
        return (self.path, self.variant, self.metric, self.measure, self.src, self.dst, self.sharing, self.bytes)


def _is_false(flag) -> bool:
    """A nullable boolean that is known and False."""
    return flag is not None and flag is not pd.NA and not bool(flag)


def above_ceiling(row) -> float:
    """How far a figure is above what bounds it, as a fraction (NaN when it is not above it):
    its ceiling at its size; where that is call-bound (a batched kernel path may beat one
    copy per call there), the ceiling at its best size, the link's asymptotic bandwidth."""
    bound = row.ceiling_peak_gbps if bool(row.call_bound) else row.ceiling_gbps
    if not (bound > 0) or not (row.median_gbps > 0):
        return math.nan
    ratio = row.median_gbps / bound
    return ratio if ratio > ABOVE_CEILING else math.nan


def stability_warnings(summary: pd.DataFrame, samples: Mapping[tuple, np.ndarray]) -> list[StabilityWarning]:
    """The warnings of a run, by cause (in WARNING_CAUSES order), then in summary order:
    failed verification, above the ceiling (above_ceiling), two states (robust.two_states),
    a wide interval (the median's 95% interval beyond +-MAX_INTERVAL; none for a setup
    operation timed fewer than 9 times, whose interval is its range and is shown as such),
    too few samples to compare, and a first sample more than MAX_FIRST_SAMPLE_RATIO x slower
    than the median of the rest."""
    found: dict[str, list[StabilityWarning]] = {cause: [] for cause in WARNING_CAUSES}

    def warn(cause: str, row, value: float = math.nan, share: float = math.nan) -> None:
        found[cause].append(StabilityWarning(
            cause, row.scenario, row.path, row.variant, int(row.bytes), metric=row.metric, measure=row.measure,
            src=row.src, dst=row.dst, workers=int(row.workers), sharing=row.sharing, value=float(value),
            share=float(share)))

    for row in records(summary):
        if _is_false(row.verified):
            warn(FAILED_VERIFICATION, row)
        over = above_ceiling(row)
        if not math.isnan(over):
            warn(ABOVE_ITS_CEILING, row, over)
        reasons = row.unstable.split(",") if row.unstable else []
        values = samples.get(condition(row), np.array([]))
        if BIMODAL in reasons:
            states = robust.two_states(values)
            warn(BIMODAL, row, *(states if states else (math.nan, math.nan)))
        if WIDE_INTERVAL in reasons:
            warn(WIDE_INTERVAL, row, interval_halfwidth(row.ci_lo_s, row.median_s, row.ci_hi_s, values))
        if FEW_SAMPLES in reasons:
            warn(FEW_SAMPLES, row, row.samples)
        # (a first sample no slower than MAX_FIRST_SAMPLE_RATIO x the fastest of the rest is not slower
        # than that x their median either: that median is then never computed)
        if row.metric != "setup" and len(values) >= 3 and values[0] > MAX_FIRST_SAMPLE_RATIO * values[1:].min():
            first, rest = values[0], float(np.median(values[1:]))
            if rest > 0 and first > MAX_FIRST_SAMPLE_RATIO * rest:
                warn(SLOW_FIRST_SAMPLE, row, first / rest)
    return [w for cause in WARNING_CAUSES for w in found[cause]]


# --------------------------------------------------------------------------- the SM clock

LOW_CLOCK_FRACTION = 0.9  # an SM-bound figure timed below this share of the application clock
# Variants whose bytes an SM moves (a copy kernel, a kernel's stores or loads, a device-initiated
# put or get): their figures scale with the SM clock. Copy-engine copies and PCIe transfers do not.
_SM_BOUND = re.compile(r"(^|-)sm($|@|-|/)|^push\b|zero-copy|^device-")
_APPLICATION = re.compile(r"application (\d+)/")


def sm_bound(variant: str) -> bool:
    return bool(_SM_BOUND.search(str(variant)))


def application_clocks(meta: Mapping[str, str]) -> dict[str, float]:
    """GPU index -> its application SM clock in MHz, from the header's 'gpu.N.clocks' line."""
    out = {}
    for key, text in meta.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "gpu" and parts[2] == "clocks":
            found = _APPLICATION.search(str(text))
            if found and float(found.group(1)) > 0:
                out[parts[1]] = float(found.group(1))
    return out


def clock_warnings(frame: pd.DataFrame, meta: Mapping[str, str]) -> list[StabilityWarning]:
    """SM-bound figures whose group started timing with the SM clock below LOW_CLOCK_FRACTION of
    the GPU's application clock (throttled: power, heat, or a clock setting): `value` is the
    clock's share of it. The clock is read once a group, through NVML, as it starts timing."""
    if "sm_clock_mhz" not in frame.columns or frame.empty:
        return []
    clocks = application_clocks(meta)
    if not clocks:
        return []
    variants = frame["variant"]
    bound = variants.isin([v for v in variants.unique() if sm_bound(v)])  # each variant's name read once
    rows = frame[(frame["metric"] != "setup") & bound & pd.to_numeric(frame["sm_clock_mhz"], errors="coerce").notna()]
    if rows.empty:
        return []
    keys = ["scenario", "path", "variant", "metric", "measure", "src", "dst", "bytes", "workers", "sharing"]
    out = []
    lowest = rows.assign(_clock=pd.to_numeric(rows["sm_clock_mhz"])).groupby(
        keys, dropna=False, sort=False)["_clock"].min()  # each group's lowest clock, groups as they first appear
    for key, clock in lowest.items():
        scenario, path, variant, metric, measure, src, dst, nbytes, workers, sharing = key
        gpu = str(src) if str(src) in clocks else str(dst)
        if gpu not in clocks:
            continue
        share = float(clock) / clocks[gpu]
        if share < LOW_CLOCK_FRACTION:
            out.append(StabilityWarning(LOW_CLOCK, str(scenario), str(path), str(variant), int(nbytes), str(metric),
                                        "" if pd.isna(measure) else str(measure), str(src), str(dst),
                                        int(workers), str(sharing), share))
    return out


# --------------------------------------------------------------------------- the lane


def lane_warnings(frame: pd.DataFrame, meta: Mapping[str, str]) -> list[StabilityWarning]:
    """Figures whose bytes the counters saw on a lane other than the one they should take
    (expected_lane): `value` is the share of its samples with a proven lane that took the wrong one.
    A figure is flagged where most of those did (a library that fell back to host memory; a
    P2P-off copy that went over NVLink); rows without a proven lane say nothing."""
    if "lane" not in frame.columns or frame.empty:
        return []
    keys = ["scenario", "path", "variant", "metric", "measure", "src", "dst", "bytes", "workers", "sharing",
            "transport"]
    wanted = (frame["metric"] == "bandwidth") & frame["lane"].isin(PROVEN_LANES)
    if not wanted.any():
        return []
    rows = frame.loc[wanted, keys + ["lane"]]  # only the columns read: the cut copies fewer
    out = []
    for key, lanes_seen in lanes_by_group(rows, keys):
        scenario, path, variant, metric, measure, src, dst, nbytes, workers, sharing, transport = key
        expected = expected_lane(str(path), str(variant), str(src), str(dst), meta)
        wrong = sum(wrong_lane(expected, seen) for seen in lanes_seen) / len(lanes_seen)
        if wrong > 0.5:
            out.append(StabilityWarning(WRONG_LANE, str(scenario), str(path), str(variant), int(nbytes), str(metric),
                                        "" if pd.isna(measure) else str(measure), str(src), str(dst),
                                        int(workers), str(sharing), wrong))
    return out
