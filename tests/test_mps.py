"""CPU tests of the private MPS daemon (gpuipc_bench/modes/daemon.py), with a stand-in binary (the
fixtures fake_mps and no_mps are in conftest.py); the sharing scenario's use of it is in
test_scenarios.py."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ours
from gpuipc_bench.modes import daemon as mps
from gpuipc_bench.engine.scenario import sharing_mode

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


def test_the_daemon_is_this_process_s_child_and_reaped_by_it_as_it_quits(fake_mps, monkeypatch):
    """`-d` daemonises; this process was the subreaper then, so the daemon is its child, and stop()
    reaps it at once: no zombie left for init (which took 1.7 s on an H200 node)."""
    monkeypatch.setattr(mps, "REAP_WAIT_S", 60.0)  # reaped by this process, not waited for
    daemon = mps.MpsDaemon.start()
    pid = daemon.pid
    try:
        parent = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
        assert parent == os.getpid()
    finally:
        assert daemon.stop() == []
    assert not os.path.exists(f"/proc/{pid}"), "no zombie of the daemon left"
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    assert _subreaper() == 0, "the setting is back as it was"


def test_a_server_the_daemon_leaves_behind_is_reaped_by_this_process_too(fake_mps, monkeypatch, tmp_path):
    """While the daemon lives this process is the subreaper: a server orphaned by the daemon's quit
    (here a process the fake's shell leaves, named by get_server_list) becomes its child, and
    stop() reaps it; the setting is back after."""
    monkeypatch.setattr(mps, "REAP_WAIT_S", 60.0)
    daemon = mps.MpsDaemon.start()
    try:
        assert _subreaper() == 1
        orphan = subprocess.run(["bash", "-c", "(exec sleep 0.3) & echo $!"], capture_output=True, text=True)
        server = int(orphan.stdout)
        parent = int(Path(f"/proc/{server}/stat").read_text().rpartition(")")[2].split()[1])
        assert parent == os.getpid()  # orphaned by its shell: this process's
        monkeypatch.setenv("FAKE_MPS_SERVER", str(server))
        daemon.server_pids()
        time.sleep(0.5)  # it exits: a zombie of this process until stop()
    finally:
        assert daemon.stop() == []
    assert not os.path.exists(f"/proc/{server}") and _subreaper() == 0


def test_a_server_no_list_named_is_reaped_by_this_process_too(fake_mps, monkeypatch, tmp_path):
    """A daemon's process orphaned to this process (the subreaper) that get_server_list never named
    (its name starts nvidia-cuda-mps) is reaped by stop() all the same."""
    daemon = mps.MpsDaemon.start()
    try:
        binary = tmp_path / "nvidia-cuda-mps-server"
        binary.symlink_to("/bin/sleep")
        shell = subprocess.run(["bash", "-c", f"(exec {binary} 0.2) & echo $!"], capture_output=True, text=True)
        server = int(shell.stdout)
        time.sleep(0.4)  # exited: a zombie of this process
        assert Path(f"/proc/{server}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    finally:
        assert daemon.stop() == []
    assert not os.path.exists(f"/proc/{server}")


def _subreaper() -> int:
    import ctypes

    value = ctypes.c_int(-1)
    ctypes.CDLL(None).prctl(mps.PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0)
    return value.value


def test_the_probe_takes_no_zombie_for_a_daemon(tmp_path, monkeypatch):
    """An exited, unreaped nvidia-cuda-mps-* (state Z) runs nothing: the machine's MPS state does not
    say 'running elsewhere' for it; a live one does."""
    from gpuipc_bench.machine import probe

    binary = tmp_path / "nvidia-cuda-mps-control"
    binary.symlink_to("/bin/sleep")
    monkeypatch.setattr(mps, "serves_this_process", lambda *a, **k: False)
    live = subprocess.Popen([str(binary), "30"])
    try:
        assert probe._mps_state() == "running elsewhere"
    finally:
        live.kill()
    time.sleep(0.2)  # exited, not reaped: a zombie of this process
    assert Path(f"/proc/{live.pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    assert probe._mps_state() == "not running"
    live.wait()


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
    code = ("import time; from gpuipc_bench.modes import daemon as mps; d = mps.MpsDaemon.start(); "
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
    """SIGKILL of the run (no cleanup of its own runs) still stops the daemon."""
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
        assert sharing_mode([0, 1]) == "exclusive"
    finally:
        pipe_dir = daemon.pipe_dir
        daemon.stop()
    assert not mps.serves_this_process({mps.PIPE_ENV: pipe_dir})


# --------------------------------------------------------------------------- info lists MIG instances


def test_info_lists_mig_instances():
    from rich.console import Console

    from gpuipc_bench.machine.probe import GpuInfo, Machine
    from gpuipc_bench.machine.info import render_info

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
