"""The sample loop every scenario runs its measurements through (the harness owns it).

A scenario hands the sampler a group (the row fields that name what is measured) and a
`take(trial)` function that runs one sample and returns a Sample (seconds per transfer,
transfers timed together) in the worker that holds the timing, None in the others.
The sampler does the rest, the same way for every path:

  - warm-up samples (--warmup, default 1), untimed, then timed samples until the median is
    known well enough (robust.enough: at least --min-samples, the median's 95% interval
    within +-1%, at most --max-samples), so quiet groups stop at 6 and noisy ones go on; a
    group whose timed samples already add up to GROUP_BUDGET_S stops at --min-samples (a
    transfer of a quarter second, as a library's software fallback moves 256 MiB, would
    otherwise hold the run for 20 samples: its interval is still reported);
  - the transfers per sample: a group starts at its `reps` and, after the warm-up, the
    timing worker lowers it so that a sample takes about TARGET_SAMPLE_S (a time-sliced
    hand-over of ~0.3 ms would otherwise make a 128-transfer sample last 40 ms); the warm-up
    itself takes no more transfers than the same measurement's calibrated count at the size
    before (every worker remembers it from the decisions it saw), so it lasts about one
    calibrated sample, not `reps` transfers, while the calibration's cap stays `reps`;
  - agreement: the timing worker publishes (sample, reps, stop) in the mailbox after every
    sample and the others wait for it, so every worker runs the same samples;
  - a new seed for every sample (both workers derive it from the same sequence number);
  - the phase (what a hang or death report says) and the heartbeat, before every sample;
  - the rows: the group's fields, the sample's figures, and the run's (scenario, workers,
    sharing), from one place.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from typing import Callable, Iterator

from gpuipc_bench import robust
from gpuipc_bench.mig import label_ends
from gpuipc_bench.patterns import seed_for
from gpuipc_bench.results import new_row

# A sample of many transfers lasts about this long once calibrated. GPUIPC_BENCH_SAMPLE_S changes it for
# the developers' comparison of sample lengths (the figure is per transfer; the length is a method parameter).
TARGET_SAMPLE_S = float(os.environ.get("GPUIPC_BENCH_SAMPLE_S", "") or 0.005)
GROUP_BUDGET_S = 2.0  # timed seconds after which a group stops once it has --min-samples
SETUP_REPEATS = 9  # every setup operation is timed this many times, each on fresh objects (9: a 95% interval
#                     that is not the range of the samples, x(2)..x(8))
_REPS_BITS = 20  # the decision word: sample number << 20 | reps << 1 | stop
SOLO_SEEDS = 0x50105EED  # solo samples' seeds differ from the shared ones


@dataclasses.dataclass(frozen=True)
class Trial:
    """One sample to take: its number (the same in every worker), seed, transfers, and whether
    it is a warm-up (untimed: its figure is only used to calibrate reps)."""

    seq: int
    seed: int
    reps: int
    index: int  # 0-based among the group's samples, warm-ups first
    warm: bool


@dataclasses.dataclass(frozen=True)
class Sample:
    seconds: float  # per transfer (latency: one-way; setup: the operation)
    batch: int  # transfers (round trips, crossings) timed together
    verified: bool | None = True


@dataclasses.dataclass(frozen=True)
class Counts:
    warmup: int = 1
    min_samples: int = robust.MIN_SAMPLES
    max_samples: int = robust.MAX_SAMPLES

    @classmethod
    def of(cls, config) -> "Counts":
        return cls(config.warmup, config.min_samples, config.max_samples)


class Sampler:
    """One per worker; every worker of a scenario calls run() for the same groups in the same order."""

    def __init__(self, ctx, counts: Counts | None = None):
        self.ctx = ctx
        self.counts = counts or Counts.of(ctx.config)
        self.seq = 0  # samples so far, the same in every worker
        self.solo_seq = 0  # samples of groups this worker takes alone (its own count: seeds apart)
        self.samples = 0  # timed samples this worker recorded (for the note at the end)
        self.group_clock = math.nan  # the SM clock (MHz) as the current group started timing
        # (path, variant, measure, metric, src, dst, solo) -> the transfers per sample the last
        # group of that measurement settled on: the next size's warm-up takes no more
        self.settled: dict[tuple, int] = {}

    def run(self, group: dict, take: Callable[[Trial], Sample | None], *, timer: bool, reps: int = 1,
            solo: bool = False, calibrate: bool = True, min_reps: int = 1, phase: str = "sample",
            counts: Counts | None = None) -> Iterator[dict]:
        """Warm up, then sample until the stop rule says enough; yield one row per timed sample
        (from the timing worker). `solo`: only this worker takes part (a ceiling measured alone)."""
        counts = counts or self.counts
        nbytes = int(group.get("bytes", 0))
        # What the progress line and a hang report name: the ceiling, or path/variant measure.
        label = str(group.get("variant", "")) if phase == "ceiling" else \
            f"{group.get('path', '')}/{group.get('variant', '')} {group.get('measure', '')}".strip()
        values: list[float] = []
        timed = 0.0  # seconds of timed transfers so far (the group's budget)
        index = 0
        warm_left = counts.warmup
        cap = reps  # the calibration's ceiling: the group's own count
        memory = (group.get("path"), group.get("variant"), group.get("measure"), group.get("metric"),
                  str(group.get("src")), str(group.get("dst")), solo)
        if calibrate and warm_left and memory in self.settled:
            reps = max(min(min_reps, cap), min(cap, self.settled[memory]))
        self.group_clock = math.nan
        while True:
            warm = warm_left > 0
            self.ctx.phase("warmup" if warm else phase, nbytes, index, label=label)
            if solo:
                self.solo_seq += 1
                trial = Trial(self.solo_seq, seed_for(self.solo_seq) ^ SOLO_SEEDS, reps, index, warm)
            else:
                self.seq += 1
                trial = Trial(self.seq, seed_for(self.seq), reps, index, warm)
            sample = take(trial)
            stop = False
            if timer:
                if sample is None:
                    raise RuntimeError("the timing worker's take() returned no sample")
                if warm:
                    warm_left -= 1
                    if calibrate and warm_left == 0:
                        reps = calibrated(sample, cap, min_reps)
                else:
                    clock = getattr(self.ctx, "clock", None)
                    if not values and clock is not None:  # the SM clock once a group, as it starts timing
                        self.group_clock = clock()
                    values.append(sample.seconds)
                    timed += sample.seconds * sample.batch
                    stop = robust.enough(values, counts.min_samples, counts.max_samples) or (
                        len(values) >= counts.min_samples and timed >= GROUP_BUDGET_S)
                    self.samples += 1
                    yield self.row(group, sample, len(values) - 1)
                if not solo:
                    self.ctx.store("sampler", (self.seq << _REPS_BITS) | (reps << 1) | int(stop))
            elif not solo:
                self.ctx.wait("sampler", self.seq << _REPS_BITS, what="the timing worker's decision")
                word = self.ctx.load("sampler")
                reps, stop = (word >> 1) & ((1 << (_REPS_BITS - 1)) - 1), bool(word & 1)
                warm_left = max(0, warm_left - 1) if warm else warm_left
            else:
                raise ValueError("a solo group is taken by its timing worker")
            index += 1
            if stop:
                if calibrate:
                    self.settled[memory] = reps  # the same in every worker: from the decision words
                return

    def row(self, group: dict, sample: Sample, iteration: int) -> dict:
        """The row of one timed sample. A group's `l2_resident` may be a function of the
        sample's batch (gpu.memory.L2Check): each row then says whether its own ring could stay
        in L2, from the transfers this sample really timed (after calibration)."""
        fields = {**self.ctx.row_fields, **group, "iteration": iteration, "batch": sample.batch,
                  "seconds": sample.seconds, "verified": sample.verified, "seq": next(_SEQ),
                  "sm_clock_mhz": self.group_clock if group.get("metric") != "setup" else math.nan}
        if str(fields.get("sharing")).partition("+")[0] != "mps":  # a row of the group's own kind ('none': CPU only)
            fields.pop("mps_thread_pct", None)
        if callable(fields.get("l2_resident")):
            fields["l2_resident"] = fields["l2_resident"](sample.batch)
        return new_row(**label_ends(fields, getattr(self.ctx, "spec", None)))


_SEQ = itertools.count()  # rows in the order this process took them (the CSV's `seq`: drift over a run)


def calibrated(sample: Sample, reps: int, min_reps: int = 1) -> int:
    """Transfers per sample so that one takes about TARGET_SAMPLE_S, never more than `reps`."""
    per = sample.seconds
    if not per > 0 or not math.isfinite(per):
        return reps
    return max(min(min_reps, reps), min(reps, int(TARGET_SAMPLE_S / per)))
