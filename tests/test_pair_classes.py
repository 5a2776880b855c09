"""`--pairs all` by link class (issue 34): one pair per class swept whole, the others at their
headline figures and swept whole only where one falls outside its class; the plan's estimate."""

import dataclasses

import pytest
from click.testing import CliRunner

from fakes import h100_node
from gpuipc_bench.cli import cli
from gpuipc_bench.config import RunConfig
from gpuipc_bench.harness.classes import (
    RESWEEP_BEYOND, PairClasses, Resweep, group_pairs, headline_sizes, link_class)
from gpuipc_bench.harness.estimate import estimate_text
from gpuipc_bench.harness.plan import plan_pairs, plan_runs, registry, second_mode_stream_sizes
from gpuipc_bench.harness.rounds import estimate_with_rounds, plan_rounds
from gpuipc_bench.modes import make as make_modes
from gpuipc_bench.harness.pool import set_key
from gpuipc_bench.analysis.model import link_class as header_link_class

MIB = 1 << 20
ALL = ("staging", "ipc", "vmm", "mempool", "hostpool", "mmap", "latency", "peer", "nccl", "torch", "nvshmem",
       "sharing", "host", "barrier")


def _plan(machine, names=ALL, **config):
    config = RunConfig(scenarios=tuple(names), **config)
    return [(registry()[n], registry()[n].workers(config, machine)) for n in names], config


def _where(expanded, name):
    return [((specs[0].device, specs[-1].device), scenario.sizes(config))
            for scenario, specs in expanded if scenario.name == name for config in [RunConfig(scenarios=(name,))]]


def test_one_class_one_pair_swept_whole_the_others_at_their_headline_figures():
    machine = h100_node(4)
    plan, config = _plan(machine)
    expanded, classes, rest = plan_pairs(plan, config, machine, "all")
    assert classes.full == ((0, 1),) and len(classes.headline) == 11
    assert len(set(classes.classes.values())) == 1 and "NV18" in classes.classes[(2, 3)]
    largest = max(registry()["ipc"].sizes(config))
    ipc = dict(_where(expanded, "ipc"))
    assert len(ipc) == 12 and ipc[(0, 1)] == registry()["ipc"].sizes(config)
    assert all(ipc[pair] == (4096, largest) for pair in classes.headline)
    assert all(sizes == (4096,) for pair, sizes in _where(expanded, "latency") if pair != (0, 1))
    for name in ("staging", "vmm", "peer", "nvshmem"):  # whole on the class's pair only
        assert [pair for pair, _ in _where(expanded, name)] == [(0, 1)]
    # a headline pair's whole sweep, kept for a resweep: every other pairable scenario, ipc's other sizes
    names = [s.name for s, _ in rest[(2, 3)]]
    assert "staging" in names and "peer" in names and "ipc" in names
    ipc_rest = next(s for s, _ in rest[(2, 3)] if s.name == "ipc")
    assert set(ipc_rest.sizes(config)) | {4096, largest} == set(registry()["ipc"].sizes(config))


def test_two_link_classes_each_get_a_pair_swept_whole():
    machine = h100_node(4)
    links = {(a, b): "NV18" if {a, b} in ({0, 1}, {2, 3}) else "SYS" for a in range(4) for b in range(4) if a != b}
    machine = dataclasses.replace(machine, links=links)
    classes = group_pairs([(a, b) for a in range(4) for b in range(4) if a != b], machine)
    assert classes.full == ((0, 1), (0, 2)) and classes.classes[(0, 2)].startswith("SYS")
    assert classes.classes[(3, 2)] == classes.classes[(0, 1)]
    assert link_class(machine, 2, 0) == link_class(machine, 0, 2)
    # the planner's class and the analysis's (from the header) name the same NVML link
    assert header_link_class(machine.metadata(), "0", "1") in link_class(machine, 0, 1)


def test_full_sweeps_every_pair_and_needs_pairs_all(tmp_path):
    machine = h100_node(4)
    plan, config = _plan(machine, ("ipc",))
    expanded, classes, rest = plan_pairs(plan, config, machine, "all", full=True)
    assert len(classes.full) == 12 and not classes.headline and not rest
    assert all(sizes == registry()["ipc"].sizes(config) for _, sizes in _where(expanded, "ipc"))
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--full", "-o", str(tmp_path / "x.csv")])
    assert result.exit_code == 2 and "--full" in result.output and "--pairs all" in result.output
    assert "Traceback" not in result.output


def test_headline_sizes():
    assert headline_sizes((4, 4096, 65536, 256 * MIB)) == (4096, 256 * MIB)
    assert headline_sizes((4, 64)) == (64,)  # nothing from 4 KiB up: the largest
    assert headline_sizes((1 * MIB, 64 * MIB)) == (MIB, 64 * MIB)


def _rows(pair, seconds, figure=("ipc", "ce", "stream"), nbytes=256 * MIB, n=6):
    path, variant, measure = figure
    return [dict(src=str(pair[0]), dst=str(pair[1]), path=path, variant=variant, measure=measure, bytes=nbytes,
                 seconds=seconds * (1 + 0.002 * (i % 3)), verified=True) for i in range(n)]


def test_a_pair_planted_slow_is_named_for_a_whole_sweep_and_the_others_are_not():
    """One link at half rate: its 256 MiB stream takes twice the class median; 1% apart is noise."""
    machine = h100_node(4)
    classes = group_pairs([(a, b) for a in range(4) for b in range(4) if a != b], machine)
    resweep = Resweep(classes)
    for pair in classes.classes:
        base = 6.8e-4 * (1.01 if pair == (1, 2) else 1.0)
        for row in _rows(pair, base * (2.0 if pair == (2, 3) else 1.0)) + _rows(pair, 2.1e-5, ("ipc", "ce", "handoff"),
                                                                                 4096):
            resweep.add(row)
    found = resweep.pairs()
    assert list(found) == [(2, 3)]
    assert "ipc/ce stream at 256 MiB took 2.00x the median of its class (12 pairs)" in found[(2, 3)]
    assert RESWEEP_BEYOND == pytest.approx(0.04)


def test_a_pair_swept_whole_is_never_named_and_failed_checks_do_not_count():
    machine = h100_node(2)
    classes = PairClasses({(0, 1): "c", (1, 0): "c"}, full=((0, 1),), headline=((1, 0),))
    resweep = Resweep(classes)
    for row in _rows((0, 1), 3e-4) + [dict(r, verified=False) for r in _rows((1, 0), 9e-4)]:
        resweep.add(row)
    assert resweep.pairs() == {}
    for row in _rows((0, 1), 9e-4, n=6):  # the class's own pair far off: it is swept whole already
        resweep.add(row)
    assert machine.gpu_count == 2 and resweep.pairs() == {}


def test_ab_and_ba_have_process_sets_of_their_own():
    specs = registry()["ipc"].workers(RunConfig(scenarios=("ipc",), devices=(0, 1)), h100_node(2))
    back = registry()["ipc"].workers(RunConfig(scenarios=("ipc",), devices=(1, 0)), h100_node(2))
    assert set_key(specs, None, {}) != set_key(back, None, {})
    assert set_key(specs, "mps", {}) != set_key(specs, None, {})


# The plan's estimate as make_plan computes it: both sharing modes (the same-GPU sharing scenario runs in
# each), every start of processes seeing its own GPUs alone (gpu.visible: one, or a pair's two; a start across
# two GPUs as the two-H200 run measured it: harness.estimate.PAIR_START_S), and the headline pairs in rounds of
# disjoint pairs (harness.rounds, the proof held), the runs' costs as 2.5 ms samples make them
# (harness.estimate.RUN_COST_SCALE), the CPU baseline at the GPU sweep's sizes up to 16 MiB (6, not 12).
# Today (a set's start 0.7 s, the run's end 0.5 s: the workers before a fresh scenario leave while its
# own start, the fork server killed; the host paths' 1 MiB warm-ups over PCIe, harness.estimate.HOST_STAGED_SCALE,
# fitted on one H200: 32.5, 53.7 and 84.1 s before it; peer in the swept pair's process set, not processes of its
# own: 30.4, 51.6 and 82.0 s before it): 2 GPUs 28.6 s, 4 GPUs 49.9 s, an 8-GPU NVSwitch node 80.2 s (with the
# costs of 5 ms samples and whole warm-ups: 37.0, 59.6 and 92.0 s; and every GPU seen by every start, as before
# gpu.visible: 37.4, 66.5 and 125.6 s), against 46, 246 and 1,126 s for every pair swept whole.
# The issue asks at most 45, 60 and 120 s: the first two are its measured bars, the third this estimate's.
ESTIMATED = {2: 28.6, 4: 49.9, 8: 80.2}
ESTIMATED_OF_5_MS_SAMPLES = {2: 37.0, 4: 59.6, 8: 92.0}
ESTIMATED_SEEING_EVERY_GPU = {2: 37.4, 4: 66.5, 8: 125.6}


def _estimate(gpus: int, full: bool) -> float:
    machine = h100_node(gpus)
    plan, config = _plan(machine)
    modes = make_modes(("time-sliced", "mps"))
    expanded, classes, _ = plan_pairs(plan, config, machine, "all", full=full)
    return estimate_with_rounds(plan_runs(expanded, modes), config, modes, second_mode_stream_sizes, gpus,
                                plan_rounds(classes, machine, config))


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_the_estimate_of_pairs_all_grows_with_classes_not_pairs(gpus):
    grouped, whole = _estimate(gpus, False), _estimate(gpus, True)
    assert grouped == pytest.approx(ESTIMATED[gpus], abs=0.1)
    assert ESTIMATED[8] <= 120
    assert whole > 4 * grouped if gpus > 2 else whole > grouped
    if gpus > 2:  # four times the ordered pairs (56 against 12, 12 against 2): less than twice the time
        assert grouped < 2 * _estimate(gpus // 2, False)


@pytest.mark.parametrize("gpus", [2, 4, 8])
def test_with_every_gpu_seen_by_every_start_the_estimate_is_what_it_was(gpus, monkeypatch):
    from gpuipc_bench.harness import estimate

    monkeypatch.setattr(estimate, "RUN_COST_SCALE", 1.0)  # the costs as fitted, before 2.5 ms samples
    monkeypatch.setattr(estimate, "HOST_STAGED_SCALE", 1.0)  # and before the host paths' 1 MiB warm-ups
    assert _estimate(gpus, False) == pytest.approx(ESTIMATED_OF_5_MS_SAMPLES[gpus], abs=0.1)
    monkeypatch.setattr(estimate, "SEES_OWN_GPUS", False)
    assert _estimate(gpus, False) == pytest.approx(ESTIMATED_SEEING_EVERY_GPU[gpus], abs=0.1)


def test_the_estimate_is_said_with_how_the_pairs_are_measured():
    machine = h100_node(4)
    classes = group_pairs([(a, b) for a in range(4) for b in range(4) if a != b], machine)
    text = estimate_text(75.4, 12, classes)
    assert text.startswith("this run: about 75 s (estimated from its plan) over 12 ordered GPU pairs: 1 swept whole")
    assert "11 at their headline figures" in text and "--full" in text
    assert "min" in estimate_text(200, 12)
