"""Comparing two figures (the U test, the separation test, three outcomes), the candidates
and the break-even, on hand-made frames with seeded noise. The decisions built on them:
test_decisions.py."""

from __future__ import annotations

import itertools
import math
import random

import pandas as pd
import pytest

from gpuipc_bench.analysis import samples_by_condition, summarize
from gpuipc_bench.analysis.breakeven import Crossing, break_even
from gpuipc_bench.analysis.stats import (
    FASTER,
    SAME,
    SLOWER,
    UNDECIDED,
    _u_counts,
    compare,
    mann_whitney_p,
    range_coverage,
    separation_p,
)
from gpuipc_bench.analysis.verdict import candidates
from gpuipc_bench.paths import BUILTIN
from gpuipc_bench.results import empty_frame, new_row, typed_frame

KIB, MIB = 1 << 10, 1 << 20
SIZES = (4, 4 * KIB, MIB, 4 * MIB, 16 * MIB)
PATHS = {p.name: p for p in BUILTIN}


def frame(rows: list[dict]) -> pd.DataFrame:
    return typed_frame(pd.DataFrame.from_records(rows)) if rows else empty_frame()


def measured(path, variant, seconds_at, sizes=SIZES, src="0", dst="0", n=10, noise=0.0, seed=1, measure="stream",
             workers=2, sharing="time-sliced", verified=True, **fields):
    """`n` samples per size around `seconds_at(size)`: noise 0 gives a tiny deterministic
    spread (0.01%), else Gaussian noise of that relative size, seeded."""
    rng = random.Random(f"{path}/{variant}/{seed}")
    rows = []
    for size in sizes:
        for i in range(n):
            jitter = rng.gauss(0, noise) if noise else 1e-4 * ((i % 5) - 2)
            rows.append(new_row(scenario=path, path=path, variant=variant, measure=measure, src=src, dst=dst,
                                bytes=size, iteration=i, seconds=seconds_at(size) * (1 + jitter), verified=verified,
                                workers=workers, sharing=sharing, **fields))
    return rows


def setup_rows(path, op, seconds, nbytes=0, src="0", dst="0", n=6, spread=0.01):
    return [new_row(scenario=path, path=path, variant=op, metric="setup", src=src, dst=dst, bytes=nbytes,
                    seconds=seconds * (1 + spread * (i - n / 2) / n), iteration=i, workers=2, sharing="time-sliced")
            for i in range(n)]


def linear(latency_s: float, gbps: float):
    return lambda size: latency_s + size / (gbps * 1e9)


# --------------------------------------------------------------------------- the U test


def test_exact_distribution_counts_every_ordering():
    for m, n in ((1, 1), (3, 4), (5, 5), (8, 3)):
        counts = _u_counts(m, n)
        assert len(counts) == m * n + 1 and sum(counts) == math.comb(m + n, m)
        assert counts == counts[::-1]  # symmetric about m n / 2


def test_exact_p_values_of_fully_separated_samples():
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(2 / 20)
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert mann_whitney_p([6, 7, 8, 9, 10], [1, 2, 3, 4, 5]) == pytest.approx(2 / 252)


def test_exact_p_value_by_brute_force():
    a, b = [1.0, 4.0, 6.0, 7.5], [2.0, 3.0, 5.0, 8.0, 9.0]
    pooled = a + b
    u_obs = sum(x > y for x in a for y in b)
    us = [sum(pooled[i] > pooled[j] for i in idx for j in set(range(9)) - set(idx))
          for idx in itertools.combinations(range(9), 4)]
    expected = 2 * min(sum(u <= u_obs for u in us), sum(u >= u_obs for u in us)) / len(us)
    assert mann_whitney_p(a, b) == pytest.approx(min(1.0, expected))


def test_normal_approximation_with_ties_agrees_with_the_exact_test_roughly():
    rng = random.Random(3)
    a = [rng.gauss(1.0, 0.1) for _ in range(20)]
    b = [rng.gauss(1.08, 0.1) for _ in range(20)]
    exact = mann_whitney_p(a, b)
    tied = mann_whitney_p([round(x, 2) for x in a], [round(x, 2) for x in b])  # ties: the normal approximation
    assert abs(exact - tied) < 0.03


def test_identical_or_empty_samples_are_no_evidence():
    assert mann_whitney_p([1.0] * 10, [1.0] * 10) == 1.0
    assert mann_whitney_p([], [1.0, 2.0]) == 1.0


def test_faster_from_three_separated_samples_a_side():
    a, b = [1.00, 1.01, 1.02], [1.10, 1.11, 1.12]
    assert separation_p(3, 3) == pytest.approx(0.05)
    assert mann_whitney_p(a, b) == pytest.approx(0.10)  # the U test alone could never decide at 3 against 3
    result = compare(a, b)
    assert result.outcome == FASTER and result.separated and result.ratio == pytest.approx(1.11 / 1.01)
    assert compare(b, a).outcome == SLOWER


def test_overlapping_samples_below_five_a_side_are_undecided_however_far_the_medians():
    assert compare([1.00, 1.01, 1.15], [1.10, 1.11, 1.12]).outcome == UNDECIDED


def test_from_five_a_side_the_rank_test_decides_overlapping_samples():
    rng = random.Random(11)
    a = [1.00 * (1 + rng.gauss(0, 0.01)) for _ in range(20)] + [1.2]
    b = [1.05 * (1 + rng.gauss(0, 0.01)) for _ in range(20)]
    result = compare(a, b)
    assert not result.separated and result.outcome == FASTER


def test_same_is_an_equivalence_the_ratio_interval_within_delta():
    a = [1.000 + 1e-4 * i for i in range(6)]
    b = [1.005 + 1e-4 * i for i in range(6)]
    result = compare(a, b)
    assert result.outcome == SAME and 1 - 0.02 <= result.ratio_lo <= result.ratio_hi <= 1 + 0.02


def test_a_significant_gap_under_delta_is_the_same_not_faster():
    a = [1.000 + 1e-5 * i for i in range(20)]
    b = [1.015 + 1e-5 * i for i in range(20)]
    assert mann_whitney_p(a, b) < 1e-6
    assert compare(a, b).outcome == SAME and compare(a, b, delta=0.01).outcome == FASTER


def test_noisy_samples_are_undecided_never_silently_the_same():
    rng = random.Random(5)
    a = [1.00 * (1 + rng.gauss(0, 0.2)) for _ in range(20)]
    b = [1.01 * (1 + rng.gauss(0, 0.2)) for _ in range(20)]
    assert compare(a, b).outcome == UNDECIDED


def test_same_needs_three_samples_a_side():
    assert compare([1.0, 1.0001], [1.0, 1.0002]).outcome == UNDECIDED
    assert compare([1.0, 1.0001, 1.0002], [1.0, 1.0002, 1.0001]).outcome == SAME


def test_range_coverage_of_the_median():
    assert [round(range_coverage(n), 4) for n in (3, 4, 5)] == [0.75, 0.875, 0.9375]


# --------------------------------------------------------------------------- candidates


def test_only_paths_between_the_same_two_processes_are_candidates():
    rows = (measured("ipc", "ce", linear(2e-6, 1000))
            + measured("sharing", "d2d", linear(1e-6, 2000), workers=1)
            + measured("sharing", "d2d-aggregate", linear(1e-6, 5000), workers=2)
            + measured("peer", "p2p-off", linear(1e-6, 5000), src="0", dst="1")
            + measured("peer", "ce", linear(3e-6, 300), src="0", dst="1")
            + measured("ceiling", "d2d@0", linear(0.5e-6, 3000))
            + measured("host", "shared-buffer", linear(1e-6, 3000), src="host", dst="host")
            + measured("ipc", "sm", linear(1e-6, 3000), workers=4)
            + measured("ipc", "push", linear(1e-6, 3000), verified=False))
    summary = summarize(frame(rows), paths=PATHS)
    assert sorted(set(candidates(summary, PATHS)["label"])) == ["ipc/ce", "peer/ce"]


# --------------------------------------------------------------------------- break-even

STAGING = linear(20e-6, 25)  # 20 µs + 25 GB/s
IPC = linear(2e-6, 1000)


def break_even_of(*groups, amortise_over=1000, mixed=False):  # noqa: D103
    df = frame([row for group in groups for row in group])
    found = samples_by_condition(df)
    return break_even(summarize(df, found, PATHS), PATHS, found, amortise_over=amortise_over, mixed_measures=mixed)


def test_break_even_amortised_and_per_transfer():
    (be,) = break_even_of(measured("staging", "pinned", STAGING), measured("ipc", "ce", IPC),
                          setup_rows("ipc", "ipc_open_cold", 100e-6, nbytes=16 * MIB))
    assert (be.path, be.src, be.dst, be.setup, be.variants) == ("ipc", "0", "0", ("ipc_open_cold",), ("ce",))
    assert be.baseline == "staging" and be.measure == "stream" and be.setup_samples == 6
    assert be.setup_s == pytest.approx(100e-6, rel=0.01) and be.setup_lo_s < be.setup_s < be.setup_hi_s
    assert be.sizes == SIZES
    assert be.amortised == Crossing(4, None, ((4, 16 * MIB),), 4, 4)  # 0.1 µs per transfer: wins everywhere
    # 100 µs + 2 µs + s/1e12 < 20 µs + s/25e9  <=>  s > 2.1 MB: from 4 MiB, loses at 1 MiB
    assert be.per_transfer.from_bytes == 4 * MIB and be.per_transfer.last_loss == MIB
    assert not be.per_transfer.uncertain
    (once,) = break_even_of(measured("staging", "pinned", STAGING), measured("ipc", "ce", IPC),
                            setup_rows("ipc", "ipc_open_cold", 100e-6), amortise_over=1)
    assert once.amortised.from_bytes == be.per_transfer.from_bytes


def test_break_even_carries_the_uncertainty_of_a_wide_setup_cost():
    # the cost spreads 50-150 µs: at 1 MiB it may win (50 µs) or lose (150 µs)
    sizes = (256 * KIB, MIB, 2 * MIB, 4 * MIB, 16 * MIB)
    (be,) = break_even_of(measured("staging", "pinned", STAGING, sizes=sizes), measured("ipc", "ce", IPC, sizes=sizes),
                          setup_rows("ipc", "ipc_open_cold", 100e-6, n=10, spread=1.0))
    c = be.per_transfer
    assert c.uncertain and c.earliest < c.latest
    assert c.earliest <= c.from_bytes <= c.latest


def test_break_even_never_when_the_setup_is_too_dear():
    (be,) = break_even_of(measured("staging", "pinned", STAGING), measured("ipc", "ce", IPC),
                          setup_rows("ipc", "ipc_open_cold", 10.0))
    assert be.amortised.never and be.per_transfer.never and be.amortised.from_bytes is None


def test_break_even_needs_the_baseline_on_the_same_link_and_a_cost_measured_there():
    # peer 0 -> 1 with staging measured only 0 -> 0: no break-even (never set against another link)
    assert break_even_of(measured("staging", "pinned", STAGING), measured("peer", "ce", linear(3e-6, 300), src="0",
                                                                          dst="1"),
                         setup_rows("peer", "ipc_open_cold", 2e-3, src="0", dst="1")) == []
    # a cost measured between other devices is not charged
    assert break_even_of(measured("staging", "pinned", STAGING, src="0", dst="1"),
                         measured("peer", "ce", linear(3e-6, 300), src="0", dst="1"),
                         setup_rows("peer", "peer_enable", 1e-3, src="2", dst="3")) == []
    (be,) = break_even_of(measured("staging", "pinned", STAGING, src="0", dst="1"),
                          measured("peer", "ce", linear(3e-6, 300), src="0", dst="1"),
                          measured("peer", "p2p-off", linear(15e-6, 30), src="0", dst="1"),  # a reference: left out
                          setup_rows("peer", "ipc_open_cold", 2e-3, src="0", dst="1"),
                          setup_rows("peer", "peer_enable", 1e-3, src="1", dst="0"),  # the same two devices
                          setup_rows("peer", "peer_enable", 9e-3, src="2", dst="0"))
    assert be.variants == ("ce",) and be.setup == ("ipc_open_cold", "peer_enable")
    assert be.setup_s == pytest.approx(3e-3, rel=0.02)


def test_break_even_charges_a_host_registration_by_one_of_the_two_processes():
    rows = (measured("staging", "pinned", STAGING, measure="handoff"), measured("mmap", "dma", linear(2e-6, 50),
                                                                               measure="handoff"))
    (be,) = break_even_of(*rows, setup_rows("mmap", "host_register", 1e-3, src="host", dst="0"))
    assert be.setup == ("host_register",) and not be.composed and be.setup_s == pytest.approx(1e-3, rel=0.01)
    assert break_even_of(*rows, setup_rows("mmap", "host_register", 1e-3, src="host", dst="2")) == []


def test_break_even_compares_one_measure_handoff_first():
    (be,) = break_even_of(measured("staging", "pinned", STAGING, measure="handoff"),
                          measured("staging", "pinned", linear(10e-6, 25), measure="stream"),
                          measured("ipc", "ce", IPC, measure="stream"),
                          measured("ipc", "ce", linear(15e-6, 1000), measure="handoff"),
                          setup_rows("ipc", "ipc_open_cold", 100e-6))
    assert be.measure == "handoff"
    assert break_even_of(measured("staging", "pinned", STAGING, measure="handoff"), measured("ipc", "ce", IPC),
                         setup_rows("ipc", "ipc_open_cold", 100e-6)) == []  # nothing like-for-like
    (mixed,) = break_even_of(measured("staging", "pinned", STAGING, measure="handoff"), measured("ipc", "ce", IPC),
                             setup_rows("ipc", "ipc_open_cold", 100e-6), mixed=True)
    assert mixed.measure == "mixed"


def test_break_even_of_mmap_adds_its_halves_and_pays_registration_by_size():
    halves = linear(2e-6, 50)
    register = {n: 50e-6 + n / 5e9 for n in SIZES}
    (be,) = break_even_of(
        measured("staging", "pinned", STAGING),
        measured("mmap", "d2h", halves, src="0", dst="host"),
        measured("mmap", "h2d", halves, src="host", dst="0"),
        *[setup_rows("mmap", "host_register", register[n], nbytes=n, src="host", dst="0", spread=0) for n in SIZES],
    )
    assert be.composed and be.size_dependent and (be.src, be.dst) == ("0", "0")
    assert be.setup_s == pytest.approx(register[16 * MIB]) and be.setup_min_s == pytest.approx(register[4])
    wins = [register[n] / 1000 + 2 * halves(n) < STAGING(n) for n in SIZES]
    assert [any(lo <= n <= hi for lo, hi in be.amortised.wins) for n in SIZES] == wins
