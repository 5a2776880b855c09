"""What the run has measured so far, handed to each later scenario's sampler (RunConfig.known_best):
every group's median per figure key (engine.sampler.best_key), so that a group far behind the best
of them is decided in a few samples (engine.sampler.FAR_BEHIND) instead of --min-samples, unless
nothing known lies between the best and it (then it may be the next class, whose ratio is printed)."""

from __future__ import annotations

import math
from collections import defaultdict

from gpuipc_bench import robust
from gpuipc_bench.engine.sampler import FAR_SAMPLES, best_key


class KnownBest:
    """Fed every row of the run as it arrives (the parent's on_row); `rows()` is what the next
    scenario gets. Ceilings, set-up rows and samples whose bytes failed their check are left out:
    only a verified transfer of a path can be a leader."""

    def __init__(self) -> None:
        self.samples: dict[tuple, list[float]] = defaultdict(list)

    def add(self, row: dict) -> None:
        if row.get("path") in ("ceiling", "") or row.get("metric") == "setup" or row.get("verified") is False:
            return
        seconds = float(row.get("seconds", math.nan))
        if not math.isfinite(seconds) or seconds <= 0:
            return
        group = (row.get("scenario"), row.get("path"), row.get("variant"))
        self.samples[(best_key(row), group)].append(seconds)

    def rows(self) -> tuple[tuple, ...]:
        """(measure, metric, sharing, workers, src, dst, bytes, 'path/variant', seconds): the median of
        every group with FAR_SAMPLES samples at least, by key."""
        found = [(*key, f"{path}/{variant}", robust.median(values))
                 for (key, (_, path, variant)), values in self.samples.items() if len(values) >= FAR_SAMPLES]
        return tuple(sorted(found, key=str))
