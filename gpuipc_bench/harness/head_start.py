"""The first process set of a plain run, forked while the machine is probed.

A run's first persistent set (the producer and the consumer on GPU 0, time-sliced) used to be forked
once the plan was made, and its first scenario then waited for both CUDA contexts (0.6-1.2 s on one
H200) after the probe had waited for its own CUDA start (~1 s). Here the set is forked as soon as
NVML has named the GPU, while the probe's child starts CUDA, and told to make its contexts at once
(WorkerSet.warm); the session takes it over (WorkerSets.adopt) as the set its first time-sliced
scenarios would have forked, with the same workers, mode, pipe folder and key.

Only for the run every user starts: no --devices, --pairs, --sharing or -s (--quick and --thorough
too), the fork launcher, no MPI job, no GPU with MIG on. On a node of several GPUs the set is the
first GPU's, seeing that GPU alone (gpu.visible), as the run's first sets are: the one of lowest PCI
bus id, which CUDA numbers 0 among GPUs of one model, and only where the environment leaves CUDA's
order and visibility alone; the run takes it over only where the probe numbers that GPU 0 (hand_to).
On two H200s the first scenario waited 1.5 s for its set's contexts after a plan of 2.1 s
(results/h200x2-oneset-trace.txt). Anything else, or anything unexpected here, and nothing is started:
the run forks its sets as before. A head start the plan does not use (its mode left out, a plan that
fails, another GPU 0) is ended with the run (close)."""

from __future__ import annotations

import os
from typing import Any

from gpuipc_bench.hooks.profiling import mark


class HeadStart:
    """The set forked early, its sharing mode (whose pipe folder its workers were given) and its key."""

    def __init__(self) -> None:
        self.mode: Any = None  # modes.TimeSliced, started: the plan takes this instance as its time-sliced mode
        self.workers: Any = None  # harness.pool.WorkerSet, warming
        self.key: tuple | None = None  # harness.pool.set_key of its specs, mode and environment
        self.uuid = ""  # its GPU's, where the node has several: the run's GPU 0 must be that one (hand_to)
        self.adopted = False

    @staticmethod
    def wanted(options) -> bool:
        """Whether the command line is the plain run (see the module's docstring)."""
        return (options.job is None and not options.fresh and not options.devices and not options.visible
                and options.pairs is None and not options.sharing and not options.scenario_names)

    def begin(self, nvml: dict) -> None:
        """Fork the set and have it make its contexts, given the probe's NVML facts (machine.nvml);
        nothing where NVML sees no GPU, a GPU with MIG on or one without a UUID, or where several GPUs
        are numbered by the environment (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER)."""
        try:
            found = (nvml or {}).get("gpus", {})
            gpus = [found[bus] for bus in sorted(found)]  # (normalised bus ids: their order is the bus's)
            if not gpus or any(g.get("mig_mode") == "enabled" or not str(g.get("uuid", "")).startswith("GPU-")
                               for g in gpus):
                return
            if len(gpus) > 1 and any(os.environ.get(name) for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")):
                return
            from gpuipc_bench.engine.pair import pair_specs
            from gpuipc_bench.gpu.visible import visibility_env
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
            sees = {}
            if len(gpus) > 1:  # GPU 0 alone, as the run's sets see their own (WorkerSets.visibility)
                self.uuid = str(gpus[0]["uuid"])
                sees = visibility_env([0, 0], {i: str(g["uuid"]) for i, g in enumerate(gpus)})
            self.workers = WorkerSet(specs, {**env, **sees})
            self.workers.warm()
            self.key = set_key(specs, mode.name, env)
            mark("head start forked")
        except Exception:  # noqa: BLE001 - the run forks its sets as before
            self.close()

    def hand_to(self, sets, worker_log: str, timeout: float, modes=()) -> bool:
        """Give the set to the run's sets (WorkerSets.adopt) once its contexts are made; False (and
        the set ended) where there is none, the run's `modes` do not hold its mode (no GPU for CUDA,
        say: no process of it may wait idle), the probe numbered another GPU 0 (`sets.uuids`: the run's
        GPUs by number), or a worker did not warm within `timeout` seconds."""
        if self.workers is None or self.adopted:
            return False
        other_gpu_0 = bool(self.uuid) and getattr(sets, "uuids", {}).get(0) != self.uuid
        if not any(mode is self.mode for mode in modes) or other_gpu_0 or not self.workers.warmed(timeout):
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
