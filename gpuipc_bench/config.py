"""RunConfig: the command line, parsed and validated once, then frozen and handed to every worker."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from gpuipc_bench.errors import UsageError

# Sizes swept when --sizes is not given. GPU paths: 4 B to 1 GiB in steps of 4.
# The host path stops at 64 MiB so that the first run on a laptop takes seconds.
DEFAULT_GPU_SIZES = tuple(4 ** k for k in range(1, 16))  # 4 B .. 1 GiB
DEFAULT_HOST_SIZES = tuple(4 ** k for k in range(1, 14))  # 4 B .. 64 MiB


@dataclasses.dataclass(frozen=True)
class RunConfig:
    scenarios: tuple[str, ...]
    sizes: tuple[int, ...] | None = None  # None: each scenario's default sweep
    iterations: int = 20
    warmup: int = 3
    devices: tuple[int, ...] | None = None  # None: the scenario picks (GPU 0, or 0 and 1)
    workers: int | None = None  # None: the scenario's default
    out: Path | None = None
    timeout: float = 60.0  # seconds a worker may stay silent at a barrier or a wait
    quiet: bool = False
    verbose: bool = False
    chunk_bytes: int = 16 << 20  # pipelined staging chunk
    extra: tuple[tuple[str, str], ...] = ()  # scenario-specific knobs, kept hashable

    def __post_init__(self):
        if self.iterations < 1:
            raise UsageError(f"--iterations must be at least 1 (got {self.iterations})")
        if self.warmup < 0:
            raise UsageError(f"--warmup must be 0 or more (got {self.warmup})")
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"--workers must be at least 1 (got {self.workers})")
        if self.timeout <= 0:
            raise UsageError(f"--timeout must be positive (got {self.timeout})")
        if self.chunk_bytes < 1:
            raise UsageError("--chunk must be at least 1 byte")

    def sizes_for(self, default: tuple[int, ...]) -> tuple[int, ...]:
        return self.sizes if self.sizes is not None else default


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
