"""A load beside a timed run, to see what another process of the run could do to its figures if it
started while they are timed (scripts/device/beside.sh). Runs until killed.

    python scripts/device/beside.py starts    # two processes at a time, over and over: a CUDA context,
                                              # 1 GiB set on the GPU (one of them), torch's CUDA (the other)
    python scripts/device/beside.py contexts  # two processes at a time, over and over: a CUDA context, no more
    python scripts/device/beside.py idle      # eight processes, each holding a CUDA context, doing nothing
"""

import multiprocessing as mp
import sys
import time


def start(kind: str, hold: float) -> None:
    import cupy as cp

    cp.cuda.runtime.setDevice(0)
    cp.cuda.runtime.free(0)  # the context is made here
    if kind == "memory":
        block = cp.empty(1 << 30, dtype=cp.uint8)
        block.fill(1)
        cp.cuda.runtime.deviceSynchronize()
        del block
        cp.get_default_memory_pool().free_all_blocks()
    elif kind == "torch":
        import torch

        torch.ones(1 << 20, device="cuda")
        torch.cuda.synchronize()
    time.sleep(hold)


def main(load: str) -> None:
    if load == "starts":
        context = mp.get_context("forkserver")
        context.set_forkserver_preload(["cupy", "torch"])
        kinds, hold = ("memory", "torch"), 0.3
    else:
        context = mp.get_context("fork")
        import cupy  # noqa: F401  (imported once before the forks, as the tool's parent does; no CUDA here)

        kinds, hold = ("context", "context"), 0.2
    if load == "idle":
        held = [context.Process(target=start, args=("context", 3600.0)) for _ in range(8)]
        for p in held:
            p.start()
        print("idle contexts up", flush=True)
        for p in held:
            p.join()
        return
    cycles = 0
    while True:
        started = [context.Process(target=start, args=(kind, hold)) for kind in kinds]
        for p in started:
            p.start()
        for p in started:
            p.join()
        cycles += 1
        print("cycle", cycles, flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("starts", "contexts", "idle"):
        sys.exit("usage: beside.py starts|contexts|idle")
    main(sys.argv[1])
