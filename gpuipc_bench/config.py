"""RunConfig: the command line, parsed and validated once, then frozen and handed to every worker."""

from __future__ import annotations

import dataclasses
import os
import stat
import tempfile
from pathlib import Path

from gpuipc_bench import defaults
from gpuipc_bench.errors import UsageError


# The bounds of the numeric options: (least, most, what the number counts). The CLI's
# Bounded type and RunConfig both check them, with one message; a new option adds a line.
BOUNDS: dict[str, tuple[float, float, str]] = {
    "iterations": (1, 100_000, "timed samples per group"),
    "min_samples": (1, 100_000, "timed samples per group"),
    "max_samples": (1, 100_000, "timed samples per group"),
    "warmup": (0, 10_000, "untimed samples per group"),
    "workers": (1, 64, "worker processes"),
    "timeout": (0.1, 86_400, "seconds"),
    "budget": (1, 86_400, "seconds"),  # run's --budget
    "replicas": (1, 8, "process sets per run"),  # run's --replicas
    "min_effect": (0, 100, "percent"),  # report's --min-effect
}


def bound_problem(name: str, value: float) -> str | None:
    """What is wrong with `value` for option `name` ('must be 0 to 10000 untimed samples
    per size (got -1)'), or None when it is within BOUNDS[name]."""
    low, high, what = BOUNDS[name]
    if low <= value <= high:  # NaN is not
        return None
    got = f"{value:g}" if isinstance(value, float) else str(value)
    return f"must be {low:g} to {high:g} {what} (got {got})"


def check_bound(name: str, value: float) -> None:
    """UsageError unless `value` is within BOUNDS[name], naming the option."""
    problem = bound_problem(name, value)
    if problem:
        raise UsageError(f"--{name.replace('_', '-')}: {problem}")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    scenarios: tuple[str, ...]
    sizes: tuple[int, ...] | None = None  # None: each scenario's default sweep
    # The run's defaults (gpuipc_bench.defaults); the plan sets them from the preset and the options
    min_samples: int = defaults.MIN_SAMPLES  # timed samples per group: at least this many ...
    max_samples: int = defaults.MAX_SAMPLES  # ... and at most this many (the median's interval decides between)
    warmup: int = defaults.WARMUP
    iterations: int | None = None  # a fixed count: min_samples = max_samples = iterations (--iterations)
    preset: str = ""  # "quick" or "thorough": the scenarios' preset sweeps (the CLI sets its sample counts)
    devices: tuple[int, ...] | None = None  # None: the scenario picks (GPU 0, or 0 and 1)
    workers: int | None = None  # None: the scenario's default
    timeout: float = defaults.TIMEOUT_S  # seconds a worker may stay silent at a barrier or a wait
    chunk_bytes: int = defaults.CHUNK_BYTES  # pipelined staging chunk
    launcher: str = "fork"  # "fork" (forked workers) or "mpi" (the job's ranks are the workers)
    extra: tuple[tuple[str, str], ...] = ()  # scenario-specific knobs, kept hashable
    sharing: tuple[str, ...] = ()  # the sharing modes same-GPU pairs run in (gpuipc_bench.modes); () none chosen
    worker_log: str = ""  # a file that takes the workers' own stdout and stderr (libraries' output); '': the terminal
    order_seed: int | None = None  # the shuffled order of the variants measured at one size (Sampler.interleave)
    sample_order: str = "declared"  # 'interleaved', 'shuffled' or 'declared' (the CLI's default: interleaved)
    # Set by the run loop for one scenario run, never by an option: the stream sizes it measures (None: every
    # size; the second sharing mode of a default sweep: harness.plan.second_mode_stream_sizes), and the best
    # medians the run's earlier scenarios measured, (measure, metric, sharing, workers, src, dst, bytes,
    # seconds) rows (engine.sampler: a group far behind them is decided in FAR_SAMPLES samples)
    stream_sizes: tuple[int, ...] | None = None
    known_best: tuple[tuple, ...] = ()
    # A further sharing mode's run whose first mode's run of the scenario ended well: that mode's name, whose
    # host-link ceilings from engine.pair.HOST_CEILINGS_SHARED_FROM up this run takes (None: it measures them)
    host_ceilings_from: str | None = None
    # The resampling pass's run (harness.resample): the groups it measures again, (path, variant, measure,
    # bytes); None: every group. Its ceilings are measured whatever this says; its set-up operations are
    # timed once and their rows not kept (Session._one: they set up a ring of the sizes measured again)
    only_groups: frozenset[tuple[str, str, str, int]] | None = None
    # The lane counters' proofs an earlier process set of the run made (engine.lanes: the counters are the GPU's,
    # not a process's), ((gpu, counter), the Proof's fields as JSON) pairs, and one reading's cost (ms; None:
    # not measured yet): a later set takes them instead of proving its GPUs' counters again
    lane_proofs: tuple[tuple[tuple[int, str], str], ...] = ()
    lane_read_ms: float | None = None
    # --replicas: the process sets each run of the first pass is measured on (1: one, then the resampling pass)
    replicas: int = 1

    def __post_init__(self):
        if self.iterations is not None:
            check_bound("iterations", self.iterations)
            object.__setattr__(self, "min_samples", self.iterations)
            object.__setattr__(self, "max_samples", self.iterations)
        check_bound("min_samples", self.min_samples)
        check_bound("max_samples", self.max_samples)
        if self.max_samples < self.min_samples:
            raise UsageError(f"--max-samples {self.max_samples} is below --min-samples {self.min_samples}")
        check_bound("warmup", self.warmup)
        if self.workers is not None:
            check_bound("workers", self.workers)
        check_bound("timeout", self.timeout)
        check_bound("replicas", self.replicas)
        if self.chunk_bytes < 1:
            raise UsageError("--chunk must be at least 1 byte")


def check_writable(out: Path, force: bool = False) -> None:
    """Refuse an output path we could not write, before any work starts. Only a regular
    file is ever replaced: a device, a FIFO or a socket is refused (a symlink is followed:
    what it points to counts)."""
    if str(out) == "-":
        raise UsageError("--out -: the results go to a file, appended as each size completes, not to "
                         "standard output; give a file name ending in .csv (--quiet prints just its path)")
    out = Path(out)
    kind = _file_kind(out)
    if kind == "directory":
        raise UsageError(f"--out {out}: is a directory; give a file name ending in .csv")
    if kind not in (None, "regular file"):
        raise UsageError(f"--out {out}: is a {kind}, not a regular file; the results are only "
                         "ever written to a regular file (give a file name ending in .csv)")
    if kind is not None and not force:
        raise UsageError(f"--out {out}: file exists; use --force to overwrite it")
    out = Path(os.path.realpath(out))  # a symlink: its target's folder
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--out {out}: cannot create folder {parent}: {e.strerror}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: folder {parent} is not writable")
    try:  # the file is written through a temp file beside it: make one (/proc passes the test above)
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{out.name}.", suffix=".tmp")
    except OSError as e:
        raise UsageError(f"--out {out}: cannot create a file in folder {parent}: {e.strerror or e}") from None
    os.close(fd)
    os.unlink(probe)


def _file_kind(path: Path) -> str | None:
    """'regular file', 'directory', 'character device', ... of what `path` leads to, or None."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError:
        return "file that cannot be examined"
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def available_host_memory() -> int | None:
    """Bytes of host memory a new allocation can get without swapping: /proc/meminfo's
    MemAvailable (else free pages), capped by a cgroup v2 memory limit. None if unknown."""
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    try:
        with open("/proc/self/cgroup", encoding="ascii") as fh:
            v2 = [line.strip()[3:] for line in fh if line.startswith("0::")]
        if v2:
            folder = Path("/sys/fs/cgroup") / v2[0].lstrip("/")
            limit = (folder / "memory.max").read_text().strip()
            if limit != "max":
                used = int((folder / "memory.current").read_text())
                available = min(available, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return available
