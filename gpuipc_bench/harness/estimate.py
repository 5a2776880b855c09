"""What a run will take, from its plan, said before it starts (and kept in the header as
`estimate.seconds` beside the measured `seconds.wall`): the command's start and end, each start of
processes the run makes, and each scenario run's fixed cost plus a cost per size it sweeps, scaled
by the samples a group takes.

Starts of processes are counted as the run makes them (`set_starts`, harness.pool.WorkerSets): a
persistent process set is forked on its first use and ended when a run of another sharing mode
forks one or a scenario with processes of its own runs, and forked again on its next use; every
such scenario starts its own. Each start costs more on a node of several GPUs: every worker's
CUDA initialisation opens every GPU it sees. Runs measured at once (harness.rounds) cost their
longest.

The costs are seconds measured on an H100 host (traced default and --quick runs,
`GPUIPC_BENCH_TRACE`) and checked against the four-H200 runs in results/ (tests/test_estimate.py);
a host of another kind differs (hosts of one model by up to 25%)."""

from __future__ import annotations

from gpuipc_bench.engine.scenario import shares_processes

# imports, probe and header; the answer analysed (once: harness.session._end), written and printed while the
# workers and the MPS daemon go down, the exit (one H200: 0.5-0.6 s from the last scenario to the exit, the fork
# server killed rather than left to finalize torch: results/h200-leave-trace.txt; 1.0-1.1 s before)
START_S, END_S = 1.4, 0.5
# a persistent process set forked: its workers' CUDA contexts, one GPU on the node (one H200: the MPS set's first
# scenario 0.6-0.7 s longer; the run's first set is forked while the probe starts CUDA: harness.head_start)
SET_START_S = 0.7
CPU_SET_START_S = 0.1  # a set of workers on CPUs alone (host, barrier): forked, no CUDA context
# a set forked late in a run, its libraries warm (the resampling pass's: 0.42-0.55 s on one H200, traced)
LATE_SET_START_S = 0.5
# Each further GPU a start of processes sees (a set forked, a scenario's own processes): on four H200s a set
# fork took ~1.7 s (plain run: 16 forks, the ipc to latency scenarios 1.6-1.8 s each above their sweeps) against
# 1.0 on one H100; on two H200s a CUDA context took 0.23-0.26 s with one GPU visible, 0.43-0.47 s with both.
NODE_GPU_START_S = 0.23
# A set sees its own GPUs alone (gpu.visible): one, or a pair's two, whatever the node's count. False: every
# GPU of the node, as the runs before gpu.visible were measured (the tests of those runs' wall times)
SEES_OWN_GPUS = True
# A start of processes whose workers sit on two GPUs, beyond a same-GPU start: each worker's context opens
# peer access and, at the run's first such start, the pair's lane counters are proven (known copies over NVLink
# and PCIe; later starts take those proofs: engine.lanes), fitted below (before the proofs were shared; on two
# H200s the plain run's estimate then lay 6.9% under its wall time: results/h200x2-peerset-plain.csv.gz)
PAIR_START_S = 1.5
# The resampling pass (harness.resample) without --budget: it starts runs while DEFAULT_RESAMPLE_S allows,
# and the last may end after it (one H200: 1.1-4.6 s, 2.6 on average, over nine default runs)
RESAMPLE_USE = 0.85
# scenario -> (fixed seconds per run: set-up rows, rings, a library or processes of its own; seconds per
# size swept at the default sample counts), fitted to three traced runs of this version on one H100
# (two default runs and a --quick run, results/h100-speed-*.csv); peer and nccl, which need two GPUs, to
# the four-H200 runs (results/h200x4-*.csv: 3.7-4.2 and 2.5-3.2 s a run)
COSTS: dict[str, tuple[float, float]] = {
    "ipc": (0.18, 0.150), "vmm": (0.09, 0.185), "mempool": (0.09, 0.220), "hostpool": (0.22, 0.044),
    "staging": (0.79, 0.194), "mmap": (0.62, 0.396), "latency": (0.35, 0.070), "peer": (2.60, 0.088),
    "nccl": (1.60, 0.053), "torch": (0.79, 0.070), "nvshmem": (0.88, 0.088), "symm": (1.76, 0.088),
    "sharing": (1.85, 0.088), "host": (0.26, 0.070), "barrier": (0.18, 0.000),
}
DEFAULT_COST = (1.0, 0.3)
# What a scenario run costs since its samples aim at 2.5 ms (engine.sampler.TARGET_SAMPLE_S, was 5) of at most
# 128 transfers (was 256), staging stopped timing mmap's registration and time-sliced ping-pongs take half
# the rounds, against the COSTS above (fitted before): one H200's default runs took 33.9-35.4 s and --quick
# 9.1-10.3 s (results/h200-short.txt), estimated 41.0 and 13.1 s with the COSTS alone. 1.0: the runs before
RUN_COST_SCALE = 0.75
# The host paths (HOST_STAGED) since a large transfer's warm-up over PCIe moves 1 MiB and their regions hold the
# ring and a scratch of the warm-ups (gpu.timing.host_warm_bytes, host_scratch_bytes), against the COSTS above:
# one H200's staging, mmap and hostpool took 6.6-7.0 s of a default run (10.5 estimated) and 2.8-3.2 s of --quick
# (5.1): results/h200-warm.txt, h200-region.txt. 1.0: the runs before
HOST_STAGED_SCALE = 0.6
DEFAULT_MID_SAMPLES = 7.0  # a group's samples in a default run (6 to 9): the per-size costs are for it
# Two GPUs: no hand-over between two contexts on one GPU (a time-sliced one costs ~0.3 ms a sample); on two H200s
# over NV18 ipc's default sweep took 1.2 s against 3.0 s time-sliced on one H100. The sweep only: a run's
# fixed cost (set-up rows, a library's start, its processes) is no smaller across GPUs (four H200s: nccl 2.5 s,
# torch 2.5 s, nvshmem 3.1 s a pair)
ACROSS_GPUS = 0.7
ACROSS_GPUS_COSTS = ("peer", "nccl")  # fitted across GPUs already: their sweep is not scaled again
# every byte through host memory: no hand-over saved across GPUs (two H200s: mmap 4.3 s across the pair
# against 3.9 on one GPU, staging 3.0 against 2.4)
HOST_STAGED = ("staging", "mmap", "hostpool")
HOST_SHARED_FROM = 4 << 20  # engine.pair.HOST_CEILINGS_SHARED_FROM: a further mode's host paths stop below it


def set_key(specs, mode) -> tuple:
    """The process set a run takes (harness.pool.set_key: one per ordered pair or GPU, and mode)."""
    return tuple(str(spec.device) for spec in specs), getattr(mode, "name", None)


def set_starts(runs) -> list[bool]:
    """For each run ((scenario, specs, mode), in run order): whether processes start for it. A
    persistent set forks on its first use; a run of another mode ends the sets of this one
    (WorkerSets.end_mode_other_than), a scenario with processes of its own ends every set (and
    starts its own), so the next use forks again."""
    alive: set = set()
    starts = []
    for scenario, specs, mode in runs:
        if not shares_processes(scenario):
            alive.clear()
            starts.append(True)
            continue
        key = set_key(specs, mode)
        alive = {k for k in alive if k[1] == key[1]}
        starts.append(key not in alive)
        alive.add(key)
    return starts


def fixed_seconds(scenario) -> float:
    """A scenario run's fixed cost (set-up rows, rings, a library or processes of its own)."""
    return COSTS.get(cost_key(scenario), DEFAULT_COST)[0] * RUN_COST_SCALE


def run_seconds(scenario, specs, mode, config, modes: list, stream_sizes=None) -> float:
    """Seconds one scenario run takes in its processes, their start left out (start_seconds)."""
    key = cost_key(scenario)
    per_size = COSTS.get(key, DEFAULT_COST)[1]
    if len({spec.device for spec in specs}) > 1 and key not in ACROSS_GPUS_COSTS + HOST_STAGED:
        per_size *= ACROSS_GPUS
    scale = sample_scale(config)
    sizes = scenario.sizes(config)
    swept = float(len(sizes))
    streams = stream_sizes(scenario, config, specs, modes, mode) if stream_sizes else None
    if streams is not None and getattr(scenario, "through_host", False):  # every group at these sizes alone
        swept = float(len([n for n in sizes if n < HOST_SHARED_FROM or n == max(sizes)]))
    elif streams is not None:  # hand-offs at every size, streams at these: about half the groups
        swept = (len(sizes) + len(streams)) / 2
    seconds = fixed_seconds(scenario) + per_size * swept * scale * RUN_COST_SCALE
    return seconds * HOST_STAGED_SCALE if key in HOST_STAGED else seconds


def cost_key(scenario) -> str:
    """The COSTS entry of a scenario run: its name, or what a reduced form says it costs as (the
    health form of peer: ipc's, scenarios/peer.py)."""
    return getattr(scenario, "cost_key", scenario.name)


def start_seconds(scenario, gpus: int, specs=None, pair_start_s: float = PAIR_START_S) -> float:
    """Seconds a start of processes costs on a node of `gpus` GPUs, beyond the scenario's fixed cost
    (a persistent set's fork; a scenario with processes of its own has their start in its COSTS), and
    `pair_start_s` more where its workers (`specs`) sit on two GPUs."""
    if specs is not None and all(spec.device is None for spec in specs):
        return CPU_SET_START_S if shares_processes(scenario) else 0.0  # no CUDA context: a fork
    own = len({spec.device for spec in specs}) if specs is not None else gpus  # the GPUs its workers sit on
    seen = min(gpus, own) if SEES_OWN_GPUS else gpus
    node = NODE_GPU_START_S * max(0, seen - 1)
    pair = pair_start_s if own > 1 and specs is not None else 0.0
    return node + pair + (SET_START_S if shares_processes(scenario) else 0.0)


def resample_seconds(first_pass: float, budget: float | None, config=None) -> float:
    """What the resampling pass should add to a first pass of `first_pass` seconds: its default
    allowance as runs use it (scaled, as the sweeps are, by the samples a group takes: a --quick
    run's three sizes and samples leave little open), or what --budget leaves."""
    from gpuipc_bench.defaults import resample_allowance

    if budget is not None:
        return RESAMPLE_USE * max(0.0, budget - first_pass)
    allowance = resample_allowance(getattr(config, "preset", ""))
    return RESAMPLE_USE * allowance * (min(1.0, sample_scale(config)) if config is not None else 1.0)


def sample_scale(config) -> float:
    """A run's samples a group against a default run's (the per-size costs are for the latter)."""
    samples = (config.min_samples + config.max_samples) / 2 + config.warmup - 1
    return max(0.3, samples / DEFAULT_MID_SAMPLES)


def estimate_seconds(runs, config, modes: list, stream_sizes=None, gpus: int = 1,
                     pair_start_s: float = PAIR_START_S) -> float:
    """Seconds the planned `runs` ((scenario, specs, mode) in run order) should take here, on a node
    of `gpus` GPUs. `stream_sizes(scenario, config, specs, modes, mode)`: the stream sizes a run
    measures where not every size (harness.plan.second_mode_stream_sizes), or None."""
    total = START_S + END_S
    for (scenario, specs, mode), starts in zip(runs, set_starts(runs)):
        total += run_seconds(scenario, specs, mode, config, modes, stream_sizes)
        if starts:
            total += start_seconds(scenario, gpus, specs, pair_start_s)
    return total


def estimate_text(seconds: float, pairs: int, classes=None, rounds=None) -> str:
    """The line said before a run over several GPU pairs starts."""
    about = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    how = ""
    if classes is not None and classes.headline:
        kinds = len(set(classes.classes.values()))
        how = (f": {len(classes.full)} swept whole (one per link class, {kinds} class{'es' if kinds > 1 else ''}), "
               f"{len(classes.headline)} at their headline figures, swept whole only where one falls outside "
               "its class; --full sweeps every pair")
    if rounds is not None and rounds.rounds:
        how += f"; the headline pairs in {len(rounds.rounds)} rounds of disjoint pairs at once"
    return f"this run: about {about} (estimated from its plan) over {pairs} ordered GPU pairs{how}"
