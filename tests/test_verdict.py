"""Verdicts (fastest path per size band), break-even sizes and run comparison, on hand-made frames."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gpuipc_bench.results import empty_frame, new_row, typed_frame
from gpuipc_bench.stats import Band, Crossing, break_even, compare, summarize, verdicts

KIB, MIB = 1 << 10, 1 << 20
SIZES = (4, 4 * KIB, MIB, 4 * MIB, 16 * MIB)


def frame(rows: list[dict]) -> pd.DataFrame:
    return typed_frame(pd.DataFrame.from_records(rows))


def measured(path, variant, seconds_at, sizes=SIZES, src="0", dst="0", samples=5, verified=True, **fields):
    """`samples` rows per size, each `seconds_at(size)` (the median, exactly)."""
    rows = []
    for size in sizes:
        for i in range(samples):
            rows.append(new_row(scenario=path, path=path, variant=variant, src=src, dst=dst, bytes=size, iteration=i,
                                seconds=seconds_at(size), verified=verified, workers=2, sharing="time-sliced",
                                **fields))
    return rows


def setup_row(path, op, seconds, nbytes=0, src="0", dst="0"):
    return new_row(scenario=path, path=path, variant=op, metric="setup", src=src, dst=dst, bytes=nbytes,
                   seconds=seconds, workers=2, sharing="time-sliced")


def linear(latency_s: float, gbps: float):
    return lambda size: latency_s + size / (gbps * 1e9)


def summary_of(*groups: list[dict]) -> pd.DataFrame:
    return summarize(frame([row for group in groups for row in group]))


# --------------------------------------------------------------------------- verdicts


def test_two_paths_split_the_sizes_into_two_bands():
    # staging: low latency, low bandwidth; ipc: high latency, high bandwidth -> crossing near 1.5 MB
    s = summary_of(measured("staging", "pinned", linear(2e-6, 20)), measured("ipc", "ce", linear(80e-6, 1000)))
    (v,) = verdicts(s)
    assert (v.src, v.dst) == ("0", "0")
    assert v.candidates == ("staging/pinned", "ipc/ce")
    assert [(b.lo_bytes, b.hi_bytes, b.winner) for b in v.bands] == [(4, MIB, "staging/pinned"),
                                                                     (4 * MIB, 16 * MIB, "ipc/ce")]
    small, large = v.bands
    assert small.runner_up == "ipc/ce" and large.runner_up == "staging/pinned"
    # the other path's time over the winner's, size by size over the band
    assert small.margin_min == pytest.approx(linear(80e-6, 1000)(MIB) / linear(2e-6, 20)(MIB))
    assert small.margin_max == pytest.approx(linear(80e-6, 1000)(4) / linear(2e-6, 20)(4))
    assert large.winner_gbps == pytest.approx(16 * MIB / linear(80e-6, 1000)(16 * MIB) / 1e9)
    assert large.winner_lo_s == pytest.approx(linear(80e-6, 1000)(4 * MIB))


def test_figures_within_the_tie_margin_do_not_split_a_band():
    # ce and push alternate as the fastest by 1-2%: one band, the other named as tied
    wobble = {4: 1.00, 4 * KIB: 1.02, MIB: 0.99, 4 * MIB: 1.015, 16 * MIB: 0.985}
    s = summary_of(measured("ipc", "ce", linear(2e-6, 500)),
                   measured("ipc", "push", lambda size: linear(2e-6, 500)(size) * wobble[size]),
                   measured("staging", "pinned", linear(20e-6, 25)))
    (v,) = verdicts(s)
    (band,) = v.bands
    assert (band.lo_bytes, band.hi_bytes) == (4, 16 * MIB)
    assert band.winner in ("ipc/ce", "ipc/push") and band.tied == tuple({"ipc/ce", "ipc/push"} - {band.winner})
    assert band.runner_up == "staging/pinned" and band.margin_min > 1


def test_a_tie_margin_of_zero_splits_on_every_change_of_leader():
    wobble = {4: 1.00, 4 * KIB: 1.02, MIB: 0.99, 4 * MIB: 1.015, 16 * MIB: 0.985}
    s = summary_of(measured("ipc", "ce", linear(2e-6, 500)),
                   measured("ipc", "push", lambda size: linear(2e-6, 500)(size) * wobble[size]))
    (v,) = verdicts(s, tie=0.0)
    assert len(v.bands) == 4  # push ties at 4 B and wins there in the tie-break; then ce, push, ce, push
    assert all(b.runner_up is None for b in v.bands)  # one path only: no other path to name


def test_ceilings_and_failed_samples_never_win():
    s = summary_of(
        measured("staging", "pinned", linear(20e-6, 25)),
        measured("ipc", "sm", linear(1e-6, 2000), verified=False),  # fastest, but the bytes were wrong
        measured("ceiling", "d2d@0", linear(0.5e-6, 3000)),
    )
    (v,) = verdicts(s)
    assert v.candidates == ("staging/pinned",)
    assert [b.winner for b in v.bands] == ["staging/pinned"]


def test_each_link_has_its_verdict_gpu_links_first():
    s = summary_of(
        measured("mmap", "h2d", linear(2e-6, 50), src="host", dst="0"),
        measured("peer", "ce", linear(3e-6, 300), src="0", dst="1"),
        measured("ipc", "ce", linear(2e-6, 1000)),
    )
    assert [(v.src, v.dst) for v in verdicts(s)] == [("0", "0"), ("0", "1"), ("host", "0")]


def test_sizes_measured_by_one_path_only_still_get_a_winner():
    s = summary_of(measured("staging", "pinned", linear(20e-6, 25), sizes=(4, 4 * KIB, MIB)),
                   measured("ipc", "ce", linear(2e-6, 1000), sizes=(MIB, 16 * MIB)))
    (v,) = verdicts(s)
    assert [(b.lo_bytes, b.hi_bytes, b.winner) for b in v.bands] == [(4, 4 * KIB, "staging/pinned"),
                                                                     (MIB, 16 * MIB, "ipc/ce")]


def test_no_samples_no_verdicts():
    assert verdicts(summarize(empty_frame())) == [] and break_even(summarize(empty_frame())) == []
    s = summary_of([setup_row("ipc", "ipc_open_cold", 1e-4)])
    assert verdicts(s) == []


# --------------------------------------------------------------------------- break-even


STAGING = linear(20e-6, 25)  # 20 µs + 25 GB/s
IPC = linear(2e-6, 1000)


def test_break_even_amortised_and_per_transfer():
    s = summary_of(measured("staging", "pinned", STAGING), measured("ipc", "ce", IPC),
                   [setup_row("ipc", "ipc_open_cold", 100e-6, nbytes=16 * MIB)])
    (be,) = break_even(s, amortise_over=1000)
    assert (be.path, be.src, be.dst, be.setup, be.variants) == ("ipc", "0", "0", ("ipc_open_cold",), ("ce",))
    assert be.setup_s == pytest.approx(100e-6) and not be.size_dependent and not be.composed
    assert be.sizes == SIZES
    # 0.1 µs per transfer: ipc wins everywhere
    assert be.amortised == Crossing(4, None, ((4, 16 * MIB),))
    # 100 µs + 2 µs + s/1e12 < 20 µs + s/25e9  <=>  s > 2.1 MB: from 4 MiB, loses at 1 MiB
    assert be.per_transfer == Crossing(4 * MIB, MIB, ((4 * MIB, 16 * MIB),))
    # N = 1 is the per-transfer case
    (once,) = break_even(s, amortise_over=1)
    assert once.amortised == be.per_transfer


def test_break_even_never_when_the_setup_is_too_dear():
    s = summary_of(measured("staging", "pinned", STAGING), measured("ipc", "ce", IPC),
                   [setup_row("ipc", "ipc_open_cold", 10.0)])
    (be,) = break_even(s, amortise_over=10)
    assert be.amortised == Crossing(None, None, ()) and be.amortised.never
    assert be.per_transfer.never


def test_break_even_that_holds_only_below_a_size_has_no_break_even_size():
    slow_at_large = linear(1e-6, 5)  # faster than staging when small, slower when large
    s = summary_of(measured("staging", "pinned", STAGING), measured("ipc", "ce", slow_at_large),
                   [setup_row("ipc", "ipc_open_cold", 1e-6)])
    (be,) = break_even(s)
    assert be.amortised.from_bytes is None and be.amortised.wins == ((4, 4 * KIB),)
    assert not be.amortised.never


def test_break_even_takes_the_best_variant_of_each_side_at_each_size():
    s = summary_of(measured("staging", "pinned", STAGING), measured("staging", "pipelined", linear(200e-6, 50)),
                   measured("ipc", "sm", linear(2e-6, 100)), measured("ipc", "ce", IPC),
                   [setup_row("ipc", "ipc_open_cold", 100e-6)])
    (be,) = break_even(s)
    assert set(be.variants) == {"ce", "sm"}
    # per transfer: vs the best staging (pinned below ~10 MB, pipelined above)
    best_staging = {n: min(STAGING(n), linear(200e-6, 50)(n)) for n in SIZES}
    wins = [100e-6 + IPC(n) < best_staging[n] for n in SIZES]
    assert wins == [False, False, False, True, True]
    assert be.per_transfer == Crossing(4 * MIB, MIB, ((4 * MIB, 16 * MIB),))


def test_break_even_needs_staging_and_a_setup_cost():
    assert break_even(summary_of(measured("ipc", "ce", IPC), [setup_row("ipc", "ipc_open_cold", 1e-4)])) == []
    assert break_even(summary_of(measured("staging", "pinned", STAGING), measured("ipc", "ce", IPC))) == []


def test_break_even_of_mmap_adds_its_halves_and_pays_registration_by_size():
    halves = linear(2e-6, 50)
    register = {n: 50e-6 + n / 5e9 for n in SIZES}  # host_register grows with the buffer
    s = summary_of(
        measured("staging", "pinned", STAGING),
        measured("mmap", "d2h", halves, src="0", dst="host"),
        measured("mmap", "h2d", halves, src="host", dst="0"),
        measured("mmap", "zero-copy-read", linear(3e-6, 40), src="host", dst="0"),
        [setup_row("mmap", "host_register", register[n], nbytes=n, src="host", dst="0") for n in SIZES],
    )
    (be,) = break_even(s, amortise_over=1000)
    assert be.composed and be.size_dependent and (be.src, be.dst) == ("0", "0")
    assert be.setup_s == pytest.approx(register[16 * MIB]) and be.setup_min_s == pytest.approx(register[4])
    wins = [register[n] / 1000 + 2 * halves(n) < STAGING(n) for n in SIZES]
    per = [register[n] + 2 * halves(n) < STAGING(n) for n in SIZES]
    assert be.amortised.wins == _runs(wins) and be.per_transfer.wins == _runs(per)


def _runs(wins):
    out, start = [], None
    for i, won in enumerate(wins):
        if won and start is None:
            start = i
        if start is not None and (not won or i == len(wins) - 1):
            out.append((SIZES[start], SIZES[i if won else i - 1]))
            start = None
    return tuple(out)


def test_break_even_of_peer_falls_back_to_staging_on_another_gpu_link_and_adds_both_costs():
    s = summary_of(
        measured("staging", "pinned", STAGING),  # GPU 0 -> GPU 0 only
        measured("peer", "ce", linear(3e-6, 300), src="0", dst="1"),
        measured("peer", "p2p-off", linear(15e-6, 30), src="0", dst="1"),  # no setup: left out
        [setup_row("peer", "ipc_open_cold", 2e-3, nbytes=16 * MIB, src="0", dst="1"),
         setup_row("peer", "peer_enable", 1e-3, src="0", dst="1"),
         setup_row("peer", "peer_enable", 1.5e-3, src="1", dst="0")],
    )
    (be,) = break_even(s)
    assert (be.src, be.dst, be.baseline_src, be.baseline_dst) == ("0", "1", "0", "0")
    assert be.variants == ("ce",)
    assert be.setup == ("ipc_open_cold", "peer_enable") and be.setup_s == pytest.approx(3e-3)


# --------------------------------------------------------------------------- comparing runs


def test_compare_gives_ratios_of_medians_per_path_variant_and_size():
    first = summary_of(measured("ipc", "ce", IPC), [setup_row("ipc", "ipc_open_cold", 100e-6)])
    faster = summary_of(measured("ipc", "ce", lambda n: IPC(n) / 2), [setup_row("ipc", "ipc_open_cold", 50e-6)],
                        measured("peer", "ce", IPC, src="0", dst="1"))
    out = compare([first, faster])
    bw = out[(out["metric"] == "bandwidth") & (out["path"] == "ipc")]
    assert len(bw) == len(SIZES) and set(bw["run"]) == {1}
    assert bw["ratio"].to_numpy() == pytest.approx([2.0] * len(SIZES))  # GB/s doubled
    setup = out[out["metric"] == "setup"]
    assert setup["ratio"].iloc[0] == pytest.approx(0.5)  # half the time
    only_second = out[out["path"] == "peer"]
    assert len(only_second) == len(SIZES) and only_second["ratio"].isna().all()
    assert only_second["base_s"].isna().all() and only_second["other_s"].notna().all()


def test_compare_needs_two_runs():
    with pytest.raises(ValueError):
        compare([summary_of(measured("ipc", "ce", IPC))])


def test_band_margin_is_nan_without_another_path():
    band = Band(lo_bytes=4, hi_bytes=8, winner="ipc/ce", winner_gbps=1.0)
    assert band.runner_up is None and math.isnan(band.margin_min)
