"""The descriptor channel (gpuipc_bench.ipc.fdpass): real Unix sockets, real descriptors."""

from __future__ import annotations

import multiprocessing
import os
import secrets
import time

import pytest

from gpuipc_bench.errors import BarrierAborted, BenchError
from gpuipc_bench.ipc.fdpass import FdChannel


@pytest.fixture
def run_name():
    return f"gpuipc-bench-test-{secrets.token_hex(4)}"


def memfd_with(text: bytes) -> int:
    fd = os.memfd_create("test")
    os.write(fd, text)
    return fd


def test_a_descriptor_reaches_the_other_worker_and_names_sort_out_of_order(run_name):
    a, b = FdChannel(run_name, 0, timeout=2), FdChannel(run_name, 1, timeout=2)
    try:
        first, second = memfd_with(b"first"), memfd_with(b"second")
        a.send(1, "ring", first)
        a.send(1, "pool", second)
        os.close(first)
        os.close(second)
        pool = b.receive(0, "pool")  # asked for the second one first
        ring = b.receive(0, "ring")
        assert os.pread(pool, 16, 0) == b"second" and os.pread(ring, 16, 0) == b"first"
        os.close(pool)
        os.close(ring)
    finally:
        a.close()
        b.close()


def test_a_descriptor_crosses_a_fork(run_name):
    ours = FdChannel(run_name, 1, timeout=5)

    def child():
        channel = FdChannel(run_name, 0, timeout=5)
        fd = memfd_with(b"from the child")
        channel.send(1, "ring", fd)
        os._exit(0)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    try:
        fd = ours.receive(0, "ring")
        assert os.pread(fd, 32, 0) == b"from the child"
        os.close(fd)
    finally:
        process.join(5)
        ours.close()
    assert process.exitcode == 0


def test_a_receive_that_gets_nothing_times_out_naming_the_peer(run_name):
    channel = FdChannel(run_name, 1, timeout=0.3)
    start = time.monotonic()
    with pytest.raises(BenchError, match="no ring descriptor from worker 0 within 0.3 s"):
        channel.receive(0, "ring")
    assert time.monotonic() - start < 2
    channel.close()


def test_a_peer_that_dies_mid_exchange_releases_the_receiver_through_the_abort_word(run_name):
    """The peer is killed before it sends; the launcher then sets the abort word, which the
    waiting receiver sees within a poll interval (here: a flag in shared memory)."""
    aborted = multiprocessing.get_context("fork").Value("b", 0)
    channel = FdChannel(run_name, 1, timeout=30, aborted=lambda: bool(aborted.value))

    def doomed():
        FdChannel(run_name, 0, timeout=5)
        time.sleep(30)

    process = multiprocessing.get_context("fork").Process(target=doomed)
    process.start()
    time.sleep(0.2)
    process.kill()
    process.join()
    aborted.value = 1  # what the launcher does when a worker dies
    start = time.monotonic()
    with pytest.raises(BarrierAborted):
        channel.receive(0, "ring")
    assert time.monotonic() - start < 1
    channel.close()


def test_a_send_to_a_worker_that_never_opened_its_channel_fails_in_one_line(run_name):
    channel = FdChannel(run_name, 0, timeout=0.2)
    fd = memfd_with(b"x")
    with pytest.raises(BenchError, match="cannot send the ring descriptor to worker 1"):
        channel.send(1, "ring", fd)
    os.close(fd)
    channel.close()


def test_two_channels_of_one_rank_in_one_run_are_refused(run_name):
    channel = FdChannel(run_name, 0, timeout=1)
    with pytest.raises(BenchError, match="cannot open the descriptor channel of worker 0"):
        FdChannel(run_name, 0, timeout=1)
    channel.close()


def test_close_closes_descriptors_that_were_never_asked_for(run_name):
    a, b = FdChannel(run_name, 0, timeout=1), FdChannel(run_name, 1, timeout=1)
    fd = memfd_with(b"x")
    a.send(1, "extra", fd)
    a.send(1, "ring", fd)
    os.close(fd)
    os.close(b.receive(0, "ring"))  # 'extra' arrived first and waits in pending
    (leftover,) = b.pending.values()
    b.close()
    a.close()
    with pytest.raises(OSError):
        os.fstat(leftover)
