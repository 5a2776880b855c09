"""RunConfig: the command line, parsed and validated once, then frozen and handed to every worker."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from gpuipc_bench.errors import UsageError
from gpuipc_bench.scenario import DEFAULT_GPU_SIZES, DEFAULT_HOST_SIZES  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from gpuipc_bench.machine import Machine
    from gpuipc_bench.scenario import Scenario, WorkerSpec


@dataclasses.dataclass(frozen=True)
class RunConfig:
    scenarios: tuple[str, ...]
    sizes: tuple[int, ...] | None = None  # None: each scenario's default sweep
    min_samples: int = 6  # timed samples per group: at least this many ...
    max_samples: int = 20  # ... and at most this many (the median's interval decides between)
    warmup: int = 1
    iterations: int | None = None  # a fixed count: min_samples = max_samples = iterations (--iterations)
    devices: tuple[int, ...] | None = None  # None: the scenario picks (GPU 0, or 0 and 1)
    workers: int | None = None  # None: the scenario's default
    out: Path | None = None
    timeout: float = 60.0  # seconds a worker may stay silent at a barrier or a wait
    quiet: bool = False
    verbose: bool = False
    chunk_bytes: int = 16 << 20  # pipelined staging chunk
    extra: tuple[tuple[str, str], ...] = ()  # scenario-specific knobs, kept hashable

    def __post_init__(self):
        if self.iterations is not None:
            if self.iterations < 1:
                raise UsageError(f"--iterations must be at least 1 (got {self.iterations})")
            object.__setattr__(self, "min_samples", self.iterations)
            object.__setattr__(self, "max_samples", self.iterations)
        if self.min_samples < 1:
            raise UsageError(f"--min-samples must be at least 1 (got {self.min_samples})")
        if self.max_samples < self.min_samples:
            raise UsageError(f"--max-samples {self.max_samples} is below --min-samples {self.min_samples}")
        if self.warmup < 0:
            raise UsageError(f"--warmup must be 0 or more (got {self.warmup})")
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"--workers must be at least 1 (got {self.workers})")
        if not (self.timeout > 0 and math.isfinite(self.timeout)):
            raise UsageError(f"--timeout must be positive (got {self.timeout}); it is in seconds and "
                             "bounds every wait, so it cannot be infinite")
        if self.chunk_bytes < 1:
            raise UsageError("--chunk must be at least 1 byte")


def check_writable(out: Path, force: bool = False) -> None:
    """Refuse an output path we could not write, before any work starts."""
    out = Path(out)
    if out.exists() and out.is_dir():
        raise UsageError(f"--out {out}: is a directory; give a file name ending in .csv")
    if out.exists() and not force:
        raise UsageError(f"--out {out}: file exists; use --force to overwrite it")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.exists():
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UsageError(f"--out {out}: cannot create folder {parent}: {e.strerror}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: folder {parent} is not writable")


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


def check_memory(plan: "list[tuple[Scenario, list[WorkerSpec]]]", config: RunConfig, machine: "Machine",
                 host_available: int | None = None) -> None:
    """Refuse, before any work, a largest size whose buffers cannot fit in host memory
    (what is available now) or on a GPU (its whole memory), per Scenario.memory_needed."""
    from gpuipc_bench.sizes import format_size

    if host_available is None:
        host_available = available_host_memory()
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
