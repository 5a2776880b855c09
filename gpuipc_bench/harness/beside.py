"""The two sharing modes side by side (issue 34): on a node of several GPUs, a plain run measures
its same-GPU paths time-sliced on one GPU of its pair and under MPS on the other, at once, where
the pair's GPUs are one model. The two GPUs share no memory, copy engine or link while each
measures its own device memory; what they do share is proved, not assumed.

- Proof: the first mode's ipc and latency runs are measured on the first GPU alone, then the second
  mode's on the second GPU alone (both kept), then the headline copies of both (harness.classes:
  the copy engine at the largest size, the 4 KiB hand-off, the device ping-pong) at once, rows to
  the proof only (harness.rounds.Proof, the disjoint pairs' rule). The rest of the two modes runs
  at once only where no figure ran slower together beyond its delta; else one mode after the other.
- Shared parts never run at once: two paths through pinned host memory (staging, mmap, hostpool:
  the host's memory and the PCIe switch two GPUs of a board can share) take turns, and so do two
  runs of more than two processes (the CPUs).
- Not for a run given --sharing, --devices, --pairs, MIG, MPI or --replicas: those keep every mode
  on one GPU, one after the other.

The MPS daemon sees the second GPU alone (its CUDA_VISIBLE_DEVICES), so that nothing of it sits on
the first GPU while that one measures. The header says where each mode ran (`sharing.gpu.<mode>`,
which the analysis reads: analysis.model.arrange compares the second mode with the first across
the two GPUs) and what the proof found (`beside.proof`, `beside.together`)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
from typing import Any, Callable

from gpuipc_bench.engine.scenario import shares_processes
from gpuipc_bench.harness.classes import HEADLINE_SCENARIOS, headline

GPU_KEY = "sharing.gpu."  # + mode name: the GPU its same-GPU runs measured on


@dataclasses.dataclass
class Beside:
    """The two GPUs of the modes side by side, the modes, and what the proof found."""
    first_gpu: int
    second_gpu: int
    first: Any  # the run's first mode (its same-GPU runs stay on first_gpu)
    second: Any  # the second mode (its same-GPU runs go to second_gpu)
    together: bool | None = None  # the proof's outcome (None: not yet measured)
    proof: str = ""

    def metadata(self) -> dict[str, str]:
        meta = {GPU_KEY + self.first.name: str(self.first_gpu), GPU_KEY + self.second.name: str(self.second_gpu)}
        if self.proof:
            meta["beside.proof"] = self.proof
        if self.together is not None:
            meta["beside.together"] = ("yes: the two modes at once" if self.together
                                       else "no: one mode after the other")
        return meta


def plan_beside(pairs: str | None, modes: list, machine, config, options) -> Beside | None:
    """The modes side by side where a plain run on a node of several GPUs allows it: two modes (the
    default's), persistent process sets (--launcher fork), one replica, no MIG, no MPI, no
    --sharing or --devices given, and a pair of GPUs of one model (harness.plan.default_pair; the
    same-GPU runs stay on GPU 0, the second mode goes to the pair's other GPU)."""
    from gpuipc_bench.harness.plan import default_pair
    from gpuipc_bench.modes.daemon import serves_this_process

    if pairs != "default" or len(modes) != 2 or options.sharing or options.devices or options.job is not None:
        return None
    if config.launcher != "fork" or config.replicas > 1 or machine.gpu_count < 2:
        return None
    if any(getattr(gpu, "mig_mode", "") == "enabled" for gpu in machine.gpus):
        return None
    a, b = default_pair(machine)
    other = b if a == 0 else a
    if other == 0 or machine.gpus[0].name != machine.gpus[other].name:
        return None
    first, second = modes
    if getattr(second, "name", "") == "mps" and serves_this_process():
        return None  # a daemon someone else runs, seeing every GPU: not beside a measured GPU
    second.gpu, second.gpu_cpus = other, tuple(machine.gpus[other].cpus)
    second.visible = machine.gpus[other].uuid if machine.gpus[other].uuid.startswith("GPU-") else ""
    return Beside(0, other, first, second)


def on_mode_gpu(specs, mode) -> list:
    """`specs` as `mode` runs them: a same-GPU run moved to the mode's own GPU where the modes run
    side by side (Mode.gpu), else as planned."""
    gpu = getattr(mode, "gpu", None)
    devices = {spec.device for spec in specs}
    if gpu is None or len(devices) != 1 or None in devices or any(getattr(s, "mig", "") for s in specs):
        return list(specs)
    return [dataclasses.replace(spec, device=gpu, cpus=getattr(mode, "gpu_cpus", spec.cpus)) for spec in specs]


@dataclasses.dataclass
class Lanes:
    """The two modes' same-GPU runs in the session's queue: each lane's proof runs, then the rest."""
    first_proof: list
    second_proof: list
    first_rest: list
    second_rest: list

    @property
    def runs(self) -> list:
        return self.first_proof + self.second_proof + self.first_rest + self.second_rest


def lanes_of(queue: list, beside: Beside | None) -> list:
    """The session's queue with the two modes' same-GPU runs taken out and put, as one Lanes item,
    where the first of them was. Each lane: its proof runs (ipc, latency) first; the second lane
    then its scenarios with processes of their own (so that its paths through host memory come
    when the first lane's device paths run), then its process set's paths."""
    if beside is None:
        return queue

    def lane(run, mode) -> bool:
        return not isinstance(run, Lanes) and isinstance(run, tuple) and run[2] is mode and \
            len({spec.device for spec in run[1]}) == 1

    first = [run for run in queue if lane(run, beside.first)]
    second = [run for run in queue if lane(run, beside.second)]
    if not first or not second:
        return queue
    at = next(i for i, run in enumerate(queue) if lane(run, beside.first) or lane(run, beside.second))

    def proof(runs) -> list:
        return [run for run in runs if run[0].name in HEADLINE_SCENARIOS and shares_processes(run[0])]

    rest_first = [run for run in first if run not in proof(first)]
    rest_second = [run for run in second if run not in proof(second)]
    rest_second = [r for r in rest_second if not shares_processes(r[0])] + \
        [r for r in rest_second if shares_processes(r[0])]
    item = Lanes(proof(first), proof(second), rest_first, rest_second)
    rest = [run for run in queue if not (lane(run, beside.first) or lane(run, beside.second))]
    return rest[:at] + [item] + rest[at:]


class Shared:
    """What two runs at once must not both hold: the host's memory and PCIe (a path through pinned
    host memory) and the CPUs (a run of more than two processes). Taken in that order."""

    def __init__(self) -> None:
        self.host = threading.Lock()
        self.cpus = threading.Lock()

    @contextlib.contextmanager
    def held(self, scenario, specs, at_once: bool):
        with contextlib.ExitStack() as stack:
            if at_once and getattr(scenario, "through_host", False):
                stack.enter_context(self.host)
            if at_once and len(specs) > 2:
                stack.enter_context(self.cpus)
            yield


def run_lanes(item: Lanes, beside: Beside, proof, one: Callable[..., Any], sets, stop: Callable[[], None],
              config) -> list:
    """Run the Lanes item: `one(run, keep, tee, at_once)` runs a scenario run (keep: its rows into the
    results; tee: also fed them; at_once: the other lane may run meanwhile), `sets` the run's
    WorkerSets (WorkerSets.scoped: a lane's set changes touch its own GPU's sets alone), `stop` ends
    every process (a fault in one lane's thread). The outcomes, in order."""
    from gpuipc_bench.harness.rounds import at_once
    from gpuipc_bench.harness.supervision import WorkerLost

    def lost(outcomes) -> bool:
        return any(isinstance(getattr(o, "error", None), WorkerLost) for o in outcomes)

    def lane(runs: list, gpu: int, keep: bool = True, tee=None, together: bool = False) -> list:
        out: list = []
        with sets.scoped({gpu}):
            for run in runs:
                out.append(one(run, keep, tee, together))
                if lost(out[-1:]):
                    break
        return out

    outcomes: list = []
    for runs, gpu in ((item.first_proof, beside.first_gpu), (item.second_proof, beside.second_gpu)):
        outcomes += lane(runs, gpu, tee=proof.feeder("alone"))
        if lost(outcomes):
            return outcomes
    headlines = [[(headline(s, config), w, m) for s, w, m in runs] for runs in (item.first_proof, item.second_proof)]
    if all(headlines):
        both = at_once([functools.partial(lane, runs, gpu, False, proof.feeder("together"), True)
                        for runs, gpu in zip(headlines, (beside.first_gpu, beside.second_gpu))], stop)
        if lost([o for each in both for o in each]):
            return outcomes + [o for each in both for o in each]
        beside.together, beside.proof = proof.decide()
    else:
        beside.together, beside.proof = False, "no ipc or latency run in both modes to prove it"
    if beside.together:
        both = at_once([functools.partial(lane, item.first_rest, beside.first_gpu, True, None, True),
                        functools.partial(lane, item.second_rest, beside.second_gpu, True, None, True)], stop)
        return outcomes + [o for each in both for o in each]
    outcomes += lane(item.first_rest, beside.first_gpu)
    if not lost(outcomes):
        outcomes += lane(item.second_rest, beside.second_gpu)
    return outcomes



def estimate_with_lanes(runs, config, modes: list, stream_sizes, gpus: int, rounds, beside: Beside | None) -> float:
    """The plan's estimate (harness.rounds.estimate_with_rounds) with the modes side by side: each
    lane's proof runs one after the other, their headline copies at once (the longer), then the
    longer of the two lanes' rest. Assumes the proof holds; the host paths' turns are not counted."""
    from gpuipc_bench.harness.estimate import END_S, START_S, estimate_seconds, run_seconds
    from gpuipc_bench.harness.rounds import estimate_with_rounds

    queue = lanes_of(list(runs), beside)
    item = next((q for q in queue if isinstance(q, Lanes)), None)
    if item is None:
        return estimate_with_rounds(runs, config, modes, stream_sizes, gpus, rounds)
    total = estimate_with_rounds([q for q in queue if not isinstance(q, Lanes)], config, modes, stream_sizes, gpus,
                                 rounds)

    def cost(lane: list) -> float:  # a lane's runs in their processes, as they start (the command's own left out)
        return estimate_seconds(lane, config, modes, stream_sizes, gpus) - START_S - END_S if lane else 0.0

    def headlines(lane: list) -> float:
        return sum(run_seconds(headline(s, config), w, m, config, modes, stream_sizes) for s, w, m in lane)

    proof = cost(item.first_proof) + cost(item.second_proof)
    rest = max(cost(item.first_proof + item.first_rest) - cost(item.first_proof),
               cost(item.second_proof + item.second_rest) - cost(item.second_proof))
    return total + proof + max(headlines(item.first_proof), headlines(item.second_proof)) + rest
