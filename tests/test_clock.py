"""The SM clock per sample group (the CSV's sm_clock_mhz): read through a fake NVML by the GPU's
PCI bus id, once a group as it starts timing, NaN wherever it is unknown, never an error."""

from __future__ import annotations

import math
from types import SimpleNamespace

from gpuipc_bench.gpu.clock import SmClock
from gpuipc_bench.engine.sampler import Counts, Sample, Sampler


class FakeNvml:
    NVML_CLOCK_SM = 1

    def __init__(self, clocks: dict[str, float], fail: bool = False):
        self.clocks, self.fail, self.reads = clocks, fail, 0
        self.buses = list(clocks)

    def nvmlInit(self):
        if self.fail:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self):
        return len(self.buses)

    def nvmlDeviceGetHandleByIndex(self, k):
        return k

    def nvmlDeviceGetPciInfo(self, k):
        return SimpleNamespace(busId=self.buses[k])

    def nvmlDeviceGetClockInfo(self, k, kind):
        assert kind == self.NVML_CLOCK_SM
        self.reads += 1
        return self.clocks[self.buses[k]]


def test_the_clock_of_the_gpu_at_this_bus_id():
    nvml = FakeNvml({"00000000:17:00.0": 1755, "00000000:2A:00.0": 1980})
    assert SmClock("0000:2a:00.0", nvml).read() == 1980.0  # CUDA's bus id form, NVML's numbering
    assert SmClock("0000:17:00.0", nvml).read() == 1755.0


def test_an_unknown_clock_is_nan_and_asked_once():
    nvml = FakeNvml({"00000000:17:00.0": 1755})
    clock = SmClock("0000:99:00.0", nvml)
    assert math.isnan(clock.read()) and math.isnan(clock.read())
    broken = SmClock("0000:17:00.0", FakeNvml({"00000000:17:00.0": 1755}, fail=True))
    assert math.isnan(broken.read())
    assert math.isnan(SmClock("0000:17:00.0", FakeNvml({"00000000:17:00.0": 0})).read())  # 0 MHz: not a clock


def _rows(ctx, groups=2):
    sampler = Sampler(ctx, Counts(warmup=1, min_samples=3, max_samples=3))
    out = []
    for g in range(groups):
        group = dict(path="ipc", variant="ce", measure="stream", metric="bandwidth", src="0", dst="0",
                     bytes=4096 << g, ceiling="d2d@0")
        out += list(sampler.run(group, lambda trial: Sample(1e-5, trial.reps), timer=True, solo=True,
                                calibrate=False))
    out.append(sampler.row(dict(path="ipc", variant="ipc_open_cold", measure="", metric="setup", src="0", dst="0",
                                bytes=0), Sample(1e-3, 1, None), 0))
    return out


def _ctx(clock=None):
    return SimpleNamespace(row_fields={"scenario": "ipc", "workers": 2, "sharing": "time-sliced"}, clock=clock,
                           phase=lambda *a, **k: None, spec=None)


def test_each_group_carries_the_clock_read_as_it_started_timing():
    readings = iter([1980.0, 1410.0])
    calls = []

    def clock():
        calls.append(1)
        return next(readings)

    rows = _rows(_ctx(clock))
    assert [r["sm_clock_mhz"] for r in rows[:3]] == [1980.0] * 3  # read once a group, not once a sample
    assert [r["sm_clock_mhz"] for r in rows[3:6]] == [1410.0] * 3  # a throttled second group shows it
    assert len(calls) == 2
    assert math.isnan(rows[6]["sm_clock_mhz"])  # a set-up row times no GPU work at a clock


def test_without_a_clock_the_column_is_nan():
    assert all(math.isnan(r["sm_clock_mhz"]) for r in _rows(_ctx(None)))
