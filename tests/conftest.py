import multiprocessing
import os
import tempfile
from pathlib import Path

import pytest

SHM = Path("/dev/shm")


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


def gpu_count() -> int:
    from gpuipc_bench.machine import probe

    return probe().gpu_count


@pytest.fixture(scope="session")
def machine():
    from gpuipc_bench.machine import probe

    return probe()


def pytest_collection_modifyitems(config, items):
    marked = [i for i in items if i.get_closest_marker("gpu") or i.get_closest_marker("gpu2")]
    if not marked:
        return
    from gpuipc_bench.machine import probe

    m = probe()
    for item in marked:
        need = 2 if item.get_closest_marker("gpu2") else 1
        if m.gpu_count < need:
            why = m.cuda_error or f"this machine has {m.gpu_count} GPU(s)"
            item.add_marker(pytest.mark.skip(reason=f"needs {need} GPU(s): {why}"))


@pytest.fixture
def small_env(monkeypatch):
    monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
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
    return temp


@pytest.fixture
def no_mps(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    return tmp_path


def ours(temp: Path) -> list[str]:
    """The private daemon's folders (and the like) left in `temp`."""
    return sorted(p.name for p in temp.iterdir() if p.name.startswith(_mps().PREFIX))


def _mps():
    from gpuipc_bench import mps

    return mps
