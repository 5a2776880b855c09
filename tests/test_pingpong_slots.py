"""The device ping-pong's slots: a group's samples cycle through SLOTS places of the flags and LL
words (engine/pingpong.py), the same in both workers, each inside the exported buffer."""

import types

import pytest

from gpuipc_bench.engine import pingpong
from gpuipc_bench.engine.pingpong import FLAG_OFFSET, PAYLOAD_OFFSET, SLOTS, DevicePingPong, Layout


@pytest.mark.parametrize("max_bytes", [0, 4, 4096, 1 << 20])
def test_slots_are_apart_page_aligned_and_inside_the_buffer(max_bytes):
    layout = Layout(max_bytes)
    starts = [layout.slot(i) for i in range(SLOTS)]
    assert len(set(starts)) == SLOTS
    assert all(s % pingpong.SLOT_ALIGN == 0 for s in starts)
    assert all(b - a >= layout.total for a, b in zip(starts, starts[1:]))  # no two overlap
    assert starts[-1] + layout.total <= layout.buffer_bytes
    assert layout.slot(SLOTS + 3) == layout.slot(3)  # sample numbers wrap around


class _Kernels:
    def __init__(self):
        self.calls = []

    def launch(self, stream, **kw):
        self.calls.append(("pingpong", kw))

    def launch_ll(self, stream, **kw):
        self.calls.append(("ll", kw))


def _pingpong(initiator: bool) -> DevicePingPong:
    pp = object.__new__(DevicePingPong)
    pp.layout, pp.kernels, pp.base = Layout(4096), _Kernels(), 0
    pp.role = pingpong.INITIATOR if initiator else pingpong.RESPONDER
    pp.timeout_s, pp.deadline_s = 1.0, 2.0
    pp.gpu = types.SimpleNamespace(stream=None)
    pp.buffer, pp.mapped = types.SimpleNamespace(ptr=1 << 40), types.SimpleNamespace(ptr=2 << 40)
    pp.result, pp.src = types.SimpleNamespace(ptr=3 << 40), types.SimpleNamespace(ptr=4 << 40)
    return pp


@pytest.mark.parametrize("initiator", [True, False])
def test_a_sample_s_kernels_use_its_slot_on_both_sides(initiator):
    pp = _pingpong(initiator)
    for index in (1, 2, 5):
        pp.base = pp.layout.slot(index)
        pp.launch("device-ll", 64, 1, 10)
        pp.launch("device-pingpong", 64, 1, 10)
    bases = [pp.layout.slot(i) for i in (1, 2, 5)]
    ll = [kw for kind, kw in pp.kernels.calls if kind == "ll"]
    flags = [kw for kind, kw in pp.kernels.calls if kind == "pingpong"]
    assert [kw["my_ll"] - pp.buffer.ptr for kw in ll] == [b + pp.layout.ll_offset for b in bases]
    assert [kw["peer_ll"] - pp.mapped.ptr for kw in ll] == [b + pp.layout.ll_offset for b in bases]
    assert [kw["my_flag"] - pp.buffer.ptr for kw in flags] == [b + FLAG_OFFSET for b in bases]
    assert [kw["peer_payload"] - pp.mapped.ptr for kw in flags] == [b + PAYLOAD_OFFSET for b in bases]


def test_the_timed_samples_of_a_group_take_the_slots_in_turn(monkeypatch):
    """measure() hands sample() the slot of each trial's index: the warm-up (index 0) and the timed
    samples after it each in the next slot."""
    taken = []
    pp = _pingpong(True)
    pp.ctx = types.SimpleNamespace(phase=lambda *a, **k: None, store=lambda *a: None, sync=lambda: None,
                                   load=lambda name: 10 if name.endswith("rounds") else 1)
    pp.path, pp.name, pp.device, pp.peer_device, pp.seq, pp.time_sliced = "ipc", "pp", 0, 0, 0, None

    def sample(protocol, nbytes, rounds, seed, base=0):
        taken.append(base)
        return types.SimpleNamespace(round_trip=2e-6)

    def run(group, take, **kw):
        for index in range(7):
            take(types.SimpleNamespace(index=index, seed=index))
        return iter(())

    pp.sample = sample
    pp.sampler = types.SimpleNamespace(run=run)
    list(pp.measure("device-ll", 64))
    assert taken[1:] == [pp.layout.slot(i) for i in range(7)]  # after the calibration (slot 0)
    assert len(set(taken[1:])) == 7
