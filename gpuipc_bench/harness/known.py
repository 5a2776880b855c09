"""What the run has measured so far, handed to each later scenario's sampler (RunConfig.known_best):
the best median per figure key (engine.sampler.best_key), so that a group far behind it is decided
in a few samples (engine.sampler.FAR_BEHIND) instead of --min-samples."""

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
        """(measure, metric, sharing, workers, src, dst, bytes, seconds): the lowest median of the
        groups with FAR_SAMPLES samples at least, per key."""
        best: dict[tuple, float] = {}
        for (key, _), values in self.samples.items():
            if len(values) >= FAR_SAMPLES:
                best[key] = min(robust.median(values), best.get(key, math.inf))
        return tuple((*key, seconds) for key, seconds in sorted(best.items(), key=lambda kv: str(kv[0])))
