"""The command line through click's CliRunner: bad input is refused before any work, runs write a CSV."""

import os

import pytest
from click.testing import CliRunner

from conftest import assert_refused
from gpuipc_bench.cli import cli
from gpuipc_bench.results import SCHEMA_VERSION, read_results

FAST = ["--sizes", "64,4K", "--iterations", "3", "--warmup", "1"]


def invoke(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_help_explains():
    code, out = invoke("--help")
    assert code == 0 and "run" in out and "report" in out and "staging" in out
    code, out = invoke("run", "--help")
    assert code == 0 and "--sizes" in out and "4KiB..1GiB" in out


def test_list_says_what_runs_here(machine):
    code, out = invoke("list")
    assert code == 0 and "host" in out and "barrier" in out
    if machine.gpu_count == 0:
        assert "needs a CUDA" in out  # the cell wraps after it at 80 columns


def test_info_runs():
    code, out = invoke("info")
    assert code == 0 and "CPU" in out


@pytest.mark.parametrize("args,words", [
    (["--scenario", "hots"], "did you mean host"),
    (["--scenario", "nothing"], "no such scenario"),
    (["--sizes", "1G..4K"], "reversed"),
    (["--sizes", "0"], "at least 1 byte"),
    (["--sizes", "-4"], "not a byte size"),
    (["--sizes", "12parsecs"], "unknown unit"),
    (["--iterations", "0"], "'--iterations' / '-n': must be 1 to 100000 timed samples per group (got 0)"),
    (["--warmup", "-1"], "'--warmup': must be 0 to 10000 untimed samples per group (got -1)"),
    (["--workers", "0"], "'--workers': must be 1 to 64 worker processes (got 0)"),
    (["-s", "host", "--workers", "9"], "--workers 9: scenario host takes 2 to 8 workers"),
    (["--devices", "a,b"], "not a comma-separated list"),
    (["--devices", "0,0"], "names a GPU twice"),
    (["--timeout", "0"], "'--timeout': must be 0.1 to 86400 seconds (got 0)"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words, no_leaks):
    code, out = invoke("run", "--out", str(tmp_path / "r.csv"), *args)
    assert code == 2, out
    assert out.startswith("Error: ") and out.count("\n") == 1, out  # one line, no usage block
    assert words in out
    assert "Traceback" not in out
    assert not (tmp_path / "r.csv").exists(), "nothing is written for refused input"


def test_device_that_does_not_exist(tmp_path, machine):
    code, out = invoke("run", "-s", "host", "--devices", str(machine.gpu_count + 3), "--out", str(tmp_path / "r.csv"))
    assert code == 2 and "--devices" in out


def test_unwritable_out_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, out = invoke("run", "-s", "host", "--out", str(blocker / "r.csv"), *FAST)
    assert code == 2 and "--out" in out


def test_existing_out_needs_force(tmp_path, no_leaks):
    out = tmp_path / "r.csv"
    out.write_text("keep me")
    code, text = invoke("run", "-s", "host", "--out", str(out), *FAST)
    assert code == 2 and "--force" in text and out.read_text() == "keep me"
    code, text = invoke("run", "-s", "host", "--out", str(out), "--force", *FAST)
    assert code == 0, text


def test_gpu_scenario_without_gpu_says_what_is_missing(tmp_path, machine):
    from gpuipc_bench.scenarios import SCENARIOS

    gpu_names = [n for n, s in SCENARIOS.items() if s.gpus_needed]
    if machine.gpu_count or not gpu_names:
        pytest.skip("this machine has a GPU (or no GPU scenario is registered)")
    code, out = invoke("run", "-s", gpu_names[0], "--out", str(tmp_path / "r.csv"))
    assert code == 2 and out.count("\n") == 1, out  # bad input: one line, exit 2
    assert out.startswith(f"Error: --scenario {gpu_names[0]}: cannot run here: needs a CUDA GPU: ")
    assert machine.no_gpu_reason in out and "cudaError" not in out.split("needs a CUDA GPU")[1][:40]


def test_run_host_end_to_end_then_report(tmp_path, no_leaks):
    out = tmp_path / "run.csv"
    code, text = invoke("run", "-s", "host", "--out", str(out), *FAST)
    assert code == 0, text
    assert "wrote" in text and "a hand-off through shared memory" in text  # the host baseline, with figures
    frame, meta = read_results(out)
    assert meta["partial"] == "false" and meta["schema_version"] == str(SCHEMA_VERSION)
    assert set(frame["path"]) == {"host", "ceiling"}
    assert set(frame["bytes"]) == {64, 4096}
    code, text = invoke("report", str(out))
    assert code == 0 and "shared-buffer" in text
    code, text = invoke("report", "--format", "markdown", str(out))
    assert code == 0 and "|" in text


def test_default_run_skips_gpu_with_a_note(tmp_path, monkeypatch, machine, no_leaks):
    monkeypatch.chdir(tmp_path)
    code, text = invoke("run", *FAST)
    assert code == 0, text
    written = list((tmp_path / "results").glob("*.csv"))
    assert len(written) == 1
    if machine.gpu_count == 0:
        from gpuipc_bench.scenarios import SCENARIOS

        gpu_names = [name for name, scenario in SCENARIOS.items() if scenario.gpus_needed and scenario.in_default_run]
        assert sum(line.startswith("skipped") for line in text.splitlines()) == 1, "one note for all of them"
        flat = " ".join(text.split())  # the note is wrapped to the width
        note = flat[flat.index("skipped "):]
        assert all(name in note for name in gpu_names)
        assert machine.no_gpu_reason in note  # what is missing, in words (no driver, no GPU, no CuPy)


def test_killed_worker_run_is_partial_and_exits_1(tmp_path, monkeypatch, no_leaks):
    monkeypatch.setenv("GPUIPC_BENCH_FAULT", "kill:1:sample:3")
    out = tmp_path / "r.csv"
    code, text = invoke("run", "-s", "host", "--out", str(out), *FAST)
    assert code == 1
    assert "worker 1 (consumer, CPU) was killed by SIGKILL" in " ".join(text.split())  # (wrapped at 80)
    frame, meta = read_results(out)
    assert meta["partial"] == "true" and "failed: host" in meta["status"]
    assert len(frame) > 0


def test_report_refuses_foreign_files(tmp_path):
    foreign = tmp_path / "other.csv"
    foreign.write_text("a,b\n1,2\n")
    code, out = invoke("report", str(foreign))
    assert code == 2 and "other.csv" in out
    code, out = invoke("report", str(tmp_path / "missing.csv"))
    assert code == 2 and "missing.csv" in out


def test_devices_by_uuid_parse():
    from gpuipc_bench.cli.params import DevicesType
    from gpuipc_bench.cli.run import _select_by_uuid

    parse = DevicesType().convert
    uuid = "MIG-6f2a1c3e-0d1b-5a7e-9c4b-1e2f3a4b5c6d"
    assert parse(uuid, None, None) == (uuid,)
    assert _select_by_uuid((uuid, "GPU-1234-abcd")) == ((0, 1), f"{uuid},GPU-1234-abcd")
    assert _select_by_uuid((0, 1)) == ((0, 1), None)


def test_devices_by_uuid_that_cuda_does_not_see(tmp_path, monkeypatch, machine):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    code, out = invoke("run", "-s", "host", "--devices", "MIG-00000000-0000-0000-0000-000000000000",
                       "--out", str(tmp_path / "r.csv"))
    assert code == 2 and "--devices MIG-00000000-0000-0000-0000-000000000000: CUDA sees 0" in out
    assert "CUDA_VISIBLE_DEVICES" not in __import__("os").environ, "the selection does not outlive the run"
    assert not (tmp_path / "r.csv").exists()


@pytest.mark.gpu2
def test_devices_by_uuid_selects_that_gpu(tmp_path, machine, no_leaks):
    second = machine.gpus[1].uuid
    out = tmp_path / "r.csv"
    code, text = invoke("run", "-s", "ipc", "--devices", second, "--sizes", "4K", "-n", "2", "--out", str(out))
    assert code == 0, text
    frame, meta = read_results(out)
    assert meta["gpu_count"] == "1" and meta["gpu.0.uuid"] == second
    assert meta["cuda_visible_devices"] == second


@pytest.mark.parametrize("error, driver, gpus, words", [
    ("cudaErrorInsufficientDriver: CUDA driver version is insufficient", None, (), "no NVIDIA driver"),
    ("cudaErrorNoDevice: no CUDA-capable device is detected", "580.159.04", (), "no NVIDIA GPU found"),
    ('CuPy is not installed: pip install -e ".[cuda12]" in the checkout (".[cuda13]" for CUDA 13)', "580.159.04", (),
     'pip install -e ".[cuda12]"'),
    ('CuPy is not installed: pip install -e ".[cuda12]" in the checkout (".[cuda13]" for CUDA 13)', None, (),
     "no NVIDIA driver"),  # installing CuPy would change nothing
    ("cudaErrorUnknown: unknown error", "580.159.04", (), "cudaErrorUnknown"),
])
def test_the_no_gpu_reason_is_in_plain_words(error, driver, gpus, words):
    import dataclasses

    from gpuipc_bench.machine.probe import probe

    machine = dataclasses.replace(probe(), cuda_error=error, driver_version=driver, gpus=gpus)
    assert words in machine.no_gpu_reason


# --------------------------------------------------------------------------- every GPU pair


def test_pairs_all_plans_each_pair_scenario_once_per_ordered_pair():
    from gpuipc_bench.harness.plan import plan_pairs
    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.scenarios import SCENARIOS
    from fakes import fake_machine

    machine = fake_machine((80 << 30,) * 4)
    config = RunConfig(scenarios=("ipc", "host"))
    plan = [(SCENARIOS[n], SCENARIOS[n].workers(config, machine)) for n in ("ipc", "host")]
    expanded = plan_pairs(plan, config, machine, "all", full=True)[0]
    ipc = [[spec.device for spec in specs] for scenario, specs in expanded if scenario.name == "ipc"]
    assert len(ipc) == 12 and sorted(map(tuple, ipc)) == [(a, b) for a in range(4) for b in range(4) if a != b]
    assert [s.name for s, _ in expanded].count("host") == 1  # not a GPU pair scenario
    assert [[spec.device for spec in specs] for _, specs in plan_pairs(plan[:1], config, machine, ((1, 0),))[0]] \
        == [[1, 0]]


def test_plain_run_on_several_gpus_adds_the_first_nvlink_pair():
    """Same-GPU runs stay; each pairable scenario (latency too) runs once more across the first
    NVLink pair, after every same-GPU run (one process set for them); a scenario that needs two GPUs
    runs on that pair only."""
    import dataclasses as dc

    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.harness.plan import default_pair, plan_pairs
    from gpuipc_bench.scenarios import SCENARIOS
    from fakes import fake_machine

    machine = fake_machine((80 << 30,) * 4)
    assert default_pair(machine) == (0, 1)  # no NVLink known: GPUs 0 and 1
    machine = dc.replace(machine, links={(2, 3): "NV18", (3, 2): "NV18", (0, 1): "SYS", (1, 0): "SYS"})
    assert default_pair(machine) == (2, 3)
    config = RunConfig(scenarios=("ipc", "latency", "peer", "host"))
    plan = [(SCENARIOS[n], SCENARIOS[n].workers(config, machine)) for n in ("ipc", "latency", "peer", "host")]
    got = [(s.name, [spec.device for spec in specs]) for s, specs in plan_pairs(plan, config, machine, "default")[0]]
    assert got == [("ipc", [0, 0]), ("latency", [0, 0]), ("host", [None] * len(plan[3][1])), ("ipc", [2, 3]),
                   ("latency", [2, 3]), ("peer", [2, 3])]


@pytest.mark.parametrize("args, words", [
    (["--pairs", "0-0"], "names one GPU twice"),
    (["--pairs", "0>1"], "is not a pair of GPU indices"),
    (["--pairs", "0-1,0-1"], "names a pair twice"),
    (["--pairs", "0-1", "--devices", "0"], "--pairs and --devices both choose the GPUs"),
])
def test_bad_pairs_are_refused_in_one_line(args, words, tmp_path):
    from click.testing import CliRunner

    from gpuipc_bench.cli import cli

    result = CliRunner().invoke(cli, ["run", "-s", "host", "-o", str(tmp_path / "x.csv"), *args])
    assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output


def test_pairs_all_on_a_machine_without_two_gpus_says_so(tmp_path):
    from click.testing import CliRunner

    from gpuipc_bench.cli import cli

    result = CliRunner().invoke(cli, ["run", "-s", "host", "--pairs", "all", "-o", str(tmp_path / "x.csv")])
    assert result.exit_code == 2 and "--pairs all: this machine has 0 GPU(s), no pair of two" in result.output


# --------------------------------------------------------------------------- --out where no file can be written


def test_out_in_a_folder_that_takes_no_file_is_refused(no_work):
    """/proc exists and looks writable to root, but no file can be created in it."""
    assert_refused(*invoke("run", "-s", "host", "--out", "/proc/x.csv"), "--out", "/proc")


def test_out_in_a_read_only_folder_is_refused(no_work):
    folder = no_work / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root: the mode does not stop it; /proc above covers root
            pytest.skip("running as root: a read-only mode does not stop root")
        assert_refused(*invoke("run", "-s", "host", "--out", str(folder / "x.csv")), "--out", "not writable")
    finally:
        folder.chmod(0o755)


def test_out_dash_is_refused(no_work):
    assert_refused(*invoke("run", "-s", "host", "--out", "-"), "--out -")
    assert not (no_work / "-").exists()


def test_out_gz_is_refused_not_written_as_plain_text(no_work):
    assert_refused(*invoke("run", "-s", "host", "--out", "r.csv.gz"), "--out r.csv.gz", "gzip it after")
    assert not (no_work / "r.csv.gz").exists()


def test_run_plot_with_a_bad_suffix_is_refused_before_the_run(no_work):
    assert_refused(*invoke("run", "-s", "host", "--out", "r.csv", "--plot", "x.txt"), "--plot", ".png")


def test_quick_and_thorough_are_refused_together(no_work):
    assert_refused(*invoke("run", "-s", "host", "--quick", "--thorough"), "--quick", "--thorough")
