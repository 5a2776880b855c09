"""A group's time budget: a slow group stops at --min-samples once its timed transfers add up to
GROUP_BUDGET_S; a fast noisy one still goes on to --max-samples (the stop rule is unchanged)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from gpuipc_bench.sampler import GROUP_BUDGET_S, Counts, Sample, Sampler


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
