"""time-sliced: the GPU's default: two processes' contexts take turns (no MPS).

Each worker is pointed at a private, empty MPS pipe directory, so that a daemon someone
runs at the default location (/tmp/nvidia-mps) does not make it an MPS client. Its name holds
the run's pid and start time (the folder stays empty): a run killed with SIGKILL cannot remove
it, and the next run does (daemon.remove_stale_folders), as it stops a killed run's MPS daemon."""

from __future__ import annotations

import os
import shutil
import tempfile

from gpuipc_bench.modes.base import Mode
from gpuipc_bench.modes.daemon import PIPE_ENV, TIME_SLICED_FOLDER as FOLDER, start_time


class TimeSliced(Mode):
    name = "time-sliced"
    summary = "no MPS: the two processes' contexts take turns on the GPU (a context switch per hand-over)"

    def __init__(self):
        self.pipe_dir = ""

    def start(self) -> None:
        if not self.pipe_dir:
            pid = os.getpid()
            started = start_time(pid)  # ('' without /proc: a name no later run takes for stale)
            self.pipe_dir = tempfile.mkdtemp(prefix=f"{FOLDER}{pid}-{started}-" if started else FOLDER)

    def env(self) -> dict[str, str]:
        return {PIPE_ENV: self.pipe_dir} if self.pipe_dir else {}

    def stop(self) -> list[str]:
        if self.pipe_dir:
            shutil.rmtree(self.pipe_dir, ignore_errors=True)
            self.pipe_dir = ""
        return []
