"""The distribution-free statistics behind the stop rule and the verdict."""

from __future__ import annotations

import math
import random

from gpuipc_bench import robust


def test_ci_rank_matches_the_binomial_tables():
    # n = 6: [x(1), x(6)] covers 96.9%; n = 20: [x(6), x(15)] covers 95.9%.
    assert robust.ci_rank(5) is None
    assert robust.ci_rank(6) == 1
    assert robust.ci_rank(20) == 6
    assert robust.ci_rank(100) == 40


def test_median_ci_covers_the_true_median_about_95_percent_of_the_time():
    rng = random.Random(7)
    hits = trials = 0
    for _ in range(2000):
        xs = [rng.expovariate(1.0) for _ in range(12)]  # skewed: the true median is ln 2
        lo, _, hi = robust.median_ci(xs)
        trials += 1
        hits += lo <= math.log(2) <= hi
    assert 0.93 <= hits / trials <= 0.995


def test_mad_ignores_one_stray_sample():
    xs = [55.2] * 19 + [25.6]
    assert robust.mad(xs) == 0.0
    assert robust.median(xs) == 55.2


def test_bimodal_flags_two_clusters_and_not_one():
    two = [26.8] * 9 + [28.0] * 10 + [14.6]
    one = [28.0 + 0.01 * k for k in range(20)]
    assert robust.bimodal(two)
    assert not robust.bimodal(one)
    assert not robust.bimodal([55.2] * 19 + [25.6])  # one outlier is not a mode
    noisy = [1.0, 1.01, 1.03, 1.06, 1.09, 1.12, 1.15, 1.18, 1.21, 1.24]  # 3% steps: one wide mode
    assert not robust.bimodal(noisy)
    assert robust.bimodal([276.0 + 0.05 * k for k in range(12)] + [284.2 + 0.05 * k for k in range(8)])


def test_enough_stops_a_quiet_group_at_the_minimum():
    quiet = [1.0 + 0.001 * (k % 3) for k in range(6)]
    assert not robust.enough(quiet[:5])
    assert robust.enough(quiet)


def test_enough_keeps_a_noisy_group_until_the_maximum():
    rng = random.Random(1)
    noisy = [1.0 + rng.uniform(-0.2, 0.2) for _ in range(20)]
    assert not any(robust.enough(noisy[:n]) for n in range(1, 20))
    assert robust.enough(noisy)


def test_a_wide_range_needs_twelve_samples():
    xs = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.1, 1.0, 1.0]
    assert not robust.enough(xs)  # 11 samples, range 10%: not yet
    assert robust.enough(xs + [1.0])


def test_a_nan_sample_never_stops_the_loop_early():
    xs = [1.0] * 6 + [math.nan]
    assert not robust.enough(xs)
    assert robust.enough([math.nan] * 20)
