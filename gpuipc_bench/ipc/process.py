"""The plumbing of a worker process, spec-free: the fork start method, its process title, its
death with the parent, its output to the run's worker log, its last step."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

# The parent never initialises CUDA, so that what it forks may: "fork", explicitly (Python 3.14
# changed the default start method).
FORK = multiprocessing.get_context("fork")


def set_process_title(title: str, short: str) -> None:
    """Name this process for ps: `title` where setproctitle is installed (ps -f, ps aux),
    and always `short`, the kernel's 15-byte name of it (ps, top, pgrep)."""
    try:
        import setproctitle  # optional

        setproctitle.setproctitle(title)
    except ImportError:
        pass
    try:
        import ctypes

        PR_SET_NAME = 15
        ctypes.CDLL(None).prctl(PR_SET_NAME, short.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this worker if the parent dies, so none is ever orphaned."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:  # the parent died before prctl took effect
            os._exit(1)
    except (OSError, AttributeError):
        pass


def output_to(path: str) -> None:
    """Send this worker's stdout and stderr (and its children's: torch's, NCCL's) to the run's
    worker log: what libraries print, and tracebacks printed by their threads, never reach the
    terminal's progress lines. The worker's own errors travel to the parent through the pipe."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return  # the terminal, then: nothing is lost
    for std in (1, 2):
        os.dup2(fd, std)
    os.close(fd)


def running(pid: int) -> bool:
    """Whether process `pid` still runs: a zombie has ended (its files, and with them its CUDA
    context, are closed before it becomes one), and so has a pid /proc no longer holds."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def wait_gone(pids, limit_s: float) -> bool:
    """Wait (at most `limit_s` seconds) until none of `pids` runs; whether none does."""
    deadline = time.monotonic() + limit_s
    while True:
        if not any(running(pid) for pid in pids):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.002)


def exit_worker(conn, code: int) -> None:
    """A worker's last step: close its pipe to the parent, then leave without the atexit handlers
    and finalizers inherited from the parent."""
    try:
        conn.close()
    finally:
        os._exit(code)
