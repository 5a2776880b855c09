"""Where a worker's time goes, for the developers: with GPUIPC_BENCH_PROFILE=DIR every worker
runs each scenario under cProfile and writes DIR/<scenario>-<rank>-<pid>-<n>.prof (read them with
`python -m pstats`, or scripts/profile_summary.py). Off unless the variable is set; a run
under it is slower and its figures are not results."""

from __future__ import annotations

import contextlib
import itertools
import os
from typing import Iterator

ENV = "GPUIPC_BENCH_PROFILE"
_COUNT = itertools.count()


@contextlib.contextmanager
def profiled(scenario: str, rank: int) -> Iterator[None]:
    folder = os.environ.get(ENV)
    if not folder:
        yield
        return
    import cProfile

    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        with contextlib.suppress(OSError):
            os.makedirs(folder, exist_ok=True)
            profile.dump_stats(os.path.join(folder, f"{scenario}-{rank}-{os.getpid()}-{next(_COUNT)}.prof"))
