"""The shared-memory segment every worker of one scenario run sees (like simpleIPC's shared struct).

The parent creates it before forking and unlinks its file at once, so nothing is left in /dev/shm.
It holds, in 128-byte lines of int64 words: a header, the abort word, each worker's epoch and info
(heartbeat, phase, waits), a handle table and a mailbox. Layout: docs/methods/shared-segment.md.
"""

from __future__ import annotations

import errno
import mmap
import os
import secrets
import tempfile
import time

from gpuipc_bench.errors import BarrierAborted, BarrierTimeout, BenchError

PREFIX = "gpuipc-bench-"
MAGIC = int.from_bytes(b"gpuipcSG", "little")
LAYOUT_VERSION = 2

LINE = 128  # bytes per line
_WPL = LINE // 8  # int64 words per line
HANDLE_BYTES = 64
HANDLE_SLOTS = 32  # per worker: memory handles and the events of the signals
_HANDLE_LINES = HANDLE_SLOTS * HANDLE_BYTES // LINE  # per worker

PHASES = ("idle", "setup", "warmup", "sample", "ceiling", "latency", "barrier", "teardown", "done")
_PHASE_CODE = {name: code for code, name in enumerate(PHASES)}

# Info line fields (word offsets inside a worker's info line).
_PID, _DEVICE, _PHASE, _NBYTES, _ITERATION, _HEARTBEAT, _WAITING, _WAITING_FOR, _LABEL = range(9)
LABEL_BYTES = LINE - 8 * _LABEL

# Word indices of the fixed lines.
_MAGIC_W, _VERSION_W, _NWORKERS_W, _SLOTS_W = 0, 1, 2, 3
ABORT_INDEX = 1 * _WPL

# The wait policy shared by the barrier and the mailbox.
SPIN_SECONDS = 2e-4  # spin this long (yielding every 64 reads)
YIELD_SECONDS = 1e-3  # then os.sched_yield() this long
SLEEP_FIRST = 1e-5  # then sleep, doubling from this ...
SLEEP_MAX = 2e-4  # ... up to this: a waiter wakes at most ~0.25 ms after the word changes (it waits
#                   for the other worker's 5 ms sample many times a group; 1 ms here cost ~0.5 ms a wait)
_CHECK_EVERY = 63  # spinning: look at the clock and the abort word every 64 reads

_sched_yield = getattr(os, "sched_yield", lambda: time.sleep(0))


def _token() -> str:
    """The random part of a segment's name (a test replaces it to predict the name)."""
    return secrets.token_hex(8)


def shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def spin_wait(words, index: int, target: int, deadline: float,
              spin_seconds: float = SPIN_SECONDS, yield_seconds: float = YIELD_SECONDS) -> bool:
    """Wait until words[index] >= target: spin, then yield, then sleep with back-off.

    The spin reads the word in a tight loop and, every 64 reads (~3 us), checks
    the abort word and the clock and yields the CPU once.

    True once reached, False past `deadline` (a time.monotonic() value); raises
    BarrierAborted as soon as the abort word is set.
    """
    clock = time.monotonic
    start = clock()
    spin_end = min(start + spin_seconds, deadline)
    n = 0
    while words[index] < target:
        n += 1
        if not n & _CHECK_EVERY:
            if words[ABORT_INDEX]:
                raise BarrierAborted("run aborted")
            if clock() >= spin_end:
                break
            # Let a worker that shares this CPU run now rather than after the whole spin:
            # on a busy 2-core machine a crossing then costs ~5 us instead of ~200 us.
            _sched_yield()
    else:
        return True
    yield_end = min(spin_end + yield_seconds, deadline)
    while words[index] < target:
        if words[ABORT_INDEX]:
            raise BarrierAborted("run aborted")
        _sched_yield()
        if clock() >= yield_end:
            break
    else:
        return True
    delay = SLEEP_FIRST
    while words[index] < target:
        if words[ABORT_INDEX]:
            raise BarrierAborted("run aborted")
        left = deadline - clock()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, SLEEP_MAX)
    return True


def map_shared_file(size: int, what: str, keep_fd: bool = False) -> tuple[mmap.mmap, str]:
    """A new MAP_SHARED mapping of `size` bytes backed by a file in /dev/shm that exists
    only for a moment: created exclusively (mode 0600, never following a planted link),
    unlinked at once, its pages allocated, then mapped. Returns (mapping, the name it had).
    With `keep_fd` the descriptor stays open as `mapping.kept_fd` (the caller closes it):
    a process that was not forked reaches the file through it (gpuipc_bench.ipc.shared).

    The pages are allocated (posix_fallocate), not only sized (ftruncate): on a full
    /dev/shm a sized-only file maps fine and the first write to it is a SIGBUS."""
    folder = shm_dir()
    path = os.path.join(folder, PREFIX + _token())
    flags = (os.O_RDWR | os.O_CREAT | os.O_EXCL
             | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise BenchError(
            f"refusing to use {what} {path}: something with that name "
            "already exists (planted file or link?); nothing was changed") from None
    except OSError as exc:
        raise BenchError(f"cannot create {what} {path}: {exc.strerror}") from exc
    try:
        os.unlink(path)  # from here on the file lives only as long as its mappings
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG, errno.EDQUOT):
                raise BenchError(
                    f"{folder} is full: the {what} needs {size} bytes ({_free_text(folder)}); "
                    f"free some space in {folder}") from None
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENODEV):
                raise
            os.ftruncate(fd, size)  # a filesystem without fallocate
        try:
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE, trackfd=False)
        except TypeError:  # Python < 3.13: mmap keeps a dup of the fd (CLOEXEC)
            mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except OSError as exc:
        os.close(fd)
        raise BenchError(f"cannot map {what} {path}: {exc.strerror}") from exc
    except BaseException:
        os.close(fd)
        raise
    if keep_fd:
        return mm, path, fd  # type: ignore[return-value]
    os.close(fd)
    return mm, path


def _free_text(folder: str) -> str:
    try:
        st = os.statvfs(folder)
    except OSError:
        return "free space unknown"
    return f"{st.f_bavail * st.f_frsize} bytes free"


def _attach_segment(pid: int, fd: int, name: str, nworkers: int, mailbox_slots: int) -> "Segment":
    from gpuipc_bench.ipc.shared import open_foreign_fd

    local = open_foreign_fd(pid, fd, "shared-memory segment")
    try:
        mm = mmap.mmap(local, Segment.size_for(nworkers, mailbox_slots), flags=mmap.MAP_SHARED,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(local)
    seg = Segment(mm, name, nworkers, mailbox_slots)
    if seg.words[_MAGIC_W] != MAGIC or seg.words[_NWORKERS_W] != nworkers:
        seg.close()
        raise BenchError(f"{name} is not the segment it was said to be")
    return seg


class Segment:
    """One run's shared memory. Create with Segment.create() in the parent, then fork."""

    def __init__(self, mm: mmap.mmap, name: str, nworkers: int, mailbox_slots: int):
        self.name = name
        self.nworkers = nworkers
        self.mailbox_slots = mailbox_slots
        self._mm = mm
        self._view = memoryview(mm)
        self.words = self._view.cast("q")  # int64 words; for hot loops with *_index()
        self._closed = False
        self._fd: int | None = None  # the creator keeps the file's descriptor (see __reduce__)
        self._owner = 0
        self.rank: int | None = None  # this process's worker rank, once bound (see bind)
        self._labels: dict[int, str] = {}
        n = nworkers
        self._epoch_w = tuple((2 + r) * _WPL for r in range(n))
        self._info_w = tuple((2 + n + r) * _WPL for r in range(n))
        self._handle_b = (2 + 2 * n) * LINE  # byte offset of the handle table
        mailbox_line = 2 + 2 * n + _HANDLE_LINES * n
        self._mail_w = tuple((mailbox_line + s) * _WPL for s in range(mailbox_slots))

    @staticmethod
    def size_for(nworkers: int, mailbox_slots: int) -> int:
        lines = 2 + 2 * nworkers + _HANDLE_LINES * nworkers + mailbox_slots
        page = mmap.PAGESIZE
        return -(-lines * LINE // page) * page

    @classmethod
    def create(cls, nworkers: int, mailbox_slots: int = 16) -> "Segment":
        if nworkers < 1:
            raise ValueError(f"a segment needs at least 1 worker (got {nworkers})")
        if mailbox_slots < 0:
            raise ValueError(f"mailbox_slots must be 0 or more (got {mailbox_slots})")
        size = cls.size_for(nworkers, mailbox_slots)
        mm, path, fd = map_shared_file(size, "shared-memory segment", keep_fd=True)  # type: ignore[misc]
        seg = cls(mm, path, nworkers, mailbox_slots)
        seg._fd, seg._owner = fd, os.getpid()
        w = seg.words
        w[_MAGIC_W], w[_VERSION_W], w[_NWORKERS_W], w[_SLOTS_W] = MAGIC, LAYOUT_VERSION, nworkers, mailbox_slots
        for base in seg._info_w:
            w[base + _DEVICE] = -1
        return seg

    def __repr__(self) -> str:
        return f"Segment({self.name!r}, nworkers={self.nworkers}, mailbox_slots={self.mailbox_slots})"

    def __reduce__(self):
        """A spawned worker or an MPI rank of this node maps the creator's segment again."""
        if self._fd is None:
            raise BenchError("this segment was not created here and cannot be passed on")
        return _attach_segment, (self._owner, self._fd, self.name, self.nworkers, self.mailbox_slots)

    def __enter__(self) -> "Segment":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Unmap (in this process only). Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._fd is not None and self._owner == os.getpid():
            fd, self._fd = self._fd, None
            os.close(fd)
        self.words.release()
        self._view.release()
        try:
            self._mm.close()
        except BufferError:
            pass  # someone still holds a view of it; the mapping goes with the last one

    # -- abort -----------------------------------------------------------------

    def abort(self, code: int = 1) -> None:
        """Release every worker waiting in the barrier or the mailbox with BarrierAborted."""
        self.words[ABORT_INDEX] = code or 1

    @property
    def aborted(self) -> bool:
        return self.words[ABORT_INDEX] != 0

    @property
    def abort_code(self) -> int:
        return self.words[ABORT_INDEX]

    # -- per-worker info -------------------------------------------------------

    def _info(self, rank: int) -> int:
        if not 0 <= rank < self.nworkers:
            raise ValueError(f"rank {rank} out of range (segment has {self.nworkers} workers)")
        return self._info_w[rank]

    def set_pid(self, rank: int, pid: int) -> None:
        self.words[self._info(rank) + _PID] = pid

    def pid(self, rank: int) -> int:
        return self.words[self._info(rank) + _PID]

    def set_device(self, rank: int, device: int | None) -> None:
        self.words[self._info(rank) + _DEVICE] = -1 if device is None else device

    def device(self, rank: int) -> int | None:
        d = self.words[self._info(rank) + _DEVICE]
        return None if d < 0 else d

    def bind(self, rank: int) -> None:
        """Say which worker this process is (after the fork), so that its waits are published."""
        self._info(rank)
        self.rank = rank

    def set_phase(self, rank: int, name: str, nbytes: int = 0, iteration: int = 0, label: str = "") -> None:
        """Say what worker `rank` is doing; also stamps its heartbeat. `label` names what the
        phase measures where the phase alone does not (the ceiling's link, e.g. 'd2d@0')."""
        code = _PHASE_CODE.get(name)
        if code is None:
            raise ValueError(f"unknown phase {name!r}; phases are {', '.join(PHASES)}")
        w, base = self.words, self._info(rank)
        if self._labels.get(rank, "") != label:
            data = label.encode("utf-8", "replace")[:LABEL_BYTES]
            off = (base + _LABEL) * 8
            self._mm[off:off + LABEL_BYTES] = data.ljust(LABEL_BYTES, b"\0")
            self._labels[rank] = label
        w[base + _NBYTES] = nbytes
        w[base + _ITERATION] = iteration
        w[base + _PHASE] = code
        w[base + _HEARTBEAT] = time.monotonic_ns()

    def phase(self, rank: int) -> tuple[str, int, int]:
        w, base = self.words, self._info(rank)
        code = w[base + _PHASE]
        name = PHASES[code] if 0 <= code < len(PHASES) else f"phase#{code}"
        return name, w[base + _NBYTES], w[base + _ITERATION]

    def phase_label(self, rank: int) -> str:
        off = (self._info(rank) + _LABEL) * 8
        return self._mm[off:off + LABEL_BYTES].rstrip(b"\0").decode("utf-8", "replace")

    def beat(self, rank: int) -> None:
        """Stamp worker `rank`'s heartbeat: it is making progress (a row, a progress step)."""
        self.words[self._info(rank) + _HEARTBEAT] = time.monotonic_ns()

    def heartbeat(self, rank: int) -> int:
        """time.monotonic_ns() of worker `rank`'s last sign of progress (0: never)."""
        return self.words[self._info(rank) + _HEARTBEAT]

    def waiting_for(self, rank: int) -> int | None:
        """The rank worker `rank` is waiting for right now (barrier or mailbox), or None."""
        value = self.words[self._info(rank) + _WAITING_FOR]
        return value - 1 if 0 < value <= self.nworkers else None

    def waits_chain(self, rank: int) -> list[int]:
        """`rank`, the worker it waits for, the one that one waits for, ... (no repeats)."""
        chain = [rank]
        other = self.waiting_for(rank)
        while other is not None and other not in chain:
            chain.append(other)
            other = self.waiting_for(other)
        return chain

    def last_progress(self, rank: int) -> float:
        """When worker `rank` last made progress, in time.monotonic() seconds: its own
        heartbeat, or that of the worker it waits for (and so on), whichever is latest.
        A worker that waits for a busy one is not silent."""
        return max(self.heartbeat(r) for r in self.waits_chain(rank)) / 1e9

    def await_word(self, index: int, target: int, timeout: float, others: tuple[int, ...] | list[int] = (),
                   where: str = "the barrier", me: int | None = None, spin_seconds: float = SPIN_SECONDS,
                   yield_seconds: float = YIELD_SECONDS) -> None:
        """Wait until words[index] >= target, for workers `others`. Times out (BarrierTimeout
        naming them) only once none of them has made progress for `timeout` seconds
        (without `others`: after `timeout`); BarrierAborted as soon as the run is aborted.
        While it waits, worker `me` (default: the bound rank) is published as waiting for
        the first of `others`."""
        w = self.words
        start = time.monotonic()
        deadline = start + timeout
        me = self.rank if me is None else me
        mine = None if me is None or not others else self._info(me) + _WAITING_FOR
        if mine is not None:
            w[mine] = others[0] + 1
        try:
            while not spin_wait(w, index, target, deadline, spin_seconds, yield_seconds):
                last = max([start] + [self.last_progress(r) for r in others])
                if time.monotonic() - last >= timeout:
                    raise BarrierTimeout(list(others), timeout, where=where)
                deadline = last + timeout
            if me is not None:  # the wait is over: progress (it lived on the others' until now)
                w[self._info(me) + _HEARTBEAT] = time.monotonic_ns()
        finally:
            if mine is not None:
                w[mine] = 0

    # -- handle table ----------------------------------------------------------

    def _handle_offset(self, rank: int, slot: int) -> int:
        if not 0 <= rank < self.nworkers:
            raise ValueError(f"rank {rank} out of range (segment has {self.nworkers} workers)")
        if not 0 <= slot < HANDLE_SLOTS:
            raise ValueError(f"handle slot {slot} out of range (0..{HANDLE_SLOTS - 1})")
        return self._handle_b + (rank * HANDLE_SLOTS + slot) * HANDLE_BYTES

    def put_handle(self, rank: int, slot: int, data: bytes) -> None:
        """Publish up to 64 bytes (a cudaIpcMemHandle / cudaIpcEventHandle), zero-padded."""
        data = bytes(data)
        if len(data) > HANDLE_BYTES:
            raise ValueError(f"a handle is at most {HANDLE_BYTES} bytes (got {len(data)})")
        off = self._handle_offset(rank, slot)
        self._mm[off:off + HANDLE_BYTES] = data.ljust(HANDLE_BYTES, b"\0")

    def get_handle(self, rank: int, slot: int) -> bytes:
        off = self._handle_offset(rank, slot)
        return self._mm[off:off + HANDLE_BYTES]

    # -- mailbox ---------------------------------------------------------------

    def mailbox_index(self, slot: int) -> int:
        """Index into `words` of mailbox slot `slot`, for hot loops."""
        if not 0 <= slot < self.mailbox_slots:
            raise ValueError(f"mailbox slot {slot} out of range (0..{self.mailbox_slots - 1})")
        return self._mail_w[slot]

    def store(self, slot: int, value: int) -> None:
        self.words[self._mail_w[slot]] = value

    def load(self, slot: int) -> int:
        return self.words[self._mail_w[slot]]

    def wait_until(self, slot: int, target: int, timeout: float,
                   waiting_for: list[int] | None = None, where: str | None = None) -> None:
        """Wait until load(slot) >= target, a value worker(s) `waiting_for` will store.
        BarrierAborted if the run is aborted; BarrierTimeout (naming them, and `where`, a
        name a user can read, like "the producer's 'filled' signal") once they have made
        no progress for `timeout` seconds."""
        index = self.mailbox_index(slot)
        w = self.words
        if w[index] >= target:
            return
        if w[ABORT_INDEX]:
            raise BarrierAborted("run aborted")
        others = tuple(waiting_for or ())
        if where is None:
            where = (f"a hand-off from {', '.join(f'worker {r}' for r in others)}" if others
                     else "a hand-off")
        self.await_word(index, target, timeout, others, where)

    # -- barrier epochs --------------------------------------------------------

    def epoch_index(self, rank: int) -> int:
        """Index into `words` of worker `rank`'s epoch, for the barrier."""
        if not 0 <= rank < self.nworkers:
            raise ValueError(f"rank {rank} out of range (segment has {self.nworkers} workers)")
        return self._epoch_w[rank]

    def epoch(self, rank: int) -> int:
        return self.words[self.epoch_index(rank)]

    def set_epoch(self, rank: int, value: int) -> None:
        self.words[self.epoch_index(rank)] = value

    def epochs(self) -> list[int]:
        w = self.words
        return [w[i] for i in self._epoch_w]

    def waiting_index(self, rank: int) -> int:
        """Index into `words` of worker `rank`'s waiting word: the epoch it waits at
        inside the barrier, 0 when it is not waiting (only that worker writes it)."""
        return self._info(rank) + _WAITING

    def waiting_in_barrier(self, rank: int) -> bool:
        """True when worker `rank` has arrived at the barrier and waits for others:
        its waiting word holds its current epoch, or its epoch is ahead of the smallest
        (it arrived and was stopped before it could write the waiting word)."""
        epoch = self.epoch(rank)
        return self.words[self.waiting_index(rank)] == epoch > 0 or epoch > min(self.epochs())
