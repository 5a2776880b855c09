"""mps: the two processes are clients of one MPS server, whose kernels and copies run at once.

One private daemon per run (gpuipc_bench.mps.MpsDaemon: its own pipe and log directories,
stopped at the end of the run and, through its guard, when the run is killed), started
before the first MPS worker. Where an MPS daemon already serves this process (the user runs
one, and CUDA_MPS_PIPE_DIRECTORY points at it or it sits at the default place), it is used
as it is and recorded; the tool never stops it."""

from __future__ import annotations

import os

from gpuipc_bench import mps
from gpuipc_bench.errors import BenchError
from gpuipc_bench.modes.base import Mode


class Mps(Mode):
    name = "mps"
    summary = "an MPS daemon: both processes are clients of one server and run at once"

    def __init__(self):
        self.daemon: mps.MpsDaemon | None = None
        self.users = ""  # the pipe directory of a daemon someone else runs, when it serves us
        self.failed = ""  # why the daemon could not start: tried once per run

    def unavailable(self) -> str | None:
        if mps.serves_this_process():
            return None
        if mps.find_binary() is None:
            return f"{mps.BINARY} (the MPS control daemon) is not on PATH"
        return None

    def start(self) -> None:
        if self.failed:
            raise BenchError(self.failed)
        if self.daemon is not None or self.users:
            return
        if mps.serves_this_process():
            self.users = os.environ.get(mps.PIPE_ENV) or mps.DEFAULT_PIPE_DIR
            return
        try:
            self.daemon = mps.MpsDaemon.start()
        except mps.MpsUnavailable as exc:
            self.failed = f"the mps mode: cannot start a private MPS daemon: {exc}"
            raise BenchError(self.failed) from None

    def env(self) -> dict[str, str]:
        return self.daemon.env() if self.daemon is not None else {}

    def facts(self) -> dict[str, str]:
        if self.users:
            return {"sharing.mps": f"the MPS daemon already running at {self.users} (used as it is)"}
        return {"sharing.mps": "a private MPS daemon started for this run"} if self.daemon else {}

    def stop(self) -> list[str]:
        daemon, self.daemon = self.daemon, None
        return daemon.stop() if daemon is not None else []
