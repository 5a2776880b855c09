"""Planning a run: the scenario names resolved, each scenario that can run here with its
workers (or waived with a reason), and the GPU pairs expanded. No CUDA: the machine's facts
come from machine.probe()."""

from __future__ import annotations

import dataclasses
import difflib
import random
from typing import TYPE_CHECKING, Any

from gpuipc_bench.errors import UsageError
from gpuipc_bench.engine.scenario import shares_processes

if TYPE_CHECKING:
    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.machine.probe import Machine
    from gpuipc_bench.engine.scenario import Scenario, WorkerSpec


def registry():
    """The scenarios, in their registry order (imported on first use)."""
    from gpuipc_bench.scenarios import SCENARIOS

    return SCENARIOS


def resolve_names(requested, registry, preset: str = "") -> list[str]:
    for name in requested:
        if name not in registry:
            close = difflib.get_close_matches(name.lower(), registry, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else f"; choose from {', '.join(registry)}"
            raise UsageError(f"--scenario {name}: no such scenario{hint}")
    # With no --scenario: every scenario of the default run (a study such as 'handles' is only run by
    # name), less those --quick leaves out (in_quick_run).
    return list(dict.fromkeys(requested)) or [name for name, s in registry.items() if s.in_default_run
                                              and (preset != "quick" or s.in_quick_run)]


def plan_scenarios(config, registry, machine, explicit, job=None):
    """The scenarios to run with their workers, and the ones waived with a reason."""
    plan, waived = [], []
    for name in config.scenarios:
        scenario = registry[name]
        reason = scenario.waive_reason(machine)
        if reason is None and job is not None:
            reason = mpi_reason(scenario, job)
        if reason is not None:
            if explicit:
                raise UsageError(f"--scenario {name}: cannot run here: {reason}")
            waived.append((name, reason))
            continue
        if config.workers is not None and not scenario.min_workers <= config.workers <= scenario.max_workers:
            given = f"the MPI job has {config.workers} ranks" if job else f"--workers is {config.workers}"
            if explicit or len(config.scenarios) == 1:
                raise UsageError(f"{'mpirun -np' if job else '--workers'} {config.workers}: scenario {name} takes "
                                 f"{scenario.min_workers} to {scenario.max_workers} workers")
            waived.append((name, f"takes {scenario.min_workers} to {scenario.max_workers} workers, {given}"))
            continue
        plan.append((scenario, scenario.workers(config, machine)))
    if not plan:
        raise UsageError("nothing to run: every scenario was skipped (see above)")
    return plan, waived


def default_pair(machine) -> tuple[int, int]:
    """The GPU pair a plain run measures across: the first pair linked by NVLink, else GPUs 0 and 1."""
    count = machine.gpu_count
    for a in range(count):
        for b in range(a + 1, count):
            if str(machine.links.get((a, b), "")).startswith("NV"):
                return a, b
    return 0, 1


def plan_pairs(plan, config, machine, pairs, full: bool = False):
    """Each pairable scenario of the plan (its workers: a producer GPU and a consumer GPU) once
    per ordered pair of GPUs: (runs, PairClasses or None, {pair: the runs that sweep it whole}).
    `pairs`: the pairs given (each swept whole), 'default' (a plain run on a node of several GPUs:
    the same-GPU runs stay and each pairable scenario runs once more across default_pair(), those
    needing two GPUs, nccl and peer, there only; the runs across the pair come after the same-GPU ones,
    which they would otherwise alternate with: each change between a same-GPU mode's process set and
    the pair's ended one set and forked the other, 16 forks where 4 do, ~1.7 s each on four H200s)
    or 'all': every ordered pair, one pair
    per link class swept whole and the others at their headline figures (harness.classes), unless
    `full`. The third item holds each headline pair's whole sweep, for the pairs whose headline
    figures fall outside their class."""
    from gpuipc_bench.harness.classes import group_pairs, headline, sized

    same_gpu_too = pairs == "default"
    grouped = pairs == "all"
    if pairs == "default":
        pairs = (default_pair(machine),)
    elif pairs == "all":
        if machine.gpu_count < 2:
            raise UsageError(f"--pairs all: this machine has {machine.gpu_count} GPU(s), no pair of two")
        pairs = tuple((a, b) for a in range(machine.gpu_count) for b in range(machine.gpu_count) if a != b)
    for a, b in pairs:
        if max(a, b) >= machine.gpu_count:
            raise UsageError(f"--pairs {a}-{b}: GPU {max(a, b)} does not exist (this machine has "
                             f"{machine.gpu_count})")
    classes = group_pairs(pairs, machine, full=full) if grouped else None
    expanded: list = []
    across: list = []  # a plain run's runs across its pair: after the same-GPU ones (one process set, not one each)
    rest: dict[tuple[int, int], list] = {}  # a headline pair's runs beyond its headline ones
    for scenario, specs in plan:
        if not scenario.pairable:
            expanded.append((scenario, specs))
            continue
        if same_gpu_too and scenario.gpus_needed < 2:
            expanded.append((scenario, specs))
        for pair in pairs:
            workers = scenario.workers(dataclasses.replace(config, devices=pair), machine)
            if same_gpu_too:
                across.append((scenario, workers))
                continue
            if classes is None or pair in classes.full:
                expanded.append((scenario, workers))
                continue
            reduced = headline(scenario, config)
            if reduced is not None:
                expanded.append((reduced, workers))
                measured = set(reduced.sizes(config))
                remaining = tuple(n for n in scenario.sizes(config) if n not in measured)
                if not remaining:
                    continue
                rest.setdefault(pair, []).append((sized(scenario, remaining), workers))
            else:
                rest.setdefault(pair, []).append((scenario, workers))
    return expanded + across, classes, rest


def plan_modes(sharing: str | None, machine, job=None, time_sliced=None) -> tuple[list, str | None]:
    """The sharing modes of the run (gpuipc_bench.modes), and a note on a mode left out of the
    default. --sharing given: each named mode must be able to run here (else UsageError).
    `time_sliced`: the time-sliced mode to use, started before the plan (harness.head_start)."""
    from gpuipc_bench import modes

    names = modes.parse(sharing) if sharing else tuple(modes.MODES)
    if job is not None:
        if sharing:
            raise UsageError("--sharing: under MPI the ranks share their GPU as the job started them "
                             "(start the job as clients of an MPS daemon for mps)")
        return [], None
    if not machine.gpu_count:
        if sharing:
            raise UsageError(f"--sharing {sharing}: there is no GPU to share here")
        return [], None
    chosen, note = [], None
    for mode in modes.make(names):
        if time_sliced is not None and type(mode) is type(time_sliced):
            mode = time_sliced  # the one whose pipe folder the head start's workers were given
        reason = mode.unavailable()
        if reason is None:
            chosen.append(mode)
        elif sharing:
            raise UsageError(f"--sharing {mode.name}: cannot run here: {reason}")
        else:
            note = f"the {mode.name} mode for same-GPU pairs: {reason}"
    return chosen, note


def modes_for(scenario, specs, modes: list) -> list:
    """The modes a planned scenario runs in: each of the run's that measures it, where it
    declares sharing_modes and its workers share one GPU (none of them: [], it does not run);
    else once, as it is ([None]). A pair on MIG instances runs once, outside the mode axis: in
    the time-sliced mode where the run has it (its two processes take turns inside an instance;
    MPS is not applied to MIG pairs), else as it is."""
    if any(getattr(spec, "mig", "") for spec in specs):
        return [m for m in modes if m.name == "time-sliced"][:1] or [None]
    devices = {spec.device for spec in specs}
    if modes and scenario.sharing_modes and len(specs) > 1 and len(devices) == 1 and None not in devices:
        return [m for m in modes if not m.scenarios or scenario.name in m.scenarios]
    return [None]


def plan_runs(plan, modes: list) -> list:
    """(scenario, specs, mode) in the order the run takes them: mode by mode, so that no other
    work shares the GPU with a mode's daemon: every scenario in the first mode (and the ones
    that run once, as they are), then the same-GPU pairs again in each further mode."""
    runs = [(s, w, m) for s, w in plan for m in modes_for(s, w, modes)[:1]]
    for mode in modes:
        runs += [(s, w, mode) for s, w in plan if mode in modes_for(s, w, modes)[1:]]
    return runs


def shuffle_paths(runs: list, seed: int | None) -> list:
    """The paths that share one persistent process set (the same mode and workers, back to back in
    `runs`) in an order shuffled from the run's --order-seed, so that a drift over the run does not
    fall on the same path in every run; the seed is in the CSV header. A path that says
    `last_in_set` stays after the others (what it leaves in a process breaks another path), one that
    says `first_in_set` before them (it needs processes no path ran in). Scenarios with processes of
    their own keep their place (moving them would end and restart the sets)."""
    out: list = []
    block: list = []

    def flush() -> None:
        if not block:
            return
        first = getattr(block[0][2], "name", "")
        if seed is None:  # the declared order, but `first_in_set` first (it needs processes no path ran in)
            out.extend(sorted(block, key=lambda run: not getattr(run[0], "first_in_set", False)))
        else:
            random.Random(f"{seed}:{first}:{len(out)}").shuffle(block)
            # stable: `first_in_set` first, the paths through pinned host memory after the device paths (what
            # the sampler knows of the device paths' figures decides the host paths' far-behind groups early),
            # `last_in_set` last
            out.extend(sorted(block, key=lambda run: (not getattr(run[0], "first_in_set", False),
                                                      bool(getattr(run[0], "last_in_set", False)),
                                                      bool(getattr(run[0], "through_host", False)))))
        block.clear()

    for run in runs:
        shared = shares_processes(run[0])
        if not (shared and (not block or (run[1], run[2]) == (block[0][1], block[0][2]))):
            flush()
        (block if shared else out).append(run)
    flush()
    return out


CALL_BOUND_BYTES = 1 << 20  # up to here a stream figure is bound by enqueueing (the second mode's stream sweep)


def second_mode_stream_sizes(scenario, config, specs, modes: list, mode) -> tuple[int, ...] | None:
    """The stream sizes a scenario measures in `mode`: every size (None) in its first mode and
    wherever the sizes or a preset's were chosen; in a further mode of a default sweep, the
    call-bound sizes (up to CALL_BOUND_BYTES, where a mode's enqueue and hand-over costs can
    change the choice) and the largest (the bandwidth-bound figure, confirmed). Its hand-offs,
    which pay the mode's hand-over at every size, are swept whole."""
    if mode is None or config.sizes is not None or config.preset or mode in modes_for(scenario, specs, modes)[:1]:
        return None
    sizes = scenario.sizes(config)
    return tuple(n for n in sizes if n <= CALL_BOUND_BYTES or n == max(sizes))


def second_mode_sizes(scenario, config, specs, modes: list, mode) -> tuple[int, ...] | None:
    """The sizes a path whose every byte crosses the host link (`through_host`: staging, mmap,
    hostpool) measures in a further mode of a default sweep, or None (every size): below
    HOST_CEILINGS_SHARED_FROM, where a mode's hand-over and enqueue costs can change its figures
    and the answer, and the largest, confirmed. From there its figures are the bus's, not the mode's
    (its ceilings are the first mode's from there: engine.pair), 10-50x a device path's hand-off."""
    from gpuipc_bench.engine.pair import HOST_CEILINGS_SHARED_FROM

    if not getattr(scenario, "through_host", False) or second_mode_stream_sizes(scenario, config, specs, modes,
                                                                                  mode) is None:
        return None
    sizes = scenario.sizes(config)
    return tuple(n for n in sizes if n < HOST_CEILINGS_SHARED_FROM or n == max(sizes))


def mpi_reason(scenario, job) -> str | None:
    """Why a scenario cannot run with MPI ranks as its workers, or None."""
    if not job.one_node():
        hosts = ", ".join(dict.fromkeys(job.hosts))
        return (f"its workers meet in a shared-memory segment, and the MPI job spans hosts {hosts}: "
                "no path across nodes is measured yet")
    return scenario.mpi_waiver or None


def check_memory(plan: "list[tuple[Scenario, list[WorkerSpec]]]", config: "RunConfig", machine: "Machine",
                 host_available: int | None = None) -> None:
    """Refuse, before any work, a largest size whose buffers cannot fit in host memory
    (what is available now) or on a GPU (its whole memory), per Scenario.memory_needed."""
    from gpuipc_bench import config as run_config
    from gpuipc_bench.sizes import format_size

    if host_available is None:
        host_available = run_config.available_host_memory()
    gpu_memory = {gpu.index: gpu.memory_bytes for gpu in machine.gpus}
    for scenario, specs in plan:
        host_bytes, gpu_bytes = scenario.memory_needed(config, specs)
        largest = max(scenario.sizes(config))
        if config.sizes is not None:
            what = f"--sizes: the largest size, {format_size(largest)},"
        else:
            what = f"--sizes (not given): the default sweep of {scenario.name} reaches {format_size(largest)}, which"
        if host_available and host_bytes > host_available:
            raise UsageError(
                f"{what} needs about {format_size(host_bytes)} of host memory in scenario {scenario.name}, "
                f"and {format_size(host_available)} is available; give a smaller --sizes")
        devices = sorted({spec.device for spec in specs if spec.device is not None})
        for device in devices if gpu_bytes else ():
            total = gpu_memory.get(device)
            if total and gpu_bytes > total:
                raise UsageError(
                    f"{what} needs about {format_size(gpu_bytes)} on GPU {device} in scenario "
                    f"{scenario.name}, and GPU {device} has {format_size(total)}; give a smaller --sizes")


# --------------------------------------------------------------------------- a run's plan, from its options


@dataclasses.dataclass
class PlanOptions:
    """What the command line asked for, checked by click. `devices`: GPU indices (UUIDs given to
    --devices are the caller's CUDA_VISIBLE_DEVICES, `visible`, and their indices here)."""
    scenario_names: tuple[str, ...] = ()
    sizes: tuple[int, ...] | None = None
    preset: str = ""
    iterations: int | None = None
    min_samples: int | None = None
    max_samples: int | None = None
    warmup: int | None = None
    devices: tuple | None = None
    visible: str | None = None
    workers: int | None = None
    timeout: float | None = None
    chunk: tuple[int, ...] | None = None
    pairs: str | None = None
    sharing: str | None = None
    fresh: bool = False  # --launcher fork-fresh
    full: bool = False  # --full: with --pairs all, every pair swept whole
    order: tuple[str, int | None] = ("declared", None)  # --sample-order, --order-seed
    budget: float | None = None  # --budget: seconds the run may take (None: the first pass and a short resampling)
    replicas: int = 1  # --replicas: process sets each run of the first pass is measured on
    job: Any = None  # the MPI job whose ranks are the workers, or None


@dataclasses.dataclass
class Plan:
    """What a run will do: its configuration, the machine, each scenario with its workers, the
    sharing modes, and what the caller should say before it starts: notes as (kind, text), kind
    'skipped', 'note', 'estimate' or 'cleanup' (a daemon of an earlier run stopped: said even when
    quiet)."""
    config: "RunConfig"
    machine: "Machine"
    runs: list  # (scenario, specs)
    modes: list
    mig_notes: dict[str, str]
    notes: list[tuple[str, str]]
    estimate: float = 0.0  # seconds the run should take (harness.estimate)
    pair_classes: Any = None  # --pairs all: harness.classes.PairClasses
    resweep_runs: dict = dataclasses.field(default_factory=dict)  # headline pair -> its whole sweep's other runs
    rounds: Any = None  # --pairs all on an all-NVLink node: harness.rounds.Rounds (disjoint pairs at once)
    budget: float | None = None  # --budget (harness.resample)
    # each run measured on its own (check's preset): in fresh processes, without the figures of the runs
    # before it (known_best) and without a resweep; a lost worker or a run that raised fails that run alone
    independent: bool = False


def run_config(options: PlanOptions) -> "RunConfig":
    """The run's configuration from the options alone: bad input refused (UsageError), no work done."""
    from gpuipc_bench.config import RunConfig

    if options.pairs is not None and options.devices:
        raise UsageError("--pairs and --devices both choose the GPUs: give one of them")
    if options.replicas > 1 and options.job is not None:
        raise UsageError(f"--replicas {options.replicas}: under MPI the job's ranks are the only processes; "
                         "run it without --replicas (or start the job again for another replica)")
    if options.replicas > 1 and options.budget is not None:
        raise UsageError(f"--replicas {options.replicas} and --budget: a run on several process sets measures "
                         "every run on each of them, with no resampling pass for a budget to limit; give one of them")
    if options.full and options.pairs != "all":
        raise UsageError("--full: sweeps every GPU pair whole with --pairs all (without it one pair per link "
                         "class is); give --pairs all too")
    names = resolve_names(options.scenario_names, registry(), options.preset)
    workers, job = options.workers, options.job
    if job is not None:
        if workers is not None and workers != job.size:
            raise UsageError(f"--workers {workers}: under MPI each rank is one worker, and the job has "
                             f"{job.size} ranks")
        workers = job.size
    given: dict[str, Any] = sample_counts(options.preset, options.min_samples, options.max_samples, options.warmup)
    if options.timeout is not None:
        given["timeout"] = options.timeout
    if options.chunk:
        given["chunk_bytes"] = single_size(options.chunk, "--chunk")
    return RunConfig(
        scenarios=tuple(names), sizes=options.sizes, iterations=options.iterations, preset=options.preset,
        devices=options.devices, workers=workers,
        launcher="mpi" if job else "fork-fresh" if options.fresh else "fork", sample_order=options.order[0],
        order_seed=options.order[1], replicas=options.replicas, **given,
    )


def make_plan(options: PlanOptions, config: "RunConfig | None" = None, head_start=None) -> Plan:
    """Probe the machine and plan the run: scenarios, GPU pairs, MIG instances, memory, sharing
    modes. `config`: run_config(options), possibly adjusted by the caller (its worker log).
    `head_start` (harness.head_start.HeadStart): the first process set, forked while CUDA starts
    in the probe; its time-sliced mode is the plan's."""
    from gpuipc_bench.harness.estimate import estimate_text, resample_seconds
    from gpuipc_bench.harness.rounds import estimate_with_rounds, plan_rounds
    from gpuipc_bench.machine.probe import probe
    from gpuipc_bench.results.rows import pandas_module

    config = run_config(options) if config is None else config
    job, devices, visible = options.job, options.devices, options.visible
    notes: list[tuple[str, str]] = []
    machine = probe(meanwhile=pandas_module,  # pandas (~0.5 s: the results' frames) while CUDA starts there
                    early=head_start.begin if head_start is not None else None)
    if job is not None and devices is None:
        config = dataclasses.replace(config, devices=job.devices(machine.gpu_count))
    notes += [("cleanup", text) for text in stop_stale_daemons()]
    if visible and machine.gpu_count < len(devices or ()):
        raise UsageError(f"--devices {visible}: CUDA sees {machine.gpu_count} of these devices "
                         f"({machine.cuda_error or 'one MIG instance per process at most'}); "
                         "gpuipc-bench info lists the GPU and MIG UUIDs")
    if devices:
        machine.check_devices(devices)
    plan, waived = plan_scenarios(config, registry(), machine, explicit=bool(options.scenario_names), job=job)
    pairs = options.pairs
    if pairs is None and not devices and job is None and machine.gpu_count >= 2:
        pairs = "default"  # a plain run on a node of several GPUs answers across one pair too
    classes, rest = None, {}
    if pairs is not None:
        plan, classes, rest = plan_pairs(plan, config, machine, pairs, full=options.full)
    mig_notes: dict[str, str] = {}
    if job is None and not devices:  # each GPU with MIG on: pairs within an instance and across two
        from gpuipc_bench.machine.mig import plan_mig

        mig_plan, mig_notes = plan_mig(plan, config, machine)
        plan = plan + mig_plan
    check_memory(plan, config, machine)
    modes, mode_note = plan_modes(options.sharing, machine, job,
                                  time_sliced=head_start.mode if head_start is not None else None)
    config = dataclasses.replace(config, sharing=tuple(mode.name for mode in modes))
    if mode_note and any(s.sharing_modes for s, _ in plan):
        notes.append(("skipped", mode_note))
    unmeasured = sorted({s.name for s, w in plan if not modes_for(s, w, modes)})
    if unmeasured:  # e.g. --sharing mps:25 alone: only the SM-bound scenarios
        notes.append(("skipped", f"{', '.join(unmeasured)}: no mode of --sharing {','.join(config.sharing)} "
                                 "measures them"))
    notes += [("note", text) for text in mig_notes.values()]  # a GPU with MIG on and no pair across instances
    by_reason: dict[str, list[str]] = {}
    for name, reason in waived:
        by_reason.setdefault(reason, []).append(name)
    notes += [("skipped", f"{', '.join(names)}: {reason}") for reason, names in by_reason.items()]
    rounds = plan_rounds(classes, machine, config) if job is None else None
    first = estimate_with_rounds(plan_runs(plan, modes), config, modes, second_mode_stream_sizes,
                                 machine.gpu_count, rounds)
    check_budget(options.budget, first)
    # the resampling pass after it (an MPI job's ranks are its processes: none there; harness.session), or
    # with --replicas N the first pass N times over, on fresh process sets
    estimate = first * config.replicas if config.replicas > 1 else \
        first + (resample_seconds(first, options.budget, config) if job is None else 0.0)
    ordered = {(w[0].device, w[-1].device) for s, w in plan if s.pairable and w[0].device != w[-1].device}
    if len(ordered) > 1:  # a run over several pairs: how long it takes, before it starts
        notes.append(("estimate", estimate_text(estimate, len(ordered), classes, rounds)))
    return Plan(config, machine, plan, modes, mig_notes, notes, estimate, classes, rest, rounds, options.budget)


def check_budget(budget: float | None, estimate: float) -> None:
    """Refuse a --budget below the first pass's estimate: the first pass runs whole, and the
    resampling pass takes what is left."""
    if budget is not None and budget < estimate:
        raise UsageError(f"--budget {budget:g}: the first pass alone should take about {estimate:.0f} s here "
                         "(estimated from its plan); give at least that, or leave --budget out")


def stop_stale_daemons() -> list[str]:
    """Stop any private MPS daemon an earlier run left behind (its guard was killed too); what to say."""
    from gpuipc_bench.modes import daemon as mps

    return list(mps.stop_stale_daemons())


def sample_counts(preset, min_samples, max_samples, warmup) -> dict[str, Any]:
    """The sample counts: as given, else the preset's, else the defaults (gpuipc_bench.defaults)."""
    from gpuipc_bench import defaults

    low, high, warm = defaults.sample_counts(preset)
    return dict(min_samples=low if min_samples is None else min_samples,
                max_samples=high if max_samples is None else max_samples,
                warmup=warm if warmup is None else warmup)


def single_size(sizes: tuple[int, ...], option: str) -> int:
    if len(sizes) != 1:
        raise UsageError(f"{option} takes one size, not a list or range")
    return sizes[0]
