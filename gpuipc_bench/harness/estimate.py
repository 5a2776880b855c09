"""What a run will take, from its plan, said before it starts (and kept in the header as
`estimate.seconds` beside the measured `seconds.wall`): the command's start and end, one start per
process set, and each scenario run's fixed cost plus a cost per size it sweeps, scaled by the
samples a group takes. The costs are seconds measured on an H100 host (traced default and --quick
runs of this version, `GPUIPC_BENCH_TRACE`); a host of another kind differs (hosts of one model by up
to 25%)."""

from __future__ import annotations

from gpuipc_bench.engine.scenario import shares_processes

START_S, END_S = 1.4, 2.8  # imports, probe and header; the answer analysed, written and printed, the exit
SET_START_S = 1.0  # a persistent process set: its workers' CUDA contexts
# scenario -> (fixed seconds per run: set-up rows, rings, a library or processes of its own; seconds per
# size swept at the default sample counts), fitted to three traced runs of this version on one H100
# (two default runs and a --quick run, results/h100-speed-*.csv) and a --pairs all run on four H200s
COSTS: dict[str, tuple[float, float]] = {
    "ipc": (0.18, 0.150), "vmm": (0.09, 0.185), "mempool": (0.09, 0.220), "hostpool": (0.22, 0.044),
    "staging": (0.79, 0.194), "mmap": (0.62, 0.396), "latency": (0.35, 0.070), "peer": (2.20, 0.088),
    "nccl": (1.76, 0.053), "torch": (0.79, 0.070), "nvshmem": (0.88, 0.088), "symm": (1.76, 0.088),
    "sharing": (1.85, 0.088), "host": (0.26, 0.070), "barrier": (0.18, 0.000),
}
DEFAULT_COST = (1.0, 0.3)
DEFAULT_MID_SAMPLES = 7.0  # a group's samples in a default run (6 to 9): the per-size costs are for it
# Two GPUs: no hand-over between two contexts on one GPU (a time-sliced one costs ~0.3 ms a sample); on two H200s
# over NV18 ipc's default sweep took 1.2 s against 3.0 s time-sliced on one H100
ACROSS_GPUS = 0.7


def estimate_seconds(runs, config, modes: list, stream_sizes=None) -> float:
    """Seconds the planned `runs` ((scenario, specs, mode) in run order) should take here.
    `stream_sizes(scenario, config, specs, modes, mode)`: the stream sizes a run measures where not
    every size (harness.plan.second_mode_stream_sizes), or None."""
    samples = (config.min_samples + config.max_samples) / 2 + config.warmup - 1
    scale = max(0.3, samples / DEFAULT_MID_SAMPLES)
    total = START_S + END_S
    sets: set = set()
    for scenario, specs, mode in runs:
        fixed, per_size = COSTS.get(scenario.name, DEFAULT_COST)
        if len({spec.device for spec in specs}) > 1:
            fixed, per_size = fixed * ACROSS_GPUS, per_size * ACROSS_GPUS
        if shares_processes(scenario):  # one set per ordered pair and mode (harness.pool.set_key)
            key = (tuple(str(spec.device) for spec in specs), getattr(mode, "name", None))
            if key not in sets:
                sets.add(key)
                total += SET_START_S
        sizes = scenario.sizes(config)
        swept = float(len(sizes))
        streams = stream_sizes(scenario, config, specs, modes, mode) if stream_sizes else None
        if streams is not None:  # hand-offs at every size, streams at these: about half the groups
            swept = (len(sizes) + len(streams)) / 2
        total += fixed + per_size * swept * scale
    return total


def estimate_text(seconds: float, pairs: int, classes=None) -> str:
    """The line said before a run over several GPU pairs starts."""
    about = f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
    how = ""
    if classes is not None and classes.headline:
        kinds = len(set(classes.classes.values()))
        how = (f": {len(classes.full)} swept whole (one per link class, {kinds} class{'es' if kinds > 1 else ''}), "
               f"{len(classes.headline)} at their headline figures, swept whole only where one falls outside "
               "its class; --full sweeps every pair")
    return f"this run: about {about} (estimated from its plan) over {pairs} ordered GPU pairs{how}"
