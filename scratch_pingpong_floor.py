"""Scratch (not committed): in-process 2-GPU ping-pong floor vs the tool's kernels."""
import statistics, sys
import numpy as np, cupy as cp
from cupy.cuda import runtime as rt
from gpuipc_bench import cuda

SRC = r'''
typedef unsigned long long u64; typedef unsigned int u32;
__device__ __forceinline__ u64 now(){u64 t; asm volatile("mov.u64 %0, %%globaltimer;":"=l"(t)); return t;}
__device__ __forceinline__ void put(u32* p, u32 v, int mode) {
  if (mode & 4) asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
  else *(volatile u32*)p = v;
  if (mode & 8) __threadfence_system();
}
__device__ __forceinline__ int get(u32* p, u32 target, int mode) {
  u32 v; u32 n = 0;
  while (true) {
    if (mode & 2) asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else if (mode & 16) asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    else v = *(volatile u32*)p;
    if ((int)(v - target) >= 0) return 0;
    ++n;
    if ((mode & 1) && (n & 63) == 0) { if (now() == 0) return 1; }
    if (n > (1u << 26)) return 1;
  }
}
extern "C" __global__ void minimal(u64 mine, u64 theirs, u32 first, u32 rounds, int init, int mode, u64 out) {
  u64 t0 = 0; int bad = 0;
  for (u32 r = 0; r <= rounds; ++r) {
    u32 seq = first + r;
    if (init) { put((u32*)theirs, seq, mode); bad |= get((u32*)mine, seq, mode); if (r == 0) t0 = now(); }
    else { bad |= get((u32*)mine, seq, mode); put((u32*)theirs, seq, mode); }
    if (bad) break;
  }
  if (init) { ((u64*)out)[0] = now() - t0; ((u64*)out)[1] = bad; }
}
'''
for d in (0, 1):
    rt.setDevice(d); rt.deviceEnablePeerAccess(1 - d)
mods, bufs, outs, streams, kerns = {}, {}, {}, {}, {}
for d in (0, 1):
    with cp.cuda.Device(d):
        mods[d] = cp.RawModule(code=SRC, options=("--std=c++14",)).get_function("minimal")
        bufs[d] = cp.zeros(1 << 16, dtype=cp.uint8)
        outs[d] = cp.zeros(8, dtype=cp.uint64)
        streams[d] = cp.cuda.Stream(non_blocking=True)
        kerns[d] = cuda.PingPongKernels(d)
seq = [0]
def minimal(mode, rounds=20000):
    first = seq[0] + 1; seq[0] += rounds + 1
    for d in (1, 0):
        with cp.cuda.Device(d):
            mods[d]((1,), (32,), (np.uint64(bufs[d].data.ptr), np.uint64(bufs[1-d].data.ptr), np.uint32(first),
                    np.uint32(rounds), np.int32(d == 0), np.int32(mode), np.uint64(outs[d].data.ptr)), stream=streams[d])
    for d in (0, 1): streams[d].synchronize()
    o = cp.asnumpy(outs[0])
    assert o[1] == 0, "bailed"
    return o[0] / rounds / 2 / 1e3
LL = 4096
def tool(protocol, nbytes, rounds=20000):
    first = seq[0] + 1; seq[0] += rounds + 1
    res = {}
    for d in (1, 0):
        with cp.cuda.Device(d):
            mine, theirs = bufs[d].data.ptr, bufs[1-d].data.ptr
            common = dict(first=first, rounds=rounds, initiator=d == 0, timeout_s=5, deadline_s=30, result=outs[d].data.ptr)
            if protocol == "ll":
                kerns[d].launch_ll(streams[d], my_ll=mine + LL, peer_ll=theirs + LL, src=mine + 32768, nbytes=nbytes, **common)
            else:
                kerns[d].launch(streams[d], my_flag=mine, peer_flag=theirs, my_payload=mine + 256, peer_payload=theirs + 256,
                                src=mine + 32768, nbytes=nbytes, **common)
    for d in (0, 1): streams[d].synchronize()
    with cp.cuda.Device(0):
        r = kerns[0].result(outs[0].data.ptr, streams[0])
    assert r.status == 0, r
    return r.round_trip / 2 * 1e6
cases = [("minimal volatile", lambda: minimal(0)), ("minimal +timer/64", lambda: minimal(1)),
         ("minimal ld.acquire.sys", lambda: minimal(2)), ("minimal ld.relaxed.sys", lambda: minimal(16)),
         ("minimal st.release.sys", lambda: minimal(4)), ("minimal st+fence.sys", lambda: minimal(8)),
         ("tool flags 0B", lambda: tool("simple", 0)), ("tool simple 4B", lambda: tool("simple", 4)),
         ("tool ll 4B", lambda: tool("ll", 4)), ("tool ll 64B", lambda: tool("ll", 64)), ("tool ll 4KiB", lambda: tool("ll", 4096))]
for name, fn in cases:
    fn()
    vals = [fn() for _ in range(7)]
    print(f"{name:26s} one-way us: median {statistics.median(vals):.3f}  min {min(vals):.3f}  max {max(vals):.3f}", flush=True)
