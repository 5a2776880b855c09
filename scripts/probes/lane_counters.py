"""Probe of NVML's lane counters on this machine: each counter's deltas around known copies
(1 GiB in 16 copies of 64 MiB: GPU -> pinned host, host -> GPU, and GPU a -> b with peer access
on), the proof the harness would make of each (unit, overhead, settle time), the cost of one
reading, and the idle creep over a second. Usage: python scripts/probes/lane_counters.py"""

from __future__ import annotations

import time

import cupy

from gpuipc_bench.gpu.device import enable_peer_access
from gpuipc_bench.gpu.lanes import KnownCopies
from gpuipc_bench.machine import lanes

COPY = 64 << 20
COPIES = 16


def main() -> None:
    devices = list(range(min(2, cupy.cuda.runtime.getDeviceCount())))
    counters, wire = lanes.open_counters({d: cupy.cuda.runtime.deviceGetPCIBusId(d) for d in devices})
    for d, gpu in counters.items():
        print(f"GPU {d}: {len(gpu.links)} active NVLinks, PCIe wire {wire[d] / 1e9:.0f} GB/s, "
              f"scoped fields: {lanes.scoped_fields(gpu.nvml)}")
    if not counters:
        print("no NVML counters here")
        return
    peer = len(devices) == 2 and all(cupy.cuda.runtime.deviceCanAccessPeer(a, b) for a, b in ((0, 1), (1, 0)))
    if peer:
        enable_peer_access(0, 1)
        enable_peer_access(1, 0)
    copies = KnownCopies(devices, COPY)
    kinds = [("d2h", d, d) for d in devices] + [("h2d", d, d) for d in devices]
    kinds += [("peer", 0, 1), ("peer", 1, 0)] if peer else []
    try:
        for kind, a, b in kinds:
            before = {d: counters[d].read() for d in devices}
            for _ in range(COPIES):
                copies(kind, a, b)
            time.sleep(0.2)
            after = {d: counters[d].read() for d in devices}
            print(f"{kind} {a}>{b}, {COPIES * COPY} bytes:")
            for d in devices:
                deltas = {c: lanes.counter_delta(c, before[d][c], after[d][c]) for c in lanes.COUNTERS}
                print(f"  GPU {d}: " + ", ".join(f"{c} {v}" for c, v in deltas.items()))
        t0 = time.perf_counter()
        proofs = lanes.prove(counters, copies, peer)
        copies.close()
        print(f"proof took {time.perf_counter() - t0:.2f} s")
        for key, text in lanes.proof_metadata(proofs).items():
            print(f"  {key}: {text}")
    finally:
        copies.close()
    sizes(counters, proofs, devices)
    print(f"one reading: {1e3 * lanes.read_cost(counters):.3f} ms")
    before = {d: counters[d].read() for d in devices}
    time.sleep(1.0)
    after = {d: counters[d].read() for d in devices}
    for d in devices:
        print(f"idle 1 s, GPU {d}: " + ", ".join(
            f"{c} {lanes.counter_delta(c, before[d][c], after[d][c])}" for c in lanes.COUNTERS))


def sizes(counters, proofs, devices) -> None:
    """The payload each counter reports (scaled by its proof) over the bytes copied, for the batches
    a run's samples move (4 MiB x 65, 256 MiB x 2) and the proof's own (64 MiB x 16), read around
    the copies alone as the harness reads a sample (no settling sleep): does the ratio depend on
    the size or the direction, apart from the tool's samples?"""
    for nbytes, count in ((4 << 20, 65), (64 << 20, 16), (256 << 20, 2)):
        copies = KnownCopies(devices[:1], nbytes)
        try:
            for kind in ("d2h", "h2d"):
                copies(kind, 0, 0)  # warm
                before = counters[0].read(pcie_only=True)
                start = time.perf_counter()
                for _ in range(count):
                    copies(kind, 0, 0)
                window = time.perf_counter() - start
                after = counters[0].read(pcie_only=True)
                parts = []
                for c in (lanes.PCIE_TX, lanes.PCIE_RX):
                    delta = lanes.counter_delta(c, before[c], after[c])
                    proof = proofs.get((0, c))
                    scaled = proof.bytes(delta) if proof is not None and proof.usable and delta is not None else None
                    parts.append(f"{c} {delta} = {scaled / (nbytes * count):.4f}x" if scaled is not None
                                 else f"{c} {delta}")
                print(f"{kind} GPU 0, {count} x {nbytes >> 20} MiB in {1e3 * window:.1f} ms: " + ", ".join(parts))
        finally:
            copies.close()


if __name__ == "__main__":
    main()
