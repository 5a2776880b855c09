"""The shared-memory segment: creation that cannot be hijacked or leak, and its fields."""

from __future__ import annotations

import glob
import multiprocessing
import os
import stat
import time

import pytest

from gpuipc_bench.ipc import segment as segment_mod
from gpuipc_bench.errors import BarrierAborted, BarrierTimeout, BenchError
from gpuipc_bench.ipc.segment import HANDLE_SLOTS, LINE, PHASES, PREFIX, Segment

CTX = multiprocessing.get_context("fork")


def _ours() -> set[str]:
    return set(glob.glob(os.path.join(segment_mod.shm_dir(), PREFIX + "*")))


# -- creation -----------------------------------------------------------------------------


def test_created_0600_and_unlinked_at_once(monkeypatch):
    seen = []
    real_unlink = os.unlink

    def unlink(path, *a, **k):
        st = os.lstat(path)
        seen.append((path, stat.S_IMODE(st.st_mode), stat.S_ISREG(st.st_mode)))
        return real_unlink(path, *a, **k)

    monkeypatch.setattr(os, "unlink", unlink)
    seg = Segment.create(2)
    try:
        assert len(seen) == 1
        path, mode, regular = seen[0]
        assert path == seg.name
        assert os.path.basename(path).startswith(PREFIX)
        assert mode == 0o600 and regular
        assert not os.path.lexists(path)  # gone before create() returned
    finally:
        seg.close()


def test_nothing_left_behind():
    before = _ours()
    seg = Segment.create(4, mailbox_slots=8)
    assert not os.path.lexists(seg.name)
    assert _ours() <= before
    seg.close()
    seg.close()  # idempotent
    assert _ours() <= before


@pytest.fixture
def predicted(monkeypatch):
    """The path the next Segment.create() will try; removed afterwards."""
    token = "planted" + os.urandom(4).hex()
    monkeypatch.setattr(segment_mod, "_token", lambda: token)
    path = os.path.join(segment_mod.shm_dir(), PREFIX + token)
    yield path
    if os.path.lexists(path):
        os.remove(path)


def test_planted_file_refused_and_untouched(predicted):
    with open(predicted, "wb") as f:
        f.write(b"planted")
    os.chmod(predicted, 0o644)
    with pytest.raises(BenchError, match="already exists"):
        Segment.create(2)
    with open(predicted, "rb") as f:
        assert f.read() == b"planted"
    assert stat.S_IMODE(os.stat(predicted).st_mode) == 0o644


def test_planted_symlink_refused_and_target_untouched(predicted, tmp_path):
    target = tmp_path / "victim"
    target.write_bytes(b"do not truncate me")
    os.symlink(target, predicted)
    with pytest.raises(BenchError, match="already exists"):
        Segment.create(2)
    assert os.readlink(predicted) == str(target)
    assert target.read_bytes() == b"do not truncate me"


def test_planted_dangling_symlink_creates_nothing(predicted, tmp_path):
    target = tmp_path / "would-be-created"
    os.symlink(target, predicted)
    with pytest.raises(BenchError):
        Segment.create(2)
    assert not target.exists()


def test_falls_back_to_temp_dir(monkeypatch, tmp_path):
    monkeypatch.setattr(segment_mod, "shm_dir", lambda: str(tmp_path))
    with Segment.create(2) as seg:
        assert seg.name.startswith(str(tmp_path))
        assert list(tmp_path.iterdir()) == []


def test_bad_sizes_refused():
    with pytest.raises(ValueError):
        Segment.create(0)
    with pytest.raises(ValueError):
        Segment.create(2, mailbox_slots=-1)


def test_names_are_unpredictable():
    """64 bits from the system's CSPRNG in every name: a name seen once says nothing of the next."""
    names = []
    for _ in range(64):
        with Segment.create(1) as seg:
            names.append(os.path.basename(seg.name))
    assert len(set(names)) == len(names)
    tokens = [n[len(PREFIX):] for n in names]
    assert all(len(t) == 16 and all(c in "0123456789abcdef" for c in t) for t in tokens)
    # every hex digit position varies across the names (a counter or a pid would not)
    assert all(len({t[i] for t in tokens}) > 4 for i in range(16))


def test_a_failed_create_leaves_nothing(monkeypatch):
    """/dev/shm is full: the pages are allocated up front, so the error is one line naming
    the folder and the bytes needed (not a SIGBUS at the first write), and no name is left."""
    before = _ours()

    def full(fd, offset, size):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(segment_mod.os, "posix_fallocate", full)
    with pytest.raises(BenchError) as info:
        Segment.create(2)
    message = str(info.value)
    assert message.startswith(f"{segment_mod.shm_dir()} is full: the shared-memory segment needs "
                              f"{Segment.size_for(2, 16)} bytes"), message
    assert "\n" not in message
    assert _ours() <= before


class _Inspect:
    """A scenario whose workers look at their own segment while the run is alive."""

    name = "inspect"
    gpus_needed = 0

    def default_sizes(self):
        return (1,)

    def mailbox_slots(self, config, specs):
        return 1

    def prepare(self, config, specs):
        return None

    def release(self, shared):
        pass

    def progress_total(self, config, specs):
        return 1

    def run(self, ctx):
        name = ctx.segment.name
        try:
            os.close(os.open(name, os.O_RDWR))
            attach = "opened"
        except FileNotFoundError:
            attach = "no such file"
        with open("/proc/self/maps") as fh:
            maps = [line.split() for line in fh if name in line]
        ctx.sync()  # both have looked while both are alive
        yield {"rank": ctx.rank, "exists": os.path.lexists(name), "attach": attach,
               "maps": [(fields[1], " ".join(fields[5:])) for fields in maps]}


def test_nobody_can_attach_while_a_run_is_alive():
    """Inside a live run the segment has no name: another process (any user) cannot open it;
    the workers reach it only through the mapping they inherited, shown as deleted."""
    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.harness.launcher import run_scenario
    from gpuipc_bench.engine.scenario import Scenario, WorkerSpec

    scenario = type("Inspect", (_Inspect, Scenario), {})()
    specs = [WorkerSpec(0, "producer", None), WorkerSpec(1, "consumer", None)]
    rows = []
    outcome = run_scenario(scenario, RunConfig(scenarios=("inspect",), timeout=10), specs, on_row=rows.append)
    assert outcome.ok, outcome.error
    assert sorted(r["rank"] for r in rows) == [0, 1]
    for row in rows:
        assert row["exists"] is False and row["attach"] == "no such file"
        assert len(row["maps"]) == 1
        perms, path = row["maps"][0]
        assert perms == "rw-s" and path.endswith("(deleted)"), row["maps"]


# -- layout ---------------------------------------------------------------------------------


def test_hot_words_on_lines_of_their_own():
    with Segment.create(5, mailbox_slots=7) as seg:
        hot = [segment_mod.ABORT_INDEX]
        hot += [seg.epoch_index(r) for r in range(5)]
        hot += [seg.mailbox_index(s) for s in range(7)]
        lines = [i * 8 // LINE for i in hot]
        assert all(i * 8 % LINE == 0 for i in hot)
        assert len(set(lines)) == len(lines)
        handle_lines = {(seg._handle_offset(r, s) + k) // LINE for r in range(5) for s in range(4) for k in (0, 63)}
        assert not handle_lines & set(lines)
        assert max(lines) * LINE + LINE <= len(seg._mm)
        w = seg.words
        assert (w[0], w[1], w[2], w[3]) == (segment_mod.MAGIC, segment_mod.LAYOUT_VERSION, 5, 7)


# -- fields ----------------------------------------------------------------------------------


def test_handle_round_trip():
    with Segment.create(3) as seg:
        full = bytes(range(64))
        seg.put_handle(1, 0, full)
        seg.put_handle(1, 1, b"\xff" * 10)
        seg.put_handle(2, 3, b"x")
        assert seg.get_handle(1, 0) == full
        assert seg.get_handle(1, 1) == b"\xff" * 10 + b"\0" * 54
        assert seg.get_handle(2, 3) == b"x" + b"\0" * 63
        assert seg.get_handle(0, 0) == b"\0" * 64
        seg.put_handle(1, 0, b"short")  # a shorter handle clears the rest
        assert seg.get_handle(1, 0) == b"short" + b"\0" * 59
        with pytest.raises(ValueError):
            seg.put_handle(0, 0, b"x" * 65)
        with pytest.raises(ValueError):
            seg.put_handle(0, HANDLE_SLOTS, b"x")
        with pytest.raises(ValueError):
            seg.get_handle(3, 0)


def test_phase_round_trip():
    with Segment.create(2) as seg:
        assert seg.phase(1) == ("idle", 0, 0)
        assert seg.heartbeat(1) == 0
        for i, name in enumerate(PHASES):
            t0 = time.monotonic_ns()
            seg.set_phase(1, name, nbytes=1 << (i + 20), iteration=i)
            assert seg.phase(1) == (name, 1 << (i + 20), i)
            assert t0 <= seg.heartbeat(1) <= time.monotonic_ns()
        assert seg.phase(0) == ("idle", 0, 0)
        with pytest.raises(ValueError, match="unknown phase"):
            seg.set_phase(0, "napping")


def test_pid_and_device():
    with Segment.create(2) as seg:
        assert seg.device(0) is None and seg.pid(0) == 0
        seg.set_pid(0, 4242)
        seg.set_device(0, 0)
        seg.set_device(1, 3)
        assert (seg.pid(0), seg.device(0), seg.device(1)) == (4242, 0, 3)
        seg.set_device(1, None)
        assert seg.device(1) is None
        with pytest.raises(ValueError):
            seg.set_pid(2, 1)


def test_abort_word():
    with Segment.create(2) as seg:
        assert not seg.aborted and seg.abort_code == 0
        seg.abort(3)
        assert seg.aborted and seg.abort_code == 3
    with Segment.create(2) as seg:
        seg.abort(0)  # 0 would mean "running": still aborts
        assert seg.aborted


def test_mailbox_and_wait_until():
    with Segment.create(2, mailbox_slots=6) as seg:
        seg.store(5, -7)
        assert seg.load(5) == -7
        seg.store(5, 1 << 62)
        seg.wait_until(5, 1 << 62, timeout=1)  # already there: returns at once
        t0 = time.monotonic()
        with pytest.raises(BarrierTimeout) as info:
            seg.wait_until(4, 1, timeout=0.05, waiting_for=[1])
        assert 0.05 <= time.monotonic() - t0 < 2
        assert info.value.missing == [1]
        assert str(info.value) == "worker 1 made no progress for 0.05 s (awaited at a hand-off from worker 1)"
        with pytest.raises(BarrierTimeout, match="awaited at the producer's 'filled' signal"):
            seg.wait_until(4, 1, timeout=0.05, waiting_for=[1], where="the producer's 'filled' signal")
        with pytest.raises(ValueError):
            seg.wait_until(6, 1, timeout=0.01)
        seg.abort()
        with pytest.raises(BarrierAborted):
            seg.wait_until(4, 1, timeout=10)


def _late_store(seg):
    time.sleep(0.05)
    seg.set_pid(1, os.getpid())
    seg.store(0, 7)
    time.sleep(60)  # killed by the test


def test_forked_child_shares_the_mapping():
    with Segment.create(2, mailbox_slots=1) as seg:
        p = CTX.Process(target=_late_store, args=(seg,), daemon=True)
        p.start()
        try:
            seg.wait_until(0, 7, timeout=10, waiting_for=[1])
            assert seg.load(0) == 7
            assert seg.pid(1) == p.pid
        finally:
            p.kill()
            p.join()


def test_close_releases_the_views():
    seg = Segment.create(2)
    seg.close()
    with pytest.raises(ValueError):
        seg.load(0)


# -- properties -------------------------------------------------------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402

_INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@settings(max_examples=100, deadline=None)
@given(writes=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.binary(max_size=64)), max_size=12))
def test_handles_never_overlap(writes):
    with Segment.create(3) as seg:
        expected = {}
        for rank, slot, data in writes:
            seg.put_handle(rank, slot, data)
            expected[rank, slot] = data.ljust(64, b"\0")
        for rank in range(3):
            for slot in range(4):
                assert seg.get_handle(rank, slot) == expected.get((rank, slot), b"\0" * 64)


@settings(max_examples=100, deadline=None)
@given(phase=st.sampled_from(PHASES), nbytes=_INT64, iteration=_INT64, value=_INT64)
def test_fields_hold_any_int64(phase, nbytes, iteration, value):
    with Segment.create(2, mailbox_slots=1) as seg:
        seg.set_phase(1, phase, nbytes, iteration)
        seg.store(0, value)
        assert seg.phase(1) == (phase, nbytes, iteration)
        assert seg.phase(0) == ("idle", 0, 0)
        assert seg.load(0) == value
        assert seg.epochs() == [0, 0] and not seg.aborted


# -- timeouts bound a silence -----------------------------------------------------------------


def _busy_then_store(seg, seconds):
    """Worker 1: busy (beating every 50 ms) for `seconds`, then stores the awaited value."""
    seg.bind(1)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        seg.set_phase(1, "ceiling", 64 << 20, 0, label="memcpy@host")
        time.sleep(0.05)
    seg.store(0, 1)
    time.sleep(60)  # killed by the test


def test_a_wait_outlasts_its_timeout_while_the_other_makes_progress():
    with Segment.create(2, mailbox_slots=1) as seg:
        p = CTX.Process(target=_busy_then_store, args=(seg, 1.0), daemon=True)
        p.start()
        try:
            t0 = time.monotonic()
            seg.wait_until(0, 1, timeout=0.3, waiting_for=[1])  # 1 s of progress, 0.3 s timeout
            assert time.monotonic() - t0 >= 0.9
            assert seg.phase(1) == ("ceiling", 64 << 20, 0) and seg.phase_label(1) == "memcpy@host"
        finally:
            p.kill()
            p.join()


def test_a_waiting_worker_is_published_and_lives_on_the_progress_of_whom_it_waits_for():
    with Segment.create(3, mailbox_slots=1) as seg:
        seg.bind(0)
        seen = []

        def look():
            seg.beat(2)  # worker 0 itself is silent, but the one it waits for is not
            seen.append((seg.waiting_for(0), seg.waits_chain(0), abs(seg.last_progress(0) - time.monotonic()) < 1))

        import threading

        timer = threading.Timer(0.05, look)
        timer.start()
        with pytest.raises(BarrierTimeout):
            seg.wait_until(0, 1, timeout=0.2, waiting_for=[2])
        timer.join()
        assert seen == [(2, [0, 2], True)]
        assert seg.waiting_for(0) is None and seg.waits_chain(0) == [0]
