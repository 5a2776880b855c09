"""The causes of a warning and their words, one record each: the report's line for the cause
(`title`, `advice`), the few words the count line and the tables use (`short`), the short form
with the warning's number (`with_value`) and how that number is shown (`value`). Which figures
a cause concerns is detected in analysis/warnings.py; a new cause is a name and its detection
there and one `Cause` here (report/wording.py and the renderers read CAUSES).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gpuipc_bench.analysis.conditions import ABOVE_CEILING
from gpuipc_bench.analysis.summary import BIMODAL, FEW_SAMPLES, MAX_INTERVAL, MIN_SAMPLES, WIDE_INTERVAL
from gpuipc_bench.analysis.warnings import (
    ABOVE_ITS_CEILING,
    FAILED_VERIFICATION,
    LOW_CLOCK,
    LOW_CLOCK_FRACTION,
    SLOW_FIRST_SAMPLE,
    WRONG_LANE,
    StabilityWarning,
)


def no_value(w: StabilityWarning) -> str:
    return ""


@dataclasses.dataclass(frozen=True)
class Cause:
    """One cause of a warning. `title`: what its line in the report says ('bytes wrong in some
    samples'); `advice`: one sentence on what it means and what to do; `short`: a few words
    ('bytes wrong'), in the count line, the tables' flags and the short form without a number;
    `with_value`: the short form with the warning's number ('{value}' stands for it); `value`:
    the number as text (called only where the warning has one)."""

    key: str
    title: str
    advice: str
    short: str
    with_value: str = "{value}"
    value: Callable[[StabilityWarning], str] = no_value


# In the order the report lists them.
CAUSES: dict[str, Cause] = {c.key: c for c in (
    Cause(FAILED_VERIFICATION, "bytes wrong in some samples",
          "the figure is not trustworthy and is left out of the answer; rerun, and report it if it persists",
          short="bytes wrong"),
    Cause(WRONG_LANE, "bytes went over a lane other than the path's",
          "NVML's byte counters saw them on another lane (a library that fell back to host memory, a copy "
          "that should stage through host memory going over NVLink): the figure is of that lane, not of the "
          "path; check the transport the library chose and peer access",
          short="wrong lane", with_value="wrong lane {value}",
          value=lambda w: f"in {w.value:.0%} of samples"),
    Cause(ABOVE_ITS_CEILING, f"more than {ABOVE_CEILING - 1:.0%} above what bounds it",
          "a cache effect (buffers resident in L2) or a timing error, not a property of the path; "
          "compare with larger sizes",
          short="above the ceiling", with_value="{value} of its bound",
          value=lambda w: f"{w.value:.0%}"),  # always above 100%: whole percents
    Cause(LOW_CLOCK, f"an SM-bound figure timed below {LOW_CLOCK_FRACTION:.0%} of the application SM clock",
          "the GPU was throttled (power, heat) or clocked down as the group started: a kernel copy's figure "
          "scales with the clock; see nvidia-smi -q -d PERFORMANCE and rerun on a quiet, cool GPU",
          short="low SM clock", with_value="SM clock {value}",
          value=lambda w: f"{w.value:.0%} of its application clock"),
    Cause(BIMODAL, "samples in two states",
          "each sample sits on one of two levels (often one more time-slice switch per sample); the median "
          "is on the more common one and the comparison uses the whole range, so nothing to do unless the "
          "figure is close to the leader",
          short="two states", with_value="two states {value}",
          value=lambda w: f"{w.value:.1%} apart, {w.share:.0%}/{1 - w.share:.0%}"),
    Cause(WIDE_INTERVAL, f"the median's 95% interval is wider than ±{MAX_INTERVAL:.0%}",
          "the figure is noisy; it is still ranked with its spread, and only matters where it reaches "
          "the leader: then rerun with more --max-samples or on a quieter machine",
          short="wide interval", value=lambda w: f"±{w.value:.0%}"),
    Cause(FEW_SAMPLES, f"fewer than {MIN_SAMPLES} samples",
          "too few to tell it from anything; rerun with more --min-samples",
          short="few samples", value=lambda w: f"n={int(w.value)}"),
    Cause(SLOW_FIRST_SAMPLE, "first sample much slower than the rest",
          "warm-up was short: the median is robust to it, but try more --warmup",
          short="slow first sample", with_value="slow first sample {value}",
          value=lambda w: f"{w.value:.1f}×"),
)}


def cause_of(key: str) -> Cause:
    """The registered cause, or one worded by its key alone (a cause without words yet)."""
    return CAUSES.get(key) or Cause(key, key, "", key)
