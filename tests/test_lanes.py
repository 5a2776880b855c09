"""The lane counters on fakes: NVML's field reads, the proof on known copies, a sample's
attribution, and the sampler's hook (gpuipc_bench.machine.lanes, engine.lanes)."""

from __future__ import annotations

import math
import types

import pytest

from gpuipc_bench.machine import lanes
from gpuipc_bench.machine.lanes import (
    ABSENT, NO_LINKS, NVLINK_RX, NVLINK_TX, PCIE_RX, PCIE_TX, TRUSTED, UNPROVEN, UNTRUSTED, LaneMeter, Proof,
    attribute, counter_delta, judge, prove,
)

MIB = 1 << 20
PCIE_OVERHEAD = 0.094  # the H200 probe


class Clock:
    """A fake clock: sleep() moves it on."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class FakeGpu:
    """A GPU's four counters as NVML would show them: NVLink in KiB summed over its links, PCIe in
    bytes plus overhead, 32-bit. A count lands `lag` seconds after the traffic (the settle time);
    `stuck` counters never move; `missing` ones are absent."""

    def __init__(self, clock: Clock, links=(0, 1), lag: float = 0.0, stuck=(), missing=(), pcie_start: int = 0):
        self.clock, self.links, self.lag = clock, tuple(links), lag
        self.stuck, self.missing = set(stuck), set(missing)
        self.spans = {c: (0, 1) for c in lanes.COUNTERS if c not in self.missing}
        self.events: list[tuple[float, str, int]] = [(-1.0, PCIE_TX, pcie_start), (-1.0, PCIE_RX, pcie_start)]
        self.reads: list[str] = []  # each reading's fields ('all', 'pcie', 'nvlink'): one NVML call each

    def traffic(self, counter: str, payload: int, overhead: float = PCIE_OVERHEAD) -> None:
        if counter in (NVLINK_TX, NVLINK_RX):
            counted = payload // 1024
        else:
            counted = int(payload * (1 + overhead))
        self.events.append((self.clock() + self.lag, counter, counted))

    def read(self, pcie_only: bool = False, nvlink_only: bool = False) -> dict[str, int | None]:
        self.reads.append("pcie" if pcie_only else "nvlink" if nvlink_only else "all")
        out: dict[str, int | None] = {}
        for counter in lanes.COUNTERS:
            nvlink = counter in (NVLINK_TX, NVLINK_RX)
            if counter in self.missing or (pcie_only and nvlink) or (nvlink_only and not nvlink):
                out[counter] = None
                continue
            total = 0 if counter in self.stuck else sum(n for t, c, n in self.events
                                                        if c == counter and t <= self.clock())
            out[counter] = total % lanes.PCIE_WRAP if counter in (PCIE_TX, PCIE_RX) else total
        return out


SM_OVERHEAD, SM_REQUESTS = 0.17, 0.19  # a kernel's loads and stores of host memory: smaller packets


def copier(gpus: dict[int, FakeGpu], nbytes: int, clock: Clock, requests: float = 0.0):
    """The known copies on fake GPUs: each moves nbytes over its lane and takes a millisecond; a
    read from host memory (h2d) sends `requests` bytes per byte read on the GPU's PCIe TX; a
    kernel's ('d2h-sm', 'h2d-sm') counts SM_OVERHEAD and sends SM_REQUESTS."""

    def copy(kind: str, a: int, b: int) -> None:
        clock.sleep(0.001)
        if kind == "d2h":
            gpus[a].traffic(PCIE_TX, nbytes)
        elif kind == "h2d":
            gpus[a].traffic(PCIE_RX, nbytes)
            gpus[a].events.append((clock() + gpus[a].lag, PCIE_TX, int(nbytes * requests)))
        elif kind == "d2h-sm":
            gpus[a].traffic(PCIE_TX, nbytes, SM_OVERHEAD)
        elif kind == "h2d-sm":
            gpus[a].traffic(PCIE_RX, nbytes, SM_OVERHEAD)
            gpus[a].events.append((clock() + gpus[a].lag, PCIE_TX, int(nbytes * SM_REQUESTS)))
        else:
            gpus[a].traffic(NVLINK_TX, nbytes)
            gpus[b].traffic(NVLINK_RX, nbytes)

    return copy


def proven_pair(clock: Clock, **gpu1) -> tuple[dict[int, FakeGpu], dict]:
    gpus = {0: FakeGpu(clock, lag=0.004), 1: FakeGpu(clock, lag=0.004, **gpu1)}
    proofs = prove(gpus, copier(gpus, lanes.PROOF_BYTES, clock), nvlink=True, clock=clock, sleep=clock.sleep)
    return gpus, proofs


# ------------------------------------------------------------------------------ the proof

def test_proof_finds_units_overhead_and_settle_time():
    clock = Clock()
    _, proofs = proven_pair(clock)
    nv, pcie = proofs[(0, NVLINK_TX)], proofs[(1, PCIE_RX)]
    assert nv.state == TRUSTED and nv.unit == 1024 and abs(nv.overhead) < 0.001
    assert pcie.state == TRUSTED and pcie.unit == 1 and pcie.overhead == pytest.approx(PCIE_OVERHEAD, abs=1e-4)
    # the counts landed 4 ms after each copy ended: seen by the check 10 ms after the first copy
    assert pcie.settle_s == pytest.approx(lanes.SETTLE_CHECK_S)
    assert all(p.state == TRUSTED for p in proofs.values())
    assert "unit 1024 B" in nv.text() and "9.4%" in pcie.text() and "settles in 10 ms" in pcie.text()


def test_a_counter_stuck_at_zero_is_untrusted_and_proves_nothing():
    clock = Clock()
    gpus, proofs = proven_pair(clock, stuck={NVLINK_RX})
    assert proofs[(1, NVLINK_RX)].state == UNTRUSTED
    assert "did not move" in proofs[(1, NVLINK_RX)].why
    assert proofs[(0, NVLINK_TX)].state == TRUSTED
    # a peer copy's NVLink bytes are read from the GPU whose NVLink counters are both trusted
    meter = LaneMeter(gpus, proofs, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep)
    assert meter.nvlink_end((0, 1)) == 0
    finish = meter.watch({"metric": "bandwidth", "src": 0, "dst": 1, "bytes": 64 * MIB})
    gpus[0].traffic(NVLINK_TX, 64 * MIB)
    gpus[1].traffic(NVLINK_RX, 64 * MIB)
    fields = finish(1)
    assert fields["lane"] == "nvlink" and fields["lane_nvlink_bytes"] == pytest.approx(64 * MIB)
    # and never claimed where neither GPU counts both ways
    stuck = {**proofs, (0, NVLINK_TX): Proof(UNTRUSTED, why="x")}
    meter = LaneMeter(gpus, stuck, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep)
    finish = meter.watch({"metric": "bandwidth", "src": 0, "dst": 1, "bytes": 64 * MIB})
    gpus[0].traffic(NVLINK_TX, 64 * MIB)
    gpus[1].traffic(NVLINK_RX, 64 * MIB)
    fields = finish(1)
    assert fields["lane"] == "unproven" and math.isnan(fields["lane_nvlink_bytes"])


def test_absent_fields_are_absent_and_a_gpu_without_links_has_no_nvlink_lane():
    clock = Clock()
    gpus = {0: FakeGpu(clock, links=(), missing={PCIE_TX})}
    proofs = prove(gpus, copier(gpus, lanes.PROOF_BYTES, clock), nvlink=False, clock=clock, sleep=clock.sleep)
    assert proofs[(0, PCIE_TX)].state == ABSENT
    assert proofs[(0, PCIE_RX)].state == TRUSTED
    assert proofs[(0, NVLINK_TX)].state == NO_LINKS
    # without its PCIe TX counter, a GPU's PCIe lane is unknown: nothing is claimed
    share = attribute({0: {PCIE_TX: None, PCIE_RX: 0}}, proofs, 64 * MIB, 1, two_gpus=False)
    assert share.lane == "unproven"


def test_nvlink_unproven_without_a_peer_copy():
    clock = Clock()
    gpus = {0: FakeGpu(clock), 1: FakeGpu(clock)}
    proofs = prove(gpus, copier(gpus, lanes.PROOF_BYTES, clock), nvlink=False, clock=clock, sleep=clock.sleep)
    assert proofs[(0, NVLINK_TX)].state == UNPROVEN and proofs[(0, PCIE_TX)].state == TRUSTED
    assert lanes.proof_state(Proof(UNTRUSTED, why="x").text()) == UNTRUSTED


def test_the_proof_is_short_and_waits_for_nothing_where_the_counts_are_current():
    """Counted on fakes (docstring of prove): on one GPU 2 kinds of copy x (3 x 2 + 1) readings of
    the PCIe fields alone, 6 copies, one 10 ms check per kind; on a pair 6 kinds and 56
    readings. Counts current at once (as on an H200, driver 580): settle 0, no sample waits."""
    clock = Clock()
    gpus = {0: FakeGpu(clock)}
    copies = []
    copy = copier(gpus, lanes.PROOF_BYTES, clock)
    proofs = prove(gpus, lambda *a: (copies.append(a), copy(*a)), nvlink=False, clock=clock, sleep=clock.sleep)
    assert len(gpus[0].reads) == 14 and all(gpus[0].reads) and len(copies) == 6
    assert clock.now == pytest.approx(6 * 0.001 + 2 * lanes.SETTLE_CHECK_S)  # the copies and two checks
    assert all(p.settle_s == 0.0 for p in proofs.values() if p.usable)
    assert LaneMeter(gpus, proofs, {0: 63e9}).wait_s == 0.0
    clock = Clock()
    pair = {0: FakeGpu(clock), 1: FakeGpu(clock)}
    prove(pair, copier(pair, lanes.PROOF_BYTES, clock), nvlink=True, clock=clock, sleep=clock.sleep)
    assert len(pair[0].reads) + len(pair[1].reads) == 4 * 7 + 2 * 14
    assert sum(r == "all" for g in pair.values() for r in g.reads) == 2 * 14  # the peer copies' full readings
    assert clock.now == pytest.approx(18 * 0.001 + 6 * lanes.SETTLE_CHECK_S)


def test_the_meter_is_not_read_for_a_small_sample_nor_past_a_groups_first_reading():
    clock = Clock()
    gpus, proofs = proven_pair(clock)
    for gpu in gpus.values():
        gpu.reads.clear()
    meter = LaneMeter(gpus, proofs, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep, poll_s=0)
    group = {"metric": "bandwidth", "path": "ipc", "variant": "ce", "src": 0, "dst": 1, "bytes": 64 << 10}
    fields = meter.watch(group, reps=255)(255)  # 64 KiB x 255 < 16 MiB
    assert fields["lane"] == "small" and math.isnan(fields["lane_nvlink_bytes"])
    assert not gpus[0].reads and not gpus[1].reads
    big = {**group, "bytes": 64 * MIB}
    small_ops = meter.watch({**group, "bytes": 1 * MIB}, reps=64)(64)  # 64 MiB in 1 MiB transfers
    assert small_ops["lane"] == "small" and not gpus[0].reads  # each transfer's own PCIe traffic would show
    for _ in range(lanes.READS_PER_GROUP):
        finish = meter.watch(big, reps=1)
        gpus[0].traffic(NVLINK_TX, 64 * MIB)
        gpus[1].traffic(NVLINK_RX, 64 * MIB)
        assert finish(1)["lane"] == "nvlink"
    read = len(gpus[0].reads)
    # one GPU's NVLink fields (the 15 ms reading on an H200 of 18 links), outside both GPUs' PCIe
    # fields (its NVLink reading moves bytes over its PCIe): first at the start, last at the end
    assert gpus[0].reads == ["nvlink", "pcie", "pcie", "nvlink"] * lanes.READS_PER_GROUP
    assert gpus[1].reads == ["pcie", "pcie"] * lanes.READS_PER_GROUP
    fields = meter.watch(big, reps=1)(1)  # the group's lane, not read again
    assert fields["lane"] == "nvlink" and math.isnan(fields["lane_nvlink_bytes"])
    assert len(gpus[0].reads) == read
    # between two GPUs, a reading that saw no lane missed the copy: unproven, never 'none'
    finish = meter.watch({**big, "bytes": 256 * MIB}, reps=1)
    assert finish(1)["lane"] == "unproven"
    assert lanes.group_lane(["other-traffic", "pcie", "nvlink", "nvlink"]) == "nvlink"
    assert lanes.group_lane(["other-traffic"]) == "" and lanes.group_lane(["unproven"]) == "unproven"


def test_judge_refuses_a_counter_that_moves_by_no_unit_or_unsteadily():
    assert judge(64 * MIB, [int(64 * MIB * 1.7)] * 3, 0.0).state == UNTRUSTED  # 70% more: no unit
    assert judge(64 * MIB, [64 * MIB, 64 * MIB, 80 * MIB], 0.0).state == UNTRUSTED  # unsteady
    assert judge(64 * MIB, [None, 1, 1], 0.0).state == ABSENT


# ------------------------------------------------------------------------------ a sample's lane

def test_bytes_on_the_expected_lane():
    clock = Clock()
    gpus, proofs = proven_pair(clock)
    meter = LaneMeter(gpus, proofs, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep)
    assert meter.wait_s == pytest.approx(proofs[(0, PCIE_TX)].settle_s, abs=0.002)
    finish = meter.watch({"metric": "bandwidth", "src": "0", "dst": "1", "bytes": 16 * MIB})
    for _ in range(4):
        gpus[0].traffic(NVLINK_TX, 16 * MIB)
        gpus[1].traffic(NVLINK_RX, 16 * MIB)
    fields = finish(4)  # the counts land 4 ms later: the meter waits for them
    assert fields["lane"] == "nvlink"
    assert fields["lane_nvlink_bytes"] == pytest.approx(64 * MIB, rel=0.001)
    assert fields["lane_pcie_bytes"] < 0.01 * 64 * MIB


def test_bytes_on_the_wrong_lane_are_named_for_the_alarm():
    """An IPC copy between two NVLink GPUs whose bytes went through host memory (a library's
    fallback): the lane says PCIe, with its overhead taken out."""
    clock = Clock()
    gpus, proofs = proven_pair(clock)
    meter = LaneMeter(gpus, proofs, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep)
    finish = meter.watch({"metric": "bandwidth", "src": 0, "dst": 1, "bytes": 32 * MIB})
    gpus[0].traffic(PCIE_TX, 32 * MIB)
    gpus[1].traffic(PCIE_RX, 32 * MIB)
    fields = finish(1)
    assert fields["lane"] == "pcie"
    assert fields["lane_pcie_bytes"] == pytest.approx(32 * MIB, rel=0.001)
    assert fields["lane_nvlink_bytes"] == 0


def test_other_traffic_during_a_sample_is_flagged_not_attributed():
    clock = Clock()
    gpus, proofs = proven_pair(clock)
    meter = LaneMeter(gpus, proofs, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep)
    finish = meter.watch({"metric": "bandwidth", "src": 0, "dst": 1, "bytes": 4 * MIB}, reps=4)
    gpus[0].traffic(NVLINK_TX, 16 * MIB)
    gpus[1].traffic(NVLINK_RX, 16 * MIB)
    gpus[1].traffic(PCIE_RX, 512 * MIB)  # another process reads host memory on GPU 1
    fields = finish(4)
    assert fields["lane"] == "other-traffic"
    assert math.isnan(fields["lane_nvlink_bytes"]) and math.isnan(fields["lane_pcie_bytes"])


def test_one_gpu_device_copy_crosses_no_lane_and_staging_shows_pcie():
    clock = Clock()
    gpus = {0: FakeGpu(clock)}
    proofs = prove(gpus, copier(gpus, lanes.PROOF_BYTES, clock), nvlink=False, clock=clock, sleep=clock.sleep)
    meter = LaneMeter(gpus, proofs, {0: 63e9}, clock=clock, sleep=clock.sleep)
    assert meter.watch({"metric": "bandwidth", "src": 0, "dst": 0, "bytes": 8 * MIB}, 2)(2)["lane"] == "none"
    finish = meter.watch({"metric": "bandwidth", "src": 0, "dst": 0, "bytes": 8 * MIB, "path": "staging"}, 2)
    gpus[0].traffic(PCIE_TX, 16 * MIB)
    gpus[0].traffic(PCIE_RX, 16 * MIB)
    assert finish(2)["lane"] == "pcie"
    assert gpus[0].reads[-2:] == ["pcie", "pcie"]  # within one GPU: the PCIe fields alone
    assert meter.watch({"metric": "latency", "src": 0, "dst": 0, "bytes": 8}) is None  # bandwidth rows only
    assert meter.watch({"metric": "bandwidth", "src": 0, "dst": 2, "bytes": 8}) is None  # GPU 2: no counters


def test_a_staged_copy_is_counted_once_not_again_by_the_reading_gpus_requests():
    """GPU 0 writes P to host memory, GPU 1 reads it: GPU 1's TX carries its read requests (9.6% of P
    on an H200). The proof measures that share on its h2d copy, and the staged copy counts P, not
    P plus the requests (1.088 P before)."""
    clock = Clock()
    gpus = {0: FakeGpu(clock), 1: FakeGpu(clock)}
    proofs = prove(gpus, copier(gpus, lanes.PROOF_BYTES, clock, requests=0.096), nvlink=True, clock=clock,
                   sleep=clock.sleep)
    assert proofs[(1, PCIE_RX)].requests == pytest.approx(0.096, rel=1e-3)
    assert "read requests 9.6%" in proofs[(1, PCIE_RX)].text()
    meter = LaneMeter(gpus, proofs, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep)
    finish = meter.watch({"metric": "bandwidth", "src": 0, "dst": 1, "bytes": 64 * MIB, "path": "staging"})
    copy = copier(gpus, 64 * MIB, clock, requests=0.096)
    copy("d2h", 0, 0)
    copy("h2d", 1, 1)
    fields = finish(1)
    assert fields["lane"] == "pcie" and fields["lane_pcie_bytes"] == pytest.approx(64 * MIB, rel=0.002)


def test_a_wrapped_32_bit_counter_and_a_window_that_could_wrap():
    assert counter_delta(PCIE_TX, lanes.PCIE_WRAP - 100, 1000) == 1100
    assert counter_delta(NVLINK_TX, 5000, 4000) is None  # a 64-bit count that went back: no delta
    clock = Clock()
    gpus, proofs = proven_pair(clock)
    gpus[0].events.append((-1.0, PCIE_TX, lanes.PCIE_WRAP - 4096))  # a counter about to wrap
    meter = LaneMeter(gpus, proofs, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep)
    finish = meter.watch({"metric": "bandwidth", "src": 0, "dst": 1, "bytes": 32 * MIB})
    gpus[0].traffic(PCIE_TX, 32 * MIB)
    gpus[1].traffic(PCIE_RX, 32 * MIB)
    fields = finish(1)
    assert fields["lane"] == "pcie" and fields["lane_pcie_bytes"] == pytest.approx(32 * MIB, rel=0.001)
    # a window long enough for 2^32 bytes at the link's rate: PCIe not attributed (another group)
    finish = meter.watch({"metric": "bandwidth", "src": 0, "dst": 1, "bytes": 32 * MIB, "variant": "sm"})
    clock.sleep(0.1)
    gpus[0].traffic(PCIE_TX, 32 * MIB)
    gpus[1].traffic(PCIE_RX, 32 * MIB)
    fields = finish(1)
    assert math.isnan(fields["lane_pcie_bytes"]) and fields["lane"] == "unproven"


def test_too_few_bytes_to_tell():
    proofs = {(d, c): Proof(TRUSTED, unit=1) for d in (0, 1) for c in lanes.COUNTERS}
    zero = {c: 0 for c in lanes.COUNTERS}
    assert attribute({0: zero, 1: zero}, proofs, 4096, 4, two_gpus=True).lane == "small"


# ------------------------------------------------------------------------------ NVML's field reads

def fake_pynvml(values: dict[tuple[int, int], int | None]):
    """A pynvml whose nvmlDeviceGetFieldValues answers (field id, scope id) pairs from `values`
    (None: NVML_ERROR_NOT_SUPPORTED for that field)."""
    nvml = types.SimpleNamespace(
        NVML_SUCCESS=0, NVML_VALUE_TYPE_DOUBLE=0, NVML_VALUE_TYPE_UNSIGNED_INT=1, NVML_VALUE_TYPE_UNSIGNED_LONG=2,
        NVML_VALUE_TYPE_UNSIGNED_LONG_LONG=3, NVML_VALUE_TYPE_SIGNED_LONG_LONG=4, NVML_VALUE_TYPE_SIGNED_INT=5,
        NVML_VALUE_TYPE_UNSIGNED_SHORT=6, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX=138,
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX=139, NVML_FI_DEV_PCIE_COUNT_TX_BYTES=197,
        NVML_FI_DEV_PCIE_COUNT_RX_BYTES=198)
    nvml.calls = 0

    def get(handle, fields):
        nvml.calls += 1
        out = []
        for field in fields:
            key = field if isinstance(field, tuple) else (field, 0)
            value = values.get(key)
            out.append(types.SimpleNamespace(
                nvmlReturn=0 if value is not None else 3, valueType=3 if key[0] < 190 else 1,
                value=types.SimpleNamespace(ullVal=value or 0, uiVal=value or 0)))
        return out

    nvml.nvmlDeviceGetFieldValues = get
    return nvml


def test_nvlink_fields_are_read_per_link_and_summed_in_one_call_where_the_sum_is_refused():
    values = {(138, 0): 100, (138, 1): 250, (139, 0): 7, (139, 1): 8, (197, 0): 1234, (198, 0): 99}
    nvml = fake_pynvml(values)
    gpu = lanes.GpuCounters(nvml, "handle", links=(0, 1), scoped=True)
    assert not gpu.aggregate and nvml.calls == 1  # the aggregate scope asked once, refused
    assert gpu.read() == {NVLINK_TX: 350, NVLINK_RX: 15, PCIE_TX: 1234, PCIE_RX: 99}
    assert nvml.calls == 2
    values[(139, 1)] = None  # one link's field returns an error: the counter is absent, not half of it
    assert gpu.read()[NVLINK_RX] is None
    unscoped = lanes.GpuCounters(nvml, "handle", links=(0, 1), scoped=False)
    assert unscoped.read()[NVLINK_TX] is None and unscoped.read()[PCIE_TX] == 1234


def test_nvlink_fields_are_read_as_the_sum_over_the_links_where_nvml_gives_it():
    """Scope id UINT_MAX: one field per direction (0.98 ms on an NV18 H200, against 28 ms for the 36
    per-link fields); the per-link fields are not read then."""
    agg = lanes.ALL_LINKS
    values = {(138, agg): 350, (139, agg): 15, (138, 0): 1, (138, 1): 1, (139, 0): 1, (139, 1): 1,
              (197, 0): 1234, (198, 0): 99}
    nvml = fake_pynvml(values)
    gpu = lanes.GpuCounters(nvml, "handle", links=(0, 1), scoped=True)
    assert gpu.aggregate and len(gpu.fields) == 4
    assert gpu.read() == {NVLINK_TX: 350, NVLINK_RX: 15, PCIE_TX: 1234, PCIE_RX: 99}
    assert gpu.read(nvlink_only=True) == {NVLINK_TX: 350, NVLINK_RX: 15, PCIE_TX: None, PCIE_RX: None}
    values[(139, agg)] = None  # refused later: the counter is absent, never a partial sum
    assert gpu.read()[NVLINK_RX] is None
    no_links = lanes.GpuCounters(nvml, "handle", links=(), scoped=True)
    assert not no_links.aggregate and no_links.read()[NVLINK_TX] is None


def test_wire_rate():
    assert lanes.wire_bytes_s(5, 16) == pytest.approx(63e9, rel=0.01)
    assert lanes.wire_bytes_s(None, 16) == lanes.UNKNOWN_WIRE_BYTES_S


# ------------------------------------------------------------------------------ the sampler's hook

def test_the_sampler_adds_the_lane_columns_to_timed_rows_only():
    from gpuipc_bench.engine.sampler import Counts, Sample, Sampler

    class Meter:
        watched = 0

        def watch(self, group, reps):
            Meter.watched += 1
            return lambda batch: {"lane": "nvlink", "lane_nvlink_bytes": float(batch * group["bytes"]),
                                  "lane_pcie_bytes": 0.0}

    ctx = types.SimpleNamespace(row_fields={"scenario": "t", "workers": 1, "sharing": "exclusive"},
                                config=None, phase=lambda *a, **k: None, spec=None)
    sampler = Sampler(ctx, Counts(warmup=1, min_samples=3, max_samples=3))
    sampler.lanes = Meter()
    group = dict(path="ipc", variant="ce", measure="stream", metric="bandwidth", src="0", dst="1", bytes=1024)
    rows = list(sampler.run(group, lambda trial: Sample(1e-3, 2), timer=True, solo=True, calibrate=False))
    assert len(rows) == 3 and Meter.watched == 3  # not the warm-up
    assert {r["lane"] for r in rows} == {"nvlink"} and rows[0]["lane_nvlink_bytes"] == 2048.0


def test_a_schema_3_file_without_lane_columns_reads_them_empty(tmp_path):
    """The committed schema-3 files have no lane columns; a file written now has them: both read."""
    from gpuipc_bench.results import format_results, new_row, read_results, typed_frame

    frame, meta = read_results("results/cpu-nixl-host.csv")
    assert meta["schema_version"] == "3"
    assert (frame["lane"] == "").all() and frame["lane_pcie_bytes"].isna().all()
    rows = [new_row(path="ipc", variant="ce", src="0", dst="1", bytes=4096, seconds=1e-6, lane=lane,
                    lane_nvlink_bytes=nv, lane_pcie_bytes=0.0) for lane, nv in (("nvlink", 4096.0), ("", math.nan))]
    import pandas as pd

    written = tmp_path / "run.csv"
    written.write_text(format_results(typed_frame(pd.DataFrame(rows)), {"schema_version": "3"}))
    back, _ = read_results(written)
    assert list(back["lane"]) == ["nvlink", ""] and back["lane_nvlink_bytes"].iloc[0] == 4096.0
    with pytest.raises(ValueError, match="lane_pcie_bytes"):
        new_row(path="ipc", seconds=1.0, lane_pcie_bytes=-1.0)


# ------------------------------------------------------------------------------ the lane alarm

def lane_rows(path, variant, src, dst, lane_seen, n=6, transport=""):
    from gpuipc_bench.results import new_row

    return [new_row(scenario=path, path=path, variant=variant, measure="stream", src=src, dst=dst, bytes=64 * MIB,
                    seconds=1e-3, iteration=k, workers=2, sharing="exclusive", transport=transport, lane=lane_seen)
            for k in range(n)]


def test_the_lane_alarm_names_a_path_whose_bytes_took_another_lane():
    import pandas as pd

    from gpuipc_bench.analysis.lanes import expected_lane
    from gpuipc_bench.analysis.warnings import WRONG_LANE, lane_warnings

    meta = {"link.0-1": "NV18"}
    rows = (lane_rows("ipc", "ce", "0", "1", "pcie")  # should be NVLink: fell back through host
            + lane_rows("peer", "p2p-off", "0", "1", "nvlink")  # P2P off, yet over NVLink
            + lane_rows("staging", "pinned", "0", "1", "pcie")  # as it should
            + lane_rows("ipc", "sm", "0", "1", "nvlink")  # as it should
            + lane_rows("nixl", "write", "0", "1", "pcie", transport="tcp")  # forced TCP between NVLink GPUs
            + lane_rows("ipc", "push", "0", "0", "none")  # one GPU: no lane crossed
            + lane_rows("ipc", "ce", "0", "0", "unproven"))  # nothing proven: nothing said
    found = lane_warnings(pd.DataFrame(rows), meta)
    assert [(w.cause, w.path, w.variant) for w in found] == [
        (WRONG_LANE, "ipc", "ce"), (WRONG_LANE, "peer", "p2p-off"), (WRONG_LANE, "nixl", "write")]
    assert found[0].value == 1.0
    assert expected_lane("ipc", "ce", "0", "1", {"link.0-1": "PIX"}) == "pcie"
    assert expected_lane("ipc", "ce", "0", "1", {}) == ""
    from gpuipc_bench.report.causes import CAUSES

    assert CAUSES[WRONG_LANE].with_value.format(value=CAUSES[WRONG_LANE].value(found[0])) == \
        "wrong lane in 100% of samples"


def test_the_summary_raises_the_lane_alarm_where_a_library_took_another_lane():
    """NIXL with UCX_TLS without cuda_ipc between two NVLink H200s (results/): its figures went over PCIe,
    and the one-screen summary says so in a line of its own; a run whose bytes took their lanes has none."""
    from pathlib import Path

    from rich.console import Console

    from gpuipc_bench.report import render_run_summary
    from gpuipc_bench.results import read_results

    results = Path(__file__).resolve().parents[1] / "results"

    def summary(name: str) -> str:
        console = Console(width=80, record=True, color_system=None, file=open("/dev/null", "w"))
        render_run_summary(*read_results(results / name), console, source=name)
        return " ".join(console.export_text().split())

    forced = summary("h200x2-nixl-cuda-copy-lanes.csv")
    assert "! wrong lane (2 figures): nixl/read:cuda_copy" in forced and "went over PCIe, its lane is NVLink" in forced
    assert "wrong lane" not in summary("h200x2-speed.csv")


# ------------------------------------------------------------------------------ the answer's lane

def laned_run(tmp_path, lane_of_path):
    """tests/data/small_run.csv (one GPU) with a lane on its bandwidth rows: lane_of_path[path] at
    64 MiB, 'small' at 4 KiB (too few bytes to read)."""
    from gpuipc_bench.results import read_results, write_results

    df, meta = read_results("tests/data/small_run.csv")
    bandwidth, big = df["metric"] == "bandwidth", df["bytes"] >= MIB
    df["lane"] = ""
    df.loc[bandwidth & ~big, "lane"] = "small"
    for path, lane in lane_of_path.items():
        df.loc[bandwidth & big & (df["path"] == path), "lane"] = lane
    written = tmp_path / "laned.csv"
    write_results(written, df, meta)
    return read_results(written)


def summary_of(df, meta) -> list[str]:
    import io

    from rich.console import Console

    from gpuipc_bench.report import render_run_summary

    console = Console(record=True, width=80, color_system=None, file=io.StringIO())
    render_run_summary(df, meta, console, source="run.csv")
    return console.export_text().splitlines()


def test_the_answer_says_the_lane_its_class_took_and_its_line_count_does_not_grow(tmp_path):
    import json

    from gpuipc_bench.analysis import analyse
    from gpuipc_bench.report import answer
    from gpuipc_bench.report.data import decision_records
    from gpuipc_bench.results import read_results

    bare = summary_of(*read_results("tests/data/small_run.csv"))
    df, meta = laned_run(tmp_path, {"ipc": "none", "staging": "pcie", "ceiling": "pcie"})
    analysis = analyse(df, meta)
    # a 4 KiB figure (too few bytes to read) takes its family's lane at 64 MiB
    assert {(d.choice, d.bytes, d.lane) for d in analysis.answer.decisions} == {
        ("staging/pinned", 4096, "pcie"), ("staging/pipelined", 64 * MIB, "pcie"), ("ipc/ce", 4096, "none"),
        ("ipc/ce", 64 * MIB, "none")}
    records = decision_records(analysis)
    assert {r["lane"] for r in records} == {"pcie", "none"}
    json.dumps(records)
    text = summary_of(df, meta)
    assert len(text) == len(bare) and max(map(len, text)) <= 80
    assert "over PCIe, counted" in " ".join(" ".join(text).split())  # where it fits the band's lines
    band = analysis.answer.sections[-1].bands[0]
    assert answer.lane_notes(band.decisions) == ("no lane crossed, verified by the counters",
                                                 "no lane crossed, counted")
    # the report has room: the long note
    head, _ = answer.band_lines(band, "stream", {})
    assert head.text.endswith("no lane crossed, verified by the counters")
    # no counter proven here: said as such, nothing guessed
    df, meta = laned_run(tmp_path, {"ipc": "unproven", "staging": "unproven", "ceiling": "unproven"})
    decisions = analyse(df, meta).answer.decisions
    assert {d.lane for d in decisions} == {"unproven", "small"}  # 4 KiB: no proven size to take it from
    assert answer.lane_notes(decisions)[0] == "lane not verified: no counter here"
    # a file without lanes: no decision has one, no note
    plain = analyse(*read_results("tests/data/small_run.csv"))
    assert {d.lane for d in plain.answer.decisions} == {""} and not answer.lane_notes(plain.answer.decisions)
    assert {r["lane"] for r in decision_records(plain)} == {None}


def test_a_process_proves_its_counters_once_not_at_every_scenario(monkeypatch):
    """prove_lanes runs before and after every scenario's set-up: a counter it cannot prove here (NVLink
    on one GPU: no link) is not tried again until peer access changes; the PCIe proof happens once."""
    import types

    from gpuipc_bench.engine import lanes as engine_lanes
    from gpuipc_bench.gpu import lanes as gpu_lanes

    proofs = []

    def prove(counters, copies, peer, done=()):
        proofs.append(peer)
        return {(0, k): lanes.Proof(lanes.NO_LINKS if k in (lanes.NVLINK_TX, lanes.NVLINK_RX) else lanes.TRUSTED, 1)
                for k in lanes.COUNTERS}

    monkeypatch.setattr(engine_lanes, "_OPEN", {"counters": {0: object()}, "wire": {}, "read_s": 1e-4})
    monkeypatch.setattr(engine_lanes, "_PROOFS", {})
    monkeypatch.setattr(engine_lanes, "_TRIED", set())
    monkeypatch.setattr(lanes, "enabled", lambda: True)
    monkeypatch.setattr(lanes, "prove", prove)
    monkeypatch.setattr(lanes, "LaneMeter", lambda *a: types.SimpleNamespace(wait_s=0.0))
    monkeypatch.setattr(gpu_lanes, "KnownCopies",
                        lambda devices, nbytes, kernel_gpu=None: types.SimpleNamespace(close=lambda: None))
    ctx = types.SimpleNamespace(specs=[types.SimpleNamespace(device=0, mig="")] * 2, phase=lambda name: None,
                                send=lambda message: None)
    worker = types.SimpleNamespace(ctx=ctx, pdev=0, cdev=0, sampler=types.SimpleNamespace(lanes=None),
                                   in_turn=lambda fn: fn())
    for _ in range(6):  # three scenarios, before and after each set-up
        engine_lanes.prove_lanes(worker)
    assert proofs == [False] and worker.sampler.lanes is not None


# ------------------------------------------------------------------------------ what a sample's window holds

def test_kernel_copies_of_host_memory_are_read_with_their_own_overhead():
    """mmap's zero-copy: a kernel stores into host memory on GPU 0 and another loads it on GPU 1. Their
    packets are smaller than the copy engine's: read with the copy engine's overhead the sample
    counted ~1.17x its bytes; with the kernel copies' (prove_kernel_copies), its bytes."""
    clock = Clock()
    gpus = {0: FakeGpu(clock), 1: FakeGpu(clock)}
    proofs = prove(gpus, copier(gpus, lanes.PROOF_BYTES, clock, requests=0.094), nvlink=True, clock=clock,
                   sleep=clock.sleep)
    kernel = lanes.prove_kernel_copies(gpus, copier(gpus, lanes.PROOF_BYTES, clock), proofs, clock=clock,
                                       sleep=clock.sleep)
    assert set(kernel) == {(d, c) for d in (0, 1) for c in (PCIE_TX, PCIE_RX)}
    assert kernel[(1, PCIE_RX)].sm_overhead == pytest.approx(SM_OVERHEAD, abs=1e-4)
    assert kernel[(1, PCIE_RX)].sm_requests == pytest.approx(SM_REQUESTS, abs=1e-4)
    assert kernel[(1, PCIE_RX)].overhead == pytest.approx(PCIE_OVERHEAD, abs=1e-4)  # the copy engine's kept
    assert "kernel copies 17.0% and read requests 19.0%" in kernel[(1, PCIE_RX)].text()
    assert lanes.proof_metadata(kernel)["lanes.1.pcie_rx.kernel"] == "overhead 17.0%, read requests 19.0%"
    group = {"metric": "bandwidth", "path": "mmap", "variant": "zero-copy", "src": 0, "dst": 1,
             "bytes": 64 * MIB, "ceiling": "d2h-sm@0|h2d-sm@1"}
    assert lanes.copy_engine(group) == "sm" and lanes.copy_engine({**group, "ceiling": "d2h@0|h2d@1"}) == "ce"
    assert lanes.copy_engine({"path": "ceiling", "variant": "h2d-sm@0", "ceiling": ""}) == "sm"

    def sample(proven) -> float:
        meter = LaneMeter(gpus, proven, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep)
        window = meter.watch({**group, "variant": f"zero-copy-{len(meter.seen)}-{clock.now}"})
        copy = copier(gpus, 64 * MIB, clock)
        copy("d2h-sm", 0, 0)
        copy("h2d-sm", 1, 1)
        return window(1)["lane_pcie_bytes"]

    assert sample(proofs) > 1.1 * 64 * MIB
    assert sample({**proofs, **kernel}) == pytest.approx(64 * MIB, rel=0.002)


def test_a_window_holds_the_samples_transfers_not_a_fill_before_or_a_verification_after():
    """A ceiling from host memory fills its source ring (a kernel's stores) before its copies, and one
    into host memory verifies it after them (a kernel's loads): begin() again after the fill and end()
    before the verification keep both out. An NVSHMEM sample ends its window before its paired
    ceiling's copies."""
    clock = Clock()
    gpus = {0: FakeGpu(clock)}
    proofs = prove(gpus, copier(gpus, lanes.PROOF_BYTES, clock, requests=0.094), nvlink=False, clock=clock,
                   sleep=clock.sleep)
    meter = LaneMeter(gpus, proofs, {0: 63e9}, clock=clock, sleep=clock.sleep)
    group = {"metric": "bandwidth", "path": "ceiling", "variant": "d2h@0", "src": 0, "dst": "host",
             "bytes": 64 * MIB}
    copy = copier(gpus, 64 * MIB, clock, requests=0.094)
    window = meter.watch(group)
    copy("d2h-sm", 0, 0)  # a fill of host memory, before the copies
    window.begin()
    copy("d2h", 0, 0)
    window.end()
    copy("h2d-sm", 0, 0)  # the verification reads host memory
    copy("h2d-sm", 0, 0)
    fields = window(1)
    assert fields["lane"] == "pcie" and fields["lane_pcie_bytes"] == pytest.approx(64 * MIB, rel=0.002)
    window.end()  # once ended, the window keeps its reading
    assert window(1)["lane_pcie_bytes"] == pytest.approx(64 * MIB, rel=0.002)


def test_the_sampler_gives_a_take_its_lane_window_and_takes_it_back():
    from gpuipc_bench.engine.sampler import Counts, Sample, Sampler

    class Window(lanes.LaneWindow):
        ended = 0

        def __init__(self):  # no counters: what the sampler does with it
            pass

        def end(self):
            Window.ended += 1

        def __call__(self, batch):
            return {"lane": "pcie", "lane_nvlink_bytes": 0.0, "lane_pcie_bytes": 1.0}

    ctx = types.SimpleNamespace(row_fields={"scenario": "t", "workers": 1, "sharing": "exclusive"},
                                config=None, phase=lambda *a, **k: None, spec=None)
    sampler = Sampler(ctx, Counts(warmup=0, min_samples=2, max_samples=2))
    sampler.lanes = types.SimpleNamespace(watch=lambda group, reps: Window())
    seen = []

    def take(trial):
        seen.append(sampler.window)
        sampler.window.end()  # a take that ends its window early (a ceiling before verifying)
        return Sample(1e-3, 1)

    group = dict(path="ceiling", variant="d2h@0", measure="stream", metric="bandwidth", src="0", dst="host",
                 bytes=64 << 20)
    rows = list(sampler.run(group, take, timer=True, solo=True, calibrate=False))
    assert len(rows) == 2 and all(isinstance(w, Window) for w in seen) and Window.ended == 2
    assert sampler.window is None

    def fails(trial):
        raise RuntimeError("a copy failed")

    with pytest.raises(RuntimeError):
        list(sampler.run({**group, "variant": "h2d@0"}, fails, timer=True, solo=True, calibrate=False))
    assert Window.ended == 3 and sampler.window is None  # a take that raised: its window (and poller) ended


def test_a_process_whose_kernels_copy_host_memory_proves_their_overheads_once(monkeypatch):
    from gpuipc_bench.engine import lanes as engine_lanes
    from gpuipc_bench.gpu import lanes as gpu_lanes

    calls = []
    trusted = {(0, k): lanes.Proof(lanes.NO_LINKS if k in (lanes.NVLINK_TX, lanes.NVLINK_RX) else lanes.TRUSTED, 1)
               for k in lanes.COUNTERS}
    monkeypatch.setattr(engine_lanes, "_OPEN", {"counters": {0: object()}, "wire": {}, "read_s": 1e-4})
    monkeypatch.setattr(engine_lanes, "_PROOFS", {})
    monkeypatch.setattr(engine_lanes, "_TRIED", set())
    monkeypatch.setattr(lanes, "enabled", lambda: True)
    monkeypatch.setattr(lanes, "prove", lambda counters, copies, peer, done=(): (calls.append("ce"), dict(trusted))[1])
    monkeypatch.setattr(lanes, "prove_kernel_copies", lambda counters, copies, proofs: (
        calls.append(("sm", copies.kernel_gpu is not None)),
        {(0, lanes.PCIE_TX): lanes.Proof(lanes.TRUSTED, 1, sm_overhead=0.17)})[1])
    monkeypatch.setattr(lanes, "LaneMeter", lambda *a: types.SimpleNamespace(wait_s=0.0))
    monkeypatch.setattr(gpu_lanes, "KnownCopies", lambda devices, nbytes, kernel_gpu=None: types.SimpleNamespace(
        close=lambda: None, kernel_gpu=kernel_gpu))
    ctx = types.SimpleNamespace(specs=[types.SimpleNamespace(device=0, mig="")] * 2, phase=lambda name: None,
                                send=lambda message: None)
    plain = types.SimpleNamespace(ctx=ctx, pdev=0, cdev=0, sampler=types.SimpleNamespace(lanes=None),
                                  in_turn=lambda fn: fn())
    engine_lanes.prove_lanes(plain)
    mmap = types.SimpleNamespace(**vars(plain), kernel_host_copies=True, meter=lambda: None)
    for _ in range(4):  # the mmap scenario's set-up, twice, in the same process
        engine_lanes.prove_lanes(mmap)
    assert calls == ["ce", ("sm", True)]
    assert engine_lanes._PROOFS[(0, lanes.PCIE_TX)].sm_overhead == 0.17


def test_a_long_window_reads_the_pcie_fields_often_enough_that_no_wrap_goes_unseen():
    """NIXL over TCP between two GPUs: 5 GiB at ~1 GB/s, more than 2^32 bytes on a 32-bit counter and a
    window of seconds. Read every 20 ms (poll), it is counted; read at its ends alone, it is not."""
    clock = Clock()
    gpus, proofs = proven_pair(clock)
    meter = LaneMeter(gpus, proofs, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep, poll_s=0)
    group = {"metric": "bandwidth", "path": "nixl", "variant": "write:tcp", "src": 0, "dst": 1, "bytes": 256 * MIB}

    def sample(polled: bool) -> dict:
        window = meter.watch({**group, "measure": str(polled)}, reps=20)
        for _ in range(20):
            clock.sleep(0.02)
            gpus[0].traffic(PCIE_TX, 256 * MIB)
            gpus[1].traffic(PCIE_RX, 256 * MIB)
            if polled:
                window.poll()
        return window(20)

    fields = sample(True)
    assert fields["lane"] == "pcie" and fields["lane_pcie_bytes"] == pytest.approx(20 * 256 * MIB, rel=0.001)
    assert math.isnan(sample(False)["lane_pcie_bytes"])
    # the poller is a thread of the window: it reads while the window is open, and stops at its end
    threaded = LaneMeter(gpus, proofs, {0: 63e9, 1: 63e9}, clock=clock, sleep=clock.sleep, poll_s=0.001)
    import time as real_time

    before = gpus[1].reads.count("pcie")
    window = threaded.watch({**group, "measure": "threaded"}, reps=20)
    deadline = real_time.monotonic() + 2.0
    while gpus[1].reads.count("pcie") < before + 4 and real_time.monotonic() < deadline:
        real_time.sleep(0.002)
    window(20)
    assert window._poller is None and gpus[1].reads.count("pcie") >= before + 4


def _fresh_process_lanes(monkeypatch, proofs_made):
    """engine.lanes as a fresh process has it (nothing proven), its prove() recording each call."""
    from gpuipc_bench.engine import lanes as engine_lanes
    from gpuipc_bench.gpu import lanes as gpu_lanes

    def prove(counters, copies, peer, done=()):  # (what lanes.prove would make known copies for: proofs_made)
        copied = [(d, k) for d in counters for k in lanes.COUNTERS
                  if (peer or k in (lanes.PCIE_TX, lanes.PCIE_RX)) and (d, k) not in set(done)]
        if copied:
            proofs_made.append(copied)
        found = {key: lanes.Proof(lanes.TRUSTED, 1, overhead=0.08 if key[1] in (lanes.PCIE_TX, lanes.PCIE_RX) else 0.02)
                 for key in copied}
        found.update({(d, k): lanes.Proof(lanes.UNPROVEN) for d in counters for k in (lanes.NVLINK_TX, lanes.NVLINK_RX)
                      if not peer and (d, k) not in set(done)})
        return found

    monkeypatch.setattr(engine_lanes, "_OPEN", {"counters": {0: object(), 1: object()}, "wire": {}})
    monkeypatch.setattr(engine_lanes, "_PROOFS", {})
    monkeypatch.setattr(engine_lanes, "_TRIED", set())
    monkeypatch.setattr(lanes, "enabled", lambda: True)
    monkeypatch.setattr(lanes, "prove", prove)
    monkeypatch.setattr(lanes, "read_cost", lambda counters: 6.2e-4)
    monkeypatch.setattr(lanes, "LaneMeter", lambda counters, proofs, wire: types.SimpleNamespace(wait_s=0.0,
                                                                                               proofs=proofs))
    monkeypatch.setattr(gpu_lanes, "KnownCopies",
                        lambda devices, nbytes, kernel_gpu=None: types.SimpleNamespace(close=lambda: None))
    return engine_lanes


def _pair_worker(config, sent, pdev=0, cdev=1):
    ctx = types.SimpleNamespace(specs=[types.SimpleNamespace(device=pdev, mig=""), types.SimpleNamespace(device=cdev,
                                                                                                        mig="")],
                                phase=lambda name: None, send=sent.append, config=config)
    return types.SimpleNamespace(ctx=ctx, pdev=pdev, cdev=cdev, sampler=types.SimpleNamespace(lanes=None),
                                 in_turn=lambda fn: fn())


def test_a_later_process_set_takes_the_run_s_proofs_instead_of_proving_again(monkeypatch):
    """The counters are the GPU's: a pair's first process proves them and sends each proof to the parent;
    a later process (a scenario with processes of its own) handed those proofs (RunConfig.lane_proofs)
    proves nothing, and its meter holds the same proofs. A one-GPU process takes the PCIe proofs alone
    (NVLink's unproven there, as its own proof would have left them)."""
    from gpuipc_bench.engine import lanes as engine_lanes
    from gpuipc_bench.gpu.device import PEER_ON

    made: list = []
    _fresh_process_lanes(monkeypatch, made)
    PEER_ON.update({(0, 1), (1, 0)})
    try:
        sent: list = []
        first = _pair_worker(None, sent)
        engine_lanes.prove_lanes(first)
        notes = {key: text for kind, key, text in (m for m in sent if m[0] == "note")}
        handed = tuple(sorted(((int(k.split(".")[2]), k.split(".")[3]), text) for k, text in notes.items()
                              if k.startswith(engine_lanes.PROOF_NOTE)))
        assert len(made) == 1 and len(made[0]) == 8 and len(handed) == 8 and float(notes["lanes.read_ms"]) == 0.62
        first_meter = first.sampler.lanes.proofs

        _fresh_process_lanes(monkeypatch, made)  # the next scenario's own processes
        later = _pair_worker(types.SimpleNamespace(lane_proofs=handed, lane_read_ms=0.62), sent := [])
        engine_lanes.prove_lanes(later)
        assert len(made) == 1 and not any(m[1].startswith(engine_lanes.PROOF_NOTE) for m in sent)
        assert later.sampler.lanes.proofs == first_meter

        _fresh_process_lanes(monkeypatch, made)  # a set on GPU 0 alone
        one = _pair_worker(types.SimpleNamespace(lane_proofs=handed, lane_read_ms=0.62), [], 0, 0)
        engine_lanes.prove_lanes(one)
        assert len(made) == 1  # no known copy: NVLink's left unproven here, as before
        assert {k for k, p in engine_lanes._PROOFS.items() if p.usable} == {(0, lanes.PCIE_TX), (0, lanes.PCIE_RX)}
    finally:
        PEER_ON.difference_update({(0, 1), (1, 0)})
