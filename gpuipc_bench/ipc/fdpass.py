"""Pass file descriptors between the workers of one run (SCM_RIGHTS over Unix sockets).

The VMM and memory-pool paths share GPU memory as POSIX file descriptors
(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), which only the kernel can move from one
process to another. Each worker binds one datagram socket in Linux's abstract namespace,
named after the run's segment and the worker's rank: nothing is created on disk, so no
exit path (not even SIGKILL) leaves a socket file behind, and forked, spawned and MPI
workers on one node find each other the same way.

A message is one datagram: the descriptor's name (e.g. 'ring') and the descriptor itself.
A receive waits at most `timeout` seconds, looking at the run's abort word every 0.1 s, so
a peer that died or failed its export never leaves the other blocked on the socket.
"""

from __future__ import annotations

import array
import errno
import os
import socket
import time
from typing import Callable

from gpuipc_bench.errors import BarrierAborted, BenchError

POLL_S = 0.1
MAX_NAME = 200


class FdChannel:
    """This worker's end: send a descriptor to worker `rank`, receive one from it by name."""

    def __init__(self, run: str, rank: int, timeout: float, aborted: Callable[[], bool] = lambda: False):
        self.run, self.rank, self.timeout, self.aborted = run, rank, timeout, aborted
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind(self.address(rank))
        except OSError as exc:
            self.sock.close()
            raise BenchError(f"cannot open the descriptor channel of worker {rank}: {exc.strerror or exc}") from None
        self.sock.settimeout(POLL_S)
        self.pending: dict[tuple[int, str], int] = {}  # arrived before they were asked for

    def address(self, rank: int) -> bytes:
        return f"\0{self.run}-fd-{rank}".encode()

    def send(self, rank: int, name: str, fd: int) -> None:
        """Send a duplicate of `fd` (the caller keeps and closes its own) to worker `rank`,
        which must have opened its channel (workers open theirs before a barrier)."""
        payload = f"{self.rank}:{name}".encode()[:MAX_NAME]
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                # (socket.send_fds ignores its address argument: sendmsg directly)
                self.sock.sendmsg([payload], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))], 0,
                                  self.address(rank))
                return
            except OSError as exc:
                # Not bound yet (ECONNREFUSED) or its queue is full (EAGAIN): retry until the deadline.
                if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT, errno.EAGAIN) or time.monotonic() > deadline:
                    raise BenchError(f"cannot send the {name} descriptor to worker {rank}: {exc.strerror or exc}") \
                        from None
                self._check_abort()
                time.sleep(0.01)

    def receive(self, rank: int, name: str) -> int:
        """The descriptor `name` from worker `rank` (this process owns it: close it when done)."""
        key = (rank, name)
        deadline = time.monotonic() + self.timeout
        while key not in self.pending:
            self._check_abort()
            if time.monotonic() > deadline:
                raise BenchError(f"no {name} descriptor from worker {rank} within {self.timeout:g} s "
                                 "(its export failed, or it hangs; see --timeout)")
            try:
                data, fds, _flags, _addr = socket.recv_fds(self.sock, MAX_NAME, 4)
            except (socket.timeout, BlockingIOError):
                continue
            sender, _, what = data.decode(errors="replace").partition(":")
            if not fds:
                continue
            for extra in fds[1:]:
                os.close(extra)
            old = self.pending.pop((int(sender), what), None)
            if old is not None:  # a repeat of a name: keep the newest
                os.close(old)
            self.pending[(int(sender), what)] = fds[0]
        return self.pending.pop(key)

    def _check_abort(self) -> None:
        if self.aborted():
            raise BarrierAborted("run aborted")

    def close(self) -> None:
        for fd in self.pending.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self.pending.clear()
        self.sock.close()


def channel_for(ctx) -> FdChannel:
    """The descriptor channel of a worker, named after its run's segment ('gpuipc-bench-<token>')."""
    return FdChannel(os.path.basename(ctx.segment.name), ctx.rank, ctx.config.timeout,
                     aborted=lambda: ctx.segment.aborted)
