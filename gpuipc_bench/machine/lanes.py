"""Which lane carried a sample's bytes: NVML's NVLink and PCIe byte counters, proven on known
copies and read around each sample (no CUDA here: gpuipc_bench.gpu.lanes makes the known copies).

The counters, per GPU (NVML, GPU-wide: another process's traffic shows too):

  nvlink_tx / nvlink_rx  NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/_RX with scope id UINT_MAX: the
                         sum over the GPU's links, in KiB (an NV18 H200, driver 580: 2 GiB of
                         peer copies moved it by 2,097,151, as the 18 links' own fields summed;
                         its two fields read in 0.98 ms, the 36 per-link ones in 28 ms). Where
                         the aggregate scope is refused, each active link's field (its scope id
                         the link), summed: the default scope 0 gives link 0's count alone
  pcie_tx / pcie_rx      NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES, 32-bit: they wrap at 4 GiB

All four come from one nvmlDeviceGetFieldValues call per GPU and reading (the two PCIe fields
alone where NVLink cannot carry the bytes: a shorter call). None is trusted until
a copy whose lane is known moved it by about the bytes copied (prove: its unit, its protocol
overhead, how long it takes to settle); a counter that did not move is untrusted and never
proof of anything. A sample's bytes are then attributed (attribute) to 'nvlink', 'pcie',
'nvlink+pcie', 'none' (no lane crossed), 'other-traffic' (more than the sample could move: not
attributed), 'small' (too few bytes to tell from the counters' noise: such a sample is not
read, LaneMeter) or 'unproven' (no trusted counter of a lane that could have carried it).
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import threading
import time
from typing import Any, Callable, Iterable, Mapping

NVLINK_TX, NVLINK_RX, PCIE_TX, PCIE_RX = "nvlink_tx", "nvlink_rx", "pcie_tx", "pcie_rx"
COUNTERS = (NVLINK_TX, NVLINK_RX, PCIE_TX, PCIE_RX)
LANES = {NVLINK_TX: "nvlink", NVLINK_RX: "nvlink", PCIE_TX: "pcie", PCIE_RX: "pcie"}
# The PCIe counters are 32 bits wide: at 55 GB/s they wrap in under 80 ms. A delta taken modulo
# 2^32 is the bytes that crossed only while fewer than 2^32 did between the two readings, so a
# window is attributed only where the link's wire rate could not have moved 2^32 bytes in it
# (window_can_wrap); the sampler's samples last ~5 ms, the proof's copies 64 MiB.
PCIE_WRAP = 1 << 32
ALL_LINKS = 0xFFFFFFFF  # the NVLink throughput fields' scope id for the sum over every link (nvml.h)
UNKNOWN_WIRE_BYTES_S = 128e9  # a link whose generation NVML does not say: PCIe 6.0 x16's rate bounds it
_LANE_GBYTES_S = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}  # per lane, after encoding

ENV = "GPUIPC_BENCH_LANES"  # '0': no lane counters read (a run that compares its cost)
META_PREFIX = "lanes."
TRUSTED, UNTRUSTED, ABSENT, NO_LINKS, UNPROVEN = "trusted", "untrusted", "absent", "no-links", "unproven"

PROOF_BYTES = 64 << 20  # each known copy
PROOF_COPIES = 3  # per counter: the median's unit, the spread's steadiness
SETTLE_CHECK_S = 0.01  # a second reading this long after a kind's first known copy: did its count lag?
POLL_S = 0.001  # how often a lagging counter is read until it settles
SETTLE_LIMIT_S = 0.5  # a counter still moving this long after its copy is taken as it is then
SAMPLE_SETTLE_LIMIT_S = 0.05  # the longest a sample waits for its counters to settle (LaneMeter)
MAX_OVERHEAD = 0.5  # a counter that moved by more than 1.5x the bytes (its unit aside) counts something else
MAX_SPREAD = 0.1  # the known copies' deltas within +-10% of their median: steady
UNIT_TOLERANCE = 0.05  # bytes / delta within 5% of a power of two: that is its unit (PCIe's 9.4% is overhead)

# Lanes a sample may say (the `lane` column): PROVEN_LANES are the counters' evidence; the others say
# why there is none ('' where nothing was read: no counters here, or a path they do not watch).
PROVEN_LANES = ("nvlink", "pcie", "nvlink+pcie", "none")
OTHER_TRAFFIC, SMALL, NOT_PROVEN = "other-traffic", "small", "unproven"
# A sample that moves less than this (bytes x reps) is not read: the noise floor below (256 KiB +
# 2%) is 3.6% of it, and it saves the 2 NVML calls per GPU a reading costs. Nor is one of transfers
# under MIN_OP_BYTES each: every operation also moves a few KiB over PCIe (its launch, doorbell and
# completion: 3-6% of a 64 KiB or 1 MiB transfer on an H200), which a device-local copy would show
# as PCIe. A group's first READS_PER_GROUP samples above both are read, its others carry their lane
# (LaneMeter): a reading of a GPU's NVLink fields, one per link, costs 15 ms on an H200 of NV18.
MIN_BYTES = 16 << 20
MIN_OP_BYTES = 4 << 20
READS_PER_GROUP = 1
FLOOR_BYTES = 256 << 10  # below this (and 2% of a sample's bytes) a lane carried nothing of it
FLOOR_SHARE = 0.02  # the tolerance: within 2% + 1 MiB of the bytes moved per sample
WARMUP_TRANSFERS = 2  # a gated batch's untimed warm-up transfers (gpu.timing.WARMUP_OPS) move bytes too
BOTH_WAYS = 2  # a ping-pong or a bidirectional copy moves its bytes both ways
# An open window reads the PCIe fields this often: 2^32 bytes take 68 ms at PCIe 5.0 x16's rate, 34 ms
# at 6.0's, so no 32-bit counter wraps twice unseen between two readings (a 0.3-0.6 ms NVML call each).
WRAP_POLL_S = 0.02


def enabled() -> bool:
    return os.environ.get(ENV, "1").strip() not in ("0", "off", "no", "false")


# ----------------------------------------------------------------------------- reading NVML

def field_value(value: Any, nvml: Any) -> int | None:
    """One nvmlFieldValue_t as an integer; None where NVML returned an error for it."""
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        return None
    kind = value.valueType
    member = {nvml.NVML_VALUE_TYPE_DOUBLE: "dVal", nvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
              nvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal", nvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
              nvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal", nvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
              nvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal"}.get(kind)
    return None if member is None else int(getattr(value.value, member))


def scoped_fields(nvml: Any) -> bool:
    """Whether this pynvml passes a (field, scope id) pair to nvmlDeviceGetFieldValues (older
    ones take field ids alone: the NVLink fields then read one link, which proves nothing)."""
    struct = getattr(nvml, "c_nvmlFieldValue_t", None)
    return "scopeId" in {field[0] for field in getattr(struct, "_fields_", ())}


class GpuCounters:
    """The four counters of one GPU, read in one nvmlDeviceGetFieldValues call: a dict counter ->
    raw value (NVLink: summed over `links`), None where the field is absent or returned an error."""

    def __init__(self, nvml: Any, handle: Any, links: Iterable[int], scoped: bool):
        self.nvml, self.handle, self.links = nvml, handle, tuple(links)
        self.fields: list[Any] = []
        self.spans: dict[str, tuple[int, int]] = {}
        for counter, field_id in ((PCIE_TX, nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES),
                                  (PCIE_RX, nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES)):
            self.spans[counter] = (len(self.fields), len(self.fields) + 1)
            self.fields.append((field_id, 0) if scoped else field_id)
        nvlink = ((NVLINK_TX, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX),
                  (NVLINK_RX, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX))
        self.aggregate = bool(scoped and self.links and self._answers([(f, ALL_LINKS) for _, f in nvlink]))
        for counter, field_id in nvlink:
            if self.aggregate:
                self.spans[counter] = (len(self.fields), len(self.fields) + 1)
                self.fields.append((field_id, ALL_LINKS))
            elif scoped and self.links:
                self.spans[counter] = (len(self.fields), len(self.fields) + len(self.links))
                self.fields += [(field_id, link) for link in self.links]

    def _answers(self, fields: list) -> bool:
        """Whether NVML gives every one of `fields` a value (not an error)."""
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(self.handle, fields)
        except Exception:  # noqa: BLE001 - a driver without the call
            return False
        return all(field_value(v, self.nvml) is not None for v in values)

    def read(self, pcie_only: bool = False, nvlink_only: bool = False) -> dict[str, int | None]:
        """The counters' raw values; `pcie_only`: the two PCIe fields alone (the PCIe fields come
        first: a shorter call, 0.32 ms against 0.98 ms with the two NVLink sums on an NV18 H200,
        driver 580), for a sample within one GPU or to host memory, which NVLink cannot carry;
        `nvlink_only`: the NVLink fields alone (a reading of them moves ~0.85 MB over the GPU's
        PCIe on an H200 of NV18: LaneWindow keeps it out of the PCIe fields' window)."""
        first = 2 if nvlink_only else 0
        fields = self.fields[:2] if pcie_only else self.fields[first:]
        out: dict[str, int | None] = {counter: None for counter in COUNTERS}
        if not fields:
            return out
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(self.handle, fields)
        except Exception:  # noqa: BLE001 - a driver without the call: every counter absent
            return out
        for counter, (start, stop) in self.spans.items():
            start, stop = start - first, stop - first
            if start < 0 or stop > len(fields):
                continue
            parts = [field_value(values[k], self.nvml) for k in range(start, stop)]
            out[counter] = None if any(p is None for p in parts) else sum(p for p in parts if p is not None)
        return out


def open_counters(bus_ids: Mapping[int, str], nvml: Any = None) -> tuple[dict[int, GpuCounters], dict[int, float]]:
    """CUDA device -> its counters, and its PCIe wire rate in bytes/s, for the devices at `bus_ids`
    (CUDA device -> PCI bus id); ({}, {}) without NVML."""
    from gpuipc_bench.machine.nvml import handles_by_bus_id, nvml_call, normalise_bus_id

    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        nvml.nvmlInit()
        handles = handles_by_bus_id(nvml)
    except Exception:  # noqa: BLE001 - no library, no driver, no permission: no counters
        return {}, {}
    call = nvml_call(nvml)
    scoped = scoped_fields(nvml)
    counters, wire = {}, {}
    for device, bus_id in bus_ids.items():
        handle = handles.get(normalise_bus_id(bus_id))
        if handle is None:
            continue
        links = [k for k in range(nvml.NVML_NVLINK_MAX_LINKS)
                 if call(nvml.nvmlDeviceGetNvLinkState, handle, k) == nvml.NVML_FEATURE_ENABLED]
        counters[device] = GpuCounters(nvml, handle, links, scoped)
        wire[device] = wire_bytes_s(call(nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle),
                                    call(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle))
    return counters, wire


def wire_bytes_s(generation: int | None, width: int | None) -> float:
    """The most bytes a second a PCIe link of this generation and width carries (after encoding)."""
    per_lane = _LANE_GBYTES_S.get(int(generation or 0))
    if per_lane is None or not width:
        return UNKNOWN_WIRE_BYTES_S
    return per_lane * 1e9 * int(width)


def counter_delta(counter: str, before: int | None, after: int | None) -> int | None:
    """What a counter moved between two readings; None where either is missing or it went back.
    The PCIe counters are 32-bit: their delta is taken modulo 2^32 (see PCIE_WRAP)."""
    if before is None or after is None:
        return None
    if counter in (PCIE_TX, PCIE_RX):
        return (after - before) % PCIE_WRAP
    return after - before if after >= before else None


def window_can_wrap(window_s: float, wire: float) -> bool:
    """Whether a PCIe counter could have wrapped unseen between two readings window_s apart."""
    return window_s * wire >= PCIE_WRAP


# ----------------------------------------------------------------------------- the proof

@dataclasses.dataclass(frozen=True)
class Proof:
    """What the known copies showed of one counter of one GPU: `state` (TRUSTED, UNTRUSTED, ABSENT,
    NO_LINKS: the GPU has no active NVLink, so nothing crosses it; UNPROVEN: no known copy could be
    made here), its unit (bytes per count), its protocol overhead (counted bytes over payload, -1),
    how long it took to settle after a copy, and why where it is not trusted. A PCIe RX counter's
    `requests`: the TX bytes its GPU sends per payload byte it reads over PCIe (a read from host
    memory is asked for in request packets the GPU sends: 9.6% of the payload on an H200), so that
    a GPU's TX less those is what it wrote (lane_bytes).

    A kernel's loads and stores of host memory travel in smaller packets than the copy engine's
    (on an H200: 1.13-1.18x the payload counted against the copy engine's 1.08-1.09x), so a PCIe
    counter proven on kernel copies too (prove_kernel_copies) has `sm_overhead` and, for RX,
    `sm_requests`: the figures of the samples whose copies a kernel makes (engine 'sm')."""

    state: str
    unit: int = 0
    overhead: float = 0.0
    settle_s: float = 0.0
    why: str = ""
    requests: float = 0.0
    sm_overhead: float | None = None
    sm_requests: float | None = None

    @property
    def usable(self) -> bool:
        return self.state == TRUSTED

    def overhead_for(self, engine: str = "ce") -> float:
        return self.sm_overhead if engine == "sm" and self.sm_overhead is not None else self.overhead

    def requests_for(self, engine: str = "ce") -> float:
        return self.sm_requests if engine == "sm" and self.sm_requests is not None else self.requests

    def bytes(self, delta: int, engine: str = "ce") -> float:
        """The payload bytes a trusted counter's delta stands for (copies by `engine`)."""
        return delta * self.unit / (1.0 + self.overhead_for(engine))

    def text(self) -> str:
        if self.state == TRUSTED:
            asks = f", read requests {100 * self.requests:.1f}%" if self.requests > 0 else ""
            kernel = ""
            if self.sm_overhead is not None:
                kernel = f", kernel copies {100 * self.sm_overhead:.1f}%"
                kernel += f" and read requests {100 * self.sm_requests:.1f}%" if self.sm_requests else ""
            return (f"trusted: unit {self.unit} B, overhead {100 * self.overhead:.1f}%{asks}{kernel}, "
                    f"settles in {1e3 * self.settle_s:.0f} ms")
        return f"{self.state}: {self.why}" if self.why else self.state


def proof_state(text: str) -> str:
    """The state a header's `lanes.<gpu>.<counter>` line names."""
    return str(text).partition(":")[0].strip()


def judge(moved: int, deltas: list[int | None], settle_s: float) -> Proof:
    """A counter's proof from the deltas it showed around known copies of `moved` bytes each."""
    if not deltas or any(d is None for d in deltas):
        return Proof(ABSENT, why="NVML gave no value")
    values = [int(d) for d in deltas if d is not None]
    middle = statistics.median(values)
    if middle <= 0:
        return Proof(UNTRUSTED, why=f"did not move for {len(values)} copies of {moved} bytes")
    unit = 2 ** round(math.log2(moved / middle)) if moved / middle >= 0.5 else 1
    overhead = middle * unit / moved - 1.0
    if not (-UNIT_TOLERANCE <= overhead <= MAX_OVERHEAD):
        return Proof(UNTRUSTED, why=f"moved by {middle:g} for {moved} bytes: no unit")
    if max(abs(v - middle) for v in values) > MAX_SPREAD * middle:
        return Proof(UNTRUSTED, why=f"unsteady: {min(values)} to {max(values)} for {moved} bytes")
    return Proof(TRUSTED, unit=int(unit), overhead=max(0.0, overhead), settle_s=settle_s)


Reading = Mapping[int, Mapping[str, "int | None"]]  # CUDA device -> counter -> raw value


def moved_on(counter: str, before: int | None, now: int | None, later: int | None) -> bool:
    """Whether a counter moved on between a reading taken after a copy (`now`) and a later one by
    more than FLOOR_SHARE of what it had counted since `before`: its count lagged the copy (the
    idle creep, 0.1-0.5 MB/s on an H200, is far below that share of a known copy)."""
    first, last = counter_delta(counter, before, now), counter_delta(counter, before, later)
    return first is not None and last is not None and last - first > FLOOR_SHARE * last


def settle_time(read: Callable[[], Reading], keys: Iterable[tuple[int, str]], before: Reading, after: Reading,
                clock: Callable[[], float], sleep: Callable[[float], None]) -> tuple[Reading, float]:
    """After a known copy and the reading right after it (`after`): one more reading SETTLE_CHECK_S
    later. Where no counter of `keys` (device, counter) moved on (moved_on), the counts were
    current at once: (after, 0.0), as on an H200 VM, driver 580 (a reading right after a
    synchronised copy and one 0.5 s later differ by the idle creep alone). Otherwise readings
    every POLL_S until none moves on for SETTLE_CHECK_S (at most SETTLE_LIMIT_S): the last, and
    when after the copy the last move was seen."""
    keys = list(keys)
    start = clock()
    sleep(SETTLE_CHECK_S)
    later = read()
    if not any(moved_on(c, before[d][c], after[d][c], later[d][c]) for d, c in keys):
        return after, 0.0
    changed = clock() - start
    while clock() - start < SETTLE_LIMIT_S and clock() - start - changed < SETTLE_CHECK_S:
        last = later
        sleep(POLL_S)
        later = read()
        if any(moved_on(c, before[d][c], last[d][c], later[d][c]) for d, c in keys):
            changed = clock() - start
    return later, changed


def prove(counters: Mapping[int, GpuCounters], copy: Callable[[str, int, int], None], nvlink: bool,
          clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep,
          moved: int = PROOF_BYTES, done: Iterable[tuple[int, str]] = ()) -> dict[tuple[int, str], Proof]:
    """Each counter of each GPU in `counters` (but those in `done`) proven on known copies:
    copy('d2h', dev, dev) and copy('h2d', dev, dev) through pinned host memory (PCIe),
    copy('peer', a, b) from GPU a to b (NVLink; only where `nvlink`: peer access is on both
    ways); each waits for its copy to end. A GPU without active links has NO_LINKS for its
    NVLink counters.

    What it costs: each kind of copy is made PROOF_COPIES times, the GPUs it proves read right
    before and right after each (the PCIe fields alone for a copy to or from host memory), and
    once more SETTLE_CHECK_S after its first copy (every POLL_S more only where a count lagged).
    On one GPU: 2 kinds, 14 readings of 0.62 ms, 6 copies of 64 MiB (~8 ms at 50 GB/s) and 2
    checks of 10 ms: about 40 ms. On an NVLink pair: 4 host kinds (28 readings of 0.62 ms) and
    2 peer kinds (28 readings of both GPUs' ~1.3 ms), 18 copies, 6 checks: about 0.15 s. Once
    per process (tests/test_lanes.py counts the calls)."""
    done = set(done)
    known: dict[tuple[int, str], tuple[str, int, int]] = {}
    for dev in counters:
        known[(dev, PCIE_TX)] = ("d2h", dev, dev)
        known[(dev, PCIE_RX)] = ("h2d", dev, dev)
    devices = sorted(counters)
    for a in devices:
        for b in devices:
            if a != b and nvlink:
                known.setdefault((a, NVLINK_TX), ("peer", a, b))
                known.setdefault((b, NVLINK_RX), ("peer", a, b))
    proofs: dict[tuple[int, str], Proof] = {}
    for dev in devices:
        for counter in (NVLINK_TX, NVLINK_RX):
            if (dev, counter) in done:
                continue
            if not counters[dev].links:
                proofs[(dev, counter)] = Proof(NO_LINKS)
            elif counter not in counters[dev].spans:
                proofs[(dev, counter)] = Proof(ABSENT, why="this pynvml reads no link's scope")
            elif (dev, counter) not in known:
                proofs[(dev, counter)] = Proof(UNPROVEN, why="no peer copy over NVLink in this process set")
    plan: dict[tuple[str, int, int], list[tuple[int, str]]] = {}  # a kind of copy -> the counters it proves
    for key, how in known.items():
        if key not in proofs and key not in done:
            plan.setdefault(how, []).append(key)
    for (kind, a, b), keys in plan.items():
        deltas, requests, settle = _known_copies(counters, copy, kind, a, b, keys, clock, sleep)
        for key in keys:
            proofs[key] = judge(moved, deltas[key], settle)
            sent = [d for d in requests.get((key[0], PCIE_TX), []) if d is not None]
            if proofs[key].usable and sent:
                proofs[key] = dataclasses.replace(proofs[key], requests=max(0.0, statistics.median(sent) / moved))
    return proofs


def _known_copies(counters: Mapping[int, GpuCounters], copy: Callable[[str, int, int], None], kind: str, a: int,
                  b: int, keys: list[tuple[int, str]], clock: Callable[[], float], sleep: Callable[[float], None],
                  settle: float | None = None) -> tuple[dict, dict, float]:
    """PROOF_COPIES known copies of one kind, the counters of `keys` read around each: their deltas,
    the request bytes a GPU that reads host memory sent meanwhile (its PCIe TX: the PCIe fields are
    read together), and the settle time (measured after the first copy unless given)."""
    gpus = sorted({dev for dev, _ in keys})

    def read() -> Reading:
        return {dev: counters[dev].read(pcie_only=kind != "peer") for dev in gpus}

    deltas: dict[tuple[int, str], list[int | None]] = {key: [] for key in keys}
    asked = [(dev, PCIE_TX) for dev, counter in keys if counter == PCIE_RX and kind.startswith("h2d")]
    requests: dict[tuple[int, str], list[int | None]] = {key: [] for key in asked}
    wait = settle or 0.0
    for k in range(PROOF_COPIES):
        before = read()
        copy(kind, a, b)
        if wait > 0:
            sleep(wait)
        after = read()
        if k == 0 and settle is None:
            after, wait = settle_time(read, keys, before, after, clock, sleep)
        for dev, counter in keys:
            deltas[(dev, counter)].append(counter_delta(counter, before[dev][counter], after[dev][counter]))
        for dev, counter in asked:
            requests[(dev, counter)].append(counter_delta(counter, before[dev][counter], after[dev][counter]))
    return deltas, requests, wait


def prove_kernel_copies(counters: Mapping[int, GpuCounters], copy: Callable[[str, int, int], None],
                        proofs: Mapping[tuple[int, str], Proof], clock: Callable[[], float] = time.perf_counter,
                        sleep: Callable[[float], None] = time.sleep,
                        moved: int = PROOF_BYTES) -> dict[tuple[int, str], Proof]:
    """The trusted PCIe counters of `proofs` (their copy-engine proof done) proven on kernel copies
    too: copy('d2h-sm', dev, dev), a kernel storing into pinned host memory, for PCIe TX, and
    copy('h2d-sm', dev, dev), one loading from it, for PCIe RX and its requests. The proofs that
    changed (sm_overhead, sm_requests); a counter whose kernel copies gave no steady count keeps
    the copy engine's figures. About 40 ms a GPU (6 copies of 64 MiB and 14 readings)."""
    out: dict[tuple[int, str], Proof] = {}
    for dev in sorted(counters):
        for kind, counter in (("d2h-sm", PCIE_TX), ("h2d-sm", PCIE_RX)):
            proof = proofs.get((dev, counter))
            if proof is None or not proof.usable or proof.sm_overhead is not None:
                continue
            deltas, requests, _ = _known_copies(counters, copy, kind, dev, dev, [(dev, counter)], clock, sleep,
                                                settle=proof.settle_s)
            found = judge(moved, deltas[(dev, counter)], proof.settle_s)
            if not found.usable or found.unit != proof.unit:
                continue
            sent = [d for d in requests.get((dev, PCIE_TX), []) if d is not None]
            asks = max(0.0, statistics.median(sent) / moved) if sent else None
            out[(dev, counter)] = dataclasses.replace(proof, sm_overhead=found.overhead, sm_requests=asks)
    return out


def read_cost(counters: Mapping[int, GpuCounters], clock: Callable[[], float] = time.perf_counter,
              reads: int = 20) -> float:
    """Median seconds of one reading of one GPU (one nvmlDeviceGetFieldValues call)."""
    times = []
    for gpu in counters.values():
        for _ in range(reads):
            t0 = clock()
            gpu.read()
            times.append(clock() - t0)
    return statistics.median(times) if times else math.nan


def proof_metadata(proofs: Mapping[tuple[int, str], Proof]) -> dict[str, str]:
    """The header's `lanes.<gpu>.<counter>` lines, and a `lanes.<gpu>.<counter>.kernel` line where the
    counter was proven on kernel copies too (a process set of its own: another set's line for the
    counter does not carry them)."""
    out = {}
    for (dev, counter), proof in sorted(proofs.items()):
        out[f"{META_PREFIX}{dev}.{counter}"] = proof.text()
        if proof.usable and proof.sm_overhead is not None:
            asks = f", read requests {100 * proof.sm_requests:.1f}%" if proof.sm_requests else ""
            out[f"{META_PREFIX}{dev}.{counter}.kernel"] = f"overhead {100 * proof.sm_overhead:.1f}%{asks}"
    return out


# ----------------------------------------------------------------------------- attribution

@dataclasses.dataclass(frozen=True)
class LaneShare:
    """One sample's lane and the payload bytes each lane carried (NaN: not known)."""

    lane: str
    nvlink_bytes: float = math.nan
    pcie_bytes: float = math.nan

    def fields(self) -> dict[str, Any]:
        return {"lane": self.lane, "lane_nvlink_bytes": self.nvlink_bytes, "lane_pcie_bytes": self.pcie_bytes}


def lane_bytes(lane: str, deltas: Mapping[int, Mapping[str, int | None]],
               proofs: Mapping[tuple[int, str], Proof], engine: str = "ce") -> float | None:
    """The payload bytes that crossed `lane` ('nvlink' or 'pcie') between the GPUs of `deltas`:
    the larger of the bytes the GPUs sent and the bytes they received (a copy from GPU a to b is
    counted by a's TX and b's RX; a staged copy by one GPU's TX and the other's, or its own, RX).
    A GPU's PCIe TX less the requests for what it read (its RX payload x Proof.requests) is what
    it wrote: a staged copy is not counted once more by the reading GPU's requests. `engine`: who
    made the copies ('ce' or 'sm': Proof.overhead_for). None where a counter it needs is not
    trusted or gave no delta."""
    sent = received = 0.0
    for dev, moved in deltas.items():
        read = 0.0  # the payload this GPU read over the lane (its RX): its TX carried the requests for it
        for counter in sorted((c for c in COUNTERS if LANES[c] == lane), key=lambda c: c not in (NVLINK_RX, PCIE_RX)):
            found = _reading(dev, counter, moved, proofs)
            if found is None:
                return None
            proof, delta = found
            if counter in (NVLINK_TX, PCIE_TX):
                asked = read * proofs[(dev, PCIE_RX)].requests_for(engine) if counter == PCIE_TX else 0.0
                sent += max(0.0, delta * proof.unit - asked) / (1.0 + proof.overhead_for(engine))
            else:
                read = proof.bytes(delta, engine)
                received += read
    return max(sent, received)


def one_end_nvlink(dev: int, moved: Mapping[str, int | None], proofs: Mapping[tuple[int, str], Proof]) -> float | None:
    """The NVLink payload the ports of one GPU of two carried, both ways (TX + RX): between two
    GPUs every byte a sample moves over NVLink crosses them once. None where a counter is not
    trusted or gave no delta."""
    total = 0.0
    for counter in (NVLINK_TX, NVLINK_RX):
        found = _reading(dev, counter, moved, proofs)
        if found is None:
            return None
        total += found[0].bytes(found[1])
    return total


def _reading(dev: int, counter: str, moved: Mapping[str, int | None],
             proofs: Mapping[tuple[int, str], Proof]) -> tuple[Proof, int] | None:
    """A GPU's counter's proof and delta; (its proof, 0) where the GPU has no links for it (nothing
    crossed them); None where the counter is not trusted or gave no delta."""
    proof = proofs.get((dev, counter), Proof(UNPROVEN))
    if proof.state == NO_LINKS:
        return proof, 0
    delta = moved.get(counter)
    if not proof.usable or delta is None:
        return None
    return proof, int(delta)


def attribute(deltas: Mapping[int, Mapping[str, int | None]], proofs: Mapping[tuple[int, str], Proof],
              nbytes: int, batch: int, two_gpus: bool, nvlink_end: int | None = None,
              engine: str = "ce") -> LaneShare:
    """The lane of one sample of `batch` transfers of `nbytes`, from its counters' deltas on the GPUs
    of its ends. NVLink counts only between two GPUs (`two_gpus`): a copy within one GPU or
    between it and host memory cannot cross it; `nvlink_end`: the one GPU whose NVLink fields
    were read (one_end_nvlink), else both GPUs' (lane_bytes). More bytes than the sample could
    move (both ways, its warm-up transfers too, FLOOR_SHARE more) is other traffic: flagged, not
    attributed. `engine`: who made the sample's copies, for the PCIe overheads (lane_bytes)."""
    moved = nbytes * batch
    if not two_gpus:
        nvlink: float | None = 0.0
    elif nvlink_end is not None:
        nvlink = one_end_nvlink(nvlink_end, deltas[nvlink_end], proofs)
    else:
        nvlink = lane_bytes("nvlink", deltas, proofs)
    pcie = lane_bytes("pcie", deltas, proofs, engine)
    floor = FLOOR_BYTES + FLOOR_SHARE * moved
    known = [b for b in (nvlink, pcie) if b is not None]
    if known and sum(known) > BOTH_WAYS * nbytes * (batch + WARMUP_TRANSFERS) * (1 + FLOOR_SHARE) + floor:
        return LaneShare(OTHER_TRAFFIC)
    share = LaneShare("", math.nan if nvlink is None else nvlink, math.nan if pcie is None else pcie)
    carried = [name for name, b in (("nvlink", nvlink), ("pcie", pcie)) if b is not None and b > floor]
    if carried:
        return dataclasses.replace(share, lane="+".join(carried))
    if moved < 2 * floor:
        return dataclasses.replace(share, lane=SMALL)
    # between two GPUs the bytes cross some lane: none seen means the reading missed the copy
    # (a process that reads around another's transfer), not a lane
    return dataclasses.replace(share, lane="none" if len(known) == 2 and not two_gpus else NOT_PROVEN)


def group_lane(seen: Iterable[str]) -> str:
    """The lane of a group's samples that were not read, from those that were: the proven lane
    most of them took ('unproven' where the counters proved nothing; '' where every reading saw
    other traffic: nothing is claimed)."""
    seen = [lane for lane in seen if lane not in (OTHER_TRAFFIC, SMALL, "")]
    proven = [lane for lane in seen if lane in PROVEN_LANES]
    pool = proven or seen
    return max(dict.fromkeys(pool), key=pool.count) if pool else ""


class LaneMeter:
    """The lane of each sample, read by the worker that times it (Sampler.lanes): watch(group,
    reps) reads the counters of the GPUs at the group's ends and gives a LaneWindow, which
    reads them again where the sample's transfers end (after the proof's settle time, at most
    SAMPLE_SETTLE_LIMIT_S: none where the proof measured none) and returns the row's lane
    columns. Bandwidth groups between GPUs
    with counters only.

    A reading costs a sample 2 NVML calls per GPU (0.3-0.6 ms each for the PCIe fields; 15 ms
    with the NVLink fields of 18 links on an H200, driver 580), so not every sample is read: one
    that moves less than MIN_BYTES (bytes x the group's reps), or transfers under MIN_OP_BYTES,
    says 'small' (the counters' noise floor, FLOOR_BYTES + FLOOR_SHARE, or each operation's own
    PCIe traffic, is a large share of it) and is not read; a group's first READS_PER_GROUP
    samples above it are read, its later ones carry their lane (group_lane) with their byte
    columns NaN (not read). A sample within one GPU or to host
    memory reads the PCIe fields alone (NVLink cannot carry it); one between two GPUs reads the
    NVLink fields of one of them (nvlink_end: every byte between the two crosses its ports, one
    way or the other) and the PCIe fields of both."""

    def __init__(self, counters: Mapping[int, GpuCounters], proofs: Mapping[tuple[int, str], Proof],
                 wire: Mapping[int, float], clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep, poll_s: float = WRAP_POLL_S):
        self.counters, self.proofs, self.wire, self.clock, self.sleep = counters, proofs, wire, clock, sleep
        self.poll_s = poll_s  # how often an open window reads the PCIe fields (LaneWindow.poll); 0: never
        self.wait_s = min(SAMPLE_SETTLE_LIMIT_S, max((p.settle_s for p in proofs.values() if p.usable), default=0.0))
        self.seen: dict[tuple, list[str]] = {}  # a group (its figure's fields) -> the lanes its readings saw

    def ends(self, group: Mapping[str, Any]) -> tuple[int, ...]:
        """The GPUs (CUDA devices) at a group's ends that have counters; () where an end is a GPU
        without them (nothing is attributed from half the picture)."""
        gpus = {int(str(end)) for end in (group.get("src"), group.get("dst")) if str(end).isdigit()}
        return tuple(sorted(gpus)) if gpus and gpus <= set(self.counters) else ()

    def nvlink_end(self, ends: tuple[int, ...]) -> int:
        """The GPU of two whose NVLink fields a sample reads: the first whose NVLink counters are
        both trusted (or have no links), else the first."""
        def proven(dev: int) -> bool:
            return all(self.proofs.get((dev, c), Proof(UNPROVEN)).state in (TRUSTED, NO_LINKS)
                       for c in (NVLINK_TX, NVLINK_RX))
        return next((dev for dev in ends if proven(dev)), ends[0])

    def watch(self, group: Mapping[str, Any], reps: int = 1) -> Callable[[int], dict[str, Any]] | None:
        """The reading of one sample of `group`: a LaneWindow (the counters read now), a function
        of the batch that says why nothing is read ('small', the group's lane), or None (no
        counters at its ends, or not a bandwidth row)."""
        ends = self.ends(group) if group.get("metric") == "bandwidth" else ()
        if not ends:
            return None
        nbytes = int(group.get("bytes", 0))
        if nbytes * max(1, int(reps)) < MIN_BYTES or nbytes < MIN_OP_BYTES:
            return lambda batch: LaneShare(SMALL).fields()
        key = tuple(str(group.get(k, "")) for k in ("path", "variant", "measure", "src", "dst", "bytes"))
        seen = self.seen.setdefault(key, [])
        if len(seen) >= READS_PER_GROUP:
            return lambda batch: LaneShare(group_lane(seen)).fields()
        return LaneWindow(self, ends, nbytes, copy_engine(group), seen)


def copy_engine(group: Mapping[str, Any]) -> str:
    """Who makes a group's copies: 'sm' (a kernel's loads and stores) where its ceiling key, or a
    ceiling row's own key, names a kernel copy (gpu.ceilings: 'd2h-sm@0'), else 'ce'."""
    keys = [str(group.get("ceiling") or "")]
    if group.get("path") == "ceiling":
        keys.append(str(group.get("variant") or ""))
    return "sm" if any("-sm@" in key for key in keys) else "ce"


class LaneWindow:
    """The counters of one sample's GPUs, read where its transfers begin and end. Made by
    LaneMeter.watch, which reads them (begin); end() reads them again (after the proof's settle
    time); calling it with the sample's batch ends the window where nobody did and returns the
    row's lane columns. A sample that does more than its transfers marks them, so that other
    bytes are not taken for the sample's: a ceiling's fill of host memory before them (begin()
    again), its verification of host memory after them, the paired ceiling of an NVSHMEM sample
    (end()).

    The NVLink fields of the GPU that has them are read outside the PCIe fields' window (first at
    the beginning, last at the end): a reading of 18 links' fields moves ~0.85 MB over that GPU's
    PCIe (an H200 of NV18, driver 580), which a staged copy of 4 MiB would count as 10% more."""

    def __init__(self, meter: LaneMeter, ends: tuple[int, ...], nbytes: int, engine: str, seen: list[str]):
        self.meter, self.ends, self.nbytes, self.engine, self.seen = meter, ends, nbytes, engine, seen
        self.nvlink = meter.nvlink_end(ends) if len(ends) == 2 else None
        self.before: dict[int, dict[str, int | None]] = {}
        self.after: dict[int, dict[str, int | None]] | None = None
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None
        self._poller: threading.Thread | None = None
        self.begin()

    def begin(self) -> None:
        """Read the counters where the sample's transfers begin (again, where it was read before),
        and keep reading the PCIe fields every meter.poll_s while the window is open (poll)."""
        self._halt()
        counters, nv = self.meter.counters, self.nvlink
        links = counters[nv].read(nvlink_only=True) if nv is not None else {}
        self.before = {dev: dict(counters[dev].read(pcie_only=True)) for dev in self.ends}
        if nv is not None:
            self.before[nv].update({c: links.get(c) for c in (NVLINK_TX, NVLINK_RX)})
        self.after = None
        self._last = {dev: {c: self.before[dev][c] for c in (PCIE_TX, PCIE_RX)} for dev in self.ends}
        self._last_t, self.gap_s = self.meter.clock(), 0.0
        self._pcie: dict[int, dict[str, int | None]] = {dev: {PCIE_TX: 0, PCIE_RX: 0} for dev in self.ends}
        if self.meter.poll_s > 0:
            self._stop = threading.Event()
            self._poller = threading.Thread(target=self._poll_until_stopped, args=(self._stop,),
                                            name="gpuipc-bench-lanes", daemon=True)
            self._poller.start()

    def poll(self, reading: Mapping[int, Mapping[str, int | None]] | None = None) -> None:
        """Add the PCIe counts since the last reading (`reading`, or one taken now): a 32-bit
        counter that wraps between two readings is still counted right where they are less than
        one wrap apart (window_can_wrap), however long the window (a transfer over TCP at 1 GB/s
        lasts longer than the 68 ms that wrap 2^32 bytes at PCIe 5.0 x16's rate)."""
        with self._lock:
            now = reading if reading is not None else {
                dev: self.meter.counters[dev].read(pcie_only=True) for dev in self.ends}
            t = self.meter.clock()
            self.gap_s = max(self.gap_s, t - self._last_t)
            for dev in self.ends:
                for c in (PCIE_TX, PCIE_RX):
                    step, total = counter_delta(c, self._last[dev][c], now[dev][c]), self._pcie[dev][c]
                    self._pcie[dev][c] = None if step is None or total is None else total + step
                    self._last[dev][c] = now[dev][c]
            self._last_t = t

    def _poll_until_stopped(self, stop: threading.Event) -> None:
        while not stop.wait(self.meter.poll_s):
            self.poll()

    def _halt(self) -> None:
        if self._stop is not None and self._poller is not None:  # (both set together, in begin)
            self._stop.set()
            self._poller.join()
        self._stop = self._poller = None

    def end(self) -> None:
        """Read the counters where the sample's transfers have ended (once: a later call does nothing)."""
        if self.after is not None:
            return
        self._halt()
        counters, nv = self.meter.counters, self.nvlink
        if self.meter.wait_s > 0:
            self.meter.sleep(self.meter.wait_s)
        after = {dev: dict(counters[dev].read(pcie_only=True)) for dev in self.ends}
        self.poll(after)
        if nv is not None:
            links = counters[nv].read(nvlink_only=True)
            after[nv].update({c: links.get(c) for c in (NVLINK_TX, NVLINK_RX)})
        self.after = after

    def __call__(self, batch: int) -> dict[str, Any]:
        self.end()
        assert self.after is not None
        deltas: dict[int, dict[str, int | None]] = {}
        for dev in self.ends:
            deltas[dev] = {c: counter_delta(c, self.before[dev][c], self.after[dev][c]) for c in (NVLINK_TX, NVLINK_RX)}
            deltas[dev].update(self._pcie[dev])
            if window_can_wrap(self.gap_s, self.meter.wire.get(dev, UNKNOWN_WIRE_BYTES_S)):
                deltas[dev][PCIE_TX] = deltas[dev][PCIE_RX] = None
        share = attribute(deltas, self.meter.proofs, self.nbytes, batch, len(self.ends) == 2, self.nvlink,
                          self.engine)
        self.seen.append(share.lane)
        return share.fields()
