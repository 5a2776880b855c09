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
    itself moves no more bytes than one calibrated sample of the same measurement at the size
    before (every worker remembers its count from the decisions it saw), so it lasts about one
    calibrated sample or less, not `reps` transfers, while the calibration's cap stays `reps`;
  - agreement: the timing worker publishes (sample, reps, stop) in the mailbox after every
    sample and the others wait for it, so every worker runs the same samples;
  - a new seed for every sample (both workers derive it from the same sequence number), salted by
    the scenario and its workers' GPUs: the scenarios of one process run their samples with seeds
    of their own, so a buffer that another scenario of the process left (CuPy's pool, the kept
    pinned buffers) never holds the bytes a sample expects;
  - the phase (what a hang or death report says) and the heartbeat, before every sample;
  - the rows: the group's fields, the sample's figures, and the run's (scenario, workers,
    sharing), from one place.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import random
import zlib
from typing import TYPE_CHECKING, Callable, Iterator

from gpuipc_bench import defaults, robust
from gpuipc_bench.machine.mig import label_ends
from gpuipc_bench.patterns import seed_for
from gpuipc_bench.gpu.device import warming
from gpuipc_bench.hooks.profiling import mark
from gpuipc_bench.results import AGGREGATE_SUFFIX, base_mode, new_row

from gpuipc_bench.machine.lanes import LaneWindow

if TYPE_CHECKING:
    from gpuipc_bench.machine.lanes import LaneMeter

# A sample of many transfers lasts about this long once calibrated. GPUIPC_BENCH_SAMPLE_S changes it for
# the developers' comparison of sample lengths (the figure is per transfer; the length is a method parameter).
# 2.5 ms: on one H200 a default run took 37.1 s against 44.0 s at 5 ms with MAX_REPS 256, its stream
# figures at 256 MiB within 0.3% and its decisions' classes unchanged (results/h200-sample-length.txt).
TARGET_SAMPLE_S = float(os.environ.get("GPUIPC_BENCH_SAMPLE_S", "") or 0.0025)
GROUP_BUDGET_S = 2.0  # timed seconds after which a group stops once it has --min-samples
BEATEN_BY = 0.02  # a group whose every sample is slower than every sample of a rival (and its median by more
#                   than this) has its answer, slower: it stops at --min-samples (the verdict's own effect size)
# A group whose every sample is more than FAR_BEHIND times the best figure known at its size (a rival's median,
# or the median of a group of an earlier scenario of the run in the same sharing mode, between the same ends:
# RunConfig.known_best) is decided slower after FAR_SAMPLES samples, whatever --min-samples says (not where the
# count is fixed, -n: exactly N samples, as asked): no further sample can make it the choice or a tie (the pinned
# host paths at 64-256 MiB are 25-50x behind the device paths on one GPU: 6-9 samples each cost seconds).
# 2x, measured against 5x: at 5x every runner-up gets --min-samples (the farthest, the time-sliced hand-off at
# 1 MiB, is 4.2-4.6x behind its choice), and in the three process sets of a -n 20 --replicas 3 run the median of
# a runner-up's first 3 samples put 3 of 87 runner-up ratios outside that run's own intervals widened by delta,
# where the first 6 put none (results/h200-falling-reference-3x20.csv.gz). In default runs it bought nothing
# measurable and cost time: on one H200 three default runs at 5x missed the runner-up check 2, 1 and 1 times
# (the pageable hand-off at 64 KiB still among them) and, in one call, runs at 5x and 2x in turn took
# 30.65-32.64 s against 28.57-31.60 s (seconds.total 29.8 against 28.5 on average: results/h200-far5-*,
# h200-far-ab-*).
FAR_BEHIND = 2.0
FAR_SAMPLES = 3
# ... unless its last FAR_SAMPLES samples each ran faster than the one before by more than STILL_FALLING: a
# warm-up still going (on one H200 the time-sliced pageable hand-off at 64 KiB ran 75, 71, 67 us, then settled
# near 60 in a 20-sample run; stopped at its first 3, such a group overstates its gap to the leader: in six
# default runs of two calls that ratio lay above the 20-sample reference's interval, widened by delta, four
# times (results/h200-exact-*, h200-falling-*). It goes on while they fall (from --min-samples on, the usual
# rules stop it).
STILL_FALLING = 0.01
# A group decided (beaten by a rival, or apart from every one) stops at --min-samples, unless it is not yet steady:
# the median of the later half of its samples more than DRIFT from the earlier half's (a drift, or noise that its
# samples do not settle). Then it takes samples up to --max-samples. A decided group's figure is still printed (a
# runner-up's ratio, the interval of a choice among APIs), and a median of samples still drifting is not the
# figure of the path: in the twelve 3x20 references on one H200 (results/h200-*-reference-3x20.csv.gz, 25,566
# groups of 20 samples), where the median of samples 4-6 lay beyond 3% of samples 1-3's (13% of the groups), the
# median of the first 6 lay 2.5% from the 20-sample median (the median over those groups) and that of the first 9
# 1.0%; elsewhere both lay 0.1% from it. In a default run it adds up to 3 samples to 4-7 groups (~0.05 s): the
# time-sliced pageable hand-off at 64 KiB (71.8, 66.8, 70.0, 64.1, 61.4, 60.5 us in results/h200-between-b-1, a
# runner-up), ipc/ce's hand-off at 256 MiB under MPS (a choice).
DRIFT = 0.03
SETUP_REPEATS = 9  # every setup operation is timed this many times, each on fresh objects (9: a 95% interval
#                     that is not the range of the samples, x(2)..x(8))
_REPS_BITS = 20  # the decision word: sample number << 20 | reps << 1 | stop
SOLO_SEEDS = 0x50105EED  # solo samples' seeds differ from the shared ones


def drifting(values) -> bool:
    """Not yet steady: the median of the later half of its samples (6 at least) more than DRIFT from the
    earlier half's, either way (of an odd count, the middle sample is in neither half)."""
    found = robust.halves(values)
    return found is not None and found[0] > 0 and abs(found[1] / found[0] - 1) > DRIFT


def still_falling(values) -> bool:
    """Its last FAR_SAMPLES samples each faster than the one before by more than STILL_FALLING: a warm-up
    that has not settled (two scheduler states alone seldom make one: it takes three levels, each over
    STILL_FALLING below the one before)."""
    last = list(values)[-FAR_SAMPLES:]
    return len(last) == FAR_SAMPLES and all(a > b * (1 + STILL_FALLING) for a, b in zip(last, last[1:]))


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
    warmup: int = defaults.WARMUP
    min_samples: int = defaults.MIN_SAMPLES
    max_samples: int = defaults.MAX_SAMPLES

    @classmethod
    def of(cls, config) -> "Counts":
        return cls(config.warmup, config.min_samples, config.max_samples)

    @property
    def fixed(self) -> bool:
        """Exactly one count asked (-n N, or --min-samples = --max-samples): taken whole, the far-behind
        stop off."""
        return self.min_samples >= self.max_samples


class Sampler:
    """One per worker; every worker of a scenario calls run() for the same groups in the same order."""

    def __init__(self, ctx, counts: Counts | None = None):
        self.ctx = ctx
        self.counts = counts or Counts.of(ctx.config)
        self.seq = 0  # samples so far, the same in every worker
        self.solo_seq = 0  # samples of groups this worker takes alone (its own count: seeds apart)
        self.samples = 0  # timed samples this worker recorded (for the note at the end)
        self._salt: int | None = None  # salt(), once the scenario has begun
        # (path, variant, measure, metric, src, dst, solo) -> (the transfers per sample the last group
        # of that measurement settled on, its size): the next size's warm-up takes no more (warm_reps)
        self.settled: dict[tuple, tuple[int, int]] = {}
        self._best: dict[tuple, list] | None = None  # known_figures(), read from the config once
        # The lane counters (gpuipc_bench.machine.lanes.LaneMeter), where the worker has them: read
        # around each timed sample of the timing worker, their lane columns added to its row
        self.lanes: LaneMeter | None = None
        # The lane reading of the sample being taken (machine.lanes.LaneWindow), where its counters
        # are read: a take() that does more than its transfers marks where they begin and end.
        self.window: LaneWindow | None = None

    def salt(self) -> int:
        """What every worker of this scenario mixes into its seeds: a hash of the scenario and its
        workers' GPUs (the same in each of them, another for each scenario the process runs)."""
        if self._salt is None:
            scenario = getattr(self.ctx, "row_fields", {}).get("scenario", "")
            gpus = ",".join(str(getattr(spec, "device", "")) for spec in getattr(self.ctx, "specs", ()) or ())
            self._salt = zlib.crc32(f"{scenario}:{gpus}".encode())
        return self._salt

    @property
    def setup_repeats(self) -> int:
        """How many times each set-up operation is timed: SETUP_REPEATS, or the run's sample cap where
        that is lower (--quick's 3: every figure of it is a range of 3, and so are its set-up rows);
        once in a run of the resampling pass (RunConfig.only_groups), whose set-up rows are not kept."""
        if getattr(getattr(self.ctx, "config", None), "only_groups", None) is not None:
            return 1
        return max(1, min(SETUP_REPEATS, self.counts.max_samples))

    def run(self, group: dict, take: Callable[[Trial], Sample | None], *, timer: bool, reps: int = 1,
            solo: bool = False, calibrate: bool = True, min_reps: int = 1, phase: str = "sample",
            counts: Counts | None = None, first_reps: int | None = None) -> "Group":
        """One group: warm up, then sample until the stop rule says enough; iterating it yields one
        row per timed sample (from the timing worker), as it runs alone; interleave() runs several
        together. `solo`: only this worker takes part (a ceiling measured alone). `first_reps`: the
        warm-up's transfers where no earlier size of the measurement settled on a count (default
        `reps`): fewer for a measurement whose transfer may take milliseconds (a device ping-pong
        round trip time-sliced takes two time slices, ~4 ms: 200 of them made a 0.9 s warm-up)."""
        state = Group(self, group, take, timer=timer, reps=reps, solo=solo, calibrate=calibrate, min_reps=min_reps,
                      phase=phase, counts=counts or self.counts, first_reps=first_reps)
        if phase != "ceiling" and not self.planned(group):
            state.done = True  # not measured in this run (RunConfig.stream_sizes): the same in every worker
        return state

    def planned(self, group: dict) -> bool:
        """Whether the run measures this group: a stream group only at the sizes of
        RunConfig.stream_sizes where the run gives them (the second sharing mode of a default run
        sweeps its streams at the call-bound sizes and the largest; its hand-offs at every size);
        in a run of the resampling pass (RunConfig.only_groups), a timed transfer only where its
        (path, variant, measure, bytes) is named (set-up operations are always measured: Sampler.setup_repeats)."""
        config = getattr(self.ctx, "config", None)
        sizes = getattr(config, "stream_sizes", None)
        if sizes is not None and group.get("measure") == "stream" and message_bytes(group) not in sizes:
            return False
        only = getattr(config, "only_groups", None)
        return only is None or group.get("metric") == "setup" or group_key(group) in only

    def known_figures(self, key: tuple) -> list[tuple[str, float]]:
        """('path/variant', median seconds per transfer) of every group an earlier scenario of the run
        measured for `key` (Group.key), from RunConfig.known_best."""
        if self._best is None:
            config = getattr(self.ctx, "config", None)
            self._best = {}
            for *fields, label, seconds in getattr(config, "known_best", ()) or ():
                self._best.setdefault(tuple(fields), []).append((str(label), float(seconds)))
        return self._best.get(key, [])

    def interleave(self, groups: "list[Group]", key: object = "") -> Iterator[dict]:
        """The groups of the variants compared at one size, in the run's --sample-order (the same in
        every worker: both take the same samples in the same order):

          interleaved  each group's warm-up, then rounds of one sample of every group still going,
                       shuffled per round from --order-seed and `key`: a drift over the run, or a
                       state of the GPU that lasts, falls on every group alike. On a time-sliced H100
                       a 256 MiB hand-off has states that last for many samples (push: 336, 835 or
                       922 us, set by what ran before): back to back, each variant tends to stay in
                       one, and the comparison ranks states, not variants;
          shuffled     each group whole (warm-up, then its samples back to back), the groups in an
                       order shuffled per size;
          declared     each group whole, in the order the scenario declares them."""
        config = getattr(self.ctx, "config", None)
        order, seed = getattr(config, "sample_order", "declared"), getattr(config, "order_seed", None)
        shuffle = random.Random(f"{seed}:{key}").shuffle if seed is not None and order != "declared" else None
        groups = list(groups)
        for state in groups:  # the groups of one decision: the same measure and metric, at this size
            state.rivals = [g for g in groups if g is not state and g.timer and (g.group.get("measure"),
                            g.group.get("metric")) == (state.group.get("measure"), state.group.get("metric"))]
        if order != "interleaved":
            if shuffle is not None:
                shuffle(groups)
            for state in groups:
                yield from state
            return
        for state in groups:
            while state.warm_left > 0 and not state.done:
                yield from state.step()
        while True:
            live = [state for state in groups if not state.done]
            if not live:
                return
            if shuffle is not None:
                shuffle(live)
            for state in live:
                yield from state.step()

    def row(self, group: dict, sample: Sample, iteration: int, clock: float = math.nan,
            lane: dict | None = None) -> dict:
        """The row of one timed sample (`lane`: its lane columns, where they were read). A group's
        `l2_resident` may be a function of the sample's batch (gpu.memory.L2Check): each row then
        says whether its own ring could stay in L2, from the transfers this sample really timed
        (after calibration)."""
        fields = {**self.ctx.row_fields, **group, "iteration": iteration, "batch": sample.batch,
                  "seconds": sample.seconds, "verified": sample.verified, "seq": next(_SEQ),
                  "sm_clock_mhz": clock if group.get("metric") != "setup" else math.nan, **(lane or {})}
        if base_mode(fields.get("sharing")) != "mps":  # a row of the group's own kind ('none': CPU only)
            fields.pop("mps_thread_pct", None)
        if callable(fields.get("l2_resident")):
            fields["l2_resident"] = fields["l2_resident"](sample.batch)
        return new_row(**label_ends(fields, getattr(self.ctx, "spec", None)))


class Group:
    """One group's samples, taken a step (one sample) at a time: Sampler.run alone, or in turn with
    the other groups of one size (Sampler.interleave). Every worker steps the same groups in the
    same order; the timing worker decides each group's reps and its stop, the others read it."""

    def __init__(self, sampler: Sampler, group: dict, take: Callable[[Trial], Sample | None], *, timer: bool,
                 reps: int, solo: bool, calibrate: bool, min_reps: int, phase: str, counts: Counts,
                 first_reps: int | None = None):
        self.sampler, self.group, self.take, self.timer, self.solo = sampler, group, take, timer, solo
        self.calibrate, self.min_reps, self.phase, self.counts = calibrate, min_reps, phase, counts
        self.nbytes = int(group.get("bytes", 0))
        # What the progress line and a hang report name: the ceiling, or path/variant measure.
        self.label = str(group.get("variant", "")) if phase == "ceiling" else \
            f"{group.get('path', '')}/{group.get('variant', '')} {group.get('measure', '')}".strip()
        self.values: list[float] = []
        self.timed = 0.0  # seconds of timed transfers so far (the group's budget)
        self.index = 0
        self.warm_left = counts.warmup
        self.cap = reps  # the calibration's ceiling: the group's own count
        self.memory = (group.get("path"), group.get("variant"), group.get("measure"), group.get("metric"),
                       str(group.get("src")), str(group.get("dst")), solo)
        self.key = best_key({**getattr(sampler.ctx, "row_fields", {}), **group})
        self.figure = f"{group.get('path', '')}/{group.get('variant', '')}"  # its label among known_figures
        if calibrate and self.warm_left and self.memory in sampler.settled:
            settled, at = sampler.settled[self.memory]
            reps = max(min(min_reps, self.cap), min(self.cap, warm_reps(settled, at, self.nbytes)))
        elif calibrate and self.warm_left and first_reps is not None:
            reps = max(1, min(first_reps, self.cap))
        self.reps = reps
        self.clock = math.nan  # the SM clock (MHz) as the group started timing
        self.done = False
        self.rivals: list[Group] = []  # the groups it is compared with, timed in this worker (interleave)
        self.far = False  # stopped as far behind (far_behind): decided, with fewer than --min-samples

    def __iter__(self) -> Iterator[dict]:
        while not self.done:
            yield from self.step()

    def versus(self, rival: "Group") -> int:
        """1 if this group is decided slower than `rival` (which has its --min-samples too): every
        sample slower than every sample of the rival, the medians more than BEATEN_BY apart; -1 if
        decided faster the same way; 0 while undecided."""
        if len(rival.values) < self.counts.min_samples and not rival.far:
            return 0
        mine, theirs = robust.median(self.values), robust.median(rival.values)
        if min(self.values) > max(rival.values) and mine > theirs * (1 + BEATEN_BY):
            return 1
        if max(self.values) < min(rival.values) and theirs > mine * (1 + BEATEN_BY):
            return -1
        return 0

    def beaten(self) -> bool:
        """Decided slower than a rival. More samples would not change the decision (it cannot be the
        fastest), only narrow its interval."""
        return any(self.versus(r) == 1 for r in self.rivals)

    def far_behind(self) -> bool:
        """Every sample (FAR_SAMPLES at least) more than FAR_BEHIND times the best figure known at its
        size (a rival's median, FAR_SAMPLES samples at least, or an earlier scenario's: known_figures),
        and some figure known between that best and it: where none is, it may be the next class, whose
        ratio the answer prints, and its first samples overstate it (on one H200 the time-sliced pageable
        hand-off at 64 KiB, 2.6x behind the host-synced one, stopped at 3 samples read 2.95-3.07x in two
        default runs of three where the same call's 3x20 reference put it at 2.28-2.84:
        results/h200-binding.txt). It takes its samples as any runner-up does."""
        if len(self.values) < FAR_SAMPLES or self.phase == "ceiling":
            return False
        known = [seconds for label, seconds in self.sampler.known_figures(self.key) if label != self.figure]
        known += [robust.median(rival.values) for rival in self.rivals if len(rival.values) >= FAR_SAMPLES]
        best = min(known, default=math.inf)
        if not (math.isfinite(best) and min(self.values) > FAR_BEHIND * best) or still_falling(self.values):
            return False
        mine = robust.median(self.values)
        return any(best < seconds < mine for seconds in known)

    def decided(self) -> bool:
        """Its answer against every rival is known, one way or the other: the leader of its size
        clear of every other, say. More samples would narrow its interval, not change a decision."""
        return bool(self.rivals) and all(self.versus(r) != 0 for r in self.rivals)

    def step(self) -> Iterator[dict]:
        """One sample, warm-up or timed: its row (from the timing worker, if timed)."""
        sampler, ctx, counts = self.sampler, self.sampler.ctx, self.counts
        warm = self.warm_left > 0
        ctx.phase("warmup" if warm else self.phase, self.nbytes, self.index, label=self.label)
        if self.solo:
            sampler.solo_seq += 1
            trial = Trial(sampler.solo_seq, seed_for(sampler.solo_seq) ^ SOLO_SEEDS ^ sampler.salt(), self.reps,
                          self.index, warm)
        else:
            sampler.seq += 1
            trial = Trial(sampler.seq, seed_for(sampler.seq) ^ sampler.salt(), self.reps, self.index, warm)
        lanes = sampler.lanes.watch(self.group, self.reps) if sampler.lanes is not None and self.timer and not warm \
            else None
        sampler.window = lanes if isinstance(lanes, LaneWindow) else None
        try:
            with warming(warm):
                sample = self.take(trial)
        except BaseException:
            if sampler.window is not None:  # its PCIe poller stops with it
                sampler.window.end()
            raise
        finally:
            sampler.window = None
        lane = lanes(sample.batch) if lanes is not None and sample is not None else None
        if sample is not None:
            mark("took", sample.seconds * sample.batch)
        stop = False
        if self.timer:
            if sample is None:
                raise RuntimeError("the timing worker's take() returned no sample")
            if warm:
                self.warm_left -= 1
                if self.calibrate and self.warm_left == 0:
                    self.reps = calibrated(sample, self.cap, self.min_reps)
            else:
                clock = getattr(ctx, "clock", None)
                if not self.values and clock is not None:  # the SM clock once a group, as it starts timing
                    self.clock = clock()
                self.values.append(sample.seconds)
                self.timed += sample.seconds * sample.batch
                enough = robust.enough(self.values, counts.min_samples, counts.max_samples)
                self.far = not enough and not counts.fixed and self.far_behind()
                stop = enough or self.far or (
                    len(self.values) >= counts.min_samples and (self.timed >= GROUP_BUDGET_S or (
                        (self.beaten() or self.decided()) and not drifting(self.values))))
                sampler.samples += 1
                yield sampler.row(self.group, sample, len(self.values) - 1, self.clock, lane)
            if not self.solo:
                ctx.store("sampler", (sampler.seq << _REPS_BITS) | (self.reps << 1) | int(stop))
        elif not self.solo:
            ctx.wait("sampler", sampler.seq << _REPS_BITS, what="the timing worker's decision")
            word = ctx.load("sampler")
            self.reps, stop = (word >> 1) & ((1 << (_REPS_BITS - 1)) - 1), bool(word & 1)
            self.warm_left = max(0, self.warm_left - 1) if warm else self.warm_left
        else:
            raise ValueError("a solo group is taken by its timing worker")
        self.index += 1
        mark("decided")
        if stop:
            if self.calibrate:
                # the same in every worker: from the decision words
                sampler.settled[self.memory] = (self.reps, self.nbytes)
            self.done = True


def message_bytes(fields: dict) -> int:
    """The size of one message of a group: its bytes, or for N processes' aggregate (the sharing
    scenario's '<transfer>-aggregate', whose bytes are N x the message) its bytes over N."""
    nbytes = int(fields.get("bytes", 0) or 0)
    if str(fields.get("variant", "")).endswith(AGGREGATE_SUFFIX):
        return nbytes // max(1, int(fields.get("workers", 1) or 1))
    return nbytes


def group_key(fields: dict) -> tuple[str, str, str, int]:
    """What names a timed group in RunConfig.only_groups: (path, variant, measure, bytes), as its rows say."""
    return (str(fields.get("path", "")), str(fields.get("variant", "")), str(fields.get("measure", "")),
            int(fields.get("bytes", 0) or 0))


def best_key(fields: dict) -> tuple:
    """What a figure is compared with at its size: (measure, metric, sharing, workers, src, dst, bytes).
    The same key for a sampler's group and a results row (RunConfig.known_best)."""
    return (str(fields.get("measure", "")), str(fields.get("metric", "")), str(fields.get("sharing", "")),
            str(fields.get("workers", "")), str(fields.get("src", "")), str(fields.get("dst", "")),
            int(fields.get("bytes", 0) or 0))


_SEQ = itertools.count()  # rows in the order this process took them (the CSV's `seq`: drift over a run)


def warm_reps(reps: int, nbytes: int, next_bytes: int) -> int:
    """The warm-up's transfers at the next size of a measurement whose last size settled on `reps`
    transfers of `nbytes`: as many bytes in all as that sample moved (a transfer takes at most
    proportionally longer with its size, so the warm-up lasts at most about one calibrated
    sample; at 4x the size it would otherwise last four)."""
    if next_bytes <= nbytes or nbytes <= 0:
        return reps
    return max(1, -(-reps * nbytes // next_bytes))


def calibrated(sample: Sample, reps: int, min_reps: int = 1) -> int:
    """Transfers per sample so that one takes about TARGET_SAMPLE_S, never more than `reps`."""
    per = sample.seconds
    if not per > 0 or not math.isfinite(per):
        return reps
    return max(min(min_reps, reps), min(reps, int(TARGET_SAMPLE_S / per)))
