"""CPU tests of the private MPS daemon (gpuipc_bench/mps.py), with a stand-in binary, and of the
pure parts of the latency and sharing scenarios; their orchestration (barriers, roles, rows,
the MPS half's decisions) runs here with fake CUDA objects (tests/fake_cuda.py)."""

from __future__ import annotations

import collections
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import fake_cuda
from gpuipc_bench import cuda, mps
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import UsageError
from gpuipc_bench.launcher import run_scenario
from gpuipc_bench.scenarios import SCENARIOS, latency, sharing

FAKE = Path(__file__).parent / "data" / "fake-nvidia-cuda-mps-control"


@pytest.fixture
def fake_mps(monkeypatch, tmp_path):
    """A stand-in nvidia-cuda-mps-control first on PATH; temporary folders under tmp_path."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / mps.BINARY).symlink_to(FAKE)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    for var in ("FAKE_MPS_MODE", "FAKE_MPS_SERVER", mps.PIPE_ENV, mps.LOG_ENV):
        monkeypatch.delenv(var, raising=False)
    # The fake exits at once; don't wait as long as for a real daemon (nor for init to reap it).
    monkeypatch.setattr(mps, "END_GRACE_S", 0.3)
    monkeypatch.setattr(mps, "REAP_WAIT_S", 0.2)
    return temp


@pytest.fixture
def no_mps(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    return tmp_path


def ours(temp: Path) -> list[str]:
    return sorted(p.name for p in temp.iterdir() if p.name.startswith(mps.PREFIX))


# --------------------------------------------------------------------------- commands


def test_commands_and_environment():
    assert mps.start_command("/usr/bin/nvidia-cuda-mps-control") == ["/usr/bin/nvidia-cuda-mps-control", "-d"]
    assert mps.control_command("nvidia-cuda-mps-control") == ["nvidia-cuda-mps-control"]
    env = mps.daemon_env("/p", "/l", base={"PATH": "/bin", mps.PIPE_ENV: "/tmp/nvidia-mps"})
    assert env == {"PATH": "/bin", mps.PIPE_ENV: "/p", mps.LOG_ENV: "/l"}
    daemon = mps.MpsDaemon("x", "/p", "/l")
    assert daemon.env() == {mps.PIPE_ENV: "/p", mps.LOG_ENV: "/l"}
    assert mps.parse_pids("123\n 456 \nServer 7 not found\n\n0\n") == [123, 456]


def test_not_on_path(no_mps):
    assert mps.find_binary() is None
    with pytest.raises(mps.MpsUnavailable, match="^nvidia-cuda-mps-control is not on PATH$"):
        mps.MpsDaemon.start()


def test_stale_pipe_directory_is_refused(fake_mps, tmp_path):
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    assert mps.stale_reason(pipe) is None
    (pipe / "control").touch()
    (pipe / mps.PID_FILE).write_text("999999\n")
    with pytest.raises(mps.MpsUnavailable, match="already holds control and nvidia-cuda-mps-control.pid"):
        mps.MpsDaemon.start(pipe_dir=str(pipe), log_dir=str(tmp_path))
    assert (pipe / "control").exists(), "a directory we did not make is left alone"


# --------------------------------------------------------------------------- the daemon's life


def test_start_and_stop(fake_mps, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_SERVER", "4242")
    daemon = mps.MpsDaemon.start()
    try:
        assert daemon.running() and mps.belongs_to(daemon.pid, daemon.pipe_dir)
        assert Path(daemon.pipe_dir).is_dir() and Path(daemon.log_dir).is_dir()
        assert oct(os.stat(daemon.pipe_dir).st_mode & 0o777) == "0o700"
        assert daemon.server_pids() == [4242] and 4242 in daemon.known_servers
        assert mps.stale_reason(daemon.pipe_dir) is not None
    finally:
        pid = daemon.pid
        problems = daemon.stop()
    assert problems == []
    assert not mps.alive(pid), "the daemon is gone"
    assert ours(fake_mps) == [], "its folders are removed"


@pytest.mark.parametrize("mode, message", [
    ("fail", r"nvidia-cuda-mps-control -d exited with code 3: fake: cannot start the daemon"),
    ("nopid", r"the MPS control daemon did not start within 0.5 s"),
])
def test_a_daemon_that_does_not_start_leaves_nothing(fake_mps, monkeypatch, mode, message):
    monkeypatch.setenv("FAKE_MPS_MODE", mode)
    with pytest.raises(mps.MpsUnavailable, match=message):
        mps.MpsDaemon.start(timeout=0.5)
    assert ours(fake_mps) == []


def test_a_daemon_that_ignores_quit_is_killed_by_pid(fake_mps, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_MODE", "stubborn")
    daemon = mps.MpsDaemon.start()
    pid = daemon.pid
    assert daemon.stop(timeout=0.5) == []
    assert not mps.alive(pid)
    assert ours(fake_mps) == []


def test_a_recycled_pid_is_never_signalled(fake_mps, monkeypatch):
    daemon = mps.MpsDaemon.start()
    try:
        assert mps.belongs_to(daemon.pid, daemon.pipe_dir)
        assert not mps.belongs_to(os.getpid(), daemon.pipe_dir)
        daemon.known_servers.add(os.getpid())  # as if a server's pid had been recycled to us
        monkeypatch.setattr(mps.time, "sleep", lambda s: None)  # don't wait 2 s for us to go
    finally:
        problems = daemon.stop(timeout=0.5)
    assert problems == [f"process {os.getpid()} of the MPS daemon did not exit, and is not ours to signal"]


# --------------------------------------------------------------------------- the daemon never outlives the run


def start_in_a_child(temp: Path) -> tuple[subprocess.Popen, int, int, str]:
    """A process that starts a private daemon (the fake) and then waits to be killed:
    (the process, the daemon's pid, its guard's pid, the pipe directory)."""
    code = ("import time; from gpuipc_bench import mps; d = mps.MpsDaemon.start(); "
            "print(d.pid, d.guard.pid, d.pipe_dir, flush=True); time.sleep(120)")
    env = dict(os.environ, TMPDIR=str(temp), PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    daemon_pid, guard_pid, pipe_dir = child.stdout.readline().split()
    return child, int(daemon_pid), int(guard_pid), pipe_dir


def gone_within(seconds: float, *pids: int) -> bool:
    deadline = time.monotonic() + seconds
    while any(mps.alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(mps.alive(pid) for pid in pids)


def test_the_guard_stops_the_daemon_of_a_killed_run(fake_mps):
    """Issue 12 item 5: SIGKILL of the run (no cleanup of its own runs) still stops the daemon."""
    child, daemon_pid, guard_pid, _ = start_in_a_child(fake_mps)
    assert mps.alive(daemon_pid) and mps.alive(guard_pid)
    child.kill()
    child.wait()
    start = time.monotonic()
    assert gone_within(5, daemon_pid, guard_pid), "the daemon (or its guard) outlived the run by 5 s"
    assert time.monotonic() - start < 5
    assert ours(fake_mps) == [], "and its folders are removed"


def test_a_stale_daemon_of_an_earlier_run_is_stopped_and_named(fake_mps):
    """The guard was killed too (say, the whole session was SIGKILLed): the next run finds
    the daemon, whose owner is gone, stops it and says so."""
    child, daemon_pid, guard_pid, _ = start_in_a_child(fake_mps)
    os.kill(guard_pid, signal.SIGKILL)
    child.kill()
    child.wait()
    assert gone_within(5, guard_pid) and mps.alive(daemon_pid)
    assert mps.stop_stale_daemons() == [
        f"stopped the private MPS daemon (pid {daemon_pid}) that an earlier run (pid {child.pid}) left running"]
    assert not mps.alive(daemon_pid)
    assert ours(fake_mps) == []
    assert mps.stop_stale_daemons() == []


def test_a_live_run_s_daemon_is_not_stale(fake_mps):
    daemon = mps.MpsDaemon.start()
    try:
        assert mps.stop_stale_daemons() == [] and daemon.running()
    finally:
        guard = daemon.guard
        daemon.stop()
    assert guard.poll() is not None, "the guard leaves with the daemon it guarded"


def test_run_stops_a_stale_daemon_and_says_so(fake_mps, tmp_path, no_leaks):
    child, daemon_pid, guard_pid, _ = start_in_a_child(fake_mps)
    os.kill(guard_pid, signal.SIGKILL)
    child.kill()
    child.wait()
    from click.testing import CliRunner

    from gpuipc_bench.cli import cli

    result = CliRunner().invoke(cli, ["run", "-s", "barrier", "-n", "1", "--warmup", "0",
                                      "--out", str(tmp_path / "r.csv")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert (f"note: stopped the private MPS daemon (pid {daemon_pid}) that an earlier run (pid {child.pid}) "
            "left running") in " ".join(result.output.split())
    assert not mps.alive(daemon_pid)


def test_serves_this_process(fake_mps, tmp_path):
    assert not mps.serves_this_process({mps.PIPE_ENV: str(tmp_path / "nothing")})
    daemon = mps.MpsDaemon.start()
    try:
        assert mps.serves_this_process({mps.PIPE_ENV: daemon.pipe_dir})
        assert not mps.serves_this_process({mps.PIPE_ENV: str(tmp_path)}), "a daemon elsewhere does not count"
        assert cuda.sharing_mode([0, 1]) == "exclusive"
    finally:
        pipe_dir = daemon.pipe_dir
        daemon.stop()
    assert not mps.serves_this_process({mps.PIPE_ENV: pipe_dir})


# --------------------------------------------------------------------------- pure parts of the scenarios


def test_rounds_for():
    assert latency.rounds_for(1e-6) == latency.MAX_ROUNDS
    assert latency.rounds_for(4.4e-3) == 22  # time-sliced: ~2.2 ms a hop
    assert latency.rounds_for(1.0) == latency.MIN_ROUNDS
    assert latency.rounds_for(0.0) == latency.MAX_ROUNDS
    assert latency.rounds_for(float("nan")) == latency.MAX_ROUNDS
    assert latency.rounds_for(1e-3, hi=200) == 100


def test_spin_limits():
    assert latency.spin_limits(RunConfig(scenarios=("latency",))) == (5.0, 30.0)
    assert latency.spin_limits(RunConfig(scenarios=("latency",), timeout=4)) == (2.0, 2.0)
    assert latency.spin_limits(RunConfig(scenarios=("latency",), extra=(("spin_timeout", "0.5"),)))[0] == 0.5
    with pytest.raises(UsageError):
        latency.spin_limits(RunConfig(scenarios=("latency",), extra=(("spin_timeout", "0"),)))


def test_layout_and_threads():
    from gpuipc_bench import cuda

    layout = latency.Layout(4099)
    assert layout.payload_cap == 4352 and layout.ll_offset == 256 + 4352
    assert layout.ll_cap >= cuda.ll_words(4099) * 8 and layout.total % 256 == 0
    assert latency.Layout(0).total == 3 * 256
    assert cuda.ll_words(4) == 1 and cuda.ll_words(5) == 2
    assert cuda.pingpong_threads(0) == 32 and cuda.pingpong_threads(4096) == 256
    assert cuda.pingpong_threads(4096, ll=True) == 1024 and cuda.pingpong_threads(1 << 20) == 1024


def test_latency_workers_and_sizes():
    scenario = SCENARIOS["latency"]
    one = scenario.workers(RunConfig(scenarios=("latency",)), None)
    assert [(s.rank, s.device) for s in one] == [(0, 0), (1, 0)]
    two = scenario.workers(RunConfig(scenarios=("latency",), devices=(1, 0)), None)
    assert [s.device for s in two] == [1, 0]
    with pytest.raises(UsageError, match="takes one GPU"):
        scenario.workers(RunConfig(scenarios=("latency",), devices=(0, 1, 2)), None)
    config = RunConfig(scenarios=("latency",), sizes=(4, 1 << 20, 1 << 21))
    assert latency.latency_sizes(config, scenario.default_sizes()) == (4, 1 << 20)
    assert latency.path_for((0, 0)) == "ipc" and latency.path_for((0, 1)) == "peer"


def test_sharing_sweep_and_workers(no_mps):
    assert sharing.sweep(8) == (1, 2, 4, 8)
    assert sharing.sweep(6) == (1, 2, 4, 6)
    assert sharing.sweep(2) == (1, 2)
    assert sharing.batch_for(64 << 20) == 16 and sharing.batch_for(4) == 256
    scenario = SCENARIOS["sharing"]
    specs = scenario.workers(RunConfig(scenarios=("sharing",), devices=(1,)), None)
    assert len(specs) == 8 and {s.device for s in specs} == {1}


def test_sharing_has_an_mps_group_when_the_binary_is_there(fake_mps):
    specs = SCENARIOS["sharing"].workers(RunConfig(scenarios=("sharing",), workers=3), None)
    assert len(specs) == 6


def test_waive_note_page():
    shared = sharing._Shared()
    try:
        assert shared.waived() is None
        shared.waive("first reason")
        shared.waive("second reason")
        assert shared.waived() == "first reason"
        shared.add_servers([11, 12, 11])
        assert shared.servers() == {11, 12}
    finally:
        shared.close()


# --------------------------------------------------------------------------- orchestration, fake CUDA


def run(monkeypatch, name, scenario=None, **overrides):
    fake_cuda.install(monkeypatch)
    monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    settings = dict(scenarios=(name,), iterations=2, warmup=1, timeout=20.0)
    settings.update(overrides)
    config = RunConfig(**settings)
    scenario = scenario or SCENARIOS[name]
    rows: list[dict] = []
    progress: list[int] = []
    specs = scenario.workers(config, None)
    outcome = run_scenario(scenario, config, specs, on_row=rows.append, on_progress=progress.append)
    assert sum(progress) == scenario.progress_total(config, specs)
    return outcome, rows


def count(rows, *keys):
    return collections.Counter(tuple(r[k] for k in keys) for r in rows)


@pytest.mark.parametrize("devices, path", [(None, "ipc"), ((0, 1), "peer")])
def test_latency_orchestration(monkeypatch, no_leaks, devices, path):
    outcome, rows = run(monkeypatch, "latency", sizes=(0, 4, 4099), devices=devices)
    assert outcome.ok, outcome.error
    got = count(rows, "path", "variant", "bytes")
    assert got == {(path, "barrier", 0): 2, (path, "flag-pingpong", 0): 2,
                   (path, "device-pingpong", 0): 2, (path, "device-pingpong", 4): 2,
                   (path, "device-pingpong", 4099): 2, (path, "device-ll", 4): 2, (path, "device-ll", 4099): 2,
                   (path, "host-pingpong", 4): 2, (path, "host-pingpong", 4099): 2}
    device = [r for r in rows if r["variant"].startswith("device")]
    assert all(r["batch"] == latency.MAX_ROUNDS and r["seconds"] == pytest.approx(0.5e-6) for r in device)
    assert all(r["metric"] == "latency" and r["scenario"] == "latency" and r["workers"] == 2 for r in rows)


def test_sharing_orchestration_without_mps(monkeypatch, no_mps, no_leaks, capsys):
    outcome, rows = run(monkeypatch, "sharing", workers=4, sizes=(1 << 20,))
    assert outcome.ok, outcome.error
    assert "the MPS half was waived: nvidia-cuda-mps-control is not on PATH" in capsys.readouterr().err
    assert {r["sharing"] for r in rows} == {"time-sliced"}
    per_worker = count([r for r in rows if r["path"] == "sharing"], "variant", "workers")
    for transfer in ("d2d", "h2d"):
        for n in (1, 2, 4):
            assert per_worker[(transfer, n)] == 2 * n
            assert per_worker[(f"{transfer}-aggregate", n)] == 2
    aggregate = [r for r in rows if r["variant"] == "d2d-aggregate"]
    assert {r["bytes"] for r in aggregate} == {1 << 20, 2 << 20, 4 << 20}
    assert count([r for r in rows if r["path"] == "ipc"], "variant", "workers") == {
        ("device-pingpong", 2): 2, ("device-ll", 2): 2}


def _capturing(base):
    class Capturing(type(base)):
        seen: dict = {}

        def prepare(self, config, specs):
            shared = super().prepare(config, specs)
            daemon = shared.daemon
            Capturing.seen = dict(pid=daemon and daemon.pid, dirs=[shared.nomps_dir] + (
                [daemon.pipe_dir, daemon.log_dir] if daemon else []))
            return shared

    return Capturing()


def test_sharing_orchestration_with_mps(monkeypatch, fake_mps, no_leaks):
    monkeypatch.setattr(sharing, "probe_client", lambda daemon, device, timeout=0: None)
    monkeypatch.setattr(sharing.SharingWorker, "check_clients", lambda self: None)
    scenario = _capturing(SCENARIOS["sharing"])
    outcome, rows = run(monkeypatch, "sharing", scenario=scenario, workers=2, sizes=(1 << 20,))
    assert outcome.ok, outcome.error
    by_mode = count(rows, "sharing", "variant", "workers")
    for mode in ("time-sliced", "mps"):
        assert by_mode[(mode, "d2d", 2)] == 4 and by_mode[(mode, "h2d-aggregate", 1)] == 2
        assert by_mode[(mode, "device-ll", 2)] == 2 and by_mode[(mode, "d2d@0", 1)] == 2
    seen = scenario.seen
    assert seen["pid"] and not mps.alive(seen["pid"]), "the daemon was stopped"
    assert not any(os.path.exists(d) for d in seen["dirs"]), "its folders were removed"
    assert ours(fake_mps) == []


def test_sharing_waives_mps_when_the_workers_are_not_clients(monkeypatch, fake_mps, no_leaks, capsys):
    monkeypatch.setattr(sharing, "probe_client", lambda daemon, device, timeout=0: None)
    monkeypatch.setattr(sharing.SharingWorker, "check_clients", lambda self: "worker processes 1, 2 are not clients")
    outcome, rows = run(monkeypatch, "sharing", workers=2, sizes=(1 << 20,))
    assert outcome.ok, outcome.error
    assert {r["sharing"] for r in rows} == {"time-sliced"}
    assert "the MPS half was waived: worker processes 1, 2 are not clients" in capsys.readouterr().err
    assert ours(fake_mps) == []


def test_sharing_waives_mps_when_no_client_can_start(monkeypatch, fake_mps, no_leaks, capsys):
    """The real probe: here CUDA cannot start at all, so the probe client fails and says why."""
    monkeypatch.setenv("FAKE_MPS_SERVER", "")
    fake_cuda.install(monkeypatch)
    scenario = SCENARIOS["sharing"]
    config = RunConfig(scenarios=("sharing",), workers=2, sizes=(1 << 20,), iterations=1, warmup=0, timeout=20)
    shared = scenario.prepare(config, scenario.workers(config, None))
    try:
        reason = shared.waived()
        assert shared.daemon is None and reason
        assert reason.startswith(("a CUDA client could not start under the private MPS daemon",
                                  "a CUDA client of the private MPS daemon did not start within",
                                  "the private MPS daemon started no server"))
    finally:
        scenario.release(shared)
    assert "the MPS half was waived" in capsys.readouterr().err
    assert ours(fake_mps) == []


# --------------------------------------------------------------------------- info lists MIG instances


def test_info_lists_mig_instances():
    from rich.console import Console

    from gpuipc_bench.machine import GpuInfo, Machine, render_info

    gpu = GpuInfo(index=0, name="NVIDIA H100", uuid="GPU-1", pci_bus_id="0000:17:00.0", memory_bytes=80 << 30,
                  compute_capability="9.0", pcie_gen=5, pcie_width=16, pcie_max_gen=5, pcie_max_width=16,
                  mig_mode="enabled", mig_instances=("MIG-aaaa", "MIG-bbbb"))
    machine = Machine(hostname="h", cpu_model="cpu", cpu_count=2, os="Linux", python="CPython 3.12", gpus=(gpu,),
                      cuda_error=None, driver_version="580", cuda_driver_version="13.0",
                      cuda_runtime_version="13.0", cupy_version="13", peer_access=frozenset(), links={},
                      mps="not running")
    out = io.StringIO()
    render_info(machine, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "enabled (2 instances)" in text
    assert "MIG instances of GPU 0 (2)" in text and "  MIG-aaaa" in text and "  MIG-bbbb" in text
    assert "--devices MIG-<uuid>" in text
