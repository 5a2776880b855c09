"""Do the memcpy nodes of a captured CUDA graph run on a copy engine, and what would a graph save?

    python scripts/probes/probe_graph_copies.py [--reps 128] [--bytes 4]

Three questions for the speed issue's "a batch enqueued once (a CUDA graph)", on GPU 0:

1. Enqueue cost: `reps` device-to-device cudaMemcpyAsync of `bytes` each from Python (CuPy's
   runtime binding, as the tool's batches do), against one launch of a graph captured from the same
   calls.
2. GPU time per copy (events around the batch, the stream idle before): the same copies queued one
   by one, and as one graph.
3. The engine: a spinner kernel holds every SM (two 1024-thread blocks per SM) until a word in
   device memory is set, or until %globaltimer says SPIN_LIMIT_S passed (it never hangs the GPU).
   While it spins, a batch on another stream finishes only if no SM is needed: the plain
   memcpyAsync batch (the copy engine, for reference), the graph of the same copies, and a kernel
   copy (which must wait, the check that the spinner really holds every SM). The release is a
   cudaMemcpyAsync into the word from a third stream, itself a copy-engine operation.

Prints one line per answer; exit 0. Figures are of this GPU and driver, not the tool's results.
"""

from __future__ import annotations

import argparse
import time

SPIN_LIMIT_S = 3.0
WAIT_S = 0.3  # how long a batch gets to finish while the SMs are held

SPINNER = r"""
__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void spinner(volatile unsigned int* word, unsigned long long limit_ns, unsigned int* gave_up) {
    unsigned long long start = now_ns();
    while (word[0] == 0) {
        if (now_ns() - start > limit_ns) { atomicExch(gave_up, 1u); return; }
        __nanosleep(200);
    }
}
extern "C" __global__ void kcopy(unsigned char* dst, const unsigned char* src, unsigned long long n) {
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=128)
    parser.add_argument("--bytes", type=int, default=4)
    args = parser.parse_args()
    import cupy as cp
    import numpy as np

    rt = cp.cuda.runtime
    reps, n, stride = args.reps, args.bytes, max(256, args.bytes)
    src = cp.arange(reps * stride, dtype=cp.uint8)
    dst = cp.zeros(reps * stride, dtype=cp.uint8)
    module = cp.RawModule(code=SPINNER)
    spinner, kcopy = module.get_function("spinner"), module.get_function("kcopy")
    word, gave_up = cp.zeros(1, dtype=cp.uint32), cp.zeros(1, dtype=cp.uint32)
    one = cp.cuda.alloc_pinned_memory(4)
    np.frombuffer(one, dtype=np.uint32, count=1)[0] = 1
    props = rt.getDeviceProperties(0)
    sms = rt.deviceGetAttribute(rt.cudaDevAttrMultiProcessorCount, 0)
    limit = int(SPIN_LIMIT_S * 1e9)
    s_spin, s_copy, s_release = (cp.cuda.Stream(non_blocking=True) for _ in range(3))

    def enqueue(stream) -> None:
        for r in range(reps):
            rt.memcpyAsync(dst.data.ptr + r * stride, src.data.ptr + r * stride, n, rt.memcpyDeviceToDevice,
                           stream.ptr)

    enqueue(s_copy)  # warm
    s_copy.synchronize()
    t0 = time.perf_counter()
    enqueue(s_copy)
    t_enqueue = time.perf_counter() - t0
    s_copy.synchronize()
    s_copy.begin_capture()
    enqueue(s_copy)
    graph = s_copy.end_capture()
    graph.launch(s_copy)  # the first launch uploads it
    s_copy.synchronize()
    t0 = time.perf_counter()
    graph.launch(s_copy)
    t_launch = time.perf_counter() - t0
    s_copy.synchronize()

    def gpu_us(run) -> float:
        best = float("inf")
        for _ in range(5):
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(s_copy)
            run()
            b.record(s_copy)
            b.synchronize()
            best = min(best, cp.cuda.get_elapsed_time(a, b) * 1e3 / reps)
        return best

    plain_us = gpu_us(lambda: enqueue(s_copy))
    graph_us = gpu_us(lambda: graph.launch(s_copy))

    def gated_us() -> float:
        """The tool's method: the batch queued behind a one-block spinner on its own stream, which a
        copy into its word (from a third stream) releases; events right after the spinner and the batch."""
        best = float("inf")
        for _ in range(5):
            word.fill(0)
            cp.cuda.Device().synchronize()
            spinner((1,), (32,), (word, np.uint64(limit), gave_up), stream=s_copy)
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record(s_copy)
            enqueue(s_copy)
            b.record(s_copy)
            rt.memcpyAsync(word.data.ptr, one.ptr, 4, rt.memcpyHostToDevice, s_release.ptr)
            b.synchronize()
            best = min(best, cp.cuda.get_elapsed_time(a, b) * 1e3 / reps)
        return best

    stream_gated_us = gated_us()

    def while_held(run) -> tuple[bool, bool]:
        """(finished while every SM spun, the spinner gave up instead of being released)."""
        word.fill(0)
        gave_up.fill(0)
        cp.cuda.Device().synchronize()
        spinner((2 * sms,), (1024,), (word, np.uint64(limit), gave_up), stream=s_spin)
        time.sleep(0.05)
        done = cp.cuda.Event()
        run()
        done.record(s_copy)
        time.sleep(WAIT_S)
        finished = done.done
        rt.memcpyAsync(word.data.ptr, one.ptr, 4, rt.memcpyHostToDevice, s_release.ptr)
        s_spin.synchronize()
        s_copy.synchronize()
        return finished, bool(int(gave_up.get()[0]))

    plain_done, plain_gave_up = while_held(lambda: enqueue(s_copy))
    graph_done, graph_gave_up = while_held(lambda: graph.launch(s_copy))
    kernel_done, kernel_gave_up = while_held(
        lambda: kcopy((1,), (256,), (dst, src, np.uint64(n)), stream=s_copy))
    host = cp.cuda.alloc_pinned_memory(n)  # a copy from pinned host memory: the copy engine's, for certain
    h2d_done, h2d_gave_up = while_held(
        lambda: rt.memcpyAsync(dst.data.ptr, host.ptr, n, rt.memcpyHostToDevice, s_copy.ptr))
    print(f"GPU {props['name'].decode() if isinstance(props['name'], bytes) else props['name']}, "
          f"driver {rt.driverGetVersion()}, runtime {rt.runtimeGetVersion()}; {reps} copies of {n} B")
    print(f"enqueue from Python: {t_enqueue * 1e3:.3f} ms ({t_enqueue / reps * 1e6:.2f} us a copy); "
          f"one graph launch {t_launch * 1e6:.1f} us")
    print(f"GPU time a copy (best of 5): stream as enqueued {plain_us:.3f} us, stream queued behind a gate "
          f"{stream_gated_us:.3f} us, graph {graph_us:.3f} us")
    print(f"finished while every SM was held: stream memcpy {plain_done}, graph memcpy {graph_done}, "
          f"kernel copy {kernel_done}, one host-to-device copy {h2d_done} "
          f"(spinner gave up: {plain_gave_up}, {graph_gave_up}, {kernel_gave_up}, {h2d_gave_up})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
