"""The decisions on crafted runs: three outcomes, mechanism classes and the choice in a class,
GPU-signalled hand-offs, sharing modes, GPU pairs, the JSON decisions and the comparison of
decisions between runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakes import KIB, META, MIB, NV18, figure, frame, pairs_run, setup, write_run
from gpuipc_bench.analysis import analyse, compare_decisions, stats
from gpuipc_bench.analysis.stats import FASTER, SAME, UNDECIDED, WITHIN, WITHIN_MAX
from gpuipc_bench.cli import cli
from gpuipc_bench.paths import PathInfo, to_metadata

RESULTS = Path(__file__).resolve().parent.parent / "results"
def ceiling(scenario, seconds, sizes=(4 * KIB,), key="d2d@0", sharing="time-sliced", **kw):
    return figure("ceiling", key, seconds, sizes=sizes, scenario=scenario, sharing=sharing, **kw)


def decisions(*groups, meta=META):
    rows = [r for g in groups for r in g]
    return analyse(frame(rows), meta).answer.decisions


def only(*groups, meta=META):
    (d,) = decisions(*groups, meta=meta)
    return d


# --------------------------------------------------------------------------- three outcomes


def test_faster_from_three_separated_samples():
    d = only(figure("ipc", "ce", 10e-6, n=3, ceiling=""), figure("staging", "pinned", 30e-6, n=3, ceiling=""))
    assert d.outcome == FASTER and d.choice == "ipc/ce" and d.separated and d.samples == 3
    assert d.next_members == ("staging/pinned",) and d.ratio == pytest.approx(3.0, rel=0.01)


def test_same_within_delta_is_shown_not_merged_without_a_mechanism():
    d = only(figure("ipc", "ce", 10.0e-6, ceiling=""), figure("staging", "pinned", 10.1e-6, ceiling=""))
    assert d.outcome == SAME and d.next is None and len(d.members) == 1
    assert {d.choice, *d.same} == {"ipc/ce", "staging/pinned"}
    # the same, so the one cheaper to set up is the one to use: staging declares no set-up
    d = only(figure("ipc", "ce", 10.0e-6, ceiling=""), figure("staging", "pinned", 10.1e-6, ceiling=""),
             setup("ipc", "ipc_open_cold", 1e-3))
    assert (d.choice, d.same, d.why) == ("staging/pinned", ("ipc/ce",), "cheapest set-up")


def test_undecided_when_the_samples_cannot_tell():
    d = only(figure("ipc", "ce", 10e-6, n=3, spread=0.2, ceiling=""),
             figure("staging", "pinned", 11e-6, n=3, spread=0.2, ceiling=""))
    assert d.outcome == UNDECIDED and d.next_members == ("staging/pinned",) and d.close == ()


def test_a_noisy_faster_figure_is_ranked_not_dropped():
    # the 16 KiB case of the H100 reference: the winner's interval is wide, but every sample is faster
    noisy = [0.88, 0.90, 0.94, 0.97, 1.0, 1.0, 1.02, 1.03, 1.04, 1.06]
    d = only(figure("staging", "pinned-hostsync", 28e-6, samples=noisy, measure="handoff", ceiling=""),
             figure("staging", "pageable", 34.4e-6, measure="handoff", ceiling=""))
    assert d.choice == "staging/pinned-hostsync" and d.outcome == FASTER


# --------------------------------------------------------------------------- classes and the choice


def copy_engine_run(costs: dict[str, float], sizes=(64 * MIB,)):
    """ipc/ce, vmm/ce and torch/caching, each at the d2d@0 ceiling of its own scenario, and a
    kernel copy 10% slower; set-up rows with the given medians."""
    link = lambda s: 1e-6 + s / 2000e9  # noqa: E731
    groups = []
    for path, variant in (("ipc", "ce"), ("vmm", "ce"), ("torch", "caching")):
        groups += [figure(path, variant, link, sizes=sizes), ceiling(path, link, sizes=sizes)]
    groups += [figure("ipc", "sm", lambda s: 1.1 * link(s), sizes=sizes, ceiling="d2d-sm@0"),
               ceiling("ipc", lambda s: 1.1 * link(s), sizes=sizes, key="d2d-sm@0")]
    ops = {"ipc": "ipc_open_cold", "vmm": "vmm_import", "torch": "caching_receive_cold"}
    groups += [setup(path, ops[path], cost) for path, cost in costs.items()]
    return groups


def test_one_copy_through_three_apis_is_one_class_and_the_cheapest_set_up_is_chosen():
    d = only(*copy_engine_run({"ipc": 0.4e-3, "vmm": 0.2e-3, "torch": 0.3e-3}))
    assert d.cls == "IPC mapping, copy engine" and set(d.members) == {"ipc/ce", "vmm/ce", "torch/caching"}
    assert (d.choice, d.why) == ("vmm/ce", "cheapest set-up") and d.outcome == FASTER
    assert d.next == "IPC mapping, kernel copy" and d.ratio == pytest.approx(1.1, rel=0.01)
    d = only(*copy_engine_run({"ipc": 0.1e-3, "vmm": 0.2e-3, "torch": 0.3e-3}))
    assert (d.choice, d.why) == ("ipc/ce", "cheapest set-up")


def test_dependencies_come_before_set_up_and_an_unknown_set_up_separates_from_nothing():
    # torch is the cheapest to set up but needs torch; ipc and vmm cost the same: declared order
    d = only(*copy_engine_run({"ipc": 0.2e-3, "vmm": 0.2e-3, "torch": 0.1e-3}))
    assert (d.choice, d.why) == ("ipc/ce", "declared first")
    d = only(*copy_engine_run({"vmm": 0.1e-3, "torch": 0.05e-3}))
    assert (d.choice, d.why) == ("ipc/ce", "declared first")  # ipc's cost unknown: not beaten by vmm's
    d = only(*copy_engine_run({"ipc": 0.4e-3, "torch": 0.05e-3}))
    assert (d.choice, d.why) == ("ipc/ce", "declared first")  # vmm's unknown cost is no evidence against ipc


def test_push_and_pull_stay_apart_where_they_differ():
    link = lambda s: s / 800e9  # noqa: E731
    d = only(figure("ipc", "push", link, sizes=(256 * MIB,), measure="handoff"),
             figure("ipc", "ce", lambda s: 2 * link(s), sizes=(256 * MIB,), measure="handoff"),
             ceiling("ipc", lambda s: s / 850e9, sizes=(256 * MIB,)))
    assert d.members == ("ipc/push",) and d.next_members == ("ipc/ce",) and d.outcome == FASTER


def hand_offs(sharing: str, factors: dict[tuple[str, str], float], size=256 * MIB):
    """Hand-offs at `size` of the given (path, variant) at these multiples of a 300 GB/s copy, each in its
    own scenario's set with its d2d@0 ceiling (kernel copies: d2d-sm@0) at 1.0."""
    link = size / 300e9
    groups = []
    for (path, variant), factor in factors.items():
        key = "d2d-sm@0" if variant == "sm" else "d2d@0"
        groups.append(figure(path, variant, factor * link, sizes=(size,), measure="handoff", ceiling=key,
                             sharing=sharing))
    for path in dict.fromkeys(path for path, _ in factors):
        groups += [ceiling(path, link, sizes=(size,), sharing=sharing),
                   ceiling(path, link, sizes=(size,), key="d2d-sm@0", sharing=sharing)]
    return groups


def test_time_sliced_a_push_of_another_scenario_ahead_in_its_one_set_does_not_pass_the_pull_over():
    """Time-sliced, a hand-off's time is set by the scheduler's state its samples land in, not by which
    side queued the copy: vmm/push 3.5% ahead of ipc/ce in its one process set names no push API (as
    mempool/push did in results/h200-oneset-b-3.csv.gz); under MPS, where push and pull differ repeatably,
    it does."""
    factors = {("ipc", "ce"): 1.0, ("ipc", "push"): 1.0, ("vmm", "push"): 0.965, ("ipc", "sm"): 1.2}
    d = only(*hand_offs("time-sliced", factors))
    assert (d.choice, d.why) == ("ipc/ce", "declared first") and "ipc/ce" not in d.beaten
    d = only(*hand_offs("mps", factors))
    assert "ipc/ce" in d.beaten and d.choice == "ipc/push"


def test_an_api_of_the_choices_own_mechanism_behind_it_in_one_set_is_not_the_next_class():
    """Under MPS, vmm/ce 6.8% behind the choice ipc/ce in its one process set, and passed over by
    ipc/push (another side starting the copy), is the offset between sets: named with the choice
    (`close`), and the next class is the next mechanism, the kernel copy (as mempool/ce was in
    results/h200-oneset-b-1.csv.gz)."""
    d = only(*hand_offs("mps", {("ipc", "ce"): 1.0, ("ipc", "push"): 0.99, ("vmm", "ce"): 1.068,
                                ("ipc", "sm"): 1.13}))
    assert d.choice == "ipc/ce" and "vmm/ce" in d.beaten and "vmm/ce" in d.close
    assert d.next == "IPC mapping, kernel copy" and d.ratio == pytest.approx(1.13, rel=0.01)


def test_below_the_per_call_floor_the_declared_mechanism_makes_the_class():
    # at 4 B every copy is one call (~2 us): the ceiling fraction says nothing, the mechanism does
    sizes = (4, 64 * MIB)
    link = lambda s: 2e-6 + s / 2000e9  # noqa: E731
    found = decisions(figure("ipc", "ce", link, sizes=sizes), figure("vmm", "ce", lambda s: 1.01 * link(s),
                                                                     sizes=sizes),
                      ceiling("ipc", link, sizes=sizes), ceiling("vmm", lambda s: 1.01 * link(s), sizes=sizes),
                      figure("ipc", "sm", lambda s: 1.5 * link(s), sizes=sizes, ceiling="d2d-sm@0"))
    small = next(d for d in found if d.bytes == 4)
    assert small.call_bound and set(small.members) == {"ipc/ce", "vmm/ce"}
    assert not next(d for d in found if d.bytes == 64 * MIB).call_bound


def test_where_the_call_binds_a_kernel_copy_the_samples_cannot_tell_from_the_copy_engine_is_not_the_next_class():
    """At 4 B (bound by the call) ipc/sm's gap to ipc/ce is its binding's enqueue cost: one family (IPC
    mapping), named with the choice (`close`), and the next class is the next mechanism; at 64 MiB
    (bound by the link) the same gap is the kernel's, and the kernel copy stays the next class."""
    sizes = (4, 64 * MIB)
    link = lambda s: 2e-6 + s / 2000e9  # noqa: E731
    kernel = lambda s: 1.03 * link(s)  # noqa: E731
    found = decisions(figure("ipc", "ce", link, sizes=sizes, spread=0.05),
                      figure("ipc", "sm", kernel, sizes=sizes, spread=0.05, ceiling="d2d-sm@0"),
                      figure("staging", "pinned", lambda s: 3 * link(s), sizes=sizes, ceiling=""),
                      ceiling("ipc", link, sizes=sizes), ceiling("ipc", kernel, sizes=sizes, key="d2d-sm@0"))
    small, large = (next(d for d in found if d.bytes == size) for size in sizes)
    assert small.call_bound and not large.call_bound
    assert small.choice == "ipc/ce" and "ipc/sm" in small.close and small.next_members == ("staging/pinned",)
    assert small.outcome == FASTER
    assert large.choice == "ipc/ce" and large.next_members == ("ipc/sm",) and large.outcome == UNDECIDED


def test_where_the_call_binds_a_kernel_copy_told_apart_from_the_copy_engine_is_a_binding_not_the_next_class():
    """At 4 B (bound by the call) a kernel copy 12% behind ipc/ce with every sample apart is its binding's
    enqueue cost, which moves between process sets: neither the next class nor undecided (the next class
    is staging); with nothing else at its size the decision is undecided, never the same. At 64 MiB
    (bound by the link) the same gap is the kernel's: the next class, 1.12x."""
    sizes = (4, 64 * MIB)
    link = lambda s: 2e-6 + s / 2000e9  # noqa: E731
    kernel = lambda s: 1.12 * link(s)  # noqa: E731
    both = [figure("ipc", "ce", link, sizes=sizes), figure("ipc", "sm", kernel, sizes=sizes, ceiling="d2d-sm@0"),
            ceiling("ipc", link, sizes=sizes), ceiling("ipc", kernel, sizes=sizes, key="d2d-sm@0")]
    found = decisions(*both, figure("staging", "pinned", lambda s: 3 * link(s), sizes=sizes, ceiling=""))
    small, large = (next(d for d in found if d.bytes == size) for size in sizes)
    assert small.call_bound and small.choice == "ipc/ce" and small.next_members == ("staging/pinned",)
    assert "ipc/sm" not in small.close and small.ratio == pytest.approx(3.0, rel=0.02)
    assert large.next_members == ("ipc/sm",) and large.ratio == pytest.approx(1.12, rel=0.01)
    alone = next(d for d in decisions(*both) if d.bytes == 4)
    assert alone.choice == "ipc/ce" and alone.next is None and alone.outcome == UNDECIDED


def test_gpu_signalled_hand_offs_are_candidates_with_their_cost():
    d = only(figure("staging", "pinned-hostsync", 24e-6, measure="handoff", ceiling=""),
             figure("ipc", "device-ll", 0.4e-6, measure="pingpong", metric="latency", ceiling="",
                    scenario="latency"))
    assert d.choice == "ipc/device-ll" and d.measure == "handoff" and "polling kernel" in d.cost
    assert d.next_members == ("staging/pinned-hostsync",)


# --------------------------------------------------------------------------- sharing modes, pairs


def two_modes(mps_choice_at_4k: bool):
    """Time-sliced: staging wins both sizes; under MPS IPC wins at 4 KiB (or not)."""
    sizes = (4 * KIB, 64 * MIB)
    groups = [figure("staging", "pinned-hostsync", 25e-6, sizes=sizes, measure="handoff", ceiling=""),
              figure("ipc", "push", 275e-6, sizes=sizes, measure="handoff", ceiling="")]
    groups += [figure("staging", "pinned-hostsync", 25e-6, sizes=sizes, measure="handoff", ceiling="",
                      sharing="mps"),
               figure("ipc", "push", lambda s: 11e-6 if s == 4 * KIB and mps_choice_at_4k else 275e-6, sizes=sizes,
                      measure="handoff", ceiling="", sharing="mps")]
    return groups


def test_a_second_sharing_mode_gets_lines_only_where_it_changes_the_choice():
    rows = two_modes(True)
    answer = analyse(frame([r for g in rows for r in g]), META).answer
    assert len(answer.decisions) == 4
    (main, mps) = answer.sections
    assert main.sharing == "time-sliced" and main.primary
    assert mps.sharing == "mps" and not mps.primary and [d.bytes for b in mps.bands for d in b.decisions] == [4 * KIB]
    assert mps.bands[0].first.choice == "ipc/push"
    quiet = analyse(frame([r for g in two_modes(False) for r in g]), META).answer
    assert [s.sharing for s in quiet.sections] == ["time-sliced"]


def test_gpu_pairs_of_one_link_class_share_a_section_with_their_spread():
    answer = analyse(frame([r for g in pairs_run() for r in g]), NV18).answer
    (section,) = answer.sections
    assert section.link_class == "NV18" and len(section.links) == 3 and section.cross_gpu


def test_a_pair_that_chooses_otherwise_is_named_only_where_two_process_sets_show_it():
    def band_of(**kw):
        (section,) = analyse(frame([r for g in pairs_run(disagree=True, **kw) for r in g]), NV18).answer.sections
        (band,) = section.bands
        return band

    once = band_of()  # one process set: the 1.5x gap on 0>2 may be the offset between sets of processes
    assert once.pick == "peer/sm" and once.differ == () and [d.link for d in once.unconfirmed] == [("0", "2")]
    twice = band_of(replicas=(1, 2))  # both sets show it: named
    assert twice.pick == "peer/sm" and [d.link for d in twice.differ] == [("0", "2")] and twice.unconfirmed == ()
    flipped = band_of(replicas=(1, 2), repeats=False)  # the second set does not: not named
    assert flipped.pick == "peer/sm" and flipped.differ == ()


def test_the_summary_names_no_pair_from_one_process_set(tmp_path):
    for replicas, named in (((1,), False), ((1, 2), True)):
        path = write_run(tmp_path, f"pairs-{len(replicas)}.csv", pairs_run(disagree=True, replicas=replicas),
                         meta=NV18)
        result = CliRunner().invoke(cli, ["report", str(path), "--summary"])
        assert result.exit_code == 0, result.output
        assert ("GPU 0 → 2 differs" in " ".join(result.output.split())) is named, result.output


# --------------------------------------------------------------------------- JSON, comparing runs


def test_json_carries_the_decisions(tmp_path):
    path = write_run(tmp_path, "run.csv", copy_engine_run({"ipc": 0.1e-3, "vmm": 0.2e-3}))
    result = CliRunner().invoke(cli, ["report", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.output)["runs"]
    (d,) = run["decisions"]
    assert {"src", "dst", "sharing", "measure", "bytes", "outcome", "class", "members", "choice", "next",
            "ratio"} <= set(d)
    assert (d["src"], d["dst"], d["sharing"], d["measure"], d["bytes"]) == ("0", "0", "time-sliced", "stream",
                                                                           64 * MIB)
    assert d["outcome"] == "faster" and d["class"] == "IPC mapping, copy engine" and d["choice"] == "ipc/ce"
    assert sorted(d["members"]) == ["ipc/ce", "torch/caching", "vmm/ce"]
    assert d["next"] == "IPC mapping, kernel copy" and d["ratio"] == pytest.approx(1.1, rel=0.01)


def test_comparing_runs_names_the_decisions_that_changed(tmp_path):
    a = write_run(tmp_path, "a.csv", two_modes(False))
    b_groups = [figure("staging", "pinned-hostsync", 25e-6, sizes=(4 * KIB, 64 * MIB), measure="handoff",
                       ceiling=""),
                figure("ipc", "push", lambda s: 11e-6 if s == 4 * KIB else 275e-6, sizes=(4 * KIB, 64 * MIB),
                       measure="handoff", ceiling="")]
    b = write_run(tmp_path, "b.csv", b_groups)
    changes = compare_decisions([analyse(*_read(p)).answer.decisions for p in (a, b)])
    assert [(c.bytes, c.before, c.after) for c in changes if c.sharing == "time-sliced"] == [
        (4 * KIB, "staging/pinned-hostsync", "ipc/push")]
    result = CliRunner().invoke(cli, ["report", str(a), str(b)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "the choice at 4 KiB changed from staging/pinned-hostsync to ipc/push" in " ".join(result.output.split())
    # first of all, before either run's tables: whether the mechanism class changed, and where
    moved = [c for c in changes if c.before_class != c.after_class]
    head = [line.strip() for line in result.output.split("═")[0].splitlines()]
    assert head[0] == "Decisions against run 1" and moved
    assert head[1].startswith(f"run 2: another mechanism class in {len(moved)} of ")
    assert head[1].endswith(f", the same API in {int(head[1].split(' of ')[1].split()[0]) - len(changes)}")
    assert "time-sliced · handoff at 4 KiB: two hops via pinned host, host-synced → IPC mapping, copy engine" \
        in " ".join(head)
    data = json.loads(CliRunner().invoke(cli, ["report", str(a), str(b), "--format", "json"]).output)
    assert any(c["before"] == "staging/pinned-hostsync" and c["after"] == "ipc/push" for c in
               data["decision_changes"])


def _read(path):
    from gpuipc_bench.results import read_results

    return read_results(path)


# --------------------------------------------------------------------------- --quick, warnings


def test_the_quick_preset_ranks_every_size_it_measures():
    from gpuipc_bench.defaults import PRESETS, QUICK_GPU_SIZES

    n, most, _ = PRESETS["quick"]
    assert n == most == 3
    link = lambda s: 2e-6 + s / 1500e9  # noqa: E731
    found = decisions(figure("ipc", "ce", link, sizes=QUICK_GPU_SIZES, n=n, ceiling=""),
                      figure("staging", "pinned", lambda s: 20e-6 + s / 25e9, sizes=QUICK_GPU_SIZES, n=n,
                             ceiling=""))
    assert [d.bytes for d in found] == list(QUICK_GPU_SIZES)
    assert all(d.outcome == FASTER and d.separated and d.choice == "ipc/ce" for d in found)


def test_only_warnings_that_could_change_a_line_are_relevant():
    noisy = [0.7, 0.8, 0.9, 1.0, 1.0, 1.1, 1.2, 1.3]  # a wide interval on both
    run = analyse(frame([r for g in (
        figure("ipc", "ce", 10e-6, ceiling="", samples=[1 + 1e-3 * i for i in range(8)]),
        figure("staging", "pinned", 10.5e-6, ceiling="", samples=noisy),  # reaches the leader: could change it
        figure("staging", "pageable", 100e-6, ceiling="", samples=noisy),  # 10x behind: cannot
    ) for r in g]), META)
    assert {w.variant for w in run.warnings} == {"pinned", "pageable"}
    assert [w.variant for w in run.answer.relevant] == ["pinned"]


def test_a_batched_kernel_path_may_beat_one_call_per_copy_at_small_sizes_without_a_warning():
    from gpuipc_bench.analysis.warnings import ABOVE_ITS_CEILING

    sizes = (4, 64 * MIB)
    one_call = lambda s: 2e-6 + s / 2000e9  # noqa: E731  (the copy engine's ceiling: one call per copy)
    rows = [r for g in (ceiling("nccl", one_call, sizes=sizes, key="peer@0>1", src="0", dst="1"),
                        figure("nccl", "send-recv", lambda s: 0.5e-6 + s / 1900e9, sizes=sizes, scenario="nccl",
                               ceiling="peer@0>1", src="0", dst="1")) for r in g]
    run = analyse(frame(rows), {**META, **to_metadata((PathInfo("nccl"),))})
    small = run.summary[(run.summary["path"] == "nccl") & (run.summary["bytes"] == 4)].iloc[0]
    assert bool(small["call_bound"]) and small["fraction_of_ceiling"] > 3  # 4x the launch-bound rate
    assert not [w for w in run.warnings if w.cause == ABOVE_ITS_CEILING]
    # above the link's asymptotic bandwidth it is a cache or timing effect, even where call-bound
    rows = [r for g in (ceiling("nccl", one_call, sizes=sizes, key="peer@0>1", src="0", dst="1"),
                        figure("nccl", "send-recv", lambda s: 0.5e-6 if s == 4 else s / 2500e9, sizes=sizes,
                               scenario="nccl", ceiling="peer@0>1", src="0", dst="1")) for r in g]
    run = analyse(frame(rows), {**META, **to_metadata((PathInfo("nccl"),))})
    assert [w.bytes for w in run.warnings if w.cause == ABOVE_ITS_CEILING] == [64 * MIB]


# --------------------------------------------------------------------------- claims from intervals


FAST, SLOW = [1.0, 1.002, 0.998, 1.001, 0.999, 1.003], [1.42, 1.421, 1.419, 1.418, 1.422, 1.42]


def two_state(path, variant, base, fast: int, slow: int, size=256 * MIB):
    """A hand-off in two scheduler states: `fast` samples near `base`, `slow` 42% above it."""
    return figure(path, variant, base, sizes=(size,), measure="handoff", ceiling="",
                  samples=FAST[:fast] + SLOW[:slow])


def test_two_state_figures_are_compared_state_by_state_not_by_their_mix():
    # ipc/sm is 3% behind ipc/ce in each state; its samples landed mostly in the slow state
    d = only(two_state("ipc", "ce", 330e-6, fast=6, slow=3), two_state("ipc", "sm", 340e-6, fast=3, slow=6))
    assert d.choice == "ipc/ce" and d.next_members == ("ipc/sm",)
    assert 1.02 <= d.ratio <= 1.04 and d.ratio_hi < 1.1  # the medians of the mixes are 1.42x apart
    assert d.states is not None and d.states.fast_share == pytest.approx(6 / 9)
    assert d.states.fast_s == pytest.approx(330e-6, rel=0.01) and d.states.step == pytest.approx(0.42, abs=0.01)


def test_a_figure_all_in_one_state_is_compared_with_the_nearest_state_of_the_other():
    # push is 1.1% ahead of ce in each state (283 and 292 against 286.5 and 295 us, 16 MiB time-sliced):
    # ce's samples all took the switch, push's mostly not; their medians are 4% apart, their states 1.1%
    d = only(figure("ipc", "push", 283e-6, sizes=(16 * MIB,), measure="handoff", ceiling="", n=9,
                    samples=[1.0, 1.0001, 1.0002, 1.0003, 1.0004, 1.0005, 1.0311, 1.0312, 1.0313]),
             figure("ipc", "ce", 295e-6, sizes=(16 * MIB,), measure="handoff", ceiling="", n=9))
    assert d.choice == "ipc/ce" and d.outcome != FASTER  # not passed over: the declared order names it
    assert "ipc/ce" not in d.beaten


def test_a_host_synced_figure_s_own_jitter_is_not_taken_for_the_scheduler_s_states():
    """Time-sliced hand-offs at 4 B: the GPU-signalled ones in two states a context switch (~17 us)
    apart; pinned-hostsync's samples at 24 and 26.5 us are its own jitter, not a switch: pageable
    (28 us, one state) is compared with all of them (1.16x), not with its 'slow state' (1.05x)."""
    size, tick = 4, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0664, 1.0664, 1.0664]
    d = only(figure("ipc", "push", 264e-6, sizes=(size,), measure="handoff", ceiling="", n=9, samples=tick),
             figure("vmm", "push", 264e-6, sizes=(size,), measure="handoff", ceiling="", n=9, samples=tick[::-1]),
             figure("staging", "pinned-hostsync", 24e-6, sizes=(size,), measure="handoff", ceiling="", n=9,
                    samples=[1.0, 1.001, 1.002, 1.003, 1.004, 1.104, 1.105, 1.106, 1.107]),
             figure("staging", "pageable", 28e-6, sizes=(size,), measure="handoff", ceiling="", n=6,
                    samples=[1.0, 1.001, 1.002, 1.003, 1.004, 1.005]))
    assert d.choice == "staging/pinned-hostsync" and d.next_members == ("staging/pageable",)
    assert d.ratio == pytest.approx(28.07 / 24.1, rel=0.01)


def one_state_pair(sharing: str):
    """256 MiB hand-offs, the size's step ~138 us (vmm/ce shows both states): ipc/sm's samples all
    missed the switch (294 us), ipc/ce's all took it (422 us): 1.43x apart as drawn, ~4% the other
    way state for state."""
    size = 256 * MIB
    return only(figure("ipc", "sm", 294e-6, sizes=(size,), measure="handoff", ceiling="", sharing=sharing),
                figure("ipc", "ce", 422e-6, sizes=(size,), measure="handoff", ceiling="", sharing=sharing),
                figure("vmm", "ce", 282e-6, sizes=(size,), measure="handoff", ceiling="", n=9, sharing=sharing,
                       samples=[1, 1.001, 1.002, 1.003, 1.004, 1.005, 1.49, 1.491, 1.492]))


def test_figures_each_in_one_state_a_step_apart_are_undecided_without_a_ratio():
    d = one_state_pair("time-sliced")
    assert d.cls == "IPC mapping, copy engine" and d.choice == "ipc/ce" and "ipc/ce" not in d.beaten
    assert d.next == "IPC mapping, kernel copy" and d.outcome == UNDECIDED and math.isnan(d.ratio)


def test_a_step_where_no_figure_holds_a_fifth_of_its_samples_in_the_other_state():
    """As one H200 ran it (results/h200-once-b-1.csv.gz), time-sliced at 256 MiB: ipc/ce's samples all took
    the switch (419 us), ipc/push's 3 of 18 (416 against 280 us, two sets), vmm/push's 1 of 9: no figure
    holds a fifth of its samples in each state, yet the size's step is there (stats.loose_step): ipc/ce
    is not 1.49x slower than ipc/push, and the declared order names it. Without the step, ipc/push was."""
    size = 256 * MIB
    fast = [1.0 + 0.002 * i for i in range(15)]
    pushed = fast[:5] + [1.49, 1.492] + fast[5:10] + [1.488] + fast[10:]  # 3 of 18 took the switch
    d = only(figure("ipc", "push", 280e-6, sizes=(size,), measure="handoff", ceiling="", n=18, samples=pushed),
             figure("ipc", "ce", 419e-6, sizes=(size,), measure="handoff", ceiling="", n=6,
                    samples=[1.0, 0.998, 0.997, 1.0, 0.998, 1.002]),
             figure("vmm", "push", 282e-6, sizes=(size,), measure="handoff", ceiling="", n=9,
                    samples=[1.49] + fast[:8]))
    assert stats.Prepared([280e-6 * x for x in pushed]).two is None  # under a fifth in the other state
    assert "ipc/ce" not in d.beaten and d.choice == "ipc/ce"
    assert stats.state_step([stats.Prepared([419e-6] * 6)]) == 0.0  # one state: no step from it
    assert stats.loose_step([280e-6 * x for x in pushed]) == pytest.approx(137e-6, rel=0.03)
    assert stats.loose_step([280e-6 * x for x in [1.49] + fast[:8]]) == 0.0  # one sample in the other: none


def test_under_mps_there_is_no_switch_and_one_state_figures_are_compared_as_measured():
    d = one_state_pair("mps")
    assert "ipc/ce" in d.beaten and d.choice != "ipc/ce"  # 1.43x behind ipc/sm: no step to blame under MPS


def test_json_decisions_say_within_states_and_replicas(tmp_path):
    path = write_run(tmp_path, "run.csv", [two_state("ipc", "ce", 330e-6, fast=6, slow=3),
                                       two_state("ipc", "sm", 340e-6, fast=3, slow=6)])
    result = CliRunner().invoke(cli, ["report", str(path), "--format", "json"])
    (d,) = json.loads(result.output)["runs"][0]["decisions"]
    assert d["replicas"] == 1 and d["states"]["fast_share"] == pytest.approx(6 / 9)
    assert d["states"]["slow_s"] == pytest.approx(330e-6 * 1.42, rel=0.01)
    assert d["within"] is None and d["outcome"] == "faster" and d["choice"] in d["members"]


def copy_pair(ipc: float, vmm: float, spread: float = 2e-3):
    """ipc/ce and vmm/ce at 64 MiB at their own scenarios' d2d ceilings (the same link), set-up alike."""
    size = 64 * MIB
    link = lambda s: 1e-6 + s / 2000e9  # noqa: E731
    return [figure("ipc", "ce", lambda s: ipc * link(s), sizes=(size,), spread=spread),
            ceiling("ipc", link, sizes=(size,)),
            figure("vmm", "ce", lambda s: vmm * link(s), sizes=(size,), spread=spread),
            ceiling("vmm", link, sizes=(size,)),
            setup("ipc", "ipc_open_cold", 0.2e-3), setup("vmm", "vmm_import", 0.2e-3)]


def test_a_within_class_difference_that_flips_between_runs_keeps_the_api():
    first, second = only(*copy_pair(1.0, 1.012)), only(*copy_pair(1.012, 1.0))
    assert first.compared[0] == "ipc/ce" and second.compared[0] == "vmm/ce"  # the fastest flips
    for d in (first, second):
        assert d.choice == "ipc/ce" and set(d.members) == {"ipc/ce", "vmm/ce"} and d.why == "declared first"


def test_a_choice_beaten_beyond_delta_by_any_figure_is_rejected():
    # torch's process set copies 5% faster than ipc's (their d2d ceilings): torch/caching is the
    # same as both ipc figures within that spread, but within the ipc scenario ipc/push beats
    # ipc/ce by 3% (delta 2% there): ipc/ce, declared first, is never the one to use
    size = 64 * MIB
    link = lambda s: 1e-6 + s / 2000e9  # noqa: E731
    groups = [figure("torch", "caching", link, sizes=(size,)), ceiling("torch", link, sizes=(size,)),
              figure("ipc", "push", lambda s: 1.005 * link(s), sizes=(size,)),
              figure("ipc", "ce", lambda s: 1.035 * link(s), sizes=(size,)),
              ceiling("ipc", lambda s: 1.05 * link(s), sizes=(size,))]
    d = only(*groups)
    assert "ipc/ce" in d.beaten and "ipc/ce" not in d.tied
    assert d.choice == "ipc/push" and d.choice in d.members and d.choice not in d.beaten
    assert d.next_members == ("ipc/ce",) and d.outcome == FASTER and d.ratio == pytest.approx(1.03, rel=0.005)
    shown = analyse(frame([r for g in groups for r in g]), META).answer.shown
    assert [x.choice for x in shown] == ["ipc/push"]  # a band may not pick it either


def test_within_x_percent_where_the_equivalence_bound_is_small():
    # 1% apart, one of them noisy: not shown within delta (2%), but within a few percent
    d = only(figure("ipc", "ce", 10.0e-6, n=9, ceiling=""),
             figure("staging", "pinned", 10.1e-6, n=9, spread=0.02, ceiling=""))
    assert d.outcome == WITHIN and d.delta < d.within <= WITHIN_MAX
    from gpuipc_bench.report.answer import confidence_line
    assert f"1 within {d.within * 100:.1f}%" in confidence_line([d]).text


def test_a_band_edge_where_a_path_stops_being_measured_is_said():
    sizes = (4, 4 * KIB, 64 * KIB, MIB)
    groups = [figure("ipc", "push", lambda s: 10e-6 + s / 100e9, sizes=sizes, measure="handoff", ceiling=""),
              figure("staging", "pinned", lambda s: 30e-6 + s / 20e9, sizes=sizes, measure="handoff", ceiling=""),
              figure("ipc", "device-ll", 0.5e-6, sizes=(4, 4 * KIB), measure="pingpong", metric="latency",
                     ceiling="", scenario="latency")]
    analysis = analyse(frame([r for g in groups for r in g]), META)
    (section,) = analysis.answer.sections
    first, second = section.bands
    assert (first.pick, first.measured_to, second.pick, second.measured_to) == \
        ("ipc/device-ll", 4 * KIB, "ipc/push", None)
    from gpuipc_bench.report.answer import summary_lines
    text = " ".join(" ".join(t for t, _ in summary_lines(analysis, "run.csv", 80)).split())
    assert "(not measured above 4 KiB)" in text


@pytest.mark.parametrize("name", ["h100-both-modes-default.csv", "h200-default.csv", "h200x4-pairs-all-quick.csv"])
def test_the_committed_references_still_read(name):
    df, meta = _read(RESULTS / name)
    analysis = analyse(df, meta)
    assert analysis.answer.decisions
    for d in analysis.answer.decisions:
        assert d.choice in d.members
        assert d.outcome in (FASTER, SAME, WITHIN, UNDECIDED) and d.replicas == 1
        assert not (d.outcome == FASTER and d.ratio_lo < 1 + d.delta)  # faster: the whole interval beyond
        assert d.choice not in d.beaten  # never beaten beyond delta at its size


def test_an_api_of_one_mechanism_in_another_scenario_is_named_until_two_process_sets_show_it_slower():
    """MPS stream on an H200: ipc/ce and vmm/ce are one copy (an IPC mapping, the copy engine)
    reached from two scenarios; one run shows ipc/ce 3.5% behind with every sample apart, the next
    run vmm/ce. One process set's gap between two scenarios' APIs of one mechanism is within what
    separates their runs: ipc/ce (declared first) stays the named API. Where both process sets
    show the gap, vmm/ce is named."""
    def rows(replicas, gap=1.035):
        out = []
        for replica in replicas:
            for found in (figure("ipc", "ce", 1e-3 * gap, sizes=(64 * MIB,), ceiling=""),
                          figure("vmm", "ce", 1e-3, sizes=(64 * MIB,), ceiling="")):
                out.append([{**row, "replica": replica} for row in found])
        return out

    (once,) = decisions(*rows((1,)))
    assert "ipc/ce" not in once.beaten and once.choice == "ipc/ce" and once.why == "declared first"
    assert once.cls == "IPC mapping, copy engine" and "vmm/ce" in once.close  # named with it, not its next
    (twice,) = decisions(*rows((1, 2)))
    assert twice.choice == "vmm/ce" and "ipc/ce" in twice.beaten_twice and "ipc/ce" in twice.beaten
    # within one scenario one run's gap is enough: its samples were interleaved with the other's
    same_run = [[{**row, "scenario": "ipc"} for row in found] for found in rows((1,))]
    (one,) = decisions(*same_run)
    assert one.choice == "vmm/ce" and "ipc/ce" in one.beaten


def test_an_api_of_the_choice_s_mechanism_that_one_process_set_shows_slower_is_not_its_next_class():
    """MPS hand-off at 4 MiB on one H200: ipc/push chosen; vmm/push, the same push through another
    scenario's mapping, 4.2% behind in its one process set; the pull (ipc/ce) 24% behind. The next
    class is the next mechanism, the pull, its ratio measured from the choice; vmm/push is named
    with the choice (a candidate of its mechanism), not taken for a runner-up mechanism 1.04x behind."""
    def hand_off(path, variant, seconds):
        return figure(path, variant, seconds, sizes=(4 * MIB,), measure="handoff", ceiling="", sharing="mps")

    d = only(hand_off("ipc", "push", 10e-6), hand_off("vmm", "push", 10.42e-6), hand_off("ipc", "ce", 12.4e-6))
    assert d.choice == "ipc/push" and d.outcome == FASTER
    assert d.next_members == ("ipc/ce",) and d.ratio == pytest.approx(1.24, rel=0.01)
    assert "vmm/push" in d.close and "vmm/push" not in d.beaten


def test_a_process_sets_per_operation_offset_seen_by_either_engines_ceiling_widens_delta():
    """MPS stream at 4 KiB on an H200 (call-bound: each figure is one operation's cost, which moves
    with the process that issues it). torch's process set copies 8.7% faster than ipc's (their d2d@0
    ceilings), so its torch/caching comes out 4% ahead of ipc's kernel copy (ceiling d2d-sm@0, the
    same link): the offset between the two process sets, not a faster mechanism. delta is at least
    that spread whichever engine each figure's ceiling names, and the API comes from the declared
    order (ipc/ce is passed over: ipc/sm beats it in their own process set)."""
    sharing, size = "mps", 4 * KIB

    def fig(path, variant, seconds, ceiling_key):
        return figure(path, variant, seconds, sizes=(size,), sharing=sharing, ceiling=ceiling_key)

    groups = [fig("torch", "caching", 1.96e-6, "d2d@0"), ceiling("torch", 2.038e-6, sharing=sharing),
              fig("ipc", "sm", 2.04e-6, "d2d-sm@0"), fig("ipc", "ce", 2.18e-6, "d2d@0"),
              ceiling("ipc", 2.215e-6, sharing=sharing), ceiling("ipc", 2.09e-6, key="d2d-sm@0", sharing=sharing)]
    d = only(*groups)
    assert d.choice == "ipc/sm" and "ipc/ce" in d.beaten and "torch/caching" not in d.beaten
    assert "torch/caching" in d.close + d.same + d.members  # named with the choice, not ahead of it
    from gpuipc_bench.analysis.verdict import ceiling_times, delta_for
    from gpuipc_bench.analysis.summary import summarize

    summary = summarize(frame([r for g in groups for r in g]))
    rows = {(r.path, r.variant): r for r in summary.itertuples() if r.path != "ceiling"}
    times = ceiling_times(summary)
    across = delta_for(rows[("torch", "caching")], rows[("ipc", "sm")], times)
    assert across == pytest.approx(2.215 / 2.038 - 1, rel=0.01)  # the d2d@0 spread between the two sets
    assert delta_for(rows[("ipc", "sm")], rows[("ipc", "ce")], times) == pytest.approx(0.02)  # one set


def test_a_ratio_that_moves_between_two_process_sets_that_measured_both_figures_widens_delta():
    """Under MPS on one H200 the latency and sharing scenarios both time the kernel ping-pongs at 4 B,
    each in its own process set, and the flag ping-pong over the LL one came out 3.38 in one set and
    3.59 in the other (results/h200-leave.txt). The decision keeps the latency scenario's figures (more
    samples) and its delta is at least that movement: a ratio from one set carries the set's draw."""
    from gpuipc_bench.analysis.summary import summarize
    from gpuipc_bench.analysis.verdict import candidates, ceiling_times, delta_for
    from gpuipc_bench.paths import from_metadata

    paths = from_metadata(META)

    def pingpongs(scenario, ll, flags, n):
        return [figure("ipc", variant, seconds, sizes=(4,), n=n, measure="pingpong", metric="latency", ceiling="",
                       scenario=scenario, sharing="mps") for variant, seconds in (("device-ll", ll),
                                                                                  ("device-pingpong", flags))]

    staging = figure("staging", "pinned-hostsync", 24e-6, sizes=(4,), measure="handoff", ceiling="", sharing="mps")
    moved = [*pingpongs("latency", 0.376e-6, 1.348e-6, 12), *pingpongs("sharing", 0.395e-6, 1.333e-6, 6), staging]
    summary = summarize(frame([r for g in moved for r in g]))
    rows = {r.label: r for r in candidates(summary, paths).itertuples()}
    ll, flags = rows["ipc/device-ll"], rows["ipc/device-pingpong"]
    assert ll.scenario == "latency" and dict(ll.sets) == pytest.approx({"latency": 0.376e-6, "sharing": 0.395e-6},
                                                                          rel=1e-3)
    moved_by = (1.348 / 0.376) / (1.333 / 0.395) - 1
    assert delta_for(flags, ll, ceiling_times(summary)) == pytest.approx(moved_by, rel=0.01)
    assert delta_for(rows["staging/pinned-hostsync"], ll, ceiling_times(summary)) == pytest.approx(0.02)  # one set
    alone = summarize(frame([r for g in (*pingpongs("latency", 0.376e-6, 1.348e-6, 12), staging) for r in g]))
    rows = {r.label: r for r in candidates(alone, paths).itertuples()}
    assert delta_for(rows["ipc/device-pingpong"], rows["ipc/device-ll"], ceiling_times(alone)) == pytest.approx(0.02)


def test_two_scenarios_figures_on_two_engines_carry_both_engines_offsets():
    """Time-sliced stream at 4 B on one H200: NVSHMEM's device-initiated put (a kernel: ceiling
    d2d-sm@0) in NVSHMEM's process set, ipc/ce (the copy engine: d2d@0) in ipc's. Each figure
    carries its own set's offset on its own engine, so their ratio carries both: delta is the
    d2d@0 spread across the sets times the d2d-sm@0 spread, not the larger of the two."""
    from gpuipc_bench.analysis.summary import summarize
    from gpuipc_bench.analysis.verdict import ceiling_times, delta_for

    groups = [figure("ipc", "ce", 1.60e-6, sizes=(4,)), ceiling("ipc", 1.60e-6, sizes=(4,)),
              figure("nvshmem", "device-put", 2.9e-6, sizes=(4,), ceiling="d2d-sm@0"),
              ceiling("nvshmem", 1.80e-6, sizes=(4,), key="d2d-sm@0"),
              ceiling("torch", 1.72e-6, sizes=(4,)), ceiling("vmm", 1.89e-6, sizes=(4,), key="d2d-sm@0")]
    summary = summarize(frame([r for g in groups for r in g]))
    rows = {(r.path, r.variant): r for r in summary.itertuples() if r.path != "ceiling"}
    both = delta_for(rows[("nvshmem", "device-put")], rows[("ipc", "ce")], ceiling_times(summary))
    assert both == pytest.approx((1.72 / 1.60) * (1.89 / 1.80) - 1, rel=0.01)
    assert both > max(1.72 / 1.60, 1.89 / 1.80) - 1


def test_the_ratio_interval_spans_each_process_set_s_where_both_figures_were_measured_twice():
    """Two process sets measured both figures: ipc/push 1.10x ahead of vmm/ce in one, 1.20x in the
    other. The pooled samples' interval sits between the two; the decision's reaches both, since
    each set's is where the ratio may lie for a set drawn next (the MPS hand-off at 256 MiB on one
    H200: pooled [1.038, 1.056], its three sets reaching 1.034 and 1.097)."""
    def rows(replica, gap, n):
        return [[{**row, "replica": replica} for row in found] for found in (
            figure("ipc", "push", 1e-3, sizes=(64 * MIB,), n=n, measure="handoff", ceiling="", sharing="mps",
                   spread=0.01),
            figure("vmm", "ce", 1e-3 * gap, sizes=(64 * MIB,), n=n, measure="handoff", ceiling="", sharing="mps",
                   spread=0.01))]

    (d,) = decisions(*rows(1, 1.10, 12), *rows(2, 1.20, 4))  # the resampling pass's few samples
    assert d.choice == "ipc/push" and d.replicas == 2
    assert d.ratio_lo <= 1.10 * 1.005 and d.ratio_hi >= 1.20 / 1.02  # the pooled samples' reach 1.114
    (one,) = decisions(*rows(1, 1.10, 12))  # one set: its own interval, about 1.10
    assert 1.07 < one.ratio_lo <= one.ratio_hi < 1.13 and one.outcome == FASTER
    # 1.20x in one set, 1.10x in the other: delta is the 9% the ratio moved between them, and the
    # second set's interval reaches below 1 + delta although the pooled samples' does not; faster
    # only where the interval spanning both lies beyond it
    (moved,) = decisions(*rows(1, 1.20, 12), *rows(2, 1.10, 4))
    assert moved.delta == pytest.approx(1.2 / 1.1 - 1, rel=0.02) and moved.ratio_lo < 1 + moved.delta
    assert moved.outcome == UNDECIDED


def test_a_next_class_whose_samples_still_fall_carries_its_fall_in_the_ratio_s_delta():
    """Time-sliced at 64 KiB on one H200 the pageable hand-off's first samples ran slow (72, 68, then ~60 us):
    its ratio to the host-synced choice claims no more than that fall (verdict.falling), so a 1.14x gap read
    faster beyond 2% is not faster beyond the 18% its samples fell; a steady next class keeps the 2%."""
    from gpuipc_bench.analysis import verdict
    from gpuipc_bench.engine.sampler import DRIFT

    size = 64 * KIB
    fell = [1.3, 1.22, 1.15, 1.09, 1.04, 1.0, 1.0, 0.99, 1.01]  # falling smoothly, not two states

    def decided(samples):
        return only(figure("staging", "pinned-hostsync", 22e-6, sizes=(size,), measure="handoff", ceiling="", n=9),
                    figure("staging", "pageable", 1.1 * 22e-6, sizes=(size,), measure="handoff", ceiling="", n=9,
                           samples=samples))

    falling = decided(fell)
    assert stats.Prepared([22e-6 * 1.1 * x for x in fell]).two is None
    assert falling.choice == "staging/pinned-hostsync" and falling.delta == pytest.approx(1.185 / 1.0 - 1, rel=0.01)
    assert falling.outcome != stats.FASTER
    steady = decided([1.14 * x for x in (1.0, 1.01, 0.99, 1.0, 1.01, 0.995, 1.005, 1.0, 0.99)])
    assert steady.outcome == stats.FASTER and steady.delta == pytest.approx(stats.MIN_EFFECT)
    rising = decided(list(reversed(fell)))  # slower later: not a warm-up, no fall to carry
    assert rising.delta == pytest.approx(stats.MIN_EFFECT)
    assert verdict.FALLING == DRIFT  # the sampler's drift rule and the analysis's read one threshold
