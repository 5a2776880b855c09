"""`run`: options -> RunConfig -> plan -> the scenarios run one after the other, their rows
appended to the results file as each size completes; progress on stderr, summary on stdout."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import click
from rich.markup import escape

from gpuipc_bench.cli.console import stderr_console
from gpuipc_bench.cli.params import Bounded, DevicesType, PairsType, SizesType
from gpuipc_bench.config import check_writable
from gpuipc_bench.engine.sampler import DRIFT, FAR_BEHIND, FAR_SAMPLES
from gpuipc_bench.errors import BenchError, UsageError
from gpuipc_bench.gpu.timing import HOST_WARM_BYTES, LARGE_TRANSFER_BYTES, WARMUP_OPS
from gpuipc_bench.hooks.profiling import mark
from gpuipc_bench.results.writing import claim_free_name, claim_name, default_results_path
from gpuipc_bench.robust import CONFIDENCE, PRECISION, WIDE_MIN_SAMPLES
from gpuipc_bench.defaults import (
    CHUNK_BYTES, DEFAULT_GPU_SIZES, DEFAULT_HOST_SIZES, DEFAULT_RESAMPLE_S, DEFAULT_SAMPLES, PRESETS, QUICK_GPU_SIZES,
    QUICK_HOST_SIZES,
    THOROUGH_GPU_SIZES, THOROUGH_HOST_SIZES, TIMEOUT_S,
)
from gpuipc_bench.sizes import describe_sizes, format_size


def _samples_text(preset: str) -> str:
    low, high, warm = PRESETS[preset]
    count = f"{low}" if low == high else f"{low} to {high}"
    return f"{count} samples per group after {warm} warm-up sample{'s' if warm != 1 else ''}"



@click.command()
@click.option("--scenario", "-s", "scenario_names", multiple=True, metavar="NAME",
              help="Scenario to run (repeatable). Default: every scenario that can run here.")
@click.option("--sizes", type=SizesType(), default=None,
              help="Message sizes: a range doubling from A to B (4KiB..1GiB), with a step "
                   "(4..1G:x4), or a list (4K,64K,1M). K/M/G are powers of 1024, kB/MB/GB of 1000. "
                   f"Default: {describe_sizes(DEFAULT_GPU_SIZES)} (host: {describe_sizes(DEFAULT_HOST_SIZES)}).")
@click.option("--quick", is_flag=True,
              help=f"A first look: {len(QUICK_GPU_SIZES)} sizes ({describe_sizes(QUICK_GPU_SIZES)}; host: "
                   f"{describe_sizes(QUICK_HOST_SIZES)}), {_samples_text('quick')}, every mechanism in both "
                   "sharing modes; without -s it leaves out torch, nvshmem and sharing (each starts a library or "
                   "processes of its own: name them with -s to add them). Every size is ranked: "
                   "samples of two figures that do not overlap decide (the range of 3 covers the median 75% "
                   "of the time); the rest are shown undecided.")
@click.option("--thorough", is_flag=True,
              help=f"The sweep {describe_sizes(THOROUGH_GPU_SIZES)} (host: {describe_sizes(THOROUGH_HOST_SIZES)}), "
                   f"{_samples_text('thorough')}.")
@click.option("--iterations", "-n", type=Bounded("iterations"), default=None, metavar="N",
              help="Exactly N timed samples per group (turns the adaptive count off, and the "
                   f"{FAR_SAMPLES}-sample stop of a group over {FAR_BEHIND:g}x behind the best at its size).")
@click.option("--min-samples", type=Bounded("min_samples"), default=None,
              help=f"Timed samples per group at least; more are taken until the median's {CONFIDENCE:.0%} interval "
                   f"is within +-{PRECISION:.0%} ({WIDE_MIN_SAMPLES}, or --max-samples if fewer, when the spread is "
                   "wide), up to --max-samples, unless the group's samples are separated from those of every other "
                   "variant of the path at that size, or all slower than one's (its decision is made) and the "
                   f"halves of its samples agree within {DRIFT:.0%} (else it is not steady yet: up to --max-samples). "
                   f"[default: {DEFAULT_SAMPLES[0]}]")
@click.option("--max-samples", type=Bounded("max_samples"), default=None,
              help=f"Timed samples per group at most. [default: {DEFAULT_SAMPLES[1]}]")
@click.option("--warmup", type=Bounded("warmup"), default=None,
              help=f"Untimed samples per group before the timed ones (each batch also queues {WARMUP_OPS} "
                   f"untimed operations before its start event, 1 for transfers of "
                   f"{format_size(LARGE_TRANSFER_BYTES)} or more, which moves {format_size(HOST_WARM_BYTES)} where "
                   f"the transfer crosses PCIe). [default: {DEFAULT_SAMPLES[2]}]")
@click.option("--devices", type=DevicesType(), default=None,
              help="GPUs to use: CUDA indices (0 or 0,1), or GPU/MIG UUIDs as `info` lists them "
                   "(MIG-..., run with CUDA_VISIBLE_DEVICES set to them). Default: GPU 0 (and 1 for peer).")
@click.option("--workers", type=Bounded("workers"), default=None,
              help="Worker processes per scenario, where the scenario allows more than 2.")
@click.option("--out", "-o", type=click.Path(dir_okay=True, path_type=Path), default=None,
              help="CSV file to write. Default: results/<UTC time>-<host>.csv")
@click.option("--force", is_flag=True, help="Overwrite --out (and the --plot files) if they exist.")
@click.option("--chunk", "chunk", type=SizesType(), default=None,
              help=f"Chunk size of pipelined staging (default {CHUNK_BYTES >> 20}MiB; a message is cut into at "
                   "most 64).")
@click.option("--timeout", type=Bounded("timeout", float), default=TIMEOUT_S, show_default=True,
              help="Seconds a worker may go without progress before the run is ended (a long "
                   "phase that makes progress is never cut short).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no summary; just the CSV path.")
@click.option("--verbose", "-v", is_flag=True, help="Show worker tracebacks on failure.")
@click.option("--plot", "plot", type=click.Path(path_type=Path), default=None, metavar="DIR|FILE.png",
              help="Also draw the run's plots (bandwidth, latency, setup costs) into a folder, or the "
                   "bandwidth figure into FILE.png/.svg and the others beside it.")
@click.option("--pairs", type=PairsType(), default=None, metavar="all|A-B,...",
              help="Run each GPU pair scenario (peer, ipc, vmm, mempool, staging, ...) once for every ordered "
                   "pair of GPUs ('all': every pair of this node) or for the pairs given (0-1,1-0): producer on "
                   "A, consumer on B. Default: one pair, as --devices says; on a node of several GPUs without "
                   "--devices, the same-GPU pair in each sharing mode, then every pair scenario once across the "
                   "first NVLink pair, in one process set of its own (interleaved with the same-GPU runs, each "
                   "change forked a set again: 16 sets where 4 do).")
@click.option("--full", is_flag=True,
              help="With --pairs all: sweep every path and size on every pair. Without it, one pair per link "
                   "class (NVLink count, or PCIe path) is swept whole and every other pair measures its headline "
                   "figures (ipc's copy-engine stream at the largest size and 4 KiB hand-off, the device "
                   "one-way latency), swept whole only where one falls outside its class. On a node whose every "
                   "pair is NVLink, the headline pairs run in rounds of disjoint pairs at once, proved first: the "
                   "first round alone and together, the rest at once only where no figure differs beyond 2% "
                   "(rounds.* in the header name the pairs).")
@click.option("--sharing", default=None, metavar="MODE[,MODE]",
              help="How the two processes of a same-GPU pair share it: 'time-sliced' (no MPS: their contexts "
                   "take turns), 'mps' (clients of an MPS daemon the run starts, or the one already serving "
                   "you), or both, comma-separated: each same-GPU pair scenario runs once per mode. "
                   "'mps:25' adds MPS with each client limited to 25% of the SMs (any 1-99), for the scenarios "
                   "that share can change (ipc, mmap, latency). A mode with '+compute' or '+copy' "
                   "(time-sliced+compute, mps+copy) measures the pair beside a busy neighbour: a third process "
                   "on the same GPU running compute-bound kernels, or device-to-device copies, back to back. "
                   "Default: time-sliced and mps where MPS can start, else time-sliced (the run says why).")
@click.option("--launcher", type=click.Choice(["fork", "fork-fresh", "mpi"]), default=None,
              help="How the workers start: 'fork' (this process forks them, once per run for the paths that "
                   "can share processes, which keep their CUDA context from path to path), 'fork-fresh' (new "
                   "processes for every scenario: to tell what a kept CUDA context changes in a path's figure) "
                   "or 'mpi' (they are the ranks of `mpirun -np N` / `srun -n N`; rank 0 writes the CSV; one "
                   "worker per rank, so N must be what a scenario takes, 2 for the GPU pairs). Default: mpi when "
                   "started by mpirun or srun, else fork.")
@click.option("--sample-order", type=click.Choice(["interleaved", "shuffled", "declared"]), default="interleaved",
              show_default=True,
              help="How the variants of a path are sampled at each size: 'interleaved' (one sample of each "
                   "in turn, shuffled per round: a drift, or a state of the GPU that lasts, falls on all of "
                   "them alike), 'shuffled' (each variant's samples back to back, the variants in a seeded "
                   "order per size) or 'declared' (back to back, in the scenario's order). With the first "
                   "two, the paths that share processes also run in a seeded order; 'declared' keeps the "
                   "registry's.")
@click.option("--budget", type=Bounded("budget", float), default=None, metavar="SECONDS",
              help="Seconds the whole run may take. The first pass over the plan runs whole (a budget below its "
                   "estimate is refused); then the groups where a decision is still open, or can move (a figure "
                   "the declared order would choose lies within twice the effect size of the leader), are "
                   "measured again on a fresh process set (replica 2 in the CSV), most open first, while time "
                   "remains. The run names the decisions it left open (stderr and the header's sampling.open). "
                   f"Default: the first pass, then at most {DEFAULT_RESAMPLE_S:g} s of resampling (none with "
                   "--quick).")
@click.option("--replicas", type=Bounded("replicas"), default=1, show_default=True, metavar="N",
              help="Process sets each run is measured on: with N above 1, every run of the first pass is "
                   "measured again on N-1 fresh process sets (replica 2.. in the CSV; pyperf's unit of "
                   "variance), and no resampling pass follows. A decision then stands on all of them: faster "
                   "only where each set shows it, its effect size at least how far the ratio moved between "
                   "sets. About N times the first pass's time: for a reference run (-n 20 --replicas 3) "
                   "that other runs' ratios are checked against.")
@click.option("--order-seed", type=click.IntRange(0, 2**31 - 1), default=None,
              help="Seed of that order. Default: a new one per run, written in the CSV header (order_seed).")
def run(scenario_names, sizes, quick, thorough, iterations, min_samples, max_samples, warmup, devices, workers, out,
        force, chunk, timeout, quiet, verbose, plot=None, launcher=None, pairs=None, sharing=None,
        sample_order="interleaved", order_seed=None, full=False, budget=None, replicas=1):
    """Run scenarios across forked workers and write one tidy CSV (one row per sample).

    Where there is no GPU, the GPU scenarios are skipped with a note and the host
    baseline runs. Naming a GPU scenario with --scenario on such a machine is bad
    input (exit 2).
    """
    from gpuipc_bench.harness import mpi_launch

    mark("run command")
    if quick and thorough:
        raise UsageError("--quick and --thorough: give one of them")
    preset = "quick" if quick else "thorough" if thorough else None
    job = None
    if mpi_launch.resolve_launcher(launcher) == "mpi":
        job = mpi_launch.Job.start(asked=launcher == "mpi")
        if job.rank != 0:  # a worker: rank 0 sends each scenario (and says when to stop)
            code = job.serve()
            job.leave_if_nixl(code)
            raise click.exceptions.Exit(code)
    code = None
    try:
        _run(scenario_names, sizes, preset, iterations, min_samples, max_samples, warmup, devices, workers, out,
             force, chunk, timeout, quiet, verbose, plot, job, pairs, sharing, fresh=launcher == "fork-fresh",
             order=(sample_order, random.randrange(2**31) if order_seed is None else order_seed), full=full,
             budget=budget, replicas=replicas)
        code = 0
    except click.exceptions.Exit as exc:
        code = exc.exit_code
        raise
    except mpi_launch.RanksLost as exc:  # the CSV is written: end the job with mpirun's own abort
        stderr_console().print(f"[red]error[/]: {escape(str(exc))}; ending the MPI job (MPI_Abort)", soft_wrap=True)
        job.abort(1)  # type: ignore[union-attr]
    finally:
        if job is not None:
            job.stop_others()
            if code is not None:
                job.leave_if_nixl(code)

def _select_by_uuid(devices):
    """UUIDs given to --devices: (indices 0..n-1, value for CUDA_VISIBLE_DEVICES); else (devices, None).
    The parent never initialises CUDA, so the forked workers see only these devices."""
    if not devices or not isinstance(devices[0], str):
        return devices, None
    return tuple(range(len(devices))), ",".join(devices)


def _run(scenario_names, sizes, preset, iterations, min_samples, max_samples, warmup, devices, workers, out,
         force, chunk, timeout, quiet, verbose, plot, job, pairs=None, sharing=None, fresh=False,
         order=("declared", None), full=False, budget=None, replicas=1):
    # the run's machinery, imported here: the other commands (report, list, info) need none of it
    from gpuipc_bench.cli.progress import run_session
    from gpuipc_bench.harness.head_start import HeadStart
    from gpuipc_bench.harness.plan import PlanOptions, make_plan, run_config
    from gpuipc_bench.harness.session import drop_if_empty
    from gpuipc_bench.modes import end_all as end_modes

    if pairs is not None and devices:
        raise UsageError("--pairs and --devices both choose the GPUs: give one of them")
    devices, visible = _select_by_uuid(devices)
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible
    head = None  # the first process set, forked while the probe starts CUDA (harness.head_start)
    try:
        options = PlanOptions(scenario_names=scenario_names, sizes=sizes, preset=preset or "", iterations=iterations,
                              min_samples=min_samples, max_samples=max_samples, warmup=warmup, devices=devices,
                              visible=visible, workers=workers, timeout=timeout, chunk=chunk, pairs=pairs,
                              sharing=sharing, fresh=fresh, order=order, job=job, full=full, budget=budget,
                              replicas=replicas)
        config = run_config(options)
        default_name = out is None  # taken by exclusive create before the run starts (see below)
        out = out or default_results_path()
        check_writable(out, force or default_name)
        if Path(out).suffix == ".log":
            raise UsageError(f"--out {out}: .log names the workers' log beside the results; "
                             "give a file name ending in .csv")
        if Path(out).suffix == ".gz":
            raise UsageError(f"--out {out}: a run writes its rows as plain text as they come; give a file name "
                             "ending in .csv and gzip it after (report reads RUN.csv.gz as it is)")
        if plot is not None:
            from gpuipc_bench.plots import check_plot_dest, check_plot_targets

            check_plot_dest(plot)
            check_plot_targets(plot, [Path(out).stem], None, force)

        head = HeadStart() if HeadStart.wanted(options) else None
        planned = make_plan(options, config, head)
        mark("plan made")
        config = planned.config
        err = stderr_console()
        for kind, text in planned.notes:
            if kind == "cleanup" or not quiet:
                # skip lines wrap to the terminal's width; the others stay whole (a path or a command in them)
                err.print(_note_line(kind, text), soft_wrap=kind != "skipped")

        if default_name:  # a run started in the same second has it: the next free name (<name>-2.csv)
            out = claim_free_name(out)
        elif not force:  # a name given twice by runs started at once: the second refused, not one result lost
            out = claim_name(out)
        if not verbose and job is None:  # what libraries print in the workers goes beside the CSV
            config = dataclasses.replace(config, worker_log=str(Path(out).with_suffix(".log")))
        for scenario in dict.fromkeys(s for s, _ in planned.runs):  # nvcc builds while the first paths run
            getattr(scenario, "prebuild", lambda: None)()
        try:
            run_session(planned, config, out, err, quiet, verbose, job, head)
        except BenchError:
            if plot is not None:
                _plot_run(out, plot, err, quiet, failed=True)  # the samples taken before the failure
            raise
        finally:
            end_modes(planned.modes)
            drop_if_empty(config.worker_log)
        if plot is not None:
            _plot_run(out, plot, err, quiet)
    finally:
        if head is not None:
            head.close()  # (nothing once the run took its set over)
        if visible:
            if previous is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = previous


def _note_line(kind: str, text: str) -> str:
    """A planning note as the terminal shows it: '[yellow]skipped[/] ...', '[yellow]note[/]: ...'."""
    if kind == "skipped":
        return f"[yellow]skipped[/] {escape(text)}"
    if kind == "estimate":
        return escape(text)
    return f"[yellow]note[/]: {escape(text)}"


def _plot_run(out: Path, plot: Path, err, quiet: bool, failed: bool = False) -> None:
    """Draw the plots of the run just written to `out`."""
    from gpuipc_bench.plots import save_plots
    from gpuipc_bench.results import read_results

    try:
        frame, meta = read_results(out)
        if frame.empty:
            return
        written = save_plots(frame, meta, plot, Path(out).stem)
    except BenchError as e:
        if not failed:
            raise
        err.print(f"[yellow]no plots[/]: {e}", soft_wrap=True)
        return
    if not quiet:
        err.print("plots: " + "".join(f"\n  {escape(str(p))}" for p in written), soft_wrap=True)  # a file a line


