"""The verdict (rankings per size band, ties decided by a U test and a minimum effect) and the
break-even, on hand-made frames with seeded noise."""

from __future__ import annotations

import itertools
import math
import random

import pandas as pd
import pytest

from gpuipc_bench.analysis import analyse, samples_by_condition, summarize
from gpuipc_bench.paths import BUILTIN
from gpuipc_bench.results import empty_frame, new_row, typed_frame
from gpuipc_bench.verdict import (
    Band,
    Crossing,
    _u_counts,
    break_even,
    candidates,
    differ,
    mann_whitney_p,
    rankings,
)

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


def ranked(*groups, min_effect=0.02, mixed=False):
    df = frame([row for group in groups for row in group])
    found = samples_by_condition(df)
    return rankings(summarize(df, found, PATHS), found, PATHS, min_effect=min_effect, mixed_measures=mixed)


def bands(ranking):
    return [(b.lo_bytes, b.hi_bytes, b.winner) for b in ranking.bands]


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


def test_a_3_percent_gap_with_0_2_percent_noise_is_a_difference():
    rng = random.Random(11)
    a = [1.00 * (1 + rng.gauss(0, 0.002)) for _ in range(20)]
    b = [1.03 * (1 + rng.gauss(0, 0.002)) for _ in range(20)]
    assert differ(a, b) and differ(b, a)


def test_an_8_percent_gap_with_20_percent_noise_is_a_tie():
    rng = random.Random(5)
    a = [1.00 * (1 + rng.gauss(0, 0.2)) for _ in range(20)]
    b = [1.08 * (1 + rng.gauss(0, 0.2)) for _ in range(20)]
    assert mann_whitney_p(a, b) > 0.05
    assert not differ(a, b)


def test_a_significant_gap_under_the_minimum_effect_is_a_tie():
    a = [1.000 + 1e-5 * i for i in range(20)]
    b = [1.015 + 1e-5 * i for i in range(20)]
    assert mann_whitney_p(a, b) < 1e-6
    assert not differ(a, b) and differ(a, b, min_effect=0.01)


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


def test_aggregates_and_sharing_rows_never_win():
    r = ranked(measured("ipc", "ce", linear(2e-6, 1000)),
               measured("sharing", "d2d-aggregate", linear(1e-6, 5000)),
               measured("staging", "pinned", linear(20e-6, 25), measure="handoff"), mixed=True)
    (only,) = r
    assert only.candidates == ("staging/pinned", "ipc/ce")
    assert {b.winner for b in only.bands} == {"ipc/ce"}


# --------------------------------------------------------------------------- winners, bands, ties


def test_winner_per_size_then_bands():
    # staging: low latency, low bandwidth; ipc: high latency, high bandwidth -> crossing near 1.5 MB
    (r,) = ranked(measured("staging", "pinned", linear(2e-6, 20)), measured("ipc", "ce", linear(80e-6, 1000)))
    assert (r.src, r.dst, r.sharing, r.measure) == ("0", "0", "time-sliced", "stream")
    assert bands(r) == [(4, MIB, "staging/pinned"), (4 * MIB, 16 * MIB, "ipc/ce")]
    small, large = r.bands
    assert small.runner_up == "ipc/ce" and large.runner_up == "staging/pinned"
    assert small.margin_min == pytest.approx(linear(80e-6, 1000)(MIB) / linear(2e-6, 20)(MIB), rel=1e-3)
    assert small.margin_max == pytest.approx(linear(80e-6, 1000)(4) / linear(2e-6, 20)(4), rel=1e-3)
    assert large.winner_gbps[1] == pytest.approx(16 * MIB / linear(80e-6, 1000)(16 * MIB) / 1e9, rel=1e-3)
    lo, med, hi = large.winner_gbps
    assert lo <= med <= hi


def test_the_fastest_median_wins_each_size_not_the_longest_run():
    # push is fastest at 4 B and 16 MiB by 5%, ce everywhere between: three bands, never push over ce's sizes
    push = {4: 0.95, 4 * KIB: 1.05, MIB: 1.05, 4 * MIB: 1.05, 16 * MIB: 0.95}
    (r,) = ranked(measured("ipc", "ce", linear(2e-6, 500)),
                  measured("ipc", "push", lambda s: linear(2e-6, 500)(s) * push[s]))
    assert bands(r) == [(4, 4, "ipc/push"), (4 * KIB, 4 * MIB, "ipc/ce"), (16 * MIB, 16 * MIB, "ipc/push")]
    for band in r.bands:
        for size in band.sizes:
            result = next(s for s in r.sizes if s.bytes == size)
            assert band.winner in result.leaders  # fastest, or tied with the fastest


def test_ties_merge_sizes_and_are_listed_with_the_winner():
    # ce and push alternate as the fastest by under 2%: one band, the other tied
    wobble = {4: 1.00, 4 * KIB: 1.015, MIB: 0.99, 4 * MIB: 1.01, 16 * MIB: 0.985}
    (r,) = ranked(measured("ipc", "ce", linear(2e-6, 500)),
                  measured("ipc", "push", lambda s: linear(2e-6, 500)(s) * wobble[s]),
                  measured("staging", "pinned", linear(20e-6, 25)))
    (band,) = r.bands
    assert (band.lo_bytes, band.hi_bytes) == (4, 16 * MIB)
    assert {band.winner, *band.tied} == {"ipc/ce", "ipc/push"}
    assert band.runner_up == "staging/pinned" and band.margin_min > 1


def test_a_3_percent_gap_with_0_2_percent_noise_wins_the_band():
    (r,) = ranked(measured("ipc", "ce", linear(2e-6, 500), noise=0.002, n=20),
                  measured("ipc", "push", lambda s: linear(2e-6, 500)(s) * 1.03, noise=0.002, n=20))
    (band,) = r.bands
    assert band.winner == "ipc/ce" and band.tied == () and band.tied_at == ()
    assert band.runner_up == "ipc/push" and 1.02 < band.margin_min <= band.margin_max < 1.04


def test_an_8_percent_gap_with_20_percent_noise_names_no_winner_over_the_other():
    (r,) = ranked(measured("ipc", "ce", linear(2e-6, 500), noise=0.2, n=20),
                  measured("ipc", "push", lambda s: linear(2e-6, 500)(s) * 1.08, noise=0.2, n=20))
    for s in r.sizes:
        # Either both are ranked and tied, or (their interval being wide) they are not ranked at all.
        assert len(s.leaders) == len(s.medians)


def ceiling_of(scenario, key, seconds_at, sizes=SIZES):
    """Ceiling rows of `key` measured in `scenario` (what bounds that scenario's figures)."""
    rows = measured("ceiling", key, seconds_at, sizes=sizes, workers=1)
    return [{**r, "scenario": scenario} for r in rows]


def two_processes_one_copy(gap, fraction=1.0):
    """ipc/ce and peer/ce (standing in for any two paths whose figure is one d2d copy), each
    in a scenario of its own whose copies cost `gap` more in one of them, ceilings included."""
    slow = lambda s: linear(2e-6, 500)(s) * gap  # noqa: E731
    fast = linear(2e-6, 500)
    return (measured("ipc", "ce", lambda s: fast(s) / fraction, ceiling="d2d@0"),
            ceiling_of("ipc", "d2d@0", fast),
            measured("peer", "ce", slow, ceiling="d2d@0/producer"),
            ceiling_of("peer", "d2d@0/producer", slow))


def test_one_copy_measured_in_two_processes_is_a_tie_when_their_ceilings_differ_as_much():
    (r,) = ranked(*two_processes_one_copy(1.08))  # 8% apart, and so are their own ceilings
    assert all(set(s.leaders) == {"ipc/ce", "peer/ce"} for s in r.sizes)


def test_the_same_copy_rule_needs_the_figures_at_their_ceilings_and_the_gap_unexplained_is_kept():
    (r,) = ranked(*two_processes_one_copy(1.08, fraction=0.8))  # ipc at 80% of its ceiling: no claim
    assert all(s.leaders == ("peer/ce",) for s in r.sizes)
    slow = lambda s: linear(2e-6, 500)(s) * 1.08  # noqa: E731
    groups = (measured("ipc", "ce", linear(2e-6, 500), ceiling="d2d@0"), ceiling_of("ipc", "d2d@0", linear(2e-6, 500)),
              measured("peer", "ce", slow, ceiling="d2d@0/producer"),
              ceiling_of("peer", "d2d@0/producer", linear(2e-6, 500)))  # same ceilings: the 8% is the path's
    (r,) = ranked(*groups)
    assert all(s.leaders == ("ipc/ce",) for s in r.sizes)


def test_figures_under_different_ceilings_are_never_the_same_copy():
    from types import SimpleNamespace as Row

    from gpuipc_bench.verdict import same_copy

    def row(ceiling, fraction=1.0):
        return Row(ceiling=ceiling, fraction_of_ceiling=fraction)

    assert same_copy(row("d2d@0"), row("d2d@0/producer", 0.99))
    assert not same_copy(row("d2d@0"), row("d2d-sm@0"))
    assert not same_copy(Row(ceiling="d2h@0+h2d@0", fraction_of_ceiling=1.0),
                         Row(ceiling="d2h@0+h2d@0", fraction_of_ceiling=1.0))
    assert not same_copy(Row(ceiling="", fraction_of_ceiling=math.nan), Row(ceiling="", fraction_of_ceiling=math.nan))
    assert not same_copy(Row(ceiling="d2d@0", fraction_of_ceiling=1.0), Row(ceiling="d2d@0", fraction_of_ceiling=0.97))


def test_a_bimodal_group_is_not_ranked_and_the_verdict_says_why():
    twin = {4 * KIB: True}

    def bimodal(size):
        return linear(1e-6, 600)(size)

    rows = measured("ipc", "ce", linear(2e-6, 500))
    push = measured("ipc", "push", bimodal)
    for row in push:
        if twin.get(row["bytes"]) and row["iteration"] % 2:
            row["seconds"] *= 1.10
    (r,) = ranked(rows, push)
    at = next(s for s in r.sizes if s.bytes == 4 * KIB)
    assert at.fastest == "ipc/ce" and at.unranked == (("ipc/push", "bimodal"),)
    band = next(b for b in r.bands if 4 * KIB in b.sizes)
    assert band.winner == "ipc/ce" and ("ipc/push", "bimodal", (4 * KIB,)) in band.unranked


def test_few_samples_are_not_ranked_and_nothing_ranked_gives_a_band_without_winner():
    (r,) = ranked(measured("ipc", "ce", linear(2e-6, 500), n=3), measured("ipc", "sm", linear(2e-6, 500), n=4))
    (band,) = r.bands
    assert band.winner is None and {lab for lab, _, _ in band.unranked} == {"ipc/ce", "ipc/sm"}


def test_links_sharing_modes_and_measures_are_ranked_apart():
    r = ranked(measured("ipc", "ce", linear(2e-6, 1000)),
               measured("ipc", "ce", linear(20e-6, 1000), measure="handoff"),
               measured("staging", "pinned", linear(20e-6, 25), measure="handoff"),
               measured("ipc", "sm", linear(2e-6, 1000), sharing="mps"),
               measured("mmap", "h2d", linear(2e-6, 50), src="host", dst="0"),
               measured("peer", "ce", linear(3e-6, 300), src="0", dst="1", sharing="exclusive"))
    assert [(x.src, x.dst, x.sharing, x.measure) for x in r] == [
        ("0", "0", "mps", "stream"), ("0", "0", "time-sliced", "handoff"), ("0", "0", "time-sliced", "stream"),
        ("0", "1", "exclusive", "stream"), ("host", "0", "time-sliced", "stream")]
    handoff = r[1]
    assert handoff.candidates == ("staging/pinned", "ipc/ce")


def test_a_schema_1_file_is_ranked_with_its_measures_mixed():
    (r,) = ranked(measured("ipc", "ce", linear(2e-6, 1000)),
                  measured("staging", "pinned", linear(20e-6, 25), measure="handoff"), mixed=True)
    assert r.measure == "mixed" and set(r.candidates) == {"ipc/ce", "staging/pinned"}


def test_l2_resident_sizes_are_marked():
    rows = measured("ipc", "ce", linear(2e-6, 1000)) + measured("ipc", "sm", linear(2e-6, 800))
    for row in rows:
        row["l2_resident"] = row["bytes"] <= MIB
    (r,) = ranked(rows)
    assert r.bands[0].l2_sizes == (4, 4 * KIB, MIB)


def test_the_margin_never_says_the_next_path_is_faster():
    rng = random.Random(9)
    for trial in range(20):
        factors = {s: rng.uniform(0.9, 1.1) for s in SIZES}
        groups = [measured("ipc", v, lambda s, f=factors, k=k: linear(2e-6, 500)(s) * (f[s] if k else 1),
                           noise=0.01, n=12, seed=trial) for k, v in enumerate(("ce", "sm"))]
        groups.append(measured("staging", "pinned", lambda s: linear(2e-6, 500)(s) * rng.uniform(0.95, 1.2),
                               noise=0.01, n=12, seed=trial))
        for r in ranked(*groups):
            for band in r.bands:
                assert math.isnan(band.margin_min) or band.margin_min > 1


def test_no_samples_no_rankings():
    assert ranked([]) == []
    df = frame(setup_rows("ipc", "ipc_open_cold", 1e-4))
    assert analyse(df, {"schema_version": "2"}).rankings == []


def test_band_defaults():
    band = Band(lo_bytes=4, hi_bytes=8, sizes=(4, 8), winner="ipc/ce")
    assert band.runner_up is None and math.isnan(band.margin_min) and band.tied == ()


# --------------------------------------------------------------------------- break-even

STAGING = linear(20e-6, 25)  # 20 µs + 25 GB/s
IPC = linear(2e-6, 1000)


def break_even_of(*groups, amortise_over=1000, mixed=False):
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
