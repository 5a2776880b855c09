"""Shared memory that workers reach whether they were forked, spawned or started by mpirun.

A forked worker inherits every MAP_SHARED mapping of its parent. A spawned worker or an MPI
rank on the same node inherits nothing, so what the parent (or rank 0) makes for its workers
must travel by pickle: SharedPages pickles to (creator pid, descriptor, size), and the other
process maps the same pages again through /proc/<pid>/fd/<descriptor>. The pages live in an
anonymous memfd (or an unlinked /dev/shm file): no name on disk, nothing left behind however
the processes end; they go with the last mapping and descriptor.

Reaching another process's descriptor takes the same user and a readable /proc (as for
`ls -l /proc/<pid>/fd`); the error says so when it is refused.
"""

from __future__ import annotations

import mmap
import os

from gpuipc_bench.errors import BenchError

_PROT = mmap.PROT_READ | mmap.PROT_WRITE


class SharedPages(mmap.mmap):
    """MAP_SHARED memory, usable wherever an mmap is, that survives pickling into another
    process of this node (see the module's docstring). The creator owns the descriptor."""

    def __new__(cls, size: int, fd: int | None = None):
        """`size` bytes of a new memfd, or of the open file `fd` (which the object then owns)."""
        if fd is None:
            fd = os.memfd_create("gpuipc-bench", getattr(os, "MFD_CLOEXEC", 0))
            try:
                os.ftruncate(fd, max(1, size))
            except OSError:
                os.close(fd)
                raise
        try:
            self = super().__new__(cls, fd, max(1, size), flags=mmap.MAP_SHARED, prot=_PROT)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._pid, self._size = fd, os.getpid(), max(1, size)
        return self

    def __reduce__(self):
        return attach_pages, (self._pid, self._fd, self._size)

    def close(self) -> None:
        try:
            super().close()
        except BufferError:
            pass  # a view of it is still alive (an MPI rank 0's worker thread): it goes with the process
        finally:
            fd, self._fd = getattr(self, "_fd", None), None
            if fd is not None and self._pid == os.getpid():
                try:
                    os.close(fd)
                except OSError:
                    pass


def open_foreign_fd(pid: int, fd: int, what: str) -> int:
    """A descriptor of this process for descriptor `fd` of process `pid` (same node, same user)."""
    try:
        return os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BenchError(f"cannot reach the {what} of process {pid} through /proc/{pid}/fd/{fd}: "
                         f"{exc.strerror} (workers must run on one node, as one user)") from None


def attach_pages(pid: int, fd: int, size: int) -> mmap.mmap:
    """Map the pages of another process's SharedPages (what unpickling one does)."""
    if pid == os.getpid():
        own = os.dup(fd)
        return SharedPages(size, own)
    local = open_foreign_fd(pid, fd, "shared memory")
    return SharedPages(size, local)
