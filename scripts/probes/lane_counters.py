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
        print(f"proof took {time.perf_counter() - t0:.2f} s")
        for key, text in lanes.proof_metadata(proofs).items():
            print(f"  {key}: {text}")
    finally:
        copies.close()
    print(f"one reading: {1e3 * lanes.read_cost(counters):.3f} ms")
    before = {d: counters[d].read() for d in devices}
    time.sleep(1.0)
    after = {d: counters[d].read() for d in devices}
    for d in devices:
        print(f"idle 1 s, GPU {d}: " + ", ".join(
            f"{c} {lanes.counter_delta(c, before[d][c], after[d][c])}" for c in lanes.COUNTERS))


if __name__ == "__main__":
    main()
