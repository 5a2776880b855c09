"""The launcher with real forked processes: rows come back, faults end the run promptly and cleanly."""

import os

import pytest

from gpuipc_bench.errors import WorkerFailed


@pytest.fixture
def run_host(run_scenario):
    """The host scenario through the launcher: (outcome, rows, seconds)."""

    def run(fault=None, timeout=10.0, workers=2, sizes=(64, 4096, 1 << 16), iterations=4, warmup=1):
        return run_scenario("host", fault, sizes=sizes, iterations=iterations, warmup=warmup,
                            timeout=timeout, workers=workers)

    return run


def test_rows_come_back(run_host, no_leaks):
    outcome, rows, _ = run_host()
    assert outcome.ok and outcome.rows == len(rows)
    metrics = {(r["path"], r["metric"]) for r in rows}
    assert metrics == {("host", "bandwidth"), ("ceiling", "bandwidth"), ("host", "latency")}
    bandwidth = [r for r in rows if r["path"] == "host" and r["metric"] == "bandwidth"]
    assert len(bandwidth) == 3 * 4  # 3 sizes x 4 samples, one consumer
    assert all(r["verified"] is True and r["seconds"] > 0 for r in bandwidth)


def test_many_consumers(run_host, no_leaks):
    outcome, rows, _ = run_host(workers=4, sizes=(4096,), iterations=2)
    assert outcome.ok
    timed = [r for r in rows if r["path"] == "host" and r["metric"] == "bandwidth"]
    assert len(timed) == 2 and {r["workers"] for r in timed} == {4}  # timed until the last consumer is done


def test_killed_worker_ends_run_keeps_samples(run_host, no_leaks):
    outcome, rows, elapsed = run_host(fault="kill:1:sample:7", timeout=30)
    assert isinstance(outcome.error, WorkerFailed)
    message = str(outcome.error)
    assert "worker 1 (consumer, CPU) was killed by SIGKILL" in message
    assert "during sample" in message
    assert elapsed < 10, "a dead worker must end the run within seconds, not the timeout"
    kept = [r for r in rows if r["path"] == "host" and r["metric"] == "bandwidth"]
    assert len(kept) >= 4, "samples taken before the death are kept"


@pytest.mark.parametrize("phase", ["setup:1", "barrier:5", "latency:2"])
def test_killed_anywhere(run_host, no_leaks, phase):
    outcome, rows, elapsed = run_host(fault=f"kill:0:{phase}", timeout=30)
    assert "worker 0 (producer, CPU) was killed by SIGKILL" in str(outcome.error)
    assert elapsed < 10


def test_hung_worker_is_named(run_host, no_leaks):
    outcome, rows, elapsed = run_host(fault="hang:1:sample:3", timeout=1.5)
    message = str(outcome.error)
    assert "worker 1" in message and ("did not arrive" in message or "no progress" in message)
    assert elapsed < 1.5 + 6


def test_exception_in_worker(run_host, no_leaks):
    outcome, rows, _ = run_host(fault="raise:1:sample:2")
    assert "RuntimeError: injected fault in phase sample" in str(outcome.error)
    assert "Traceback" in outcome.error.traceback_text


def test_corruption_is_caught(run_host, no_leaks):
    outcome, rows, _ = run_host(fault="corrupt", warmup=0)
    message = str(outcome.error)
    assert "verification failed on path host/shared-buffer at size 64 B" in message
    assert "offset 32" in message
    assert [r for r in rows if r["path"] == "host" and r["metric"] == "bandwidth"] == []  # no figure from bad bytes


def test_driver_files_of_dead_workers_are_removed(tmp_path, monkeypatch):
    from gpuipc_bench.harness import supervision

    shm = tmp_path / "shm"
    shm.mkdir()
    for name in ("cuda.shm.0.3c2.1", "cuda.shm.0.3c3.1", "other.0.3c2.1", "cuda.shm.0.3c2"):
        (shm / name).write_text("")
    real_listdir, real_join = os.listdir, os.path.join
    monkeypatch.setattr(supervision.os, "listdir", lambda p: real_listdir(shm if p == "/dev/shm" else p))
    monkeypatch.setattr(supervision.os.path, "join",
                        lambda a, *b: real_join(str(shm) if a == "/dev/shm" else a, *b))
    supervision.remove_driver_files([0x3C2])
    assert sorted(p.name for p in shm.iterdir()) == ["cuda.shm.0.3c2", "cuda.shm.0.3c3.1", "other.0.3c2.1"]


# --------------------------------------------------------------------------- spawned workers


def test_spawned_workers_meet_in_the_same_segment_and_shared_pages(run_scenario, no_leaks, monkeypatch):
    from gpuipc_bench.scenarios import SCENARIOS, host

    monkeypatch.setattr(type(SCENARIOS["host"]), "start_method", "spawn")
    outcome, rows, _ = run_scenario("host", sizes=(4096, 1 << 16), iterations=3, warmup=1, timeout=30)
    assert outcome.ok, outcome.error
    data = [r for r in rows if r["path"] == "host" and r["metric"] == "bandwidth"]
    assert len(data) == 2 * 3 and all(r["verified"] is True for r in data)  # bytes crossed the shared pages
    assert host.HostScenario.start_method == "spawn"


def test_a_killed_spawned_worker_ends_the_run_naming_it(run_scenario, no_leaks, monkeypatch):
    from gpuipc_bench.scenarios import SCENARIOS

    monkeypatch.setattr(type(SCENARIOS["host"]), "start_method", "spawn")
    outcome, rows, elapsed = run_scenario("host", "kill:1:sample:3", sizes=(4096,), iterations=6, timeout=30)
    assert isinstance(outcome.error, WorkerFailed)
    assert "worker 1 (consumer, CPU) was killed by SIGKILL" in str(outcome.error)
    assert elapsed < 20 and rows
