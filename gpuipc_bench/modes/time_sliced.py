"""time-sliced: the GPU's default: two processes' contexts take turns (no MPS).

Each worker is pointed at a private, empty MPS pipe directory, so that a daemon someone
runs at the default location (/tmp/nvidia-mps) does not make it an MPS client. Its name holds
the run's pid and start time (the folder stays empty): a run killed with SIGKILL cannot remove
it, and the next run does (remove_stale_folders), as it stops a killed run's MPS daemon."""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

from gpuipc_bench.modes.base import Mode
from gpuipc_bench.modes.daemon import PIPE_ENV, PREFIX, start_time

FOLDER = PREFIX + "none-"  # then <pid>-<start time>-<random>


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


def remove_stale_folders(temp_dir: str | None = None) -> int:
    """Remove the empty pipe folders of earlier runs that are gone (killed: their own stop never ran);
    how many. A folder whose run still goes, that is not empty or not named as ours is left alone."""
    removed = 0
    for folder in glob.glob(os.path.join(temp_dir or tempfile.gettempdir(), FOLDER + "*")):
        pid, _, rest = os.path.basename(folder)[len(FOLDER):].partition("-")
        started = rest.partition("-")[0]
        if not (pid.isdigit() and started.isdigit()) or start_time(int(pid)) == started:
            continue  # not named by this version, or its run is still going
        try:
            os.rmdir(folder)  # only an empty one: a worker never writes there
            removed += 1
        except OSError:
            pass
    return removed
