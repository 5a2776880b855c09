"""Buffers a process set's scenarios share: the pinned host buffers of the ceilings, kept by the
process for its next scenario (gpu.memory.KeptPinnedBuffer), made in a scenario's set-up by both
workers at once (Ceilings.reserve); and the seeds each scenario samples with, salted by the scenario
and its GPUs (engine.sampler), so that bytes one scenario left never pass as another's."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest

from gpuipc_bench.engine.sampler import Counts, Sample, Sampler
from gpuipc_bench.gpu import ceilings, memory
from gpuipc_bench.gpu.memory import Ring


class FakePinned:
    made: list = []

    def __init__(self, nbytes, device):
        self.nbytes, self.ptr, self.dptr = nbytes, 0x1000 * (len(FakePinned.made) + 1), 0
        self.dptr = self.ptr
        FakePinned.made.append(self)

    def numpy(self, nbytes=None):
        return ("bytes of", self.ptr)


@pytest.fixture
def pinned(monkeypatch):
    FakePinned.made = []
    monkeypatch.setattr(memory, "PinnedHostBuffer", FakePinned)
    monkeypatch.setattr(memory, "_KEPT_PINNED", {})
    return FakePinned.made


def kept_bytes() -> int:
    """Bytes of pinned host memory the process keeps for reuse (not lent now)."""
    return sum(n * len(buffers) for n, buffers in memory._KEPT_PINNED.items())


def test_a_kept_pinned_buffer_goes_back_to_the_process_and_is_taken_again(pinned):
    first = memory.KeptPinnedBuffer(1 << 20, 0)
    both = memory.KeptPinnedBuffer(1 << 20, 0)  # lent at once: two buffers
    assert len(pinned) == 2 and first.ptr != both.ptr and kept_bytes() == 0
    address = first.ptr
    first.close()
    first.close()  # given back once
    assert first.ptr == 0 and kept_bytes() == 1 << 20
    with pytest.raises(RuntimeError, match="after it was given back"):
        first.numpy()
    again = memory.KeptPinnedBuffer(1 << 20, 0)  # the next scenario of the process
    assert again.ptr == address and len(pinned) == 2 and kept_bytes() == 0
    other = memory.KeptPinnedBuffer(2 << 20, 0)  # another size: a buffer of its own
    assert len(pinned) == 3 and other.nbytes == 2 << 20


class StubGpu:
    device, l2_bytes = 0, 0

    def __init__(self):
        self.kept, self.allocs, self.fills = [], [], []

    def kept_pinned(self, nbytes):
        buffer = SimpleNamespace(dptr=0x10000 * (len(self.kept) + 1), nbytes=nbytes)
        self.kept.append(buffer)
        return buffer

    def alloc(self, nbytes):
        buffer = SimpleNamespace(ptr=0xD0000 + len(self.allocs), nbytes=nbytes)
        self.allocs.append(buffer)
        return buffer

    def gpu_for(self, device):
        return self

    def fill(self, ptr, ring, seed):
        self.fills.append(ptr)

    def synchronize(self):
        pass


def test_reserve_makes_a_ceilings_buffers_before_its_first_sample(monkeypatch):
    monkeypatch.setattr(ceilings, "on_device", lambda device: contextlib.nullcontext())
    gpu = StubGpu()
    table = ceilings.Ceilings(gpu, 1 << 20)
    table.reserve("h2d@0")  # the pinned source and its second ring, and the device destination
    assert [b.nbytes for b in gpu.kept] == [1 << 20, 1 << 20] and len(gpu.allocs) == 1
    ring = Ring.for_size(4096, 8)
    taken = [table._host_source(("h2d", "host", 0), table._buffers[("h2d", "host", 0)][0], ring, seed)[0]
             for seed in (5, 9)]
    assert taken == [gpu.kept[0].dptr, gpu.kept[1].dptr] and len(gpu.kept) == 2  # nothing more made
    table.reserve("h2d-sm@0")  # the kernel copy shares the copy engine's buffers
    table.reserve("d2h@0")  # a device source and a pinned destination
    assert len(gpu.kept) == 3 and len(gpu.allocs) == 2
    with pytest.raises(ValueError, match="its own GPU"):
        table.reserve("d2h@1")


def _ctx(scenario, devices):
    return SimpleNamespace(row_fields={"scenario": scenario}, specs=[SimpleNamespace(device=d) for d in devices],
                           clock=None, phase=lambda *a, **k: None, spec=None, store=lambda *a: None,
                           wait=lambda *a, **k: None, load=lambda name: 0,
                           config=SimpleNamespace(order_seed=None, sample_order="declared"))


def _seeds(scenario, devices, solo=False):
    sampler = Sampler(_ctx(scenario, devices), Counts(warmup=0, min_samples=3, max_samples=3))
    seeds: list[int] = []

    def take(trial):
        seeds.append(trial.seed)
        return Sample(1e-5, trial.reps)

    group = dict(path="x", variant="v", measure="stream", metric="bandwidth", src="0", dst="0", bytes=4096)
    list(sampler.run(group, take, timer=True, solo=solo))
    return seeds


def test_each_scenario_of_a_process_samples_with_seeds_of_its_own():
    ipc, vmm = _seeds("ipc", (0, 0)), _seeds("vmm", (0, 0))
    assert len(set(ipc)) == 3 and not set(ipc) & set(vmm)  # a new seed a sample; none shared between scenarios
    assert _seeds("ipc", (0, 0)) == ipc  # every worker of a scenario derives the same seeds
    assert not set(_seeds("ipc", (0, 1))) & set(ipc) and not set(_seeds("ipc", (1, 0))) & set(ipc)
    alone = _seeds("ipc", (0, 0), solo=True)  # a ceiling's samples, taken by one worker: apart from both
    assert not set(alone) & set(ipc) and not set(alone) & set(_seeds("vmm", (0, 0), solo=True))
