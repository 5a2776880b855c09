"""The launcher with real forked processes: rows come back, faults end the run promptly and cleanly."""

import os
import time

import pytest

from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import WorkerFailed
from gpuipc_bench.launcher import run_scenario
from gpuipc_bench.scenarios import SCENARIOS

HOST = SCENARIOS["host"]


def run_host(monkeypatch, fault=None, timeout=10.0, workers=2, sizes=(64, 4096, 1 << 16), iterations=4, warmup=1):
    if fault:
        monkeypatch.setenv("GPUIPC_BENCH_FAULT", fault)
    else:
        monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    config = RunConfig(scenarios=("host",), sizes=sizes, iterations=iterations, warmup=warmup,
                       timeout=timeout, workers=workers)
    specs = HOST.workers(config, None)
    rows, steps = [], []
    start = time.monotonic()
    outcome = run_scenario(HOST, config, specs, on_row=rows.append, on_progress=steps.append)
    return outcome, rows, time.monotonic() - start


def test_rows_come_back(monkeypatch, no_leaks):
    outcome, rows, _ = run_host(monkeypatch)
    assert outcome.ok and outcome.rows == len(rows)
    metrics = {(r["path"], r["metric"]) for r in rows}
    assert metrics == {("host", "bandwidth"), ("ceiling", "bandwidth"), ("host", "latency")}
    bandwidth = [r for r in rows if r["path"] == "host" and r["metric"] == "bandwidth"]
    assert len(bandwidth) == 3 * 4  # 3 sizes x 4 samples, one consumer
    assert all(r["verified"] is True and r["seconds"] > 0 for r in bandwidth)


def test_many_consumers(monkeypatch, no_leaks):
    outcome, rows, _ = run_host(monkeypatch, workers=4, sizes=(4096,), iterations=2)
    assert outcome.ok
    timed = [r for r in rows if r["path"] == "host" and r["metric"] == "bandwidth"]
    assert len(timed) == 2 and {r["workers"] for r in timed} == {4}  # timed until the last consumer is done


def test_killed_worker_ends_run_keeps_samples(monkeypatch, no_leaks):
    outcome, rows, elapsed = run_host(monkeypatch, fault="kill:1:sample:7", timeout=30)
    assert isinstance(outcome.error, WorkerFailed)
    message = str(outcome.error)
    assert "worker 1 (consumer, CPU) was killed by SIGKILL" in message
    assert "during sample" in message
    assert elapsed < 10, "a dead worker must end the run within seconds, not the timeout"
    kept = [r for r in rows if r["path"] == "host" and r["metric"] == "bandwidth"]
    assert len(kept) >= 4, "samples taken before the death are kept"


@pytest.mark.parametrize("phase", ["setup:1", "barrier:5", "latency:2"])
def test_killed_anywhere(monkeypatch, no_leaks, phase):
    outcome, rows, elapsed = run_host(monkeypatch, fault=f"kill:0:{phase}", timeout=30)
    assert "worker 0 (producer, CPU) was killed by SIGKILL" in str(outcome.error)
    assert elapsed < 10


def test_hung_worker_is_named(monkeypatch, no_leaks):
    outcome, rows, elapsed = run_host(monkeypatch, fault="hang:1:sample:3", timeout=1.5)
    message = str(outcome.error)
    assert "worker 1" in message and ("did not arrive" in message or "no progress" in message)
    assert elapsed < 1.5 + 6


def test_exception_in_worker(monkeypatch, no_leaks):
    outcome, rows, _ = run_host(monkeypatch, fault="raise:1:sample:2")
    assert "RuntimeError: injected fault in phase sample" in str(outcome.error)
    assert "Traceback" in outcome.error.traceback_text


def test_corruption_is_caught(monkeypatch, no_leaks):
    outcome, rows, _ = run_host(monkeypatch, fault="corrupt", warmup=0)
    message = str(outcome.error)
    assert "verification failed on path host/shared-buffer at size 64 B" in message
    assert "offset 32" in message
    assert [r for r in rows if r["path"] == "host" and r["metric"] == "bandwidth"] == []  # no figure from bad bytes


def test_driver_files_of_dead_workers_are_removed(tmp_path, monkeypatch):
    from gpuipc_bench import launcher

    shm = tmp_path / "shm"
    shm.mkdir()
    for name in ("cuda.shm.0.3c2.1", "cuda.shm.0.3c3.1", "other.0.3c2.1", "cuda.shm.0.3c2"):
        (shm / name).write_text("")
    real_listdir, real_join = os.listdir, os.path.join
    monkeypatch.setattr(launcher.os, "listdir", lambda p: real_listdir(shm if p == "/dev/shm" else p))
    monkeypatch.setattr(launcher.os.path, "join",
                        lambda a, *b: real_join(str(shm) if a == "/dev/shm" else a, *b))
    launcher._remove_driver_files([0x3C2])
    assert sorted(p.name for p in shm.iterdir()) == ["cuda.shm.0.3c2", "cuda.shm.0.3c3.1", "other.0.3c2.1"]
