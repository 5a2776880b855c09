"""Comparing two figures from their samples: the claim rests on the interval of their ratio,
never on the point ratio alone (criterion.rs decides the same way).

The ratio's interval is the Hodges-Lehmann one, built from both samples at once: every pair
(one sample of each) gives a log-ratio, and the interval between the k-th smallest and the
k-th largest of them, k from the exact Mann-Whitney U distribution (its normal approximation
beyond EXACT_MAX a side), covers the true ratio at 1 - 2 ALPHA with no assumption about the
distribution (one-sided ALPHA at each end: two one-sided tests). With 3 against 3 it is the
ratio of the ends of the samples (k = 1, 1/C(6, 3) = 0.05); below that no interval exists.

  faster     the whole interval lies beyond 1 + delta;
  slower     the whole interval lies below 1 / (1 + delta);
  same       the whole interval lies inside [1 / (1 + delta), 1 + delta]: an equivalence
             shown, not a failure to find a difference (MIN_SAME samples a side);
  within     none of those, but the interval reaches no further than 1 + WITHIN_MAX either
             way: "within X%", X the interval's reach (`within`);
  undecided  anything else: the samples cannot tell. Never reported as a tie.

Two-state figures (robust.two_states: a scheduler state that adds a step to some samples)
are compared state by state: where both figures' samples fall into two states, the fast
states are compared with each other (the slow ones where a fast state has fewer than
MIN_STATE samples), so that a different mix of states is not taken for a difference between
the paths; `states` says each figure's states and mix. Where the states are time-slicing's
(a size's `step`: what a context switch adds to a sample, state_step; a figure's two states about
one step apart) and only one of the two shows two (the other's samples all fell in one), the
one-state figure is compared with the other's state nearest it, and is undecided against it
where that state holds fewer than MIN_STATE samples; two one-state figures about one step apart
are undecided, no ratio claimed.

delta = max(MIN_EFFECT, what the two figures' process sets measured of one ceiling apart).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from collections.abc import Sequence

import numpy as np

from gpuipc_bench import robust

MIN_EFFECT = 0.02  # ratios closer to 1 than this are never "faster", however significant
ALPHA = 0.05  # each end of the ratio's interval (two one-sided tests); the U test's two-sided level
MIN_RANK_TEST = 5  # samples a side before the U test's p is worth reporting
MIN_SAME = 3  # samples a side before "same" or "within" may be claimed
MIN_STATE = 3  # samples in a state before the states are compared on their own
LOOSE_STATE = 2  # samples in the smaller state before a figure's gap counts toward its size's step (state_step)
WITHIN_MAX = 0.05  # an open comparison whose interval reaches no further than this reads "within X%"
MAX_PAIRS = 250_000  # pairs of samples beyond this: the interval from evenly spaced order statistics
FASTER, SLOWER, SAME, WITHIN, UNDECIDED = "faster", "slower", "same", "within", "undecided"
EXACT_MAX = 25


def _finite(values: Sequence[float]) -> list[float]:
    if isinstance(values, np.ndarray) and values.dtype == np.float64:  # the same floats, converted at once
        return values[np.isfinite(values)].tolist()
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
class States:
    """A figure's samples in two states: the fast and slow states' medians (seconds) and the
    share of the samples in the fast state."""

    fast_s: float
    slow_s: float
    fast_share: float
    samples: int

    @property
    def step(self) -> float:
        return self.slow_s / self.fast_s - 1 if self.fast_s > 0 else math.nan


def states(values: Sequence[float], min_share: float | None = None) -> tuple[States, list[float], list[float]] | None:
    """(the states, the fast state's samples, the slow state's) of samples in two states
    (robust.two_states; `min_share`: its least share of the samples in each, where not its own); None
    when they are not."""
    xs = sorted(_finite(values))
    found = robust.two_states(xs) if min_share is None else robust.two_states(xs, min_share=min_share)
    if found is None:
        return None
    cut = round(found[1] * len(xs))
    fast, slow = xs[:cut], xs[cut:]
    return States(robust.median(fast), robust.median(slow), cut / len(xs), len(xs)), fast, slow


@dataclasses.dataclass(frozen=True)
class Comparison:
    """a against b (times: smaller is faster). outcome: FASTER (a is), SLOWER (a is), SAME,
    WITHIN or UNDECIDED; ratio: median b / median a (of the states compared); ratio_lo..
    ratio_hi: the ratio's Hodges-Lehmann interval (NaN where too few samples give none);
    within: how far that interval reaches from 1, as a fraction (NaN without one);
    separated: every sample of the faster below every sample of the slower; p: the U test's
    two-sided p-value (of `ranked`, the two parts' samples compared, counted when read: a
    decision compares every two figures of a size and reads none); states: a's and b's two
    states where they were compared state by state ('fast' or 'slow': `compared`; also the
    state of the one figure in two states that the other, in one state, was compared with)."""

    outcome: str
    ratio: float
    ratio_lo: float
    ratio_hi: float
    delta: float
    separated: bool = False
    within: float = math.nan
    states: tuple[States, States] | None = None
    compared: str = ""
    ranked: tuple[list[float], list[float]] | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def decided(self) -> bool:
        return self.outcome not in (UNDECIDED, WITHIN)

    @property
    def p(self) -> float:
        return _u_test_p(*self.ranked) if self.ranked is not None else math.nan


def compare(a: Sequence[float], b: Sequence[float], delta: float = MIN_EFFECT, alpha: float = ALPHA) -> Comparison:
    """The outcome of a against b (see the module's docstring)."""
    return compare_prepared(Prepared(a), Prepared(b), delta, alpha)


class Prepared:
    """One figure's samples, made ready once for the many comparisons a decision makes with it
    (verdict.decide compares each figure of a size with the others): the finite samples, their
    two states, and per part compared (all of them, the fast or the slow state) its median,
    ends and sorted logarithms. compare_prepared gives what compare gives, to the bit."""

    __slots__ = ("xs", "two", "_parts", "_interval")

    def __init__(self, values: Sequence[float]):
        self.xs = _finite(values)
        self.two = states(self.xs) if self.xs else None
        self._parts: dict[str, _Part] = {}
        self._interval: tuple[float, float, float] | None = None

    def part(self, which: str = "") -> _Part:
        """The samples compared: all ('') or those of the 'fast' or the 'slow' state."""
        found = self._parts.get(which)
        if found is None:
            values = self.xs if not which else self.two[1] if which == "fast" else self.two[2]  # type: ignore[index]
            found = self._parts[which] = _Part(values)
        return found

    @property
    def interval(self) -> tuple[float, float, float]:
        """median_interval of the samples."""
        if self._interval is None:
            self._interval = median_interval(self.xs)
        return self._interval


class _Part:
    """Samples as compare uses them: their count, median, ends and sorted logarithms."""

    __slots__ = ("values", "n", "median", "lo", "hi", "_logs")

    def __init__(self, values: list[float]):
        self.values = values
        self.n = len(values)
        self.median = robust.median(values)
        self.lo, self.hi = (min(values), max(values)) if values else (math.nan, math.nan)
        self._logs: np.ndarray | None = None

    @property
    def logs(self) -> np.ndarray:
        if self._logs is None:
            self._logs = np.log(np.asarray(sorted(self.values), dtype=float))
        return self._logs


def compare_prepared(a: Prepared, b: Prepared, delta: float = MIN_EFFECT, alpha: float = ALPHA,
                     step: float = 0.0) -> Comparison:
    """compare() of two figures' prepared samples. `step` (seconds, state_step; 0: none): their states
    are time-slicing's (a context switch in a sample or not), which every figure at the size may fall
    in: a figure in one state is compared with the other's state nearest it, and two figures each in
    one state a step apart are not told apart."""
    if not a.xs or not b.xs:
        return Comparison(UNDECIDED, math.nan, math.nan, math.nan, delta)
    both: tuple[States, States] | None = None
    compared = ""
    part_a = part_b = ""
    if a.two is not None and b.two is not None:
        (sa, fa, wa), (sb, fb, wb) = a.two, b.two
        both = (sa, sb)
        if min(len(fa), len(fb)) >= MIN_STATE:
            compared = "fast"
        elif min(len(wa), len(wb)) >= MIN_STATE:
            compared = "slow"
        else:
            both = None
        part_a = part_b = compared
    elif step > 0 and (a.two is None) != (b.two is None) and _steps_like(a.two or b.two, step):
        # one figure in two states, the other in one (its samples all fell in one state): like with
        # like, the one state against the other's state nearest it (a time-sliced hand-off whose
        # samples all took the context switch is not slower than one whose samples all missed it).
        # Only states one context switch apart are the scheduler's: a host-synced hand-off's 24 and
        # 26.5 us, beside the 17 us step of the GPU-signalled ones at 4 B, are its own jitter
        two, one = (a, b) if a.two is not None else (b, a)
        nearest, enough = nearest_state(two, one.part().median)
        if nearest and not enough:  # it sits in the state the other rarely took: nothing like to compare
            return Comparison(UNDECIDED, math.nan, math.nan, math.nan, delta, compared="states")
        if nearest:
            compared = nearest
            part_a, part_b = (nearest, "") if two is a else ("", nearest)
    xa, xb = a.part(part_a), b.part(part_b)
    ma, mb = xa.median, xb.median
    if not (ma > 0 and mb > 0) or min(xa.lo, xb.lo) <= 0:
        return Comparison(UNDECIDED, math.nan, math.nan, math.nan, delta)
    ratio = mb / ma
    ratio_lo, ratio_hi = _log_ratio_interval(xa.logs, xb.logs, alpha)
    separated = (xa.hi < xb.lo or xb.hi < xa.lo) and separation_p(xa.n, xb.n) <= alpha
    reach = max(ratio_hi, 1 / ratio_lo) - 1 if math.isfinite(ratio_lo) and ratio_lo > 0 else math.nan
    top = 1 + delta
    if ratio_lo >= top:
        outcome = FASTER
    elif ratio_hi <= 1 / top:
        outcome = SLOWER
    elif min(xa.n, xb.n) >= MIN_SAME and 1 / top <= ratio_lo and ratio_hi <= top:
        outcome = SAME
    elif min(xa.n, xb.n) >= MIN_SAME and reach <= WITHIN_MAX:
        outcome = WITHIN
    else:
        outcome = UNDECIDED
    if step > 0 and outcome in (FASTER, SLOWER) and a.two is None and b.two is None:
        # each in one state, about one step apart: as drawn or state for state, either may be ahead
        # (0.7x or 1.04x at 256 MiB); no ratio claimed
        gap, fast = abs(mb - ma), min(ma, mb)
        if abs(gap - step) <= step / 2 and gap < step + fast * delta:
            return Comparison(UNDECIDED, math.nan, math.nan, math.nan, delta, separated, math.nan, both, "states",
                              (xa.values, xb.values))
    return Comparison(outcome, ratio, ratio_lo, ratio_hi, delta, separated, reach, both, compared,
                      (xa.values, xb.values))


def _steps_like(two, step: float) -> bool:
    """Whether a figure's two states lie about one scheduler step apart (within half a step)."""
    states = two[0]
    return abs((states.slow_s - states.fast_s) - step) <= step / 2


def state_step(figures: Sequence[Prepared]) -> float:
    """A size's scheduler step (seconds: what a context switch adds to a sample), the median over the
    figures whose samples show two states; where none does (each state held by under a fifth of a
    figure's samples), over the figures whose samples show a second state in LOOSE_STATE samples or more
    (loose_step); 0 where none does either."""
    steps = [two[0].slow_s - two[0].fast_s for two in (p.two for p in figures) if two is not None]
    if not steps:
        steps = [step for step in (loose_step(p.xs) for p in figures) if step > 0]
    return float(np.median(steps)) if steps else 0.0


def loose_step(values: Sequence[float]) -> float:
    """The gap between two states of samples (seconds) where the smaller holds LOOSE_STATE samples or more,
    however few that is of them (robust.two_states with that share); 0.0 where there are none. Only a
    size's step is taken from it: the states of a figure stay those `states` finds. On one H200, time-sliced
    at 256 MiB, every IPC copy-engine hand-off sits at ~280 or ~420 us by the scheduler's draw; where each
    figure's draw put at most a sixth of its samples in the other state (ipc/push 3 of 18 at 416 us), no
    step was found, and ipc/ce's six samples all at 419 us read 1.49x slower than ipc/push's mostly at 280:
    ipc/push was named in one default run of three where the other two named ipc/ce
    (results/h200-once-b-1.csv.gz)."""
    xs = _finite(values)
    found = states(xs, min_share=LOOSE_STATE / len(xs)) if xs else None
    return found[0].slow_s - found[0].fast_s if found is not None else 0.0


def nearest_state(figure: Prepared, median: float) -> tuple[str, bool]:
    """('fast' or 'slow', whether it holds MIN_STATE samples): the state of a two-state figure whose
    median is nearest `median` (by ratio); ('', False) where there is none, or where `median` lies
    further from it than the two states lie apart (the states do not explain the gap)."""
    if figure.two is None or not median > 0:
        return "", False
    found, fast, slow = figure.two
    if not (found.fast_s > 0 and found.slow_s > 0):
        return "", False
    away = {"fast": abs(math.log(median / found.fast_s)), "slow": abs(math.log(median / found.slow_s))}
    which = min(away, key=away.__getitem__)
    if away[which] > math.log(found.slow_s / found.fast_s):  # further from both than they are apart
        return "", False
    return which, len(fast if which == "fast" else slow) >= MIN_STATE


def ratio_interval(a: Sequence[float], b: Sequence[float], alpha: float = ALPHA) -> tuple[float, float]:
    """The Hodges-Lehmann interval of the ratio b / a (positive samples), each end at one-sided
    level alpha: the k-th smallest and k-th largest of the m*n ratios b_j / a_i, k the largest
    with P(U <= k - 1) <= alpha under the null. (NaN, NaN) when no k exists (e.g. 2 against 2)."""
    xa = np.log(np.asarray(sorted(_finite(a)), dtype=float))
    xb = np.log(np.asarray(sorted(_finite(b)), dtype=float))
    return _log_ratio_interval(xa, xb, alpha)


def _log_ratio_interval(xa: np.ndarray, xb: np.ndarray, alpha: float) -> tuple[float, float]:
    """ratio_interval of the sorted logarithms of the samples."""
    m, n = len(xa), len(xb)
    if not m or not n:
        return math.nan, math.nan
    k = _hl_rank(m, n, alpha)
    if k is None:
        return math.nan, math.nan
    while m * n > MAX_PAIRS:  # thin the larger side to evenly spaced order statistics (its quantiles)
        if m >= n:
            xa = xa[np.linspace(0, m - 1, m // 2).round().astype(int)]
        else:
            xb = xb[np.linspace(0, n - 1, n // 2).round().astype(int)]
        k = max(1, round(k * len(xa) * len(xb) / (m * n)))
        m, n = len(xa), len(xb)
    # the k-th smallest and k-th largest of the m*n differences (a partial sort finds the same two; a
    # few of them, the same differences, Python sorts before numpy has started)
    if m * n <= _PYTHON_PAIRS_UPTO:
        left, right = xa.tolist(), xb.tolist()
        diffs = sorted([y - x for y in right for x in left])
    else:
        diffs = np.partition(np.subtract.outer(xb, xa), (k - 1, m * n - k), axis=None)
    return float(np.exp(diffs[k - 1])), float(np.exp(diffs[m * n - k]))


_PYTHON_PAIRS_UPTO = 64  # pairs of samples up to which the interval's differences are sorted in Python


@functools.lru_cache(maxsize=1024)
def _hl_rank(m: int, n: int, alpha: float) -> int | None:
    if max(m, n) <= EXACT_MAX:
        counts = _u_counts(min(m, n), max(m, n))
        total, cdf, best = sum(counts), 0, None
        for k, c in enumerate(counts):
            cdf += c
            if cdf / total <= alpha:
                best = k + 1
            else:
                break
        return best
    z = _z(alpha)
    k = math.floor(m * n / 2 - z * math.sqrt(m * n * (m + n + 1) / 12))
    return k if k >= 1 else None


def _z(alpha: float) -> float:
    """The upper alpha quantile of the standard normal (bisection on erfc)."""
    lo, hi = 0.0, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if math.erfc(mid / math.sqrt(2)) / 2 > alpha:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# --------------------------------------------------------------------------- the U test


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of the Mann-Whitney U test of a against b: exact (the distribution
    of U counted) when there are no ties and each side has at most EXACT_MAX samples, else
    the normal approximation with the tie correction and a continuity correction.
    1.0 when either side is empty or every value is the same."""
    return _u_test_p(_finite(a), _finite(b))


def _u_test_p(xa: Sequence[float], xb: Sequence[float]) -> float:
    """mann_whitney_p of two lists of finite samples, its ranks and ties counted by sorted
    search: the same p (each midrank is half an integer, so their sum is exact in any order)."""
    m, n = len(xa), len(xb)
    if not m or not n:
        return 1.0
    first, end, tied = _ranks_and_ties(xa, xb)
    # a's midranks, (first index of its value + last index) / 2 + 1, summed
    u = (first + end - m) / 2 + m - m * (m + 1) / 2
    if not tied and max(m, n) <= EXACT_MAX:
        below_k, total = _u_cumulative(m, n)
        k = round(u)
        below = below_k[k] / total
        above = (total - (below_k[k - 1] if k > 0 else 0)) / total
        return min(1.0, 2 * min(below, above))
    big = m + n
    variance = m * n / 12 * ((big + 1) - sum(t ** 3 - t for t in tied) / (big * (big - 1)))
    if variance <= 0:
        return 1.0
    z = max(0.0, abs(u - m * n / 2) - 0.5) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))


def _ranks_and_ties(xa: Sequence[float], xb: Sequence[float]) -> tuple[int, int, list[int]]:
    """(the sum over a of the first index of its value among both samples sorted, the sum of
    the index after its last, the sizes of the groups of equal values): a plain loop for a
    few samples, numpy for more."""
    tied: list[int] = []
    if len(xa) + len(xb) <= _NUMPY_RANKS_FROM:
        both = sorted([*xa, *xb])
        first = sum(bisect.bisect_left(both, v) for v in xa)
        end = sum(bisect.bisect_right(both, v) for v in xa)
        run, previous = 1, both[0]
        for v in both[1:]:
            if v == previous:
                run += 1
            else:
                if run > 1:
                    tied.append(run)
                run, previous = 1, v
        if run > 1:
            tied.append(run)
        return first, end, tied
    a = np.asarray(xa, dtype=float)
    values = np.sort(np.concatenate((a, np.asarray(xb, dtype=float))))
    first_at, end_at = np.searchsorted(values, a, "left"), np.searchsorted(values, a, "right")
    if (values[1:] == values[:-1]).any():
        counts = np.unique(values, return_counts=True)[1]
        tied = [int(t) for t in counts[counts > 1]]
    return int(first_at.sum()), int(end_at.sum()), tied


_NUMPY_RANKS_FROM = 64  # samples of both figures together from which numpy ranks them


@functools.cache
def _u_cumulative(m: int, n: int) -> tuple[tuple[int, ...], int]:
    """(the running sums of _u_counts(m, n), their total)."""
    counts = _u_counts(m, n)
    running, total = [], 0
    for c in counts:
        total += c
        running.append(total)
    return tuple(running), total


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
