"""GPU tests of the sharing scenario: N processes on one GPU, time-sliced and (where
nvidia-cuda-mps-control is on PATH) under a private MPS daemon that must be gone afterwards.

They skip with the reason where there is no GPU; the MPS checks skip with the reason where the
MPS half is waived (no binary, or a daemon that cannot serve here).
"""

from __future__ import annotations

import collections
import os
import statistics
from pathlib import Path

import pytest

from gpuipc_bench import mps
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import WorkerFailed
from gpuipc_bench.launcher import run_scenario
from gpuipc_bench.scenarios.sharing import SharingScenario

MiB = 1 << 20


class Capturing(SharingScenario):
    """Remembers the daemon's pid and folders, to check that release() removed them."""

    def prepare(self, config, specs):
        shared = super().prepare(config, specs)
        daemon = shared.daemon
        self.seen = dict(pid=daemon.pid if daemon else None,
                         pipe_dir=daemon.pipe_dir if daemon else None,
                         dirs=[shared.nomps_dir] + ([daemon.pipe_dir, daemon.log_dir] if daemon else []))
        return shared


def run(monkeypatch, fault=None, **overrides):
    if fault:
        monkeypatch.setenv("GPUIPC_BENCH_FAULT", fault)
    else:
        monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    settings = dict(scenarios=("sharing",), workers=2, sizes=(MiB + 16,), iterations=3, warmup=1, timeout=60.0)
    settings.update(overrides)
    config = RunConfig(**settings)
    scenario = Capturing()
    rows: list[dict] = []
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append)
    return outcome, rows, scenario.seen


def processes_of(pipe_dir: str) -> list[int]:
    """Live processes whose environment names this pipe directory (the daemon, its server)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            if mps.belongs_to(int(entry.name), pipe_dir) and mps.alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def check_cleanup(seen):
    if seen["pid"]:
        assert not mps.alive(seen["pid"]), "the MPS control daemon is still running"
        assert processes_of(seen["pipe_dir"]) == [], "a process of the private MPS daemon is left"
    for folder in seen["dirs"]:
        assert not os.path.exists(folder), f"{folder} was not removed"


def one_way(rows, mode, variant):
    return statistics.median(r["seconds"] for r in rows if r["sharing"] == mode and r["variant"] == variant)


@pytest.mark.gpu
def test_sharing_time_sliced_and_mps(monkeypatch, no_leaks, capsys):
    outcome, rows, seen = run(monkeypatch)
    check_cleanup(seen)
    assert outcome.ok, outcome.error
    modes = {r["sharing"] for r in rows}
    assert "time-sliced" in modes and modes <= {"time-sliced", "mps"}
    for mode in modes:
        mine = [r for r in rows if r["sharing"] == mode]
        got = collections.Counter((r["path"], r["variant"], r["workers"]) for r in mine)
        for transfer in ("d2d", "h2d"):
            assert got[("sharing", transfer, 1)] == 3 and got[("sharing", transfer, 2)] == 6
            assert got[("sharing", f"{transfer}-aggregate", 1)] == 3
            assert got[("sharing", f"{transfer}-aggregate", 2)] == 3
            assert got[("ceiling", f"{transfer}@0", 1)] == 3
        assert got[("ipc", "device-pingpong", 2)] == 3 and got[("ipc", "device-ll", 2)] == 3
        for r in mine:
            assert r["scenario"] == "sharing" and r["seconds"] > 0 and r["verified"] is True
            if r["path"] == "sharing":
                assert r["bandwidth_gbps"] > 0.5 and r["ceiling"] == f"{r['variant'].split('-')[0]}@0"
        aggregate = [r for r in mine if r["variant"] == "d2d-aggregate" and r["workers"] == 2]
        assert all(r["bytes"] == 2 * (MiB + 16) for r in aggregate)
    # Without MPS each hop waits for the other context's time slice.
    assert one_way(rows, "time-sliced", "device-pingpong") > 20e-6
    if mps.find_binary() is None:
        assert "mps" not in modes
        pytest.skip("nvidia-cuda-mps-control is not on PATH: the MPS half was waived")
    if "mps" not in modes:
        err = capsys.readouterr().err
        pytest.skip("the MPS half was waived here: " + err.strip().splitlines()[-1] if err.strip() else "?")
    assert seen["pid"], "the private daemon was started"
    assert one_way(rows, "mps", "device-pingpong") < 100e-6
    assert one_way(rows, "mps", "device-ll") < 100e-6


@pytest.mark.gpu
def test_sharing_catches_corruption_and_still_stops_the_daemon(monkeypatch, no_leaks):
    outcome, rows, seen = run(monkeypatch, fault="corrupt", iterations=1, warmup=0)
    check_cleanup(seen)
    assert isinstance(outcome.error, WorkerFailed)
    assert "verification failed on path sharing/" in str(outcome.error)
