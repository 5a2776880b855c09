"""Comparing two figures from their samples: three outcomes, as nvbench's compare does.

  faster     the medians are more than delta apart (ratio beyond 1 + delta) and the samples
             say so: every sample of one below every sample of the other (under
             exchangeability the chance of that is 1 / C(m+n, m): 0.05 at 3 against 3), or,
             from MIN_RANK_TEST samples a side, a two-sided Mann-Whitney U test at p < ALPHA;
  same       the interval of the ratio of the medians lies inside 1 +- delta: an equivalence
             test, not a failure to find a difference. Each median's interval is its
             distribution-free 95% interval (robust.median_ci), or the range of its samples
             below 6 of them;
  undecided  neither: the samples cannot tell. Never reported as a tie.

delta = max(MIN_EFFECT, the offset between the two processes measured for the ceiling).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

from gpuipc_bench import robust

MIN_EFFECT = 0.02  # medians closer than this are never "faster", however significant
ALPHA = 0.05  # the separation test's one-sided and the U test's two-sided level
MIN_RANK_TEST = 5  # samples a side before the U test may decide
MIN_SAME = 3  # samples a side before "same" may be claimed (a range of 3 covers the median 75% of the time)
FASTER, SLOWER, SAME, UNDECIDED = "faster", "slower", "same", "undecided"
EXACT_MAX = 25


def _finite(values: Sequence[float]) -> list[float]:
    return [float(x) for x in values if x is not None and math.isfinite(float(x))]


def range_coverage(n: int) -> float:
    """The probability that the range of n samples covers the true median: 1 - 2^(1-n)
    (75% at 3, 87.5% at 4, 93.8% at 5)."""
    return 1 - 2.0 ** (1 - n) if n >= 1 else 0.0


def separation_p(m: int, n: int) -> float:
    """The chance, under exchangeability, that m samples all fall below n others: 1 / C(m+n, m)."""
    return 1 / math.comb(m + n, m) if m and n else 1.0


def median_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(lo, median, hi): the median's 95% interval, or the samples' range below 6 of them."""
    xs = sorted(_finite(values))
    if not xs:
        return math.nan, math.nan, math.nan
    lo, m, hi = robust.median_ci(xs)
    if math.isnan(lo) or math.isnan(hi):
        lo, hi = xs[0], xs[-1]
    return lo, m, hi


@dataclasses.dataclass(frozen=True)
class Comparison:
    """a against b (times: smaller is faster). outcome: FASTER (a is), SLOWER (a is), SAME or
    UNDECIDED; ratio: median b / median a; ratio_lo..ratio_hi: what the medians' intervals
    allow; separated: every sample of the faster below every sample of the slower."""

    outcome: str
    ratio: float
    ratio_lo: float
    ratio_hi: float
    delta: float
    separated: bool = False
    p: float = math.nan

    @property
    def decided(self) -> bool:
        return self.outcome != UNDECIDED


def compare(a: Sequence[float], b: Sequence[float], delta: float = MIN_EFFECT, alpha: float = ALPHA) -> Comparison:
    """The outcome of a against b (see the module's docstring)."""
    xa, xb = _finite(a), _finite(b)
    if not xa or not xb:
        return Comparison(UNDECIDED, math.nan, math.nan, math.nan, delta)
    lo_a, ma, hi_a = median_interval(xa)
    lo_b, mb, hi_b = median_interval(xb)
    if not (ma > 0 and mb > 0):
        return Comparison(UNDECIDED, math.nan, math.nan, math.nan, delta)
    ratio = mb / ma
    ratio_lo, ratio_hi = lo_b / hi_a, hi_b / lo_a
    a_first = max(xa) < min(xb)
    b_first = max(xb) < min(xa)
    separated = (a_first or b_first) and separation_p(len(xa), len(xb)) <= alpha
    p = mann_whitney_p(xa, xb)
    ranked = min(len(xa), len(xb)) >= MIN_RANK_TEST and p < alpha
    if ratio >= 1 + delta and ((a_first and separated) or ranked):
        return Comparison(FASTER, ratio, ratio_lo, ratio_hi, delta, separated, p)
    if 1 / ratio >= 1 + delta and ((b_first and separated) or ranked):
        return Comparison(SLOWER, ratio, ratio_lo, ratio_hi, delta, separated, p)
    if min(len(xa), len(xb)) >= MIN_SAME and 1 - delta <= ratio_lo and ratio_hi <= 1 + delta:
        return Comparison(SAME, ratio, ratio_lo, ratio_hi, delta, False, p)
    return Comparison(UNDECIDED, ratio, ratio_lo, ratio_hi, delta, False, p)


# --------------------------------------------------------------------------- the U test


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test of a against b: exact (the distribution
    of U counted) when there are no ties and each side has at most EXACT_MAX samples, else
    the normal approximation with the tie correction and a continuity correction.
    1.0 when either side is empty or every value is the same."""
    xa, xb = _finite(a), _finite(b)
    m, n = len(xa), len(xb)
    if not m or not n:
        return 1.0
    ranks = _midranks(xa + xb)
    u = sum(ranks[:m]) - m * (m + 1) / 2
    ties = _tie_sizes(xa + xb)
    if not any(t > 1 for t in ties) and max(m, n) <= EXACT_MAX:
        counts = _u_counts(m, n)
        total = sum(counts)
        k = round(u)
        below = sum(counts[: k + 1]) / total
        above = sum(counts[k:]) / total
        return min(1.0, 2 * min(below, above))
    big = m + n
    variance = m * n / 12 * ((big + 1) - sum(t ** 3 - t for t in ties) / (big * (big - 1)))
    if variance <= 0:
        return 1.0
    z = max(0.0, abs(u - m * n / 2) - 0.5) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))


def _midranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _tie_sizes(values: list[float]) -> list[int]:
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return list(counts.values())


@functools.cache
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings of m x's and n y's give U = 0, 1, ..., m*n
    (U: the pairs with the x above the y). c(m, n, u) = c(m-1, n, u-n) + c(m, n-1, u)."""
    if m == 0 or n == 0:
        return (1,)
    without_x, without_y = _u_counts(m - 1, n), _u_counts(m, n - 1)
    out = [0] * (m * n + 1)
    for u, c in enumerate(without_x):
        out[u + n] += c
    for u, c in enumerate(without_y):
        out[u] += c
    return tuple(out)
