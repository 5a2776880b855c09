"""Where a run's time goes, for the developers (off unless their variable is set; a run under
either is slower or larger, and its figures are not results):

  GPUIPC_BENCH_PROFILE=DIR  every worker runs each scenario under cProfile and writes
                            DIR/<scenario>-<rank>-<pid>-<n>.prof (read them with `python -m pstats`,
                            or scripts/trace/profile_summary.py);
  GPUIPC_BENCH_TRACE=DIR    a timeline: every worker writes each scenario's phase changes (one per
                            sample: warm-up, sample, ceiling, set-up, teardown, with size and label)
                            and each sample's steps (the batch queued, released, run; verified; its
                            figure; the stop rule's word) to DIR/<scenario>-<rank>-<sharing>-<pid>.jsonl,
                            its first scenario's file opening with the worker's own start (forked, its
                            CUDA context made, the processes before it gone),
                            and the parent its own steps (a mode started, a process set forked, a
                            scenario begun and ended) to DIR/parent-<pid>.jsonl;
                            scripts/trace/trace_summary.py adds them up per phase, scripts/trace/trace_samples.py
                            per step of a sample. Times are CLOCK_MONOTONIC seconds, one clock for
                            every process of the machine."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from typing import Callable, Iterator

ENV = "GPUIPC_BENCH_PROFILE"
TRACE_ENV = "GPUIPC_BENCH_TRACE"
_COUNT = itertools.count()
_TRACE: list[tuple] | None = [] if os.environ.get(TRACE_ENV) else None


_STARTED: list[tuple] = []  # a worker's own steps before its first scenario's timeline begins (mark_start)


def mark(event: str, *fields) -> None:
    """One step of the timeline (nothing unless GPUIPC_BENCH_TRACE is set)."""
    if _TRACE is not None:
        _TRACE.append((time.monotonic(), event, *fields))


def mark_start(event: str) -> None:
    """A forked worker's step before its first scenario ('context made', 'leavers gone'): kept for that
    scenario's timeline, which begins later (profiled clears what the worker inherited)."""
    if _TRACE is not None:
        _STARTED.append((time.monotonic(), event))


def write_trace(name: str) -> None:
    """This process's timeline since the last write, to DIR/<name>.jsonl (then forgotten)."""
    folder = os.environ.get(TRACE_ENV)
    if _TRACE is None or not folder:
        return
    with contextlib.suppress(OSError):
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{name}.jsonl"), "a") as out:
            for entry in _TRACE:
                out.write(json.dumps(entry) + "\n")
    _TRACE.clear()


@contextlib.contextmanager
def profiled(scenario: str, rank: int, sharing: Callable[[], str] | None = None) -> Iterator[None]:
    """One worker's scenario, under cProfile and the timeline where their variables ask for them.
    `sharing()` names the scenario's sharing mode once it ran (its timeline's file name says it)."""
    if _TRACE is not None:
        _TRACE.clear()  # a forked worker's copy of its parent's timeline is not its own
        _TRACE.extend(_STARTED)
        _STARTED.clear()
        mark("begin", scenario)
    folder = os.environ.get(ENV)
    profile = None
    if folder:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    try:
        yield
    finally:
        if profile is not None:
            profile.disable()
            with contextlib.suppress(OSError):
                os.makedirs(folder, exist_ok=True)
                profile.dump_stats(os.path.join(folder, f"{scenario}-{rank}-{os.getpid()}-{next(_COUNT)}.prof"))
        mark("end", scenario)
        mode = (sharing() if sharing is not None else "") or "none"  # the rows' mode, else the one handed
        write_trace(f"{scenario}-{rank}-{mode}-{os.getpid()}")
