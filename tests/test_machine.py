"""machine.probe(): facts from NVML and a probe child, without CUDA in the parent."""

from __future__ import annotations

import dataclasses
import io
import multiprocessing
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from rich.console import Console

from fakes import fake_machine, h100_node
from gpuipc_bench.cli import cli
from gpuipc_bench.machine import nvml
from gpuipc_bench.machine import probe as machine_mod
from gpuipc_bench.errors import UsageError
from gpuipc_bench.machine.nvml import normalise_bus_id
from gpuipc_bench.machine.probe import Machine, probe
from gpuipc_bench.machine.info import render_info

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def here() -> Machine:
    return probe()


def needs_gpu(machine: Machine, count: int = 1) -> None:
    if machine.gpu_count < count:
        why = machine.cuda_error or f"{machine.gpu_count} GPU(s)"
        pytest.skip(f"needs {count} CUDA GPU(s): {why}")


def render(machine: Machine) -> str:
    out = io.StringIO()
    render_info(machine, Console(file=out, width=140, color_system=None))
    return out.getvalue()


# ---------------------------------------------------------------- on this machine, whatever it is


def test_probe_reports_cuda_state(here):
    if here.gpu_count == 0:
        assert here.cuda_error and ("cudaError" in here.cuda_error or "CuPy" in here.cuda_error
                                    or here.cuda_error == machine_mod.NO_DRIVER)
    else:
        assert here.cuda_error is None
        assert [g.index for g in here.gpus] == list(range(here.gpu_count))
    assert here.mps in ("running", "running elsewhere", "not running")
    assert here.cpu_count >= 1 and here.hostname


def test_probe_does_the_caller_s_work_in_this_process_while_its_child_starts_cuda():
    """`meanwhile` (the run's pandas import) runs here, in this process's own thread, once, while the
    child starts CUDA: no thread of it is left to a later fork."""
    import threading

    seen = []
    machine = probe(meanwhile=lambda: seen.append((os.getpid(), threading.current_thread() is threading.main_thread())))
    assert seen == [(os.getpid(), True)] and machine.cpu_count >= 1


def test_probe_leaves_no_child_behind():
    probe()
    assert multiprocessing.active_children() == []


def test_probe_is_fresh_and_quick():
    start = time.perf_counter()
    a, b = probe(), probe()
    assert a is not b and a.gpu_count == b.gpu_count
    assert time.perf_counter() - start < 20


def test_metadata_is_flat_strings(here):
    metadata = here.metadata()
    assert metadata and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    for key in ("host", "cpu", "cpu_count", "os", "python", "cupy", "driver", "cuda_driver",
                "cuda_runtime", "cuda_error", "gpu_count", "mps"):
        assert key in metadata
    assert metadata["gpu_count"] == str(here.gpu_count)


def test_parent_never_loads_the_cuda_driver():
    # In a fresh interpreter, so that nothing else this test session did can mask it.
    code = (
        "from gpuipc_bench.machine.probe import probe; m = probe(); "
        "print(m.gpu_count, 'libcuda.so' in open('/proc/self/maps').read())"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": REPO}, check=True).stdout.split()
    assert out[1] == "False", f"probe() mapped libcuda.so into the parent (gpu_count {out[0]})"


# ---------------------------------------------------------------- without a GPU


def test_no_gpu_machine_renders_why(here):
    if here.gpu_count:
        pytest.skip("this machine has a GPU")
    text = render(here)
    assert "No usable CUDA GPU" in text and here.no_gpu_reason in text
    assert "CPU" in text and "MPS" in text


def test_check_devices_without_gpu(here):
    if here.gpu_count:
        pytest.skip("this machine has a GPU")
    with pytest.raises(UsageError, match=r"--devices 0: this machine has no usable CUDA GPU \((no NVIDIA|CuPy)"):
        here.check_devices([0])


def test_missing_cupy_is_a_sentence(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # the forked child inherits this: import fails
    m = probe()
    assert m.gpu_count == 0
    assert m.cuda_error == machine_mod.CUPY_MISSING
    assert m.cupy_version is None
    assert "not installed" in render(m)


def test_nvml_failure_is_tolerated(monkeypatch):
    import pynvml

    def broken():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    monkeypatch.setattr(pynvml, "nvmlInit", broken)
    m = probe()
    assert m.driver_version is None
    assert all(g.mig_mode == "n/a" and g.pcie_gen is None for g in m.gpus)


def test_nvml_unsupported_calls_are_tolerated_one_by_one(monkeypatch):
    import pynvml

    def unsupported(*args):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlSystemGetDriverVersion", lambda: "580.159.04")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCount", lambda: 1)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda k: object())
    monkeypatch.setattr(pynvml, "nvmlDeviceGetPciInfo",
                        lambda h: type("Pci", (), {"busId": "00000000:17:00.0"})())
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCurrPcieLinkGeneration", lambda h: 5)
    for name in ("nvmlDeviceGetUUID", "nvmlDeviceGetMigMode", "nvmlDeviceGetCurrPcieLinkWidth",
                 "nvmlDeviceGetNvLinkState", "nvmlDeviceGetTopologyCommonAncestor"):
        monkeypatch.setattr(pynvml, name, unsupported)
    facts = nvml.nvml_facts()
    assert facts["driver"] == "580.159.04"
    gpu = facts["gpus"]["0000:17:00.0"]
    assert gpu["pcie_gen"] == 5 and gpu["pcie_width"] is None
    assert gpu["mig_mode"] == "n/a" and gpu["uuid"] == ""


def test_hanging_probe_child_is_killed(monkeypatch):
    monkeypatch.setattr(machine_mod, "_cuda_facts", lambda: time.sleep(60))
    start = time.perf_counter()
    m = probe(timeout=1)
    assert time.perf_counter() - start < 10
    assert m.gpu_count == 0 and "timed out" in m.cuda_error
    assert multiprocessing.active_children() == []


def test_dying_probe_child_is_reported(monkeypatch):
    monkeypatch.setattr(machine_mod, "_cuda_facts", lambda: os._exit(3))
    m = probe(timeout=10)
    assert m.gpu_count == 0 and "exit code 3" in m.cuda_error
    assert multiprocessing.active_children() == []


def test_cuda_errors_keep_their_name(monkeypatch):
    from cupy.cuda import runtime

    monkeypatch.setattr(runtime, "getDeviceCount", lambda: 0)  # a driver, no device
    m = probe()
    assert m.cuda_error == "cudaErrorNoDevice: no CUDA-capable device is detected"

    def fails():
        raise runtime.CUDARuntimeError(3)  # cudaErrorInitializationError

    monkeypatch.setattr(runtime, "getDeviceCount", fails)
    assert probe().cuda_error.startswith("cudaErrorInitializationError: ")


# ---------------------------------------------------------------- pure pieces


def test_bus_ids_from_nvml_and_cuda_agree():
    assert normalise_bus_id("00000000:17:00.0") == "0000:17:00.0"
    assert normalise_bus_id("0000:17:00.0") == "0000:17:00.0"
    assert normalise_bus_id("00000001:AB:00.0\n") == "0001:ab:00.0"


def test_cuda_versions():
    assert machine_mod._cuda_version(12040) == "12.4"
    assert machine_mod._cuda_version(13000) == "13.0"
    assert machine_mod._cuda_version(0) is None


def test_check_devices_names_the_range():
    m = h100_node(2)
    m.check_devices([0, 1])
    m.check_devices(None)
    with pytest.raises(UsageError, match=r"^--devices 3: this machine has 2 GPUs \(0-1\)$"):
        m.check_devices([0, 3])
    with pytest.raises(UsageError, match=r"has 1 GPU \(0\)"):
        h100_node(1).check_devices([1])


def test_metadata_of_a_two_gpu_machine():
    metadata = h100_node(2).metadata()
    assert metadata["gpu.1.name"] == "NVIDIA H100 80GB HBM3"
    assert metadata["gpu.0.pcie"] == "Gen5 x16 (max Gen5 x16)"
    assert metadata["gpu.0.cc"] == "9.0" and metadata["gpu.0.mig"] == "disabled"
    assert metadata["link.0-1"] == "NV18" and metadata["peer.0-1"] == "yes"
    assert "link.1-0" not in metadata


def test_render_of_a_two_gpu_machine():
    text = render(h100_node(2))
    assert "NVIDIA H100 80GB HBM3" in text and "79.6 GiB" in text
    assert "Gen5 x16 (max Gen5 x16)" in text
    assert "NV18 ✓" in text and "580.159.04" in text and "No usable" not in text


def test_nvlink_counting_through_switch_and_direct(monkeypatch):
    import pynvml

    # GPU a and b: 2 direct links between them; a, b, c: 4 links each to an NVSwitch.
    wiring = {
        "a": ["0000:0b:00.0"] * 2 + ["0000:ee:00.0"] * 4,
        "b": ["0000:0a:00.0"] * 2 + ["0000:ee:00.0"] * 4,
        "c": ["0000:ee:00.0"] * 4,
    }
    handles = {"0000:0a:00.0": "a", "0000:0b:00.0": "b", "0000:0c:00.0": "c"}

    def state(h, link):
        if link >= len(wiring[h]):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    monkeypatch.setattr(pynvml, "nvmlDeviceGetNvLinkState", state)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetNvLinkRemotePciInfo",
                        lambda h, link: type("Pci", (), {"busId": "0" * 4 + wiring[h][link]})())
    links = nvml.nvml_links(pynvml, nvml.nvml_call(pynvml), handles)
    assert links[("0000:0a:00.0", "0000:0b:00.0")] == "NV6"
    assert links[("0000:0a:00.0", "0000:0c:00.0")] == "NV4"
    assert links[("0000:0c:00.0", "0000:0b:00.0")] == "NV4"


# ---------------------------------------------------------------- with a GPU


@pytest.mark.gpu
def test_a_child_forked_after_probe_can_use_cuda(here):
    """The point of the probe child: the parent stays CUDA-free, so workers forked later work."""
    needs_gpu(here)
    # libcuda.so may well be loaded here (CuPy's runtime library loads it); what must
    # not have happened is cuInit, and the forked child proves that.
    ctx = multiprocessing.get_context("fork")
    receiver, sender = ctx.Pipe(duplex=False)

    def child():
        from cupy.cuda import runtime

        try:
            sender.send(runtime.getDeviceCount())
        except Exception as exc:
            sender.send(str(exc))
        os._exit(0)

    p = ctx.Process(target=child)
    p.start()
    try:
        assert receiver.poll(60), "the forked child hung"
        assert receiver.recv() == here.gpu_count
    finally:
        p.kill()
        p.join()


@pytest.mark.gpu
def test_gpus_have_nvml_facts(here):
    needs_gpu(here)
    assert here.driver_version and here.cuda_driver_version and here.cuda_runtime_version
    for gpu in here.gpus:
        assert gpu.name and gpu.memory_bytes > 0 and gpu.pci_bus_id.count(":") == 2
        assert gpu.mig_mode in ("enabled", "disabled", "n/a")
    assert "GiB" in render(here)


@pytest.mark.gpu2
def test_two_gpus_have_links(here):
    needs_gpu(here, 2)
    assert (0, 1) in here.links and here.metadata()["link.0-1"] == here.links[(0, 1)]


# ---------------------------------------------------------------- info without CuPy


def test_info_without_cupy_keeps_the_extras_in_its_advice(monkeypatch):
    from gpuipc_bench.machine.probe import CUPY_MISSING

    machine = dataclasses.replace(fake_machine(()), cuda_error=CUPY_MISSING, cpu_model="[bold]cpu[/]",
                                  driver_version="580.159.04")  # a driver: CuPy is what is missing
    monkeypatch.setattr(machine_mod, "probe", lambda *a, **k: machine)
    result = CliRunner().invoke(cli, ["info"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert 'pip install -e ".[cuda12]"' in text and '".[cuda13]"' in text, text
    assert "[bold]cpu[/]" in text  # what the machine says is printed as it is, never as markup
