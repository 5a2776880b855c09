"""Bad input on every option and subcommand: one line, exit code 2, no traceback, no work.

"No work" is checked, not assumed: the launcher is replaced by a tripwire, and the
test fails if a worker would have been forked, a results file written or anything
left in /dev/shm. (tests/test_cli.py holds the first cases; these are the rest.)
"""

from __future__ import annotations

import dataclasses

import pytest

from gpuipc_bench.sizes import format_size

from conftest import assert_refused, invoke
from fakes import fake_machine
from gpuipc_bench import config as config_mod
from gpuipc_bench.config import RunConfig
from gpuipc_bench.harness.plan import check_memory
from gpuipc_bench.errors import UsageError
from gpuipc_bench.machine.probe import Machine
from gpuipc_bench.scenarios import SCENARIOS

GiB = 1 << 30


RUN = ["run", "-s", "host", "--out", "r.csv"]


@pytest.mark.parametrize("args,words", [
    # --sizes
    (["--sizes", "4K.."], ["--sizes", "not a byte size"]),
    (["--sizes", "..4K"], ["--sizes", "not a byte size"]),
    (["--sizes", "4K..1M:x1"], ["--sizes", "step"]),
    (["--sizes", "4K..1M:x"], ["--sizes", "step"]),
    (["--sizes", "4K..1M:/2"], ["--sizes", "step"]),
    (["--sizes", "4K;8K"], ["--sizes", "not a byte size"]),
    (["--sizes", "4K,,8K"], ["--sizes", "empty item"]),
    (["--sizes", ""], ["--sizes", "no sizes"]),
    (["--sizes", "1.5B"], ["--sizes", "whole number"]),
    (["--sizes", "1e3"], ["--sizes", "not a byte size"]),
    (["--sizes", "nan"], ["--sizes", "not a byte size"]),
    (["--sizes", "2048T"], ["--sizes", "larger than any buffer"]),
    (["--sizes", "4M..4K:x4"], ["--sizes", "reversed"]),
    # numbers
    (["--iterations", "-5"], ["--iterations", "must be 1 to 100000 timed samples per group (got -5)"]),
    (["--iterations", "many"], ["--iterations", "'many' is not a whole number"]),
    (["--iterations", "1.5"], ["--iterations", "'1.5' is not a whole number"]),
    (["--warmup", "x"], ["--warmup", "'x' is not a whole number"]),
    (["--workers", "-3"], ["--workers", "must be 1 to 64 worker processes (got -3)"]),
    (["--workers", "1"], ["--workers 1: scenario host takes 2 to 8 workers"]),
    (["--timeout", "-1"], ["--timeout", "must be 0.1 to 86400 seconds (got -1)"]),
    (["--timeout", "nan"], ["--timeout", "(got nan)"]),
    (["--timeout", "inf"], ["--timeout", "(got inf)"]),
    (["--timeout", "soon"], ["--timeout", "'soon' is not a number"]),
    # unbounded numbers would run for ever
    (["-n", str(10 ** 20)], ["--iterations", "must be 1 to 100000", f"(got {10 ** 20})"]),
    (["--warmup", str(10 ** 10)], ["--warmup", "must be 0 to 10000", f"(got {10 ** 10})"]),
    (["--iterations", "10**20"], ["--iterations", "not a whole number"]),
    (["--workers", "1000000"], ["--workers", "must be 1 to 64"]),
    (["--timeout", "1e300"], ["--timeout", "must be 0.1 to 86400 seconds"]),
    # --chunk
    (["--chunk", "0"], ["--chunk", "at least 1 byte"]),
    (["--chunk", "4K,8K"], ["--chunk takes one size"]),
    (["--chunk", "4K..1M"], ["--chunk takes one size"]),
    (["--chunk", "big"], ["--chunk", "not a byte size"]),
    # --devices
    (["--devices", "-1"], ["--devices", "GPU indices start at 0"]),
    (["--devices", ""], ["--devices", "not a comma-separated list"]),
    (["--devices", "0,"], ["--devices", "not a comma-separated list"]),
    (["--devices", "1.5"], ["--devices", "not a comma-separated list"]),
    (["--devices", "0,1,0"], ["--devices", "names a GPU twice"]),
    # --scenario
    (["-s", ""], ["--scenario", "no such scenario"]),
    (["-s", "HOST"], ["--scenario HOST: no such scenario", "did you mean host"]),
    # the command line itself
    (["--bogus"], ["No such option '--bogus'"]),
    (["extra-argument"], ["unexpected extra argument"]),
    (["--sizes"], ["--sizes", "requires an argument"]),
])
def test_run_refuses(no_work, args, words):
    assert_refused(*invoke(*RUN, *args), *words)


def test_huge_size_beyond_host_memory(no_work):
    available = config_mod.available_host_memory()
    assert available and available > 0
    code, output = invoke(*RUN, "--sizes", "4K,1T")
    assert_refused(code, output, "--sizes", "1024 GiB", "host memory", "available")


def test_huge_default_sweep_is_named_as_the_default(no_work, monkeypatch):
    monkeypatch.setattr(config_mod, "available_host_memory", lambda: 1 << 20)  # a 1 MiB machine
    code, output = invoke(*RUN)
    assert_refused(code, output, "--sizes (not given)", "default sweep of host", "1 MiB is available")


def test_output_that_is_a_directory(no_work):
    (no_work / "d.csv").mkdir()
    assert_refused(*invoke("run", "-s", "host", "--out", "d.csv", "--sizes", "64"), "--out", "is a directory")


def test_output_refused_before_the_machine_is_probed(no_work, monkeypatch):
    """The cheap checks come first: a bad --out costs no probe child."""
    import gpuipc_bench.machine.probe

    def probe(*a, **k):
        raise AssertionError("probed the machine for a run that was going to be refused")

    monkeypatch.setattr(gpuipc_bench.machine.probe, "probe", probe)
    (no_work / "r.csv").write_text("keep")
    assert_refused(*invoke(*RUN, "--sizes", "64"), "--out", "--force")
    assert (no_work / "r.csv").read_text() == "keep"
    (no_work / "r.csv").unlink()


@pytest.mark.parametrize("args,words", [
    (["bench"], ["No such command 'bench'"]),
    (["report"], ["Missing argument 'FILES...'"]),
    (["report", "--format", "html", "x.csv"], ["--format", "'html' is not one of"]),
    (["list", "--all"], ["No such option '--all'"]),
    (["info", "extra"], ["unexpected extra argument"]),
    (["--no-such-flag"], ["No such option '--no-such-flag'"]),
])
def test_subcommands_refuse(no_work, args, words):
    assert_refused(*invoke(*args), *words)


def _results_text() -> str:
    from pathlib import Path

    return (Path(__file__).parent / "data" / "small_run.csv").read_text(encoding="utf-8")


@pytest.mark.parametrize("name,content,words", [
    ("truncated.csv", _results_text()[: _results_text().rindex("\n", 0, -1) + 30], ["truncated"]),
    ("cut-in-header.csv", _results_text()[:40], ["schema_version"]),
    ("foreign.csv", "time,value\n1,2\n", ["not a gpuipc-bench results file"]),
    ("empty.csv", "", ["the file is empty"]),
    ("binary.csv", b"\x89PNG\r\n\x1a\n\x00\x00", ["binary"]),
])
def test_report_refuses_bad_files(no_work, name, content, words):
    path = no_work / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    code, output = invoke("report", str(path))
    path.unlink()  # no_work checks no CSV is left: this one was ours
    assert_refused(code, output, name, *words)


def test_report_refuses_a_missing_file_and_a_directory(no_work):
    assert_refused(*invoke("report", "missing.csv"), "missing.csv", "no such file")
    (no_work / "folder").mkdir()
    assert_refused(*invoke("report", "folder"), "folder", "directory")


def test_report_names_the_bad_one_of_several(no_work):
    good = no_work / "good.csv"
    good.write_text(_results_text(), encoding="utf-8")
    bad = no_work / "bad.csv"
    bad.write_text("a,b\n", encoding="utf-8")
    code, output = invoke("report", str(good), str(bad))
    good.unlink()
    bad.unlink()
    assert_refused(code, output, "bad.csv")
    assert "good.csv" not in [line for line in output.splitlines() if line.startswith("Error:")][0]


# --------------------------------------------------------------------------- the memory check


def plan_for(name: str, config: RunConfig, machine: Machine):
    scenario = SCENARIOS[name]
    return [(scenario, scenario.workers(config, machine))]


GPU_NAMES = [name for name, s in SCENARIOS.items() if s.gpus_needed]


def _devices(name: str) -> tuple[int, ...]:
    return (0,) if SCENARIOS[name].gpus_needed == 1 else (0, 1)


@pytest.mark.parametrize("name", GPU_NAMES)
def test_gpu_memory_check_follows_the_scenario_estimate(name):
    """Refused exactly when the scenario's own estimate exceeds the GPU's memory (whatever the
    estimate is: scenarios may override it)."""
    config = RunConfig(scenarios=(name,), sizes=(4096, 4 * GiB), devices=_devices(name))
    machine = fake_machine((1 << 50, 1 << 50))
    _, need = SCENARIOS[name].memory_needed(config, plan_for(name, config, machine)[0][1])
    assert need > 0, "a GPU scenario needs GPU memory"
    roomy = fake_machine((need, need))
    check_memory(plan_for(name, config, roomy), config, roomy, host_available=1 << 50)
    tight = fake_machine((need - 1, need - 1))
    with pytest.raises(UsageError) as info:
        check_memory(plan_for(name, config, tight), config, tight, host_available=1 << 50)
    message = str(info.value)
    largest = format_size(max(SCENARIOS[name].sizes(config)))  # latency measures up to 1 MiB
    assert message.startswith(f"--sizes: the largest size, {largest},") and "GPU 0" in message
    assert f"scenario {name}" in message and "\n" not in message


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_host_memory_check_follows_the_scenario_estimate(name):
    config = RunConfig(scenarios=(name,), sizes=(4096, 4 * GiB),
                       devices=_devices(name) if SCENARIOS[name].gpus_needed else None)
    machine = fake_machine((1 << 50, 1 << 50))
    plan = plan_for(name, config, machine)
    need, _ = SCENARIOS[name].memory_needed(config, plan[0][1])
    check_memory(plan, config, machine, host_available=max(need, 1))
    if need > 1:
        with pytest.raises(UsageError, match="host memory"):
            check_memory(plan, config, machine, host_available=need - 1)


def test_memory_check_follows_the_gpu_in_use():
    """GPU 1 is one byte too small: a run on GPU 0 fits, the same run on GPU 1 does not."""
    name = next(n for n in GPU_NAMES if SCENARIOS[n].gpus_needed == 1)
    probe = RunConfig(scenarios=(name,), sizes=(4096, 2 * GiB), devices=(0,))
    _, need = SCENARIOS[name].memory_needed(probe, plan_for(name, probe, fake_machine((1 << 50,)))[0][1])
    machine = fake_machine((need, need - 1))
    for device, ok in ((0, True), (1, False)):
        config = dataclasses.replace(probe, devices=(device,))
        if ok:
            check_memory(plan_for(name, config, machine), config, machine, host_available=1 << 50)
        else:
            with pytest.raises(UsageError, match="on GPU 1 in scenario"):
                check_memory(plan_for(name, config, machine), config, machine, host_available=1 << 50)


def test_the_default_estimate():
    """Scenario.memory_needed's default, for scenarios that do not override it."""
    from gpuipc_bench.engine.scenario import Scenario

    cpu = type("Cpu", (Scenario,), {"gpus_needed": 0})()
    gpu = type("Gpu", (Scenario,), {"gpus_needed": 1})()
    config = RunConfig(scenarios=("x",), sizes=(64, GiB))
    assert cpu.memory_needed(config, []) == (3 * GiB, 0)
    assert gpu.memory_needed(config, []) == (2 * GiB, 3 * GiB)


def test_huge_size_beyond_gpu_memory_through_the_cli(no_work, monkeypatch):
    """The whole path from the command line, with a machine that has one 4 GiB GPU."""
    import gpuipc_bench.machine.probe

    monkeypatch.setattr(gpuipc_bench.machine.probe, "probe", lambda *a, **k: fake_machine((4 * GiB,)))
    monkeypatch.setattr(config_mod, "available_host_memory", lambda: 1 << 50)
    name = next(n for n in GPU_NAMES if SCENARIOS[n].gpus_needed == 1)
    code, output = invoke("run", "-s", name, "--out", "r.csv", "--sizes", "4K..8G")
    assert_refused(code, output, "--sizes", "the largest size, 8 GiB,", "GPU 0 has 4 GiB")


def test_available_host_memory_is_sane():
    available = config_mod.available_host_memory()
    with open("/proc/meminfo") as fh:
        total = int(next(line for line in fh if line.startswith("MemTotal:")).split()[1]) * 1024
    assert 0 < available <= total


@pytest.mark.gpu
def test_huge_size_beyond_the_real_gpu(no_work, machine):
    name = next(n for n in GPU_NAMES if SCENARIOS[n].gpus_needed == 1)
    memory = machine.gpus[0].memory_bytes
    size = 1 << (memory.bit_length())  # the next power of two above the whole GPU
    monkeypatch_host = pytest.MonkeyPatch()
    monkeypatch_host.setattr(config_mod, "available_host_memory", lambda: 1 << 50)
    try:
        code, output = invoke("run", "-s", name, "--out", "r.csv", "--sizes", str(size))
    finally:
        monkeypatch_host.undo()
    assert_refused(code, output, "--sizes", "GPU 0")
