"""The shared-memory barrier the workers of one scenario cross between samples.

Each worker publishes a crossing count (its epoch) in its own line of the
segment and waits until every other worker's epoch has caught up. Waiting spins
for a short while, then yields the CPU, then sleeps with back-off, and checks
the segment's abort word throughout, so the parent can release everyone when a
worker dies. A worker that makes no progress for the timeout (its heartbeat, see
segment.py) turns the wait into BarrierTimeout naming who is missing; one that is
busy, however long, does not.

Cost: about half a microsecond a crossing for two workers on idle cores, against
~30 us for multiprocessing.Barrier; `python -m gpuipc_bench.barrier 2` measures both.
"""

from __future__ import annotations

import time
import traceback
from typing import Callable

from gpuipc_bench.errors import BarrierAborted, BarrierTimeout, WorkerFailed
from gpuipc_bench.segment import ABORT_INDEX, SPIN_SECONDS, YIELD_SECONDS, Segment


class Barrier:
    """Worker `rank`'s side of the barrier over `segment`. One per worker, made after the fork.

    `on_wait`, if given, is called with no argument each time this worker has
    published its arrival and has to wait for another (the fault-injection hook
    that kills a worker "inside the barrier"; see faults.py). It costs nothing
    on the fast path, where every other worker has already arrived.
    """

    def __init__(self, segment: Segment, rank: int, timeout: float,
                 spin_seconds: float = SPIN_SECONDS, yield_seconds: float = YIELD_SECONDS,
                 on_wait: Callable[[], None] | None = None):
        if not timeout > 0 or timeout == float("inf"):
            raise ValueError(f"barrier timeout must be a positive number of seconds (got {timeout})")
        self.segment = segment
        self.rank = rank
        self.timeout = timeout
        self.spin_seconds = spin_seconds
        self.yield_seconds = yield_seconds
        self.on_wait = on_wait
        self._words = segment.words
        self._mine = segment.epoch_index(rank)
        self._waiting = segment.waiting_index(rank)
        self._others = tuple((r, segment.epoch_index(r)) for r in range(segment.nworkers) if r != rank)

    def wait(self) -> None:
        """Cross: publish this worker's next epoch, wait until every worker has published it."""
        w = self._words
        e = w[self._mine] + 1  # only this worker writes its epoch
        w[self._mine] = e
        if w[ABORT_INDEX]:
            raise BarrierAborted("run aborted")
        for _, i in self._others:
            if w[i] < e:  # epochs only grow: once caught up, that worker stays caught up
                self._wait_for_others(e)
                return

    def _wait_for_others(self, e: int) -> None:
        """The slow path. While here, this worker's waiting word holds `e`, so that the
        parent can say a worker that died now died inside the barrier (epochs alone
        cannot: the others may arrive, see its epoch and leave before the parent looks)."""
        w = self._words
        w[self._waiting] = e
        try:
            if self.on_wait is not None:
                self.on_wait()
            seg = self.segment
            for r, i in self._others:
                if w[i] < e:
                    try:
                        seg.await_word(i, e, self.timeout, (r,), "the barrier", self.rank,
                                       self.spin_seconds, self.yield_seconds)
                    except BarrierTimeout:
                        missing = [m for m in range(seg.nworkers) if seg.epoch(m) < e]
                        raise BarrierTimeout(missing, self.timeout) from None
        finally:
            w[self._waiting] = 0


# -- a quick benchmark: this barrier against multiprocessing.Barrier ---------------


def _summary(samples: list[float]) -> dict:
    import numpy as np

    a = np.asarray(samples, dtype=float)
    return {
        "median_s": float(np.median(a)),
        "p5_s": float(np.percentile(a, 5)),
        "p95_s": float(np.percentile(a, 95)),
        "samples_s": [float(x) for x in a],
    }


def _time_crossings(wait, warmup: int, nbatches: int, batch: int) -> list[float]:
    for _ in range(warmup):
        wait()
    clock = time.perf_counter_ns
    samples = []
    for _ in range(nbatches):
        t0 = clock()
        for _ in range(batch):
            wait()
        samples.append((clock() - t0) / batch / 1e9)
    return samples


def _worker(kind, shared, rank, timeout, warmup, nbatches, batch, conn):
    try:
        if kind == "shm":
            wait = Barrier(shared, rank, timeout).wait
        else:
            wait = lambda: shared.wait(timeout)  # noqa: E731
        conn.send(("ok", _time_crossings(wait, warmup, nbatches, batch)))
    except BaseException:
        shared.abort()  # release the other workers (Segment.abort / multiprocessing.Barrier.abort)
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def _run(ctx, kind, shared, abort, nworkers, timeout, warmup, nbatches, batch) -> list[float]:
    """Fork the workers, return rank 0's samples. Children are always joined, or killed."""
    from multiprocessing.connection import wait as mp_wait

    procs, readers = [], []
    try:
        for rank in range(nworkers):
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_worker, name=f"barrier-bench-{rank}", daemon=True,
                            args=(kind, shared, rank, timeout, warmup, nbatches, batch, w))
            p.start()
            w.close()
            procs.append(p)
            readers.append(r)
        results: dict[int, tuple] = {}
        deadline = time.monotonic() + timeout
        while len(results) < nworkers:
            pending = {readers[r]: r for r in range(nworkers) if r not in results}
            pending.update({procs[r].sentinel: r for r in range(nworkers) if r not in results})
            left = deadline - time.monotonic()
            ready = mp_wait(list(pending), timeout=left) if left > 0 else []
            if not ready:
                abort()
                late = sorted(set(pending.values()))
                raise WorkerFailed(f"barrier benchmark ({kind}): worker(s) {late} "
                                   f"did not finish within {timeout:g} s")
            for obj in ready:
                rank = pending[obj]
                if rank in results:
                    continue
                try:
                    msg = readers[rank].recv() if readers[rank].poll() else None
                except EOFError:
                    msg = None
                if msg is None:  # exited without a word: release the others at once
                    abort()
                    procs[rank].join(1)
                    msg = ("error", f"worker {rank} died (exit code {procs[rank].exitcode})")
                results[rank] = msg
        errors = [f"worker {r}: {msg[1]}" for r, msg in sorted(results.items()) if msg[0] != "ok"]
        if errors:
            raise WorkerFailed(f"barrier benchmark ({kind}) failed", "\n".join(errors))
        return results[0][1]
    finally:
        for p in procs:
            p.join(timeout=max(1.0, min(timeout, 5.0)))
            if p.is_alive():
                p.kill()
                p.join()
        for r in readers:
            r.close()


def measure_crossing(nworkers: int, crossings: int, timeout: float = 30.0, batch: int = 100) -> dict:
    """Time `crossings` barrier crossings of `nworkers` forked processes, for this
    barrier and for multiprocessing.Barrier. Rank 0 times batches of `batch`
    crossings with perf_counter_ns; each batch is one sample in seconds per crossing.
    `timeout` bounds each of the two runs and each wait."""
    import multiprocessing

    if nworkers < 1 or crossings < 1:
        raise ValueError("measure_crossing needs at least 1 worker and 1 crossing")
    ctx = multiprocessing.get_context("fork")
    batch = max(1, min(batch, crossings))
    nbatches = max(1, crossings // batch)
    warmup = min(max(crossings // 10, 10), 1000)
    out = {"nworkers": nworkers, "crossings": nbatches * batch, "batch": batch, "warmup": warmup}

    seg = Segment.create(nworkers)
    try:
        out["shm_barrier"] = _summary(
            _run(ctx, "shm", seg, seg.abort, nworkers, timeout, warmup, nbatches, batch))
    finally:
        seg.close()
    mpb = ctx.Barrier(nworkers)
    out["multiprocessing_barrier"] = _summary(
        _run(ctx, "mp", mpb, mpb.abort, nworkers, timeout, warmup, nbatches, batch))
    return out


if __name__ == "__main__":  # python -m gpuipc_bench.barrier [NWORKERS] [CROSSINGS]
    import sys

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    c = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    r = measure_crossing(n, c)
    for key in ("shm_barrier", "multiprocessing_barrier"):
        s = r[key]
        print(f"{key:24s} {n} workers: median {s['median_s'] * 1e6:7.2f} us  "
              f"p5 {s['p5_s'] * 1e6:7.2f} us  p95 {s['p95_s'] * 1e6:7.2f} us  per crossing")
