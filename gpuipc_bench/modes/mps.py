"""mps: the two processes are clients of one MPS server, whose kernels and copies run at once.

One private daemon per run (gpuipc_bench.modes.daemon.MpsDaemon: its own pipe and log directories,
stopped at the end of the run and, through its guard, when the run is killed), started
before the first MPS worker. Where an MPS daemon already serves this process (the user runs
one, and CUDA_MPS_PIPE_DIRECTORY points at it or it sits at the default place), it is used
as it is and recorded; the tool never stops it."""

from __future__ import annotations

import os

from gpuipc_bench.modes import daemon as mps
from gpuipc_bench.errors import BenchError
from gpuipc_bench.modes.base import Mode
from gpuipc_bench.engine.scenario import MPS_THREAD_PCT_ENV


class Mps(Mode):
    name = "mps"
    summary = "an MPS daemon: both processes are clients of one server and run at once"
    # The scenarios whose figures a client's share of the SMs can change (SM copies, zero-copy
    # kernels, the device ping-pongs), for a mode with a thread percentage; () is every one.
    SM_BOUND = ("ipc", "mmap", "latency")

    def __init__(self, thread_pct: int = 100, shares: "Mps | None" = None):
        self.thread_pct = thread_pct
        self.owner = shares  # the mode whose daemon this one's clients join (one daemon per run)
        self.scenarios: tuple[str, ...] = () if thread_pct == 100 else self.SM_BOUND
        if thread_pct != 100:
            self.name = f"mps:{thread_pct}"
        self.daemon: mps.MpsDaemon | None = None
        self.users = ""  # the pipe directory of a daemon someone else runs, when it serves us
        self.failed = ""  # why the daemon could not start: tried once per run

    def unavailable(self) -> str | None:
        if self.owner is not None:
            return self.owner.unavailable()
        if mps.serves_this_process():
            return None
        if mps.find_binary() is None:
            return f"{mps.BINARY} (the MPS control daemon) is not on PATH"
        return None

    def start(self) -> None:
        if self.owner is not None:
            self.owner.start()
            return
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
        if self.owner is not None:
            env = self.owner.env()
            env.pop(MPS_THREAD_PCT_ENV, None)
        else:
            env = self.daemon.env() if self.daemon is not None else {}
        if self.thread_pct != 100:
            env[MPS_THREAD_PCT_ENV] = str(self.thread_pct)
        return env

    def facts(self) -> dict[str, str]:
        if self.owner is not None:
            return self.owner.facts()
        if self.users:
            return {"sharing.mps": f"the MPS daemon already running at {self.users} (used as it is)"}
        return {"sharing.mps": "a private MPS daemon started for this run"} if self.daemon else {}

    def stop(self) -> list[str]:
        if self.owner is not None:
            return []  # the owner stops the daemon
        daemon, self.daemon = self.daemon, None
        return daemon.stop() if daemon is not None else []
