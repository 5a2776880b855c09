"""Fault injection for the test suite (not a user option).

GPUIPC_BENCH_FAULT holds one fault, read by each worker:
  kill:RANK:PHASE[:N]   worker RANK sends itself SIGKILL the Nth time it enters PHASE
  hang:RANK:PHASE[:N]   ... stops (sleeps) there instead
  stop:RANK:PHASE[:N]   ... stops itself there with SIGSTOP (a process that cannot move at all)
  raise:RANK:PHASE[:N]  ... raises RuntimeError there
  corrupt               scenarios flip one received byte before verifying it
PHASE is a segment phase name ('setup', 'sample', 'teardown', ...) or 'barrier'.
A 'barrier' fault fires inside the barrier: from the Nth crossing on, at the
first crossing where the worker has published its arrival and waits for another
worker (Barrier's on_wait hook), so that it dies, hangs or raises while others
still count on it.

GPUIPC_BENCH_FAULT_FIRED, if set, names a file to which the worker appends
'ACTION:RANK:PHASE' just before the fault acts, so that a test can wait for the
moment instead of sleeping.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable

ENV = "GPUIPC_BENCH_FAULT"
FIRED_ENV = "GPUIPC_BENCH_FAULT_FIRED"


def corrupt_requested() -> bool:
    return os.environ.get(ENV, "") == "corrupt"


class FaultPlan:
    """The parsed fault for one worker; `hit(phase)` fires it at the right moment."""

    def __init__(self, rank: int, text: str | None = None):
        text = os.environ.get(ENV, "") if text is None else text
        self.rank = rank
        self.action = None
        self.phase = ""
        parts = text.split(":")
        if len(parts) in (3, 4) and parts[0] in ("kill", "hang", "raise", "stop") and parts[1] == str(rank):
            self.action, self.phase = parts[0], parts[2]
            self.when = int(parts[3]) if len(parts) == 4 else 1
        self.seen = 0
        self.armed = False  # a 'barrier' fault waits for the worker to be inside the barrier

    def hit(self, phase: str) -> None:
        if self.action is None or phase != self.phase:
            return
        self.seen += 1
        if self.seen != self.when:
            return
        if phase == "barrier":
            self.armed = True  # fired by in_barrier(), called by the barrier itself
            return
        self._fire(phase)

    def in_barrier(self) -> None:
        """The barrier's on_wait hook: this worker has arrived and waits for another."""
        if self.armed:
            self.armed = False
            self._fire("barrier")

    @property
    def barrier_hook(self) -> Callable[[], None] | None:
        """What to give Barrier as on_wait: None unless this worker has a 'barrier' fault."""
        return self.in_barrier if self.action is not None and self.phase == "barrier" else None

    def _fire(self, phase: str) -> None:
        note = os.environ.get(FIRED_ENV)
        if note:
            with open(note, "a", encoding="utf-8") as fh:
                fh.write(f"{self.action}:{self.rank}:{phase}\n")
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.action == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif self.action == "hang":
            while True:
                time.sleep(3600)
        else:
            raise RuntimeError(f"injected fault in phase {phase}")
