"""barrier: what one crossing of the shared-memory barrier costs, next to multiprocessing.Barrier.

Every cross-process sample in this tool is bracketed by barrier crossings, so
their cost bounds how finely the tool can synchronise workers. A sample is a
batch of crossings timed by worker 0; seconds = batch time / crossings.
"""

from __future__ import annotations

import multiprocessing
import time

from gpuipc_bench.results import new_row
from gpuipc_bench.scenario import Scenario, WorkerSpec

CROSSINGS = 1000


class BarrierScenario(Scenario):
    name = "barrier"
    summary = "cost of one crossing of the shared-memory barrier vs multiprocessing.Barrier (no GPU)"
    gpus_needed = 0
    min_workers = 2
    max_workers = 64
    default_workers = 2

    def default_sizes(self):
        return (0,)

    def workers(self, config, machine):
        n = config.workers or self.default_workers
        return [WorkerSpec(r, "peer", None) for r in range(n)]

    def memory_needed(self, config, specs):
        return 0, 0  # no buffers: --sizes does not apply

    def prepare(self, config, specs):
        # Created before the fork so that every worker inherits it.
        return multiprocessing.get_context("fork").Barrier(len(specs))

    def run(self, ctx):
        reference = ctx.shared
        for variant, cross in (("shm", ctx.sync), ("multiprocessing", lambda: reference.wait(ctx.config.timeout))):
            for i in range(ctx.config.warmup + ctx.config.iterations):
                warm = i < ctx.config.warmup
                ctx.phase("warmup" if warm else "sample", 0, i)
                ctx.sync()
                start = time.perf_counter_ns()
                for _ in range(CROSSINGS):
                    cross()
                seconds = (time.perf_counter_ns() - start) / 1e9 / CROSSINGS
                if ctx.rank == 0 and not warm:
                    yield new_row(
                        scenario="barrier", path="barrier", variant=variant, metric="latency",
                        src="host", dst="host", bytes=0, iteration=i - ctx.config.warmup,
                        batch=CROSSINGS, seconds=seconds, workers=ctx.nworkers, sharing="none",
                    )
            ctx.progress()

    def progress_total(self, config, specs) -> int:
        return 2 * len(specs)
