"""A group's time budget: a slow group stops at --min-samples once its timed transfers add up to
GROUP_BUDGET_S; a fast noisy one still goes on to --max-samples (the stop rule is unchanged)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from gpuipc_bench.engine.sampler import GROUP_BUDGET_S, TARGET_SAMPLE_S, Counts, Sample, Sampler


def _samples(per_transfer: float, batch: int = 1) -> int:
    ctx = SimpleNamespace(row_fields={"scenario": "nixl", "workers": 2, "sharing": "time-sliced"}, clock=None,
                          phase=lambda *a, **k: None, spec=None)
    sampler = Sampler(ctx, Counts(warmup=1, min_samples=6, max_samples=20))
    noise = itertools.cycle((1.0, 1.3, 0.8, 1.2))  # never within +-1%: only the cap or the budget stops it
    group = dict(path="nixl", variant="write-from-dram", measure="stream", metric="bandwidth", src="host",
                 dst="0", bytes=256 << 20, ceiling="h2d@0")
    rows = sampler.run(group, lambda trial: Sample(per_transfer * next(noise), batch), timer=True, solo=True,
                       calibrate=False)
    return len(list(rows))


def test_a_slow_noisy_group_stops_at_min_samples():
    assert _samples(GROUP_BUDGET_S / 4) == 6  # 6 x 0.5 s: over the budget as soon as it may stop


def test_the_budget_counts_every_transfer_of_a_sample():
    assert _samples(GROUP_BUDGET_S / 40, batch=10) == 6  # 10 transfers of 50 ms a sample


def test_a_group_between_stops_when_its_budget_is_spent():
    n = _samples(GROUP_BUDGET_S / 10)  # about 0.2 s a sample: the budget is spent after about 10
    assert 8 <= n <= 12


def test_a_fast_noisy_group_still_goes_to_max_samples():
    assert _samples(1e-5) == 20


# --------------------------------------------------------------------------- warm-ups sized from the size before


def _ctx(words=None):
    stored: list[int] = []
    feed = iter(words or [])
    return SimpleNamespace(row_fields={"scenario": "ipc", "workers": 2, "sharing": "time-sliced"}, clock=None,
                           phase=lambda *a, **k: None, spec=None, store=lambda name, word: stored.append(word),
                           wait=lambda *a, **k: None, load=lambda name: next(feed), stored=stored)


def _group(nbytes, variant="ce"):
    return dict(path="ipc", variant=variant, measure="handoff", metric="bandwidth", src="0", dst="0", bytes=nbytes,
                ceiling="d2d@0")


def _sizes(sampler, per_transfer, timer=True, variant="ce"):
    """The transfers of each trial, per size (4 KiB then 64 KiB), and the rows' batches."""
    trials: dict[int, list[tuple[bool, int]]] = {}
    batches = []
    for nbytes in (4096, 65536):
        def take(trial, n=nbytes):
            trials.setdefault(n, []).append((trial.warm, trial.reps))
            return Sample(per_transfer, trial.reps) if timer else None
        batches += [r["batch"] for r in sampler.run(_group(nbytes, variant), take, timer=timer, reps=64)]
    return trials, batches


def test_the_next_size_warms_up_at_the_count_the_last_one_settled_on():
    sampler = Sampler(_ctx(), Counts(warmup=1, min_samples=6, max_samples=6))
    trials, batches = _sizes(sampler, 3e-4)  # a time-sliced hand-over: 0.3 ms a transfer
    settled = int(TARGET_SAMPLE_S / 3e-4)  # the transfers that make a calibrated sample
    assert trials[4096][0] == (True, 64)  # the first size: the group's own count
    # the next (16 times the bytes): the bytes of one settled sample, not 64 transfers again
    assert trials[65536][0] == (True, 1)
    assert set(batches) == {settled}  # the timed samples: calibrated against the group's own cap


def test_the_warm_up_moves_the_bytes_of_one_settled_sample_of_the_size_before():
    from gpuipc_bench.engine.sampler import warm_reps

    assert warm_reps(16, 4096, 16384) == 4 and warm_reps(15, 4096, 16384) == 4  # rounded up
    assert warm_reps(3, 64 << 20, 256 << 20) == 1  # never below one
    assert warm_reps(16, 65536, 4096) == 16  # a smaller size (an order of its own): the count as it was


def test_the_calibration_may_still_rise_to_the_groups_own_count():
    sampler = Sampler(_ctx(), Counts(warmup=1, min_samples=6, max_samples=6))
    sampler.settled[("ipc", "ce", "handoff", "bandwidth", "0", "0", False)] = (4, 4096)
    trials, batches = _sizes(sampler, 1e-5)  # fast: 64 transfers are within TARGET_SAMPLE_S
    assert trials[4096][0] == (True, 4) and set(batches) == {64}


def test_a_first_warm_up_may_take_fewer_transfers_and_the_calibration_still_rises_to_the_cap():
    """A measurement whose transfer may take milliseconds (a time-sliced device ping-pong) warms up
    at the first size with `first_reps`; the timed samples are calibrated from it, up to the cap."""
    from gpuipc_bench.engine.sampler import warm_reps

    for per_transfer, settled in ((4e-3, 1), (1e-6, 200)):
        sampler, trials = Sampler(_ctx(), Counts(warmup=1, min_samples=6, max_samples=6)), []

        def take(trial):
            trials.append((trial.warm, trial.reps))
            return Sample(per_transfer, trial.reps)

        rows = list(sampler.run(_group(4), take, timer=True, reps=200, first_reps=10))
        assert trials[0] == (True, 10) and {r["batch"] for r in rows} == {settled}
    # a later size warms up from what the first settled on (the bytes of one such sample), not first_reps
    trials.clear()
    list(sampler.run(_group(4096), take, timer=True, reps=200, first_reps=10))
    assert trials[0] == (True, warm_reps(200, 4, 4096)) == (True, 1)


def test_another_measurement_keeps_its_own_count():
    sampler = Sampler(_ctx(), Counts(warmup=1, min_samples=6, max_samples=6))
    _sizes(sampler, 3e-4, variant="sm")
    trials, _ = _sizes(sampler, 3e-4, variant="push")
    assert trials[4096][0] == (True, 64)


def test_every_worker_sizes_the_warm_up_alike():
    """The other worker learns the counts from the timing worker's decision words only: it must
    take the same transfers in every trial, warm-ups included."""
    timer = Sampler(_ctx(), Counts(warmup=1, min_samples=6, max_samples=6))
    timed, _ = _sizes(timer, 3e-4)
    other = Sampler(_ctx(timer.ctx.stored), Counts(warmup=1, min_samples=6, max_samples=6))
    followed, _ = _sizes(other, 3e-4, timer=False)
    assert followed == timed and other.settled == timer.settled


def test_set_up_operations_are_timed_as_often_as_the_runs_figures_at_most():
    from gpuipc_bench.engine.sampler import SETUP_REPEATS

    assert Sampler(_ctx(), Counts(warmup=1, min_samples=6, max_samples=9)).setup_repeats == SETUP_REPEATS == 9
    assert Sampler(_ctx(), Counts(warmup=1, min_samples=3, max_samples=3)).setup_repeats == 3  # --quick
    assert Sampler(_ctx(), Counts(warmup=3, min_samples=20, max_samples=20)).setup_repeats == 9  # --thorough


def test_a_warm_up_sample_is_taken_with_its_check_off_and_every_timed_one_with_it_on():
    """Gpu.verify checks no bytes of a warm-up sample (gpu.device.warming): it calibrates, it is no
    result. The sampler turns the check off for the warm-up's take() alone."""
    from gpuipc_bench.gpu import device

    seen = []

    def take(trial):
        seen.append((trial.warm, device._WARMING[0]))
        return Sample(1e-5, trial.reps)

    sampler = Sampler(_ctx(), Counts(warmup=2, min_samples=6, max_samples=6))
    list(sampler.run(_group(4096, "ce"), take, timer=True, reps=8))
    assert seen[:2] == [(True, True), (True, True)] and seen[2:] == [(False, False)] * 6
    assert device._WARMING[0] is False


def test_a_check_during_a_warm_up_only_waits_for_the_stream():
    from gpuipc_bench.gpu import device
    from gpuipc_bench.gpu.memory import Ring

    calls = []
    gpu = object.__new__(device.Gpu)
    gpu.synchronize = lambda: calls.append("sync")
    gpu.kernels = SimpleNamespace(mismatch=lambda *a, **k: calls.append("mismatch"))
    gpu.stream, gpu.device = None, 0
    with device.warming():
        assert gpu.verify(0, Ring.for_size(4096, 2), 1, "ipc", "ce") is True
    assert calls == ["sync"]
    assert gpu.verify(0, Ring.for_size(4096, 2), 1, "ipc", "ce") is not False and calls == ["sync", "mismatch"]
