"""The driver-call layer of the fd-shared paths (gpu/fdmemory.py) and their skip reasons, with
fakes for the CUDA calls (this machine has no driver)."""

from __future__ import annotations

import builtins
import enum

import pytest

from gpuipc_bench.errors import BenchError, NoGpuError
from gpuipc_bench.gpu import fdmemory
from gpuipc_bench.gpu.errors import CudaError
from gpuipc_bench.scenarios import SCENARIOS
from fakes import fake_machine

FD_PATHS = ("vmm", "mempool", "hostpool", "handles")


class FakeResult(enum.IntEnum):  # what cuda-bindings returns first in every call's tuple
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_NOT_PERMITTED = 800


@pytest.fixture
def no_bindings(monkeypatch):
    real_import = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name.startswith("cuda.bindings") or name == "cuda":
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)


@pytest.mark.parametrize("name", FD_PATHS)
def test_without_cuda_bindings_each_fd_path_is_waived_naming_the_extra(no_bindings, name):
    reason = SCENARIOS[name].waive_reason(fake_machine((80 << 30,)))
    assert reason is not None and "needs cuda-bindings" in reason and "pip install -e '.[cuda12]'" in reason
    assert "\n" not in reason


@pytest.mark.parametrize("name", FD_PATHS)
def test_with_cuda_bindings_and_a_gpu_each_fd_path_may_run(name):
    pytest.importorskip("cuda.bindings.driver")
    assert SCENARIOS[name].waive_reason(fake_machine((80 << 30,))) is None


@pytest.mark.parametrize("name", FD_PATHS)
def test_without_a_gpu_the_reason_is_the_gpu(name):
    reason = SCENARIOS[name].waive_reason(fake_machine(()))
    assert reason.startswith("needs a CUDA GPU")


def test_a_failed_driver_call_is_one_line_naming_the_call_and_the_gpu(monkeypatch):
    monkeypatch.setattr(fdmemory, "_describe", lambda err: "operation not permitted")
    with pytest.raises(CudaError) as caught:
        fdmemory.call("cuMemCreate", lambda *a: (FakeResult.CUDA_ERROR_NOT_PERMITTED, None), 1, device=0)
    assert str(caught.value) == "CUDA_ERROR_NOT_PERMITTED in cuMemCreate on GPU 0 (operation not permitted)"


def test_out_of_memory_names_the_size(monkeypatch):
    monkeypatch.setattr(fdmemory, "oom_message", lambda n, d: f"cannot allocate {n} bytes on GPU {d}")
    with pytest.raises(BenchError, match="cannot allocate 4096 bytes on GPU 1"):
        fdmemory.call("cuMemCreate", lambda: (FakeResult.CUDA_ERROR_OUT_OF_MEMORY, None), device=1, nbytes=4096)


def test_no_device_and_no_driver_library_are_no_gpu_errors():
    with pytest.raises(NoGpuError):
        fdmemory.call("cuInit", lambda: (FakeResult.CUDA_ERROR_NO_DEVICE,), device=0)

    class DynamicLibNotFoundError(Exception):
        pass

    def no_library():
        raise DynamicLibNotFoundError('"cuda" is an NVIDIA driver library')

    with pytest.raises(NoGpuError, match="no CUDA driver library"):
        fdmemory.call("cuMemCreate", no_library, device=0)


def test_a_call_returns_its_values():
    assert fdmemory.call("x", lambda: (FakeResult.CUDA_SUCCESS,)) is None
    assert fdmemory.call("x", lambda: (FakeResult.CUDA_SUCCESS, 7)) == 7
    assert fdmemory.call("x", lambda: (FakeResult.CUDA_SUCCESS, 7, 8)) == (7, 8)


def test_the_real_bindings_without_a_driver_say_no_gpu():
    """On this machine cuda-bindings is installed but there is no driver: a real call is a NoGpuError."""
    driver = pytest.importorskip("cuda.bindings.driver")
    try:
        driver.cuInit(0)
    except Exception:  # noqa: BLE001 - expected here: no libcuda
        pass
    else:
        pytest.skip("a CUDA driver is present")
    with pytest.raises(NoGpuError):
        fdmemory.call("cuInit", driver.cuInit, 0, device=0)
