"""The lane counters of a pair's samples: opened and proven once per process (a persistent
process set keeps them from scenario to scenario), the workers in turn, and handed to the
sampler (Sampler.lanes) so that every bandwidth row between GPUs with counters says which lane
carried its bytes (gpuipc_bench.machine.lanes).

The proof runs where PairWorker.run calls prove_lanes: before the path's set-up (every counter
its process can prove: PCIe always; NVLink where peer access is on both ways in this process)
and after it (NVLink, where the set-up turned peer access on). The workers take turns: the
counters are GPU-wide, and one worker's known copies would show in the other's. The header
gets one `lanes.<gpu>.<counter>` line per counter proven (trusted, untrusted or absent) and
`lanes.read_ms` (one reading of one GPU) and `lanes.settle_ms` (what each sample waits).

Being the GPU's, a counter is proven once per run: each proof goes to the parent (a `lanes.proof.`
note), which hands the proofs made so far to every later scenario run (RunConfig.lane_proofs); a
process takes those as its own and proves only what none has yet. A pair's proof costs each worker
about 0.15 s (machine.lanes.prove), and before, every scenario with processes of its own and every
set of the resampling pass proved them again.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterator

from gpuipc_bench.gpu.visible import cuda_index
from gpuipc_bench.machine import lanes

PROOF_NOTE = f"{lanes.META_PREFIX}proof."  # + '<gpu>.<counter>': a proof's fields (JSON), for the parent alone

# This process's counters and proofs, kept across the scenarios of a process set.
_OPEN: dict[str, Any] = {}  # 'counters', 'wire': open_counters' answer once; 'read_s'
_PROOFS: dict[tuple[int, str], lanes.Proof] = {}
_TRIED: set[tuple[int, str, bool]] = set()  # (GPU, counter, peer access on) proven or tried in this process


def counters_here(devices: list[int]) -> dict[int, lanes.GpuCounters]:
    """The counters of `devices` (CUDA indices), opened once per process; {} without NVML."""
    if "counters" not in _OPEN:
        _OPEN["counters"], _OPEN["wire"] = {}, {}
    missing = [d for d in devices if d not in _OPEN["counters"]]
    if missing:
        try:
            import cupy

            bus_ids = {d: cupy.cuda.runtime.deviceGetPCIBusId(cuda_index(d)) for d in missing}
        except Exception:  # noqa: BLE001 - no bus id: no counters for these GPUs
            bus_ids = {}
        counters, wire = lanes.open_counters(bus_ids)
        _OPEN["counters"].update(counters)
        _OPEN["wire"].update(wire)
    return {d: _OPEN["counters"][d] for d in devices if d in _OPEN["counters"]}


def wanted(worker) -> bool:
    """Whether this pair reads lane counters: on, whole GPUs (under MIG the counters are the
    parent GPU's: every instance's traffic), and NVML answers for its GPUs."""
    specs = worker.ctx.specs
    if not lanes.enabled() or any(getattr(s, "mig", "") for s in specs) or any(s.device is None for s in specs):
        return False
    return bool(counters_here(sorted({worker.pdev, worker.cdev})))


def adopt_run_proofs(config, devices: list[int]) -> set[int]:
    """The proofs an earlier process set of the run made of `devices`' counters (RunConfig.lane_proofs),
    taken as this process's own (where it has none of its own), and one reading's cost; the GPUs
    they cover."""
    taken = set()
    for (dev, counter), fields in getattr(config, "lane_proofs", ()) or ():
        # NVLink's only for a pair's processes: one GPU's would have left it unproven (no peer copy there)
        if dev in devices and (counter in (lanes.PCIE_TX, lanes.PCIE_RX) or len(devices) == 2):
            if (dev, counter) not in _PROOFS or _PROOFS[(dev, counter)].state == lanes.UNPROVEN:
                _PROOFS[(dev, counter)] = lanes.Proof(**json.loads(fields))
            taken.add(dev)
    read_ms = getattr(config, "lane_read_ms", None)
    if read_ms is not None and "read_s" not in _OPEN:
        _OPEN["read_s"] = read_ms / 1e3
    return taken


def kernel_proven(dev: int) -> bool:
    """Whether every usable PCIe counter of `dev` here carries its kernel copies' figures (prove_kernel_copies)."""
    usable = [_PROOFS.get((dev, c)) for c in (lanes.PCIE_TX, lanes.PCIE_RX)]
    return all(proof.sm_overhead is not None for proof in usable if proof is not None and proof.usable)


def _no_copies(kind: str, a: int, b: int) -> None:
    """prove()'s copy where none is to be made (prove_lanes): one asked for is a bug, not a zero count."""
    raise RuntimeError(f"no known copy was planned here ({kind} {a}>{b})")


def prove_lanes(worker) -> None:
    """Prove, in turn, what this process has not proven of its pair's counters, and give the
    sampler its meter. Both workers call it at the same points (it crosses two barriers)."""
    if not wanted(worker):
        return
    devices = sorted({worker.pdev, worker.cdev})
    counters = counters_here(devices)
    taken = adopt_run_proofs(getattr(worker.ctx, "config", None), devices)

    def mine() -> Iterator[dict]:
        from gpuipc_bench.gpu.device import PEER_ON
        from gpuipc_bench.gpu.lanes import KnownCopies

        settled = {key for key, proof in _PROOFS.items() if proof.state != lanes.UNPROVEN}
        peer = len(devices) == 2 and all((a, b) in PEER_ON for a in devices for b in devices if a != b)
        # a counter left unproven (NVLink without peer access here, or no link) is tried again only
        # once peer access changed: every scenario's set-up calls this twice (a proof ~0.1-0.2 s)
        todo = [(d, k) for d in counters for k in lanes.COUNTERS
                if (d, k) not in settled and (d, k, peer) not in _TRIED]
        # a path whose kernels load and store host memory (mmap's zero-copy) reads PCIe with the
        # overheads of kernel copies, proven once per process too
        kernels = [d for d in counters
                   if getattr(worker, "kernel_host_copies", False) and (d, "sm", True) not in _TRIED
                   and not (d in taken and kernel_proven(d))]
        if not todo and not kernels:
            return
        _TRIED.update((d, k, peer) for d, k in todo)
        _TRIED.update((d, "sm", True) for d in kernels)
        worker.ctx.phase("setup")  # the proof is part of the set-up (its copies before the first sample)
        launcher = (lambda dev: worker.meter().gpu_for(dev)) if kernels else None
        # the buffers only where a known copy will be made (a PCIe counter, NVLink with peer access on, a
        # kernel's): where the run's proofs left NVLink alone to say unproven here, prove() copies nothing
        copying = kernels or any(k in (lanes.PCIE_TX, lanes.PCIE_RX) or peer for _, k in todo)
        copies = KnownCopies(devices, lanes.PROOF_BYTES, launcher) if copying else None
        copy = copies if copies is not None else _no_copies
        try:
            found = lanes.prove(counters, copy, peer, done=settled) if todo else {}
            _PROOFS.update(found)
            if kernels:  # over the copy engine's proofs just made
                found.update(lanes.prove_kernel_copies({d: counters[d] for d in kernels}, copy, _PROOFS))
                _PROOFS.update(found)
        finally:
            if copies is not None:
                copies.close()
        if "read_s" not in _OPEN:
            _OPEN["read_s"] = lanes.read_cost(counters)
            worker.ctx.send(("note", f"{lanes.META_PREFIX}read_ms", f"{1e3 * _OPEN['read_s']:.3f}"))
        proven = {key: proof for key, proof in found.items() if proof.state != lanes.UNPROVEN}
        for key, text in lanes.proof_metadata(proven).items():
            worker.ctx.send(("note", key, text))
        for (dev, counter), proof in proven.items():  # the run's from now on: a later set takes it
            worker.ctx.send(("note", f"{PROOF_NOTE}{dev}.{counter}", json.dumps(dataclasses.asdict(proof))))
        yield from ()

    for _ in worker.in_turn(mine):
        pass
    meter = lanes.LaneMeter(counters, dict(_PROOFS), _OPEN["wire"])
    worker.ctx.send(("note", f"{lanes.META_PREFIX}settle_ms", f"{1e3 * meter.wait_s:.1f}"))
    worker.sampler.lanes = meter
