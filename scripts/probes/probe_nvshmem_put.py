"""How NVSHMEM moves a host-initiated on-stream put between two PEs on one GPU, and what bounds it.

Evidence for the nvshmem scenario's ceiling (issue 14): on an H100 the put ran 3-8% above the
d2d ceiling at 4 KiB-4 MiB, the ceiling then being measured by the other process. Run on a GPU
machine with nvshmem4py (and torch, for the trace):

    python3 scripts/probes/probe_nvshmem_put.py

Two spawned PEs on GPU 0. Each in turn (the other waits) times, behind the tool's gate, the
median time per copy over TRIALS batches of:
    ce        cudaMemcpyAsync, cupy buffer -> cupy buffer     (the tool's d2d ceiling)
    drv       cuMemcpyDtoDAsync, the same buffers             (the driver call NVSHMEM makes)
    ce-sym    cudaMemcpyAsync, symmetric heap -> symmetric heap, both local
    ce-peer   cudaMemcpyAsync, local symmetric -> the peer's symmetric buffer (nvshmem_ptr)
    put       nvshmemx_putmem_on_stream to the peer
and PE 0 records a CUPTI trace (torch.profiler) of puts: which memcpy kind or kernel they ran.
Every destination is verified after every batch.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import sys

SIZES = (4, 4096, 1 << 20, 4 << 20, 256 << 20)
TRIALS = 9
KINDS = ("ce", "drv", "ce-sym", "ce-peer", "put")


def pe_main(rank: int, uid_queue, barrier, results) -> None:
    os.environ["NVSHMEM_DISABLE_NVLS"] = "1"
    os.environ.setdefault("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo")
    import numpy as np
    import nvshmem.core as core
    from cuda.bindings import driver
    from cuda.core import Device
    from nvshmem import bindings

    from gpuipc_bench.gpu.device import Gpu
    from gpuipc_bench.gpu.memory import Ring, reps_for, ring_capacity

    uid = core.get_unique_id(empty=rank != 0)
    raw = uid._data.view(np.uint8)
    if rank == 0:
        uid_queue.put(raw.tobytes())
    else:
        raw[:] = np.frombuffer(uid_queue.get(timeout=60), dtype=np.uint8)
    device = Device(0)
    device.set_current()
    core.init(device=device, uid=uid, rank=rank, nranks=2, initializer_method="uid")
    gpu = Gpu(0)
    peer = 1 - rank
    capacity = ring_capacity(SIZES)
    sym_src, sym_dst = bindings.malloc(capacity), bindings.malloc(capacity)  # collectives
    peer_dst = bindings.ptr(sym_dst, peer)  # the peer's sym_dst, mapped here
    src, dst = gpu.alloc(capacity), gpu.alloc(capacity)
    stream = gpu.stream.ptr
    cpus = sorted(os.sched_getaffinity(0))

    def drv(d, s, n):
        err, = driver.cuMemcpyDtoDAsync(d, s, n, stream)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuMemcpyDtoDAsync: {err}")

    def ce(d, s, n):
        from cupy.cuda import runtime
        runtime.memcpyAsync(d, s, n, 3, stream)  # cudaMemcpyDeviceToDevice

    # kind -> (source, destination as this PE writes it, copy(dst, src, n))
    plans = {
        "ce": (src.ptr, dst.ptr, ce),
        "drv": (src.ptr, dst.ptr, drv),
        "ce-sym": (sym_src, sym_dst, ce),
        "ce-peer": (sym_src, peer_dst, ce),
        "put": (sym_src, sym_dst, lambda d, s, n: bindings.putmem_on_stream(d, s, n, peer, stream)),
    }
    checks = {"ce-peer": peer_dst, "put": peer_dst}  # where the bytes land, read through the mapping
    mine = {}
    barrier.wait()
    for turn in (0, 1):
        if turn == rank:
            for n in SIZES:
                reps = reps_for(n)
                ring = Ring.for_size(n, reps)
                for kind in KINDS:
                    s, d, copy = plans[kind]
                    times = []
                    for t in range(TRIALS):
                        seed = 1000 * rank + 17 * t + KINDS.index(kind)
                        gpu.fill(s, ring, seed)
                        gpu.synchronize()

                        def op(r, s=s, d=d, copy=copy, n=n, ring=ring, kind=kind):
                            copy(d + ring.offset(r), s + ring.offset(r), n)
                            if kind == "put" and r == reps - 1:
                                bindings.quiet_on_stream(stream)

                        marks = gpu.time_batch(op, reps, warm=lambda: copy(d, s, n))
                        times.append(marks.seconds() / reps)
                        gpu.verify(checks.get(kind, d), ring, seed, "probe", kind)
                    mine[(kind, n)] = times
            if rank == 0:
                mine["trace"] = trace(bindings, sym_src, sym_dst, peer, stream, ce, src.ptr, dst.ptr)
        barrier.wait()
    results.put((rank, cpus, mine))
    barrier.wait()
    bindings.free(sym_dst)
    bindings.free(sym_src)
    gpu.close()
    core.finalize()


def trace(bindings, sym_src, sym_dst, peer, stream, ce, src, dst) -> list[str]:
    """CUPTI activity records (via torch.profiler) of three 1 MiB puts and three cudaMemcpyAsync."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError as exc:
        return [f"no trace: {exc}"]
    torch.cuda.init()
    n = 1 << 20
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for i in range(3):
            bindings.putmem_on_stream(sym_dst + i * n, sym_src + i * n, n, peer, stream)
        bindings.quiet_on_stream(stream)
        for i in range(3):
            ce(dst + i * n, src + i * n, n)
        torch.cuda.synchronize()
    lines = []
    for e in prof.events():
        if getattr(getattr(e, "device_type", None), "name", "") == "CUDA":
            us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
            lines.append(f"{e.name} | {us:.2f} us")
    return lines or ["the trace recorded no device activity"]


def main() -> int:
    ctx = mp.get_context("spawn")
    uid_queue, results, barrier = ctx.Queue(), ctx.Queue(), ctx.Barrier(2, timeout=600)
    procs = [ctx.Process(target=pe_main, args=(r, uid_queue, barrier, results)) for r in (0, 1)]
    for p in procs:
        p.start()
    got = {}
    try:
        for _ in procs:
            rank, cpus, mine = results.get(timeout=900)
            got[rank] = (cpus, mine)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    for rank in (0, 1):
        cpus, mine = got[rank]
        print(f"PE {rank}: CPUs {cpus[0]}-{cpus[-1]} ({len(cpus)})")
        print(f"  {'bytes':>10} " + " ".join(f"{k:>18}" for k in KINDS) + "   (ns per copy, median [min-max]; GB/s)")
        for n in SIZES:
            cells = []
            for kind in KINDS:
                t = mine[(kind, n)]
                med = statistics.median(t)
                cells.append(f"{med * 1e9:8.0f} {n / med / 1e9:8.1f}")
            print(f"  {n:>10} " + " ".join(f"{c:>18}" for c in cells))
        for kind in KINDS:
            spread = [f"{n}:{min(mine[(kind, n)]) * 1e9:.0f}-{max(mine[(kind, n)]) * 1e9:.0f}" for n in SIZES[:3]]
            print(f"  spread {kind}: " + ", ".join(spread) + " ns")
        if "trace" in mine:
            print("  trace of PE 0 (3 puts of 1 MiB, then 3 cudaMemcpyAsync of 1 MiB):")
            for line in mine["trace"]:
                print("    " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
