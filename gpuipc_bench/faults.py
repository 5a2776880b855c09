"""Fault injection for the test suite (not a user option).

GPUIPC_BENCH_FAULT holds one fault, read by each worker:
  kill:RANK:PHASE[:N]   worker RANK sends itself SIGKILL the Nth time it enters PHASE
  hang:RANK:PHASE[:N]   ... stops (sleeps) there instead
  raise:RANK:PHASE[:N]  ... raises RuntimeError there
  corrupt               scenarios flip one received byte before verifying it
PHASE is a segment phase name ('setup', 'sample', 'teardown', ...) or 'barrier'
(just before the worker arrives at the barrier).
"""

from __future__ import annotations

import os
import signal
import time

ENV = "GPUIPC_BENCH_FAULT"


def corrupt_requested() -> bool:
    return os.environ.get(ENV, "") == "corrupt"


class FaultPlan:
    """The parsed fault for one worker; `hit(phase)` fires it at the right moment."""

    def __init__(self, rank: int, text: str | None = None):
        text = os.environ.get(ENV, "") if text is None else text
        self.action = None
        parts = text.split(":")
        if len(parts) in (3, 4) and parts[0] in ("kill", "hang", "raise") and parts[1] == str(rank):
            self.action, self.phase = parts[0], parts[2]
            self.when = int(parts[3]) if len(parts) == 4 else 1
        self.seen = 0

    def hit(self, phase: str) -> None:
        if self.action is None or phase != self.phase:
            return
        self.seen += 1
        if self.seen != self.when:
            return
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.action == "hang":
            while True:
                time.sleep(3600)
        else:
            raise RuntimeError(f"injected fault in phase {phase}")
