"""The first process set of a plain run, forked while the machine is probed.

A run's first persistent set (the producer and the consumer on GPU 0, time-sliced) used to be forked
once the plan was made, and its first scenario then waited for both CUDA contexts (0.6-1.2 s on one
H200) after the probe had waited for its own CUDA start (~1 s). Here the set is forked as soon as
NVML has named the GPU, while the probe's child starts CUDA, and told to make its contexts at once
(WorkerSet.warm); the session takes it over (WorkerSets.adopt) as the set its first time-sliced
scenarios would have forked, with the same workers, mode, pipe folder and key.

Only for the run every user starts: one GPU without MIG, no --devices, --pairs, --sharing or -s
(--quick and --thorough too), the fork launcher, no MPI job. Anything else, or anything unexpected
here, and nothing is started: the run forks its sets as before. A head start the plan does not use
(its mode left out, a plan that fails) is ended with the run (close)."""

from __future__ import annotations

from typing import Any

from gpuipc_bench.hooks.profiling import mark


class HeadStart:
    """The set forked early, its sharing mode (whose pipe folder its workers were given) and its key."""

    def __init__(self) -> None:
        self.mode: Any = None  # modes.TimeSliced, started: the plan takes this instance as its time-sliced mode
        self.workers: Any = None  # harness.pool.WorkerSet, warming
        self.key: tuple | None = None  # harness.pool.set_key of its specs, mode and environment
        self.adopted = False

    @staticmethod
    def wanted(options) -> bool:
        """Whether the command line is the plain run (see the module's docstring)."""
        return (options.job is None and not options.fresh and not options.devices and not options.visible
                and options.pairs is None and not options.sharing and not options.scenario_names)

    def begin(self, nvml: dict) -> None:
        """Fork the set and have it make its contexts, given the probe's NVML facts (machine.nvml);
        nothing where NVML sees another machine than one GPU without MIG."""
        try:
            gpus = list((nvml or {}).get("gpus", {}).values())
            if len(gpus) != 1 or gpus[0].get("mig_mode") == "enabled" or not str(gpus[0].get("uuid", "")):
                return
            from gpuipc_bench.engine.pair import pair_specs
            from gpuipc_bench.harness.plan import registry
            from gpuipc_bench.harness.pool import WorkerSet, set_key
            from gpuipc_bench.modes import TimeSliced

            registry()  # the scenarios' modules, imported here before the fork as the plan would have
            cpus = tuple(gpus[0].get("cpus", ()) or ())
            specs = pair_specs(0, 0, lambda device: cpus)  # the pair paths' own (PairScenario.workers)
            mode = TimeSliced()
            mode.start()
            self.mode = mode
            env = mode.env()
            self.workers = WorkerSet(specs, env)  # one GPU: it sees every GPU anyway (gpu.visible)
            self.workers.warm()
            self.key = set_key(specs, mode.name, env)
            mark("head start forked")
        except Exception:  # noqa: BLE001 - the run forks its sets as before
            self.close()

    def hand_to(self, sets, worker_log: str, timeout: float, modes=()) -> bool:
        """Give the set to the run's sets (WorkerSets.adopt) once its contexts are made; False (and
        the set ended) where there is none, the run's `modes` do not hold its mode (no GPU for CUDA,
        say: no process of it may wait idle), or a worker did not warm within `timeout` seconds."""
        if self.workers is None or self.adopted:
            return False
        if not any(mode is self.mode for mode in modes) or not self.workers.warmed(timeout):
            self.close()
            return False
        sets.adopt(self.key, self.workers, worker_log)
        self.adopted = True
        mark("head start adopted")
        return True

    def close(self) -> None:
        """End what was started: the workers unless the run took them over, and the mode's pipe folder
        (the run's end, or a plan without this mode: a mode the plan took is ended with the plan's
        modes too, and stopping it twice does nothing)."""
        workers, self.workers = self.workers, None
        if workers is not None and not self.adopted:
            workers.close(graceful=False)
        if self.mode is not None:
            self.mode.stop()
