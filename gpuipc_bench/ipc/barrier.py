"""The shared-memory barrier the workers of one scenario cross between samples.

Each worker publishes a crossing count (its epoch) in its own line of the
segment and waits until every other worker's epoch has caught up. Waiting spins
for a short while, then yields the CPU, then sleeps with back-off, and checks
the segment's abort word throughout, so the parent can release everyone when a
worker dies. A worker that makes no progress for the timeout (its heartbeat, see
segment.py) turns the wait into BarrierTimeout naming who is missing; one that is
busy, however long, does not.

Cost: about half a microsecond a crossing for two workers on idle cores, against
~30 us for multiprocessing.Barrier; the `barrier` scenario measures both.
"""

from __future__ import annotations

from typing import Callable

from gpuipc_bench.errors import BarrierAborted, BarrierTimeout
from gpuipc_bench.ipc.segment import ABORT_INDEX, SPIN_SECONDS, YIELD_SECONDS, Segment


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

