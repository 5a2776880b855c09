"""Bands and second sharing modes on crafted runs: tied APIs of one mechanism taking turns at
being the fastest are one band with the cheapest of them; a choice rejected at a size splits
the band; a second mode gets a line only where it changes the choice for the faster beyond
delta; `next` is never faster than the choice."""

from __future__ import annotations

import math

import pytest
from fakes import KIB, MIB, PATHS, figure, frame, setup

from gpuipc_bench.analysis import analyse
from gpuipc_bench.analysis.bands import bands, changes
from gpuipc_bench.paths import PathInfo, to_metadata
from gpuipc_bench.report.answer import ratio_span, summary_lines
from gpuipc_bench.report.wording import fmt_pm

META = {"schema_version": "2", **to_metadata(PATHS + (PathInfo("mempool", setup=("pool_import",)),))}
SIZES = (16 * KIB, 64 * KIB, 256 * KIB, MIB)
COSTS = {"ipc": 0.1e-3, "vmm": 0.2e-3, "mempool": 0.4e-3, "torch": 0.3e-3}
OPS = {"ipc": "ipc_open_cold", "vmm": "vmm_import", "mempool": "pool_import", "torch": "caching_receive_cold"}


def set_up(*paths):
    return [setup(p, OPS[p], COSTS[p]) for p in paths]


def handoff(path, variant, times, sizes=SIZES, spread=1e-3, sharing="time-sliced"):
    """A hand-off figure (no ceiling: each figure its own class) with `times[i]` at sizes[i]."""
    at = dict(zip(sizes, times))
    return figure(path, variant, lambda s: at[s], sizes=sizes, measure="handoff", ceiling="", spread=spread,
                  sharing=sharing)


def alternating(pull_at_last: float | None = None):
    """Three push APIs of one copy, undecided against each other (samples +-5%), the fastest
    alternating between vmm and mempool by 1%, ipc/push 1% behind; a kernel copy 30% behind;
    with `pull_at_last`, torch/caching (a pull through the same mapping) 40% behind but at
    the last size `pull_at_last` times the pushes (its samples tight)."""
    base = 10e-6
    vmm = [base if i % 2 == 0 else 1.01 * base for i in range(len(SIZES))]
    mempool = [1.01 * base if i % 2 == 0 else base for i in range(len(SIZES))]
    groups = [handoff("vmm", "push", vmm, spread=0.05), handoff("mempool", "push", mempool, spread=0.05),
              handoff("ipc", "push", [1.01 * base] * len(SIZES), spread=0.05),
              handoff("ipc", "sm", [1.3 * base] * len(SIZES))]
    if pull_at_last is not None:
        groups.append(handoff("torch", "caching", [1.4 * base] * (len(SIZES) - 1) + [pull_at_last * base]))
    return groups + set_up("ipc", "vmm", "mempool", "torch")


def answer(groups, meta=META):
    return analyse(frame([r for g in groups for r in g]), meta).answer


def test_tied_members_taking_turns_are_one_band_with_the_cheapest_member():
    found = answer(alternating())
    fastest = [d.compared[0] for d in found.decisions]
    assert set(fastest) == {"vmm/push", "mempool/push"}  # the fastest API alternates by noise
    (section,) = found.sections
    (band,) = section.bands
    assert band.sizes == SIZES and band.pick == "ipc/push" and band.why == "cheapest set-up"
    assert set(band.pool) == {"ipc/push", "vmm/push", "mempool/push"}
    # each size is shown with the band's choice: its own figure and interval
    assert all(d.choice == "ipc/push" and d.choice_s[1] == pytest.approx(10.1e-6, rel=0.01) for d in band.decisions)
    # the JSON decisions say the same
    assert {d.choice for d in found.decisions} == {"ipc/push"}
    text = " ".join("\n".join(t for t, _ in summary_lines(analyse(frame([r for g in alternating() for r in g]),
                                                                    META), "run.csv", 80)).split())
    assert "16 KiB–1 MiB ipc/push (IPC mapping, copy engine; cheapest set-up): 10.1 µs" in text
    assert "next ipc/sm 1.29" in text  # measured from the choice (10.1 µs), not the fastest


def test_a_choice_rejected_at_a_size_splits_the_band():
    # at 1 MiB every sample of every push is 10% or more behind the pull: no push is usable there
    found = answer(alternating(pull_at_last=0.9))
    (section,) = found.sections
    first, second = section.bands
    assert first.sizes == SIZES[:-1] and first.pick == "ipc/push"
    assert second.sizes == SIZES[-1:] and second.pick == "torch/caching" and second.pool == ("torch/caching",)
    # a member usable at one size only (the pull, undecided at 1 MiB) splits nothing
    found = answer(alternating(pull_at_last=1.0))
    (band,) = found.sections[0].bands
    assert band.pick == "ipc/push" and "torch/caching" not in band.pool


def test_push_and_pull_stay_apart_where_they_differ_beyond_delta():
    sizes = (16 * MIB, 64 * MIB)
    groups = [handoff("ipc", "push", [290e-6, 300e-6], sizes=sizes),
              handoff("vmm", "ce", [291e-6, 330e-6], sizes=sizes),  # the same at 16 MiB, 10% behind at 64
              handoff("ipc", "ce", [300e-6, 360e-6], sizes=sizes)] + set_up("ipc", "vmm")
    (section,) = answer(groups).sections
    (band,) = section.bands  # ipc/push is usable at both sizes: one band, ipc/push
    assert band.pick == "ipc/push" and "vmm/ce" not in band.pool
    d = next(x for x in band.decisions if x.bytes == 64 * MIB)
    assert d.next_members[0] == "vmm/ce" and d.ratio == pytest.approx(1.1, rel=0.01)


def two_modes(mps: dict[str, list[float]]):
    """Time-sliced: ipc/push wins both sizes (staging far behind); under MPS the figures given."""
    sizes = SIZES[:2]
    groups = [handoff("ipc", "push", [10e-6, 10e-6], sizes=sizes),
              handoff("staging", "pinned-hostsync", [25e-6, 25e-6], sizes=sizes)]
    for label, times in mps.items():
        path, _, variant = label.partition("/")
        spread = 0.03 if label == "vmm/push" else 1e-3
        groups.append(handoff(path, variant, times, sizes=sizes, sharing="mps", spread=spread))
    return groups + set_up("ipc", "vmm", "torch")


def test_a_second_mode_gets_a_line_only_where_it_changes_the_choice_beyond_delta():
    found = answer(two_modes({
        # 16 KiB: vmm/push 5% ahead of ipc/push, every sample: a change.
        # 64 KiB: torch/caching 2.5% ahead of ipc/push (rejecting it), but the one MPS would use,
        # vmm/push (cheaper than torch, undecided against it), is not faster than ipc/push
        # beyond delta: no change.
        "ipc/push": [10.5e-6, 10.25e-6], "vmm/push": [10e-6, 10.15e-6], "torch/caching": [10.2e-6, 10e-6],
        "staging/pinned-hostsync": [25e-6, 25e-6]}))
    main, mps = found.sections
    assert main.primary and main.sharing == "time-sliced" and [b.pick for b in main.bands] == ["ipc/push"]
    assert mps.sharing == "mps" and not mps.primary
    assert [(b.sizes, b.pick) for b in mps.bands] == [((16 * KIB,), "vmm/push")]
    at_64k = next(d for d in found.decisions if d.sharing == "mps" and d.bytes == 64 * KIB)
    assert "ipc/push" not in at_64k.tied and at_64k.choice == "vmm/push"


def test_no_second_mode_lines_when_the_main_choice_holds():
    found = answer(two_modes({"ipc/push": [10e-6, 10e-6], "vmm/push": [10.1e-6, 10.1e-6],
                              "staging/pinned-hostsync": [25e-6, 25e-6]}))
    assert [s.sharing for s in found.sections] == ["time-sliced"]


def test_changes_is_false_for_the_same_choice_and_true_where_nothing_was_decided():
    d = answer(two_modes({"ipc/push": [10e-6, 10e-6], "staging/pinned-hostsync": [25e-6, 25e-6]})).decisions[0]
    assert changes(None, d) and not changes(d, d)
    assert bands([]) == []


def test_next_is_measured_from_the_choice_never_below_one():
    # torch/caching the fastest; ipc/push the same (1.5% behind) and chosen (no dependency);
    # vmm/ce 5% behind the fastest, 3.4% behind the choice: the ratio is the choice's
    groups = [handoff("torch", "caching", [10e-6], sizes=(MIB,)), handoff("ipc", "push", [10.15e-6], sizes=(MIB,)),
              handoff("vmm", "ce", [10.5e-6], sizes=(MIB,))] + set_up("ipc", "vmm", "torch")
    (d,) = answer(groups).decisions
    assert d.choice == "ipc/push" and d.next_members == ("vmm/ce",)
    assert d.ratio == pytest.approx(10.5 / 10.15, rel=0.002) and d.ratio_lo >= 1 + d.delta
    assert ratio_span([0.999]) == "≈" and ratio_span([1.02, 1.10]) == "1.02–1.10×"


def test_an_interval_below_a_twentieth_of_a_percent_is_not_zero():
    assert fmt_pm(0.9999, 1.0, 1.0001) == "±<0.1%" and fmt_pm(0.996, 1.0, 1.004) == "±0.4%"
    assert not math.isnan(1.0)
