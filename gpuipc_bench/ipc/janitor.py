"""A janitor: a small process that cleans up after the parent if the parent is killed.

SIGKILL of the parent runs none of its clean-up, and its workers die with it
(PR_SET_PDEATHSIG), so what they made under names (files in /dev/shm, named semaphores)
would stay. A Janitor is forked by the parent before the workers start, without CUDA, and
waits on a pipe only the parent writes to. The parent's close() says "done" and the janitor
leaves without doing anything; end of file without it means the parent died: the janitor
waits for the given processes to be gone, runs `cleanup` and exits.

    janitor = Janitor(cleanup, pids=lambda: [...])   # in the parent, before the workers
    ...
    janitor.close()                                   # the parent cleaned up itself
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable, Iterable

from gpuipc_bench.ipc.process import running

DONE = b"d"
WAIT_S = 5.0  # for the workers to be gone (PR_SET_PDEATHSIG kills them at once)


class Janitor:
    def __init__(self, cleanup: Callable[[], None], pids: Callable[[], Iterable[int]] = lambda: (),
                 title: str = "gpuipc-bench: janitor"):
        read_end, self._write_end = os.pipe()  # not inherited by spawned processes (close-on-exec)
        self.pid = os.fork()
        if self.pid == 0:  # the janitor
            code = 1
            try:
                os.close(self._write_end)
                code = _serve(read_end, cleanup, pids, title)
            finally:
                os._exit(code)
        os.close(read_end)

    def close(self) -> None:
        """The parent cleaned up itself: the janitor leaves without doing anything. Idempotent."""
        if self._write_end < 0:
            return
        try:
            os.write(self._write_end, DONE)
        except OSError:
            pass
        os.close(self._write_end)
        self._write_end = -1
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass

    def __getstate__(self):
        raise TypeError("a Janitor stays in the process that made it")


def _serve(read_end: int, cleanup: Callable[[], None], pids: Callable[[], Iterable[int]], title: str) -> int:
    from gpuipc_bench.ipc.process import set_process_title

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the parent decides, or dies
        signal.signal(signum, signal.SIG_IGN)
    set_process_title(title, "gpuipc-janitor")
    devnull = os.open(os.devnull, os.O_RDWR)  # holds no pipe of the parent's open (`run | head`)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)
    while True:
        try:
            said = os.read(read_end, 1)
            break
        except InterruptedError:
            continue
    if said == DONE:
        return 0
    deadline = time.monotonic() + WAIT_S
    while any(running(pid) for pid in pids() if pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    cleanup()
    return 0
