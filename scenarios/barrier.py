"""barrier: what one crossing of the shared-memory barrier costs, next to multiprocessing.Barrier.

Every cross-process sample in this tool is bracketed by barrier crossings, so their cost
bounds how finely the tool can synchronise workers. A sample is a batch of crossings timed
by worker 0; seconds = batch time / crossings. Under MPI (the workers are the job's ranks) the
reference is MPI_Barrier on the workers' own communicator instead (under `check`, the node's
pair: never the whole job's, which a rank outside the pair would never enter).
"""

from __future__ import annotations

import multiprocessing
import time

from gpuipc_bench.paths import PathInfo
from gpuipc_bench.engine.sampler import Sample, Sampler
from gpuipc_bench.engine.scenario import Scenario, WorkerSpec

CROSSINGS = 1000


class BarrierScenario(Scenario):
    name = "barrier"
    summary = "cost of one crossing of the shared-memory barrier vs multiprocessing.Barrier (no GPU)"
    gpus_needed = 0
    min_workers = 2
    max_workers = 64
    default_workers = 2
    paths = (PathInfo("barrier", role="reference", colour="#17becf"),)

    def sizes(self, config):
        return (0,)  # no buffers: --sizes does not apply

    def workers(self, config, machine):
        n = config.workers or self.default_workers
        return [WorkerSpec(r, "peer", None) for r in range(n)]

    def memory_needed(self, config, specs):
        return 0, 0

    def prepare(self, config, specs):
        if config.launcher == "mpi":
            return None  # the ranks' reference is MPI's own barrier
        # Created before the fork so that every worker inherits it.
        return multiprocessing.get_context("fork").Barrier(len(specs))

    def progress_total(self, config, specs) -> int:
        return 2 * len(specs)

    def run(self, ctx):
        ctx.begin(self.name, sharing="none")
        ctx.declare("sampler")
        ctx.lock_names()
        sampler = Sampler(ctx)
        reference = ctx.shared
        if ctx.config.launcher == "mpi":
            from gpuipc_bench.harness.mpi_launch import mpi_world

            crossings = {"shm": ctx.sync, "mpi": mpi_world().Barrier}
        else:
            crossings = {"shm": ctx.sync, "multiprocessing": lambda: reference.wait(ctx.config.timeout)}
        for variant, cross in crossings.items():
            def take(trial, cross=cross) -> Sample | None:
                ctx.sync()
                start = time.perf_counter_ns()
                for _ in range(trial.reps):
                    cross()
                seconds = (time.perf_counter_ns() - start) / 1e9 / trial.reps
                return Sample(seconds, trial.reps, None) if ctx.rank == 0 else None

            group = dict(path="barrier", variant=variant, measure="", metric="latency", src="host", dst="host",
                         bytes=0, ceiling="")
            yield from sampler.run(group, take, timer=ctx.rank == 0, reps=CROSSINGS, calibrate=False)
            ctx.progress()
