import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

SHM = Path("/dev/shm")
ROOT = Path(__file__).resolve().parent.parent
FAULT_ENV, FIRED_ENV = "GPUIPC_BENCH_FAULT", "GPUIPC_BENCH_FAULT_FIRED"
TAG = "GPUIPC_BENCH_TEST_TAG"


def our_segments() -> list[str]:
    if not SHM.is_dir():
        return []
    # Ours, and the CUDA driver's per-process files for interprocess events (cuda.shm.*).
    return sorted(p.name for p in SHM.iterdir() if "gpuipc" in p.name or p.name.startswith("cuda.shm"))


@pytest.fixture
def no_leaks():
    """Fails the test if it leaves a shared-memory segment or a child process behind."""
    before = our_segments()
    yield
    assert multiprocessing.active_children() == [], "a worker process was left behind"
    assert our_segments() == before, "a shared-memory segment was left in /dev/shm"


@pytest.fixture
def run_scenario(monkeypatch):
    """Run a scenario through the real launcher (forked workers), with an injected fault
    (see gpuipc_bench/hooks/faults.py) or none:

        outcome, rows, seconds = run_scenario("host", "kill:1:sample:3", sizes=(64,), timeout=5)

    The first argument is a registered scenario's name or a Scenario object; the keywords
    are RunConfig fields."""
    from gpuipc_bench.harness import launcher
    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.scenarios import SCENARIOS

    def run(scenario, fault=None, **config):
        if fault:
            monkeypatch.setenv(FAULT_ENV, fault)
        else:
            monkeypatch.delenv(FAULT_ENV, raising=False)
        scenario = SCENARIOS[scenario] if isinstance(scenario, str) else scenario
        run_config = RunConfig(scenarios=(scenario.name,), **config)
        rows: list[dict] = []
        start = time.monotonic()
        outcome = launcher.run_scenario(scenario, run_config, scenario.workers(run_config, None),
                                        on_row=rows.append)
        return outcome, rows, time.monotonic() - start

    return run


# --------------------------------------------------------------------------- bad input


@pytest.fixture
def no_work(monkeypatch, tmp_path):
    """Fails the test if a scenario is started; checks nothing is written or left behind."""
    import gpuipc_bench.harness.launcher

    def tripwire(*args, **kwargs):
        raise AssertionError("a scenario was started: bad input must be refused before any work")

    monkeypatch.setattr(gpuipc_bench.harness.launcher, "run_scenario", tripwire)
    monkeypatch.chdir(tmp_path)
    before = our_segments()
    yield tmp_path
    assert our_segments() == before
    assert not [p for p in tmp_path.rglob("*.csv") if p.is_file()], "a results file was written for refused input"


def invoke(*args: str) -> tuple[int, str]:
    """A command through click's CliRunner: (exit code, output)."""
    from click.testing import CliRunner

    from gpuipc_bench.cli import cli

    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def assert_refused(code: int, output: str, *words: str) -> None:
    """Exit 2, one line: 'Error:' holding every word (no usage block, no traceback)."""
    assert code == 2, output
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output
    assert output.strip() == errors[0], f"more than the one Error: line:\n{output}"
    for word in words:
        assert word in errors[0], f"{word!r} not in {errors[0]!r}"
    assert "Traceback" not in output


# --------------------------------------------------------------------------- real processes


def tagged_processes(tag: str) -> list[int]:
    """Live processes whose environment carries TAG=tag: the run's parent and every
    process it started inherit it, so this finds any of them left behind."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def assert_none_left(tag: str, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while tagged_processes(tag) and time.monotonic() < deadline:
        time.sleep(0.05)  # a process killed a moment ago may still be on its way out
    left = tagged_processes(tag)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the run outlived it: {left}"


class Run:
    """`python -m gpuipc_bench.cli ARGS` as a real process in a session of its own, its
    environment tagged so that every process of it can be found afterwards."""

    def __init__(self, cwd: Path, *args: str, fault: str | None = None, env: dict | None = None,
                 stdout=subprocess.PIPE, prefix: tuple[str, ...] = ()):
        self.tag = uuid.uuid4().hex
        self.fired = cwd / f"fired-{self.tag}"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("GPUIPC_BENCH_")}
        full_env.update({TAG: self.tag, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1", FIRED_ENV: str(self.fired)})
        if fault:
            full_env[FAULT_ENV] = fault
        full_env.update(env or {})
        # SIGHUP as a terminal leaves it (not ignored), whatever pytest inherited (`nohup pytest`)
        self.proc = subprocess.Popen([*prefix, sys.executable, "-m", "gpuipc_bench.cli", *args],
                                     cwd=cwd, env=full_env, stdout=stdout, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))

    def wait_for_fault(self, timeout: float = 60.0, unfired: str | None = None) -> str:
        """Wait until the injected fault has fired (the worker wrote it down); its line. A run
        that ends first fails the test, or skips it with the reason `unfired`."""
        deadline = time.monotonic() + timeout
        while not (self.fired.exists() and self.fired.read_text().endswith("\n")):
            if self.proc.poll() is not None:
                if unfired:
                    self.finish()
                    pytest.skip(unfired)
                pytest.fail(f"the run ended (code {self.proc.returncode}) before the fault fired:\n"
                            f"{self.proc.communicate()[1]}")
            if time.monotonic() > deadline:
                pytest.fail(f"the fault did not fire within {timeout:g} s")
            time.sleep(0.01)
        return self.fired.read_text()

    def finish(self, timeout: float = 60.0) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) once it has ended; every process of it must be gone."""
        try:
            stdout, stderr = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.communicate()
            pytest.fail(f"the run did not end within {timeout:g} s")
        assert_none_left(self.tag)
        return self.proc.returncode, stdout or "", stderr


# --------------------------------------------------------------------------- GPUs


def gpu_count() -> int:
    from gpuipc_bench.machine.probe import probe

    return probe().gpu_count


@pytest.fixture(scope="session")
def machine():
    from gpuipc_bench.machine.probe import probe

    return probe()


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long fault test (real processes); -m 'not slow' skips them")


def pytest_collection_modifyitems(config, items):
    marked = [i for i in items if i.get_closest_marker("gpu") or i.get_closest_marker("gpu2")]
    if not marked:
        return
    from gpuipc_bench.machine.probe import probe

    m = probe()
    for item in marked:
        need = 2 if item.get_closest_marker("gpu2") else 1
        if m.gpu_count < need:
            why = m.cuda_error or f"this machine has {m.gpu_count} GPU(s)"
            item.add_marker(pytest.mark.skip(reason=f"needs {need} GPU(s): {why}"))


@pytest.fixture
def small_env(monkeypatch):
    monkeypatch.delenv(FAULT_ENV, raising=False)
    return os.environ


FAKE_MPS = Path(__file__).parent / "data" / "fake-nvidia-cuda-mps-control"


@pytest.fixture
def fake_mps(monkeypatch, tmp_path):
    """A stand-in nvidia-cuda-mps-control first on PATH; temporary folders under tmp_path."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / _mps().BINARY).symlink_to(FAKE_MPS)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    for var in ("FAKE_MPS_MODE", "FAKE_MPS_SERVER", _mps().PIPE_ENV, _mps().LOG_ENV):
        monkeypatch.delenv(var, raising=False)
    # The fake exits at once; don't wait as long as for a real daemon (nor for init to reap it).
    monkeypatch.setattr(_mps(), "END_GRACE_S", 0.3)
    monkeypatch.setattr(_mps(), "REAP_WAIT_S", 0.2)
    return temp


@pytest.fixture
def no_mps(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    return tmp_path


def ours(temp: Path) -> list[str]:
    """The private daemon's folders (and the like) left in `temp`."""
    return sorted(p.name for p in temp.iterdir() if p.name.startswith(_mps().PREFIX))


def _mps():
    from gpuipc_bench.modes import daemon as mps

    return mps
