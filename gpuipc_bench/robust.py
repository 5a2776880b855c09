"""Distribution-free statistics of a handful of samples: pure functions, no pandas (numpy
sorts and scans the samples from _NUMPY_FROM of them on: the same figures, faster).

The median is the figure; its 95% confidence interval comes from order statistics
(no assumption about the distribution: for n samples the interval
[x(j), x(n-j+1)] covers the true median with probability 1 - 2 P(Bin(n, 1/2) < j));
the spread is the median absolute deviation (MAD), robust to one stray sample where
the standard deviation is not.

The sample loop stops on `enough`: at least `min_n` samples and the interval within
+-`rel` of the median, at most `max_n`; a group whose range is wide ((max - min) /
median > `wide`) needs `wide_n` samples before it may stop.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence, cast

import numpy as np

from gpuipc_bench.defaults import MIN_SAMPLES, SAMPLE_CAP

CONFIDENCE = 0.95
PRECISION = 0.01  # the interval of the median within +-1%
WIDE_RANGE = 0.05  # (max - min) / median above this ...
WIDE_MIN_SAMPLES = 12  # ... needs this many samples
# From this many samples numpy converts, filters and sorts them (a stable sort: the same list
# as sorted() gives, -0.0 and 0.0 in their order); below it the plain loop is quicker.
_NUMPY_FROM = 64


def _finite(values: Sequence[float]) -> list[float]:
    if isinstance(values, (list, tuple, np.ndarray)) and len(values) >= _NUMPY_FROM:
        xs = np.asarray(values, dtype=np.float64)  # None -> NaN, dropped as the loop drops it
        return np.sort(xs[np.isfinite(xs)], kind="stable").tolist()
    if isinstance(values, np.ndarray) and values.dtype == np.float64:  # the same floats, converted at once
        return sorted(values[np.isfinite(values)].tolist())
    return sorted(float(v) for v in values if v is not None and math.isfinite(float(v)))


def median(values: Sequence[float]) -> float:
    return _median_of_sorted(_finite(values))


def halves(values: Sequence[float]) -> tuple[float, float] | None:
    """(the median of the earlier half of `values`, that of the later half), in their order; of an odd
    count the middle value is in neither half; None below 6 values. What the sampler's drift rule and
    the analysis's fall within a process set compare (engine.sampler.drifting, analysis.verdict.falling)."""
    values = list(values)
    half = len(values) // 2
    if len(values) < 6:
        return None
    return median(values[:half]), median(values[len(values) - half:])


# The functions below read samples already through _finite (sorted, finite) through these: the
# same figures, without sorting a sorted list again.
def _median_of_sorted(xs: list[float]) -> float:
    if not xs:
        return math.nan
    n, mid = len(xs), len(xs) // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2


def _mad_of_sorted(xs: list[float]) -> float:
    if not xs:
        return math.nan
    m = _median_of_sorted(xs)
    if len(xs) >= _NUMPY_FROM:
        return median(cast(Sequence[float], np.abs(np.asarray(xs) - m)))  # the same subtractions, in numpy
    return _median_of_sorted(sorted(d for d in (abs(x - m) for x in xs) if math.isfinite(d)))  # median's, of floats


@functools.lru_cache(maxsize=4096)
def ci_rank(n: int, confidence: float = CONFIDENCE) -> int | None:
    """The 1-based rank j such that [x(j), x(n-j+1)] is the narrowest order-statistic interval
    covering the median with at least `confidence`; None when n is too small for any
    (n < 6 at 95%: even [min, max] covers with only 1 - 2 / 2**n). Cached: a report asks for
    the same n thousands of times, and at thousands of samples the sum costs milliseconds."""
    if n < 1:
        return None
    alpha = (1 - confidence) / 2
    # Largest j with P(Bin(n, 1/2) <= j - 1) <= alpha. comb(n, k) exactly, each from the one
    # before (math.comb afresh for every k was quadratic in n).
    cdf, best, comb, total = 0.0, None, 1, 2 ** n
    for k in range(n):
        cdf += comb / total
        if cdf <= alpha:
            best = k + 1
        else:
            break
        comb = comb * (n - k) // (k + 1)
    return best


def median_ci(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(low, median, high): the median and its distribution-free interval. low/high are NaN
    when there are too few samples for the confidence asked (fewer than 6 at 95%)."""
    return _median_ci_of_sorted(_finite(values), confidence)


def _median_ci_of_sorted(xs: list[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    m = _median_of_sorted(xs)
    j = ci_rank(len(xs), confidence)
    if j is None:
        return math.nan, m, math.nan
    return xs[j - 1], m, xs[len(xs) - j]


def mad(values: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    return _mad_of_sorted(_finite(values))


def describe(values: Sequence[float]) -> tuple[float, float, float, float, tuple[float, float] | None]:
    """(low, median, high, mad, two states): median_ci, mad and two_states of the samples, sorted
    once for the three."""
    xs = _finite(values)
    return (*_median_ci_of_sorted(xs), _mad_of_sorted(xs), _two_states_of_sorted(xs))


def relative_ci_halfwidth(values: Sequence[float], confidence: float = CONFIDENCE) -> float:
    """The larger distance from the median to an end of its interval, over the median (inf
    when there is no interval yet)."""
    lo, m, hi = median_ci(values, confidence)
    if math.isnan(lo) or not m:
        return math.inf
    return max(m - lo, hi - m) / abs(m)


def bimodal(values: Sequence[float], gap: float = 0.02, min_share: float = 0.2, separation: float = 3.0) -> bool:
    """Two clusters: a gap between neighbouring sorted samples wider than `gap` of the median
    and `separation` times the spread (MAD) of the samples on either side of it, with at least
    `min_share` of the samples on each side (e.g. 26.8 vs 28.0 GB/s, 9 and 10 samples; not a
    noisy single mode, whose widest gap is no wider than its own spread). Needs 6 samples."""
    return two_states(values, gap, min_share, separation) is not None


def two_states(values: Sequence[float], gap: float = 0.02, min_share: float = 0.2,
               separation: float = 3.0) -> tuple[float, float] | None:
    """The two states of samples that `bimodal` finds: (how far apart their medians are, as a
    fraction of the lower one; the share of the samples in the lower state), e.g. (0.029,
    0.7) for a step of one extra time-slice switch per sample in 30% of the samples. None
    when the samples are not in two states."""
    return _two_states_of_sorted(_finite(values), gap, min_share, separation)


def _two_states_of_sorted(xs: list[float], gap: float = 0.02, min_share: float = 0.2,
                          separation: float = 3.0) -> tuple[float, float] | None:
    n = len(xs)
    if n < 6:
        return None
    m = _median_of_sorted(xs)
    if not m:
        return None
    best = None
    candidates: Sequence[int] = range(1, n)
    if n >= _NUMPY_FROM:  # only the gaps wider than `gap` (the same test, in numpy) can qualify
        candidates = (np.flatnonzero(np.diff(xs) / abs(m) > gap) + 1).tolist()
    for i in candidates:
        width = xs[i] - xs[i - 1]
        if min(i, n - i) / n < min_share or width / abs(m) <= gap:
            continue
        if width > separation * max(_mad_of_sorted(xs[:i]), _mad_of_sorted(xs[i:])) and \
                (best is None or width > best[0]):
            best = (width, i)
    if best is None:
        return None
    i = best[1]
    low, high = _median_of_sorted(xs[:i]), _median_of_sorted(xs[i:])
    return (high / low - 1 if low else math.inf), i / n


def enough(values: Sequence[float], min_n: int = MIN_SAMPLES, max_n: int = SAMPLE_CAP,
           rel: float = PRECISION, wide: float = WIDE_RANGE, wide_n: int = WIDE_MIN_SAMPLES) -> bool:
    """Whether the sample loop may stop: max_n reached, or min_n reached with the median's
    interval within +-rel (and wide_n reached when the range is wide)."""
    xs = _finite(values)
    n = len(values)
    if n >= max_n:
        return True
    if n < min_n or len(xs) < n:  # a NaN sample: keep going until max_n
        return False
    m = _median_of_sorted(xs)
    if m and (xs[-1] - xs[0]) / abs(m) > wide and n < min(wide_n, max_n):
        return False
    return relative_ci_halfwidth(xs) <= rel
