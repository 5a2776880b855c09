"""A run's defaults and presets, in one place: the sizes swept, the timed and warm-up samples per
group, and the seconds a worker may stay silent. `run`'s options, RunConfig, the plan, the
scenarios' sweeps, the sampler and the stop rule (robust.enough) take them from here."""

from __future__ import annotations

# Sizes swept when --sizes is not given. GPU paths: 4 B, 4 KiB, 64 KiB, then 1 MiB to 256 MiB in
# steps of 4 (every ceiling has plateaued by 256 MiB, the size of the nvbandwidth comparison; larger
# sizes through --sizes). Below 4 KiB every GPU path is bound by its calls or its hand-over: on an
# H100 the medians at 16, 64 and 256 B were those at 4 B (median ratio 1.000), so one size stands
# for that band (a second one, 256 B, would cost about 4 s of a default run of both sharing
# modes). Below 1 MiB the sweep steps by 16: in two default runs on H100s (both modes), the fastest
# path of every sharing mode and measure at 16 KiB and at 256 KiB was that of the sizes on either
# side (the IPC family's ties, staging/pinned-hostsync time-sliced), each size cost about 2.5 s of
# the run, and every choice that flips (time-sliced hand-off at 4-16 MiB, MPS at 16-256 MiB) lies
# above 1 MiB, where the steps stay 4.
DEFAULT_GPU_SIZES = (4, 4 << 10, 64 << 10) + tuple(4 ** k for k in range(10, 15))  # .., 1 MiB .. 256 MiB
# The CPU baseline (host, barrier) at the GPU sweep's sizes up to 16 MiB: its figures sit beside the GPU
# paths' at the sizes they were measured, and its 12 sizes in steps of 4 (4 B .. 16 MiB) took 1.1-1.4 s of a
# default run on one H200 (a size ~0.09 s), against ~0.5 s for these six.
DEFAULT_HOST_SIZES = tuple(n for n in DEFAULT_GPU_SIZES if n <= 16 << 20)  # 4 B, 4 KiB, 64 KiB, 1 MiB .. 16 MiB
# --quick: three sizes (latency-bound, the knee, bandwidth-bound); --thorough: up to 1 GiB.
QUICK_GPU_SIZES = (4 << 10, 1 << 20, 64 << 20)
QUICK_HOST_SIZES = (4 << 10, 1 << 20)
THOROUGH_GPU_SIZES = tuple(4 ** k for k in range(1, 16))  # 4 B .. 1 GiB
THOROUGH_HOST_SIZES = tuple(4 ** k for k in range(1, 14))  # 4 B .. 64 MiB

# Timed samples per group without a preset: at least MIN_SAMPLES, at most MAX_SAMPLES (the median's
# interval decides between, robust.enough), after WARMUP untimed ones.
# At most 12: on an H100 the groups that went on to 20 (328 of 1290, 54% of the timed seconds) had a
# 95% interval of +-2.5% at 12 against +-2.0% at 20 (medians), and the median of their first 12 lay
# inside the 20's interval in 327 of 328: --thorough takes 20.
# At most 9 in a default run (both sharing modes): in three default runs on H100s (both modes), the
# 1,060 groups that went on to 12 had a 95% interval of +-3.2% at 9 against +-2.8% at 12 (medians),
# and the median of their first 9 lay inside the 12's interval in all 1,060; the 3 samples more cost
# about 5 s of a run.
MIN_SAMPLES = 6
MAX_SAMPLES = 9
WARMUP = 1
DEFAULT_SAMPLES = (MIN_SAMPLES, MAX_SAMPLES, WARMUP)  # (min samples, max samples, warm-up samples)
PRESETS = {  # --quick / --thorough: (min samples, max samples, warm-up samples)
    "quick": (3, 3, 1),
    "thorough": (20, 20, 3),
}
# The most timed samples any preset takes a group (--thorough's): the stop rule's cap where no run
# gives one (robust.enough's default, the README's study of where the rule stops).
SAMPLE_CAP = max(high for _, high, _ in (DEFAULT_SAMPLES, *PRESETS.values()))

TIMEOUT_S = 60.0  # seconds a worker may stay silent at a barrier or a wait (--timeout)
CHUNK_BYTES = 16 << 20  # pipelined staging's chunk (--chunk)
# Without --budget: seconds the resampling pass (harness.resample) may add after the first pass, where a
# decision is open or can move (a fresh process set starts in ~1 s; a path's few groups at one size take tenths)
DEFAULT_RESAMPLE_S = 3.0


def resample_allowance(preset: str = "") -> float:
    """The resampling pass's seconds without --budget: DEFAULT_RESAMPLE_S; none for --quick, a first look
    whose three samples a group leave most decisions to a longer run (its pass took 1.3 of 12.1 s on one
    H200 and settled one size; --budget still resamples)."""
    return 0.0 if preset == "quick" else DEFAULT_RESAMPLE_S


def sample_counts(preset: str = "") -> tuple[int, int, int]:
    """(min samples, max samples, warm-up samples) of a preset ('quick', 'thorough'), or the
    default's ('')."""
    return PRESETS.get(preset or "", DEFAULT_SAMPLES)
