"""Decision-driven sampling across scenarios (issues 33 and 34): a group far behind the best figure
the run knows at its size is decided in FAR_SAMPLES samples; the second sharing mode of a default
sweep measures its streams at the call-bound sizes and the largest only; the run's header says both."""

import itertools
from types import SimpleNamespace

import pytest

from click.testing import CliRunner

from gpuipc_bench.cli import cli
from gpuipc_bench.config import RunConfig
from gpuipc_bench.engine.sampler import DRIFT, FAR_SAMPLES, Counts, Sample, Sampler, best_key, drifting, still_falling
from gpuipc_bench.harness.known import KnownBest
from gpuipc_bench.harness.plan import CALL_BOUND_BYTES, second_mode_stream_sizes, shuffle_paths
from gpuipc_bench.results import read_results

MIB = 1 << 20


def _sampler(known=(), stream_sizes=None, sharing="time-sliced"):
    config = SimpleNamespace(order_seed=None, sample_order="interleaved", known_best=tuple(known),
                             stream_sizes=stream_sizes)
    ctx = SimpleNamespace(row_fields={"scenario": "staging", "workers": 2, "sharing": sharing}, clock=None,
                          phase=lambda *a, **k: None, spec=None, store=lambda name, word: None,
                          wait=lambda *a, **k: None, load=lambda name: 0, config=config)
    return Sampler(ctx, Counts(warmup=1, min_samples=6, max_samples=9))


def _group(measure="stream", nbytes=256 * MIB, variant="pinned"):
    return dict(path="staging", variant=variant, measure=measure, metric="bandwidth", src="0", dst="0", bytes=nbytes)


def _taken(sampler, groups, seconds):
    # each group's own noise: never settles by the interval (9 samples unless decided), never falls three samples in
    # a row (still_falling), and the halves of its first 6 samples agree (not drifting)
    def noise():
        return itertools.cycle((1.0, 1.02, 0.98))

    made = [sampler.run(g, lambda trial, s=s, n=noise(): Sample(s * next(n), 1), timer=True, reps=1)
            for g, s in zip(groups, seconds)]
    rows = list(sampler.interleave(made, "k"))
    return [sum(1 for r in rows if r["variant"] == g["variant"] and r["measure"] == g["measure"]) for g in groups]


def _known(seconds, measure="stream", sharing="time-sliced", nbytes=256 * MIB, between=None):
    """An earlier scenario's figure at this key (ipc/ce), and `between` (ipc/sm's) where given."""
    key = best_key(dict(measure=measure, metric="bandwidth", sharing=sharing, workers=2, src="0", dst="0",
                        bytes=nbytes))
    return [(*key, "ipc/ce", seconds)] + ([(*key, "ipc/sm", between)] if between is not None else [])


def test_a_group_far_behind_an_earlier_scenarios_best_stops_at_far_samples():
    """staging at 256 MiB, 20x behind what ipc measured earlier in the run, a kernel copy between them:
    3 samples, not 9."""
    assert _taken(_sampler(_known(1e-4, between=1.1e-4)), [_group()], [2e-3]) == [FAR_SAMPLES]


def test_a_group_far_behind_with_nothing_known_between_it_and_the_best_takes_its_samples():
    """Nothing known lies between the best and it: it may be the next class, whose ratio the answer
    prints, and its first samples overstate it (the time-sliced pageable hand-off at 64 KiB, 2.6x behind,
    read 2.95-3.07x from its first three: results/h200-binding.txt). Its own earlier figure (the
    resampling pass measuring it again) is not one between."""
    assert _taken(_sampler(_known(1e-4)), [_group()], [2e-3]) == [9]
    key = _known(1e-4)[0][:-2]
    assert _taken(_sampler(_known(1e-4) + [(*key, "staging/pinned", 1.9e-3)]), [_group()], [2e-3]) == [9]


def test_a_group_far_behind_whose_samples_still_fall_goes_on_until_they_settle():
    """The pageable hand-off's warm-up, as one H200 ran it at 64 KiB: 75 (the warm-up sample), 71, 67 us, then near 60.
    Far behind the leader all along, it stops once three samples in a row no longer fall by over
    STILL_FALLING each (5 here), not at its first three: those overstate its gap."""
    sampler = _sampler(_known(1e-6, measure="handoff", nbytes=64 << 10, between=2e-6))
    times = iter([75e-6, 71e-6, 67e-6, 63e-6, 61e-6, 60.5e-6, 60e-6, 60.2e-6, 60.1e-6])
    made = sampler.run(_group("handoff", 64 << 10), lambda trial: Sample(next(times), 1), timer=True, reps=1)
    rows = list(sampler.interleave([made], "k"))
    assert len(rows) == 5 and not still_falling([r["seconds"] for r in rows])
    assert still_falling([75, 71, 67]) and not still_falling([71, 67, 66.8]) and not still_falling([67, 71, 60])


def test_a_fixed_count_is_taken_whole_however_far_behind():
    """-n 20 (min = max): exactly 20 samples, as asked, though every one is 20x behind; the header says so."""
    sampler = _sampler(_known(1e-4, between=1.1e-4))
    sampler.counts = Counts(warmup=1, min_samples=20, max_samples=20)
    assert _taken(sampler, [_group()], [2e-3]) == [20]


def test_a_group_near_the_best_goes_on():
    """1.5x behind: a runner-up whose ratio matters; it takes its samples as before."""
    assert _taken(_sampler(_known(1e-4)), [_group()], [1.5e-4]) == [9]


def test_the_best_of_another_sharing_mode_or_size_or_measure_does_not_count():
    for known in (_known(1e-4, sharing="mps"), _known(1e-4, nbytes=64 * MIB), _known(1e-4, measure="handoff")):
        assert _taken(_sampler(known), [_group()], [2e-3]) == [9]


def test_a_rival_far_ahead_decides_a_group_and_the_leader_stops_at_min_samples():
    """In one scenario: 'pageable' 4x behind 'pinned', 'pipelined' between them, stops at 3; 'pinned' and
    'pipelined', clear of their rivals, at --min-samples or a sample more (a round of the interleave). Without
    'pipelined', 'pageable' may be the next class: --min-samples."""
    counts = _taken(_sampler(), [_group(variant="pinned"), _group(variant="pipelined"), _group(variant="pageable")],
                    [1e-3, 2e-3, 4e-3])
    assert counts[2] == FAR_SAMPLES and all(6 <= n <= 7 for n in counts[:2])
    alone = _taken(_sampler(), [_group(variant="pinned"), _group(variant="pageable")], [1e-3, 4e-3])
    assert all(6 <= n <= 7 for n in alone)


def test_the_second_mode_skips_the_streams_it_does_not_plan_and_keeps_hand_offs_and_ceilings():
    sampler = _sampler(stream_sizes=(4, MIB, 256 * MIB))
    counts = _taken(sampler, [_group("stream", 64 * MIB), _group("handoff", 64 * MIB, variant="pinned2")], [1e-3, 1e-3])
    assert counts == [0, 9]
    assert _taken(_sampler(stream_sizes=(4, MIB, 256 * MIB)), [_group("stream", 256 * MIB)], [1e-3]) == [9]
    ceiling = sampler.run(dict(_group("stream", 64 * MIB), path="ceiling", variant="d2d@0"),
                          lambda trial: Sample(1e-3, 1), timer=True, phase="ceiling")
    assert len(list(ceiling)) == 6  # constant samples: --min-samples, measured though no stream group is


def test_the_second_mode_measures_n_processes_aggregates_at_their_message_size():
    """The sharing scenario's aggregate of N workers carries N x the message in `bytes`: the second
    mode plans it by the message (64 MiB, the largest), so MPS keeps its sweep of N = 2, 4, 8."""
    sampler = _sampler(stream_sizes=(4, MIB, 64 * MIB))
    aggregates = [dict(path="sharing", variant="d2d-aggregate", measure="stream", metric="bandwidth", src="0",
                       dst="0", bytes=n * 64 * MIB, workers=n) for n in (1, 2, 4, 8)]
    assert [sampler.planned(g) for g in aggregates] == [True] * 4
    assert not sampler.planned(dict(aggregates[1], bytes=2 * 16 * MIB))  # N x a message not planned
    assert not sampler.planned(dict(_group("stream", 2 * 64 * MIB), workers=2))  # a path's own bytes


def test_known_best_keeps_the_median_of_every_verified_path_group_with_enough_samples():
    known = KnownBest()
    base = dict(measure="stream", metric="bandwidth", sharing="time-sliced", workers=2, src="0", dst="0", bytes=4096,
                scenario="ipc", verified=True)
    for s in (3e-6, 2e-6, 4e-6):
        known.add(dict(base, path="ipc", variant="ce", seconds=s))
    for s in (1e-6, 1e-6, 1e-6):
        known.add(dict(base, path="ceiling", variant="d2d@0", seconds=s))  # a ceiling: never a leader
        known.add(dict(base, path="vmm", variant="ce", seconds=s, verified=False))  # bytes wrong: no figure
    for s in (1e-7, 1e-7):
        known.add(dict(base, path="mempool", variant="ce", seconds=s))  # 2 samples: not yet
    assert known.rows() == ((*best_key(base), "ipc/ce", 3e-6),)
    for s in (5e-6, 6e-6, 7e-6):
        known.add(dict(base, path="vmm", variant="ce", seconds=s))  # every group's median, not the best alone
    assert known.rows() == ((*best_key(base), "ipc/ce", 3e-6), (*best_key(base), "vmm/ce", 6e-6))


def test_second_mode_stream_sizes():
    class Scenario:
        name, sharing_modes = "ipc", True

        def sizes(self, config):
            return (4, 4096, 65536, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)

    first, second = SimpleNamespace(name="time-sliced", scenarios=()), SimpleNamespace(name="mps", scenarios=())
    specs = [SimpleNamespace(device=0, mig=""), SimpleNamespace(device=0, mig="")]
    default = RunConfig(scenarios=("ipc",))
    assert second_mode_stream_sizes(Scenario(), default, specs, [first, second], first) is None
    assert second_mode_stream_sizes(Scenario(), default, specs, [first, second], second) == (
        4, 4096, 65536, CALL_BOUND_BYTES, 256 * MIB)
    for config in (RunConfig(scenarios=("ipc",), sizes=(4, 64 * MIB)), RunConfig(scenarios=("ipc",), preset="quick")):
        assert second_mode_stream_sizes(Scenario(), config, specs, [first, second], second) is None
    assert second_mode_stream_sizes(Scenario(), default, specs, [second], second) is None  # mps alone: its first


def test_a_host_path_in_a_further_mode_measures_below_the_shared_ceilings_and_its_largest_size():
    """staging, mmap, hostpool (through_host) in a further mode of a default sweep: the sizes below
    HOST_CEILINGS_SHARED_FROM and the largest; every size in the first mode, with --sizes or a preset,
    and for a device path; the estimate counts those sizes."""
    from gpuipc_bench.engine.pair import HOST_CEILINGS_SHARED_FROM
    from gpuipc_bench.harness import estimate
    from gpuipc_bench.harness.plan import second_mode_sizes

    sweep = (4, 4096, 65536, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB)

    class Scenario:
        name, sharing_modes, persistent_workers, start_method, cost_key = "staging", True, True, "fork", "staging"
        through_host = True

        def sizes(self, config):
            return sweep

    first, second = SimpleNamespace(name="time-sliced", scenarios=()), SimpleNamespace(name="mps", scenarios=())
    specs = [SimpleNamespace(device=0, mig=""), SimpleNamespace(device=0, mig="")]
    default = RunConfig(scenarios=("staging",))
    assert second_mode_sizes(Scenario(), default, specs, [first, second], second) == (4, 4096, 65536, MIB, 256 * MIB)
    assert second_mode_sizes(Scenario(), default, specs, [first, second], first) is None
    assert second_mode_sizes(Scenario(), RunConfig(scenarios=("staging",), sizes=sweep), specs, [first, second],
                             second) is None
    device = Scenario()
    device.through_host = False
    assert second_mode_sizes(device, default, specs, [first, second], second) is None
    assert estimate.HOST_SHARED_FROM == HOST_CEILINGS_SHARED_FROM
    whole = estimate.run_seconds(Scenario(), specs, first, default, [first, second], second_mode_stream_sizes)
    fewer = estimate.run_seconds(Scenario(), specs, second, default, [first, second], second_mode_stream_sizes)
    # a run's fixed cost, as run_seconds scales it
    fixed = estimate.COSTS["staging"][0] * estimate.RUN_COST_SCALE * estimate.HOST_STAGED_SCALE
    assert whole - fixed == pytest.approx(8 / 5 * (fewer - fixed))


def test_the_host_paths_run_after_the_device_paths_of_their_process_set():
    def scenario(name, through_host=False, last=False):
        return SimpleNamespace(name=name, persistent_workers=True, start_method="fork", through_host=through_host,
                               last_in_set=last)
    names = [scenario("staging", True), scenario("ipc"), scenario("hostpool", True, True), scenario("mmap", True),
             scenario("vmm")]
    for seed in range(20):
        order = [run[0].name for run in shuffle_paths([(s, "w", None) for s in names], seed)]
        assert set(order[:2]) == {"ipc", "vmm"} and set(order[2:4]) == {"staging", "mmap"} and order[4] == "hostpool"


def test_the_header_has_the_wall_time_from_the_commands_start_and_the_far_behind_rule(tmp_path):
    out = tmp_path / "r.csv"
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--sizes", "4K", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    meta = read_results(out)[1]
    assert float(meta["seconds.wall"]) >= float(meta["seconds.total"]) >= 0
    assert 0 <= float(meta["seconds.startup"]) <= float(meta["seconds.wall"])
    assert "stops after 3 samples" in meta["sampling.far_behind"]


def test_the_header_says_the_far_behind_rule_is_off_for_a_fixed_count(tmp_path):
    out = tmp_path / "r.csv"
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--sizes", "4K", "-n", "4", "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    assert read_results(out)[1]["sampling.far_behind"] == "off: a fixed count of 4 samples a group"


def _beaten_by_a_steady_rival(mine):
    """`mine`'s samples (us) interleaved with a rival's, steady near 25 us: every sample of mine slower
    (beaten, and decided against its only rival); nothing known between them, so never far behind."""
    sampler = _sampler()
    rival_times = itertools.cycle((25.0e-6, 25.2e-6, 24.9e-6))
    mine_times = iter([t * 1e-6 for t in mine])
    made = [sampler.run(_group("handoff", 64 << 10, "pinned-hostsync"), lambda trial: Sample(next(rival_times), 1),
                        timer=True, reps=1),
            sampler.run(_group("handoff", 64 << 10, "pageable"), lambda trial: Sample(next(mine_times), 1),
                        timer=True, reps=1)]
    rows = list(sampler.interleave(made, "k"))
    return sum(1 for r in rows if r["variant"] == "pageable")


def test_a_decided_group_still_drifting_takes_max_samples():
    """The time-sliced pageable hand-off at 64 KiB as one H200 ran it in a default run (results/h200-between-b-1:
    71.8, 66.8, 70.0, 64.1, 61.4, 60.5 us, then near 60): beaten by the host-synced hand-off from its first
    samples, it stopped at --min-samples with a median (65.5) above where it settles. Drifting (the later half's
    median over DRIFT below the earlier half's), it goes on to --max-samples; a steady one stops at 6."""
    assert _beaten_by_a_steady_rival([75.0, 71.8, 66.8, 70.0, 64.1, 61.4, 60.5, 60.2, 60.0, 60.3]) == 9
    assert _beaten_by_a_steady_rival([62.0, 61.0, 60.4, 61.2, 60.8, 60.3, 61.1, 60.2, 60.0, 60.3]) == 6


def test_drifting_either_way_from_six_samples():
    assert drifting([71.8, 66.8, 70.0, 64.1, 61.4, 60.5])  # falling: 70.0 then 61.4
    assert drifting([60.0, 60.5, 61.0, 64.0, 65.0, 66.0])  # rising
    assert not drifting([61.0, 60.4, 61.2, 60.8, 60.3, 61.1])
    assert not drifting([75.0, 70.0, 65.0, 60.0, 55.0])  # five: too few to tell halves apart
    assert DRIFT == 0.03
