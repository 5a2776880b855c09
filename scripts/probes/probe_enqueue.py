"""What one queued operation costs the host, per kind, on a GPU (for the developers: a batch queues up
to 256 of them one Python call at a time). Usage: python scripts/probes/probe_enqueue.py [DEVICE]

Prints the microseconds per call of: the copy engine (cudaMemcpyAsync through CuPy, as Gpu.copy_launcher
queues it), the kernel copy (CuPy's RawKernel call against gpu.launch.KernelLauncher), a producer's mark,
an interprocess event's record and wait, and the whole per-rep closure a ceiling batch runs."""

import sys
import time

import numpy as np

from gpuipc_bench.gpu.device import Gpu
from gpuipc_bench.gpu.memory import IpcEvent, Ring

device = int(sys.argv[1]) if len(sys.argv) > 1 else 0
gpu = Gpu(device)
a, b = gpu.alloc(1 << 20), gpu.alloc(1 << 20)
ring = Ring.for_size(4, 256)
N, ROUNDS = 200, 7


def per_call(name, call):
    best = float("inf")
    for _ in range(ROUNDS):
        gpu.synchronize()
        t0 = time.perf_counter()
        for r in range(N):
            call(r)
        best = min(best, (time.perf_counter() - t0) / N)
        gpu.synchronize()
    print(f"{name:<44} {best * 1e6:6.2f} us a call")


ce = gpu.copy_launcher(4, "ce")
sm = gpu.copy_launcher(4, "sm")
fn, grid, n = gpu.kernels._copy, (gpu.kernels._grid(4, per_sm=4),), np.uint64(4)
mark = gpu.kernels.mark_launcher(4, gpu.stream)
event = IpcEvent.create(device)
per_call("cudaMemcpyAsync 4 B (copy_launcher 'ce')", lambda r: ce(b.ptr, a.ptr))
per_call("kernel copy, CuPy RawKernel call", lambda r: fn(grid, (512,), (np.uint64(b.ptr), np.uint64(a.ptr), n),
                                                          stream=gpu.stream))
per_call("kernel copy, KernelLauncher", lambda r: sm(b.ptr, a.ptr))
per_call("mark, KernelLauncher", lambda r: mark(b.ptr, r))
per_call("interprocess event record", lambda r: event.record(gpu.stream))
per_call("interprocess event wait", lambda r: event.wait(gpu.stream))
per_call("ceiling rep: ring offsets + kernel copy", lambda r: sm(b.ptr + ring.offset(r), a.ptr + ring.offset(r)))
per_call("ceiling rep: ring offsets + copy engine", lambda r: ce(b.ptr + ring.offset(r), a.ptr + ring.offset(r)))
event.close()
gpu.close()
