"""Issue 26, what a new user and a hostile one still hit: one test (or more) per item, each
failing before its fix. Item 8 (ratios cut at 80 columns) belongs to the report renderer;
item 9's inputs are also in the hostile-input table (tests/test_hostile_input.py)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import ROOT, Run, assert_refused, invoke, our_segments
from gpuipc_bench.cli import cli
from gpuipc_bench.results import read_results
from test_bad_input import fake_machine

FAST = ["--sizes", "64", "--iterations", "2", "--warmup", "0"]


def bench(*args: str, env: dict | None = None, cwd: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
    """`python -m gpuipc_bench.cli ARGS` as a real process."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUIPC_BENCH_", "OMPI_", "PMI"))}
    full_env.update({"PYTHONPATH": str(ROOT)}, **(env or {}))
    return subprocess.run([sys.executable, "-m", "gpuipc_bench.cli", *args], env=full_env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, **kwargs)


def one_error_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    """The run's output is one 'Error:' line holding `words`, and nothing else; that line."""
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), proc.stdout + proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------------ 1: an --out folder that takes no file


def test_1_out_where_no_file_can_be_created(no_work):
    """/proc exists and looks writable to root, but no file can be created in it."""
    assert_refused(*invoke("run", "-s", "host", "--out", "/proc/x.csv"), "--out", "/proc")


def test_1_out_in_a_read_only_folder(no_work):
    folder = no_work / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        if os.access(folder, os.W_OK):  # root: the mode does not stop it; /proc above covers root
            pytest.skip("running as root: a read-only mode does not stop root")
        assert_refused(*invoke("run", "-s", "host", "--out", str(folder / "x.csv")), "--out", "not writable")
    finally:
        folder.chmod(0o755)


# ------------------------------------------------------------------------ 2: mpi4py without an MPI library


def _mpi4py_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("mpi4py") is not None


NO_LIBMPI = {"MPI4PY_LIBMPI": "/nonexistent/libmpi.so"}  # mpi4py's loader: as if no MPI library were there


@pytest.mark.skipif(not _mpi4py_installed(), reason="needs mpi4py")
@pytest.mark.parametrize("args,env", [
    (["--launcher", "mpi"], {}),
    ([], {"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}),
], ids=["launcher-mpi", "started-by-mpirun"])
def test_2_mpi4py_without_an_mpi_library(tmp_path, args, env):
    proc = bench("run", "-s", "host", "--out", "r.csv", *args, env={**NO_LIBMPI, **env}, cwd=tmp_path)
    assert proc.returncode == 2
    one_error_line(proc, "MPI library", "--launcher fork" if not args else "--launcher mpi")
    assert not (tmp_path / "r.csv").exists()


# ------------------------------------------------------------------------ 3: a closed stdout or stderr


@pytest.mark.parametrize("closed", ["stderr", "stdout", "both"])
def test_3_a_closed_output_fails_nothing(tmp_path, closed):
    """`gpuipc-bench run 2>&1 | head -3`: the reader has gone before the run writes a word."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUIPC_BENCH_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "gpuipc_bench.cli", "run", "-s", "host", "-s", "barrier",
                             "--out", "r.csv", *FAST], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    for name in ("stdout", "stderr") if closed == "both" else (closed,):
        getattr(proc, name).close()
    for stream in (proc.stdout, proc.stderr):
        if not stream.closed:
            stream.read()
    assert proc.wait(timeout=120) == 0
    _, meta = read_results(tmp_path / "r.csv")
    assert meta["partial"] == "false" and meta["status"] == "completed: host,barrier", meta


# ------------------------------------------------------------------------ 4: a killed run never claims to be complete


def headers_while_running(out, monkeypatch) -> list[dict]:
    """A launcher that runs nothing and reads the CSV's header each time a scenario starts."""
    import gpuipc_bench.harness.launcher
    from gpuipc_bench.harness.launcher import Outcome

    seen: list[dict] = []

    def fake_run_scenario(scenario, config, specs, on_row, **kwargs):
        seen.append(read_results(out)[1])
        return Outcome(scenario.name)

    monkeypatch.setattr(gpuipc_bench.harness.launcher, "run_scenario", fake_run_scenario)
    return seen


def test_4_header_says_partial_until_the_clean_end(tmp_path, monkeypatch):
    """What a SIGKILL at any moment between two scenarios leaves is what is on disk then: the
    header read while the second scenario runs must say partial."""
    out = tmp_path / "r.csv"
    seen = headers_while_running(out, monkeypatch)
    result = CliRunner().invoke(cli, ["run", "-s", "host", "-s", "barrier", "--out", str(out), "-q",
                                      "--launcher", "fork-fresh"])  # the stub stands in for fork-fresh's launcher
    assert result.exit_code == 0, result.output
    assert [meta["partial"] for meta in seen] == ["true", "true"]
    assert "running" in seen[1]["status"]
    assert read_results(out)[1]["partial"] == "false"


def test_4_sigkill_during_the_second_scenario(tmp_path):
    """The real thing: the parent killed while the second scenario (host) sets up."""
    before = our_segments()
    # setup:2: the launcher's setup phase, then host's own (barrier has only the first)
    run = Run(tmp_path, "run", "-s", "barrier", "-s", "host", "--out", "r.csv", *FAST, fault="hang:1:setup:2")
    assert run.wait_for_fault() == "hang:1:setup\n"
    os.kill(run.proc.pid, signal.SIGKILL)
    code, _, _ = run.finish()
    assert code == -signal.SIGKILL
    frame, meta = read_results(tmp_path / "r.csv")
    assert meta["partial"] == "true", meta
    assert set(frame["scenario"]) == {"barrier"}
    assert our_segments() == before


# ------------------------------------------------------------------------ 5: `info` without CuPy


def test_5_info_without_cupy_keeps_the_extras_in_its_advice(monkeypatch):
    import gpuipc_bench.machine.probe
    from gpuipc_bench.machine.probe import CUPY_MISSING

    machine = dataclasses.replace(fake_machine(()), cuda_error=CUPY_MISSING, cpu_model="[bold]cpu[/]",
                                  driver_version="580.159.04")  # a driver: CuPy is what is missing
    monkeypatch.setattr(gpuipc_bench.machine.probe, "probe", lambda *a, **k: machine)
    result = CliRunner().invoke(cli, ["info"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert 'pip install -e ".[cuda12]"' in text and '".[cuda13]"' in text, text
    assert "[bold]cpu[/]" in text  # what the machine says is printed as it is, never as markup


# ------------------------------------------------------------------------ 6: the stated worker bound holds


def _cpu_scenarios_at_most_workers():
    from gpuipc_bench.scenarios import SCENARIOS

    return [(name, s.max_workers) for name, s in SCENARIOS.items() if s.gpus_needed == 0 and s.max_workers > 2]


@pytest.mark.parametrize("name,workers", _cpu_scenarios_at_most_workers())
def test_6_a_cpu_scenario_runs_at_its_most_workers(tmp_path, name, workers):
    """`list` and `--help` say 2-64 for barrier: 64 must work (it failed at set-up: mailbox full)."""
    out = tmp_path / "r.csv"
    result = CliRunner().invoke(cli, ["run", "-s", name, "--workers", str(workers), "--out", str(out), "-q", *FAST])
    assert result.exit_code == 0, result.output
    frame, meta = read_results(out)
    assert meta["partial"] == "false" and set(frame["workers"]) == {workers}


def test_6_every_scenario_has_a_mailbox_slot_per_worker_at_its_most():
    """The slots a scenario may name do not shrink as its workers grow."""
    from gpuipc_bench.config import RunConfig
    from gpuipc_bench.engine.scenario import MAILBOX_SLOTS
    from gpuipc_bench.scenarios import SCENARIOS

    for name, scenario in SCENARIOS.items():
        if type(scenario).mailbox_slots is not type(scenario).__mro__[-2].mailbox_slots:
            continue  # a scenario that sizes its own mailbox
        config = RunConfig(scenarios=(name,), workers=scenario.max_workers)
        specs = [None] * scenario.max_workers
        assert scenario.mailbox_slots(config, specs) - scenario.max_workers >= MAILBOX_SLOTS


# ------------------------------------------------------------------------ 7: COLUMNS=0


@pytest.mark.parametrize("columns", ["0", "-1", "abc", "5"])
def test_7_every_command_prints_whatever_columns_says(tmp_path, columns):
    env = {"COLUMNS": columns}
    out = tmp_path / "r.csv"
    runner = CliRunner()
    result = runner.invoke(cli, ["run", "-s", "host", "--out", str(out), *FAST], env=env)
    assert result.exit_code == 0 and "wrote" in result.output and "r.csv" in result.output, result.output
    result = runner.invoke(cli, ["report", str(out)], env=env)
    assert result.exit_code == 0 and "host" in result.output, result.output
    result = runner.invoke(cli, ["list"], env=env)
    assert result.exit_code == 0 and "GPUs" in result.output, result.output  # narrow: names are cut
    result = runner.invoke(cli, ["info"], env=env)
    assert result.exit_code == 0 and "CPU" in result.output, result.output


def test_7_columns_zero_in_a_real_process(tmp_path):
    proc = bench("list", env={"COLUMNS": "0"})
    assert proc.returncode == 0 and "barrier" in proc.stdout


# ------------------------------------------------------------------------ 9: input checked before any work


def test_9_run_plot_with_a_bad_suffix_is_refused_before_the_run(no_work):
    assert_refused(*invoke("run", "-s", "host", "--out", "r.csv", "--plot", "x.txt"), "--plot", ".png")


def test_9_quick_and_thorough_are_refused_together(no_work):
    assert_refused(*invoke("run", "-s", "host", "--quick", "--thorough"), "--quick", "--thorough")


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "101"])
def test_9_report_min_effect_out_of_range(no_work, value):
    assert_refused(*invoke("report", "--min-effect", value, "x.csv"), "--min-effect")


def test_9_report_plot_does_not_overwrite_without_force(no_work):
    from test_report_cli import SMALL

    existing = no_work / "fig.png"
    existing.write_bytes(b"keep")
    assert_refused(*invoke("report", str(SMALL), "--plot", str(existing)), "--plot", "fig.png", "--force")
    assert existing.read_bytes() == b"keep"
    code, output = invoke("report", str(SMALL), "--plot", str(existing), "--force")
    assert code == 0, output
    assert existing.read_bytes() != b"keep"


def test_9_out_dash_is_refused(no_work):
    assert_refused(*invoke("run", "-s", "host", "--out", "-"), "--out -")
    assert not (no_work / "-").exists()


def test_9_a_results_file_over_the_limit_is_refused_before_reading(no_work, monkeypatch):
    import gpuipc_bench.results.reading as results

    big = no_work / "big.txt"
    with open(big, "wb") as fh:  # sparse: the size, not the bytes
        fh.write(b"# gpuipc-bench results\n")
        fh.truncate(results.MAX_RESULTS_BYTES + 1)

    def no_read(*args, **kwargs):
        raise AssertionError("read a file it should have refused by its size")

    monkeypatch.setattr(results, "_parse_table", no_read)
    assert_refused(*invoke("report", str(big)), "big.txt", "larger than")


def test_9_a_large_results_file_is_read_whole(tmp_path):
    """About 100k rows (a run of the thorough sweep is a few thousand), read whole by the
    vectorised reader. How fast is a benchmark's question, not a test's: measured with
    scripts/make_large_results.py (260 MB in 9.2 s at 0.92 GB on a 2-core machine, was 109 s
    at 6.1 GB); tests/test_large_report.py checks it reads what the per-cell parser reads."""
    from test_report_cli import SMALL

    text = SMALL.read_text(encoding="utf-8")
    header, _, body = text.partition("\nscenario,")
    head, rows = "scenario," + body.split("\n", 1)[0], body.split("\n", 1)[1]
    copies = max(1, 100_000 // max(1, rows.count("\n")))
    big = tmp_path / "big.csv"
    big.write_text(header + "\n" + head + "\n" + rows * copies, encoding="utf-8")
    frame, _ = read_results(big)
    assert len(frame) == rows.count("\n") * copies


# ------------------------------------------------------------------------ 10: torch's files after a SIGKILL

_TORCH_PARENT = r'''
import os, sys, time, multiprocessing
from scenarios.torch_share import TorchShared, queue_semaphores
from gpuipc_bench.ipc.process import die_with_parent

def worker(shared, rank, ready):
    die_with_parent()
    shared.pids[rank] = os.getpid()
    open(f"/dev/shm/torch_{os.getpid()}_7_0", "w").close()  # what torch's reference counts leave
    shared.queue.put(ready)
    time.sleep(600)

if __name__ == "__main__":
    shared = TorchShared(2)
    workers = [multiprocessing.get_context("spawn").Process(target=worker, args=(shared, r, r)) for r in (0, 1)]
    for w in workers:
        w.start()
    assert sorted(shared.queue.get(timeout=60) for _ in workers) == [0, 1]
    print(" ".join(map(str, [shared.janitor.pid, *shared.pids])), *queue_semaphores(shared.queue), flush=True)
    time.sleep(600)
'''


def test_10_sigkill_of_the_parent_leaves_no_torch_files_and_no_semaphores(tmp_path):
    """The torch scenario's parent objects (TorchShared) with workers spawned as the launcher does
    (PR_SET_PDEATHSIG), on CPU: the files stand for torch's /dev/shm/torch_<pid>_* reference
    counts. What needs a GPU to confirm: that real torch leaves no other name behind."""
    from conftest import TAG, assert_none_left

    tag = f"torch-janitor-{os.getpid()}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), TAG: tag}
    stderr = tmp_path / "stderr.txt"
    script = tmp_path / "parent.py"  # a file: spawned children import their parent's main module
    script.write_text(_TORCH_PARENT)
    with open(stderr, "w") as err:
        parent = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=err, text=True, start_new_session=True)
        line = parent.stdout.readline().split()
        assert line, stderr.read_text()
        janitor, *pids = (int(x) for x in line[:3])
        semaphores = line[3:]
        assert len(semaphores) == 3 and all(Path(f"/dev/shm/torch_{pid}_7_0").exists() for pid in pids)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        assert_none_left(tag, within=15)  # the workers, the janitor and the resource tracker
    assert not [p for p in Path("/dev/shm").iterdir() if any(p.name.startswith(f"torch_{pid}_") for pid in pids)]
    assert not [name for name in semaphores if Path("/dev/shm", "sem." + name.lstrip("/")).exists()]
    assert "leaked" not in stderr.read_text(), stderr.read_text()
    assert janitor not in pids


def test_10_the_janitor_does_nothing_when_the_parent_cleans_up(tmp_path):
    from gpuipc_bench.ipc.janitor import Janitor

    marker = tmp_path / "cleaned"
    janitor = Janitor(lambda: marker.touch())
    janitor.close()
    janitor.close()
    assert not marker.exists()
    with pytest.raises(ChildProcessError):
        os.waitpid(janitor.pid, os.WNOHANG)


# ------------------------------------------------------------------------ 11 (help part): help texts from the code


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli, [*args, "--help"], env={"COLUMNS": "2000"})
    assert result.exit_code == 0
    return " ".join(result.output.split())


def test_11_top_level_help_names_every_registered_scenario():
    from gpuipc_bench.scenarios import SCENARIOS

    text = _help()
    assert all(name in text for name in SCENARIOS), text
    default = [name for name, s in SCENARIOS.items() if s.in_default_run]
    assert f"Scenarios ({len(default)} in the default run): {', '.join(default)}." in text


def test_11_run_help_states_what_the_code_does_and_no_time():
    import re

    from gpuipc_bench import robust

    from gpuipc_bench.engine import scenario
    from gpuipc_bench.gpu.timing import LARGE_TRANSFER_BYTES, WARMUP_OPS
    from gpuipc_bench.sizes import format_size

    text = _help("run")
    assert not re.search(r"\babout \d+ ?s\b", text, re.I), "a time in --help that no run backs"
    quick = scenario.PRESETS["quick"]
    assert f"--quick A first look: {len(scenario.QUICK_GPU_SIZES)} sizes" in text
    assert all(format_size(n) in text for n in scenario.QUICK_GPU_SIZES + scenario.QUICK_HOST_SIZES)
    assert f"{quick[0]} samples per group after {quick[2]} warm-up sample" in text
    thorough = scenario.PRESETS["thorough"]
    assert f"{format_size(max(scenario.THOROUGH_GPU_SIZES))} in steps" in text
    assert f"{thorough[0]} samples per group after {thorough[2]} warm-up samples" in text
    assert "Default: 4 B, 4 KiB, 64 KiB, 1 MiB..256 MiB in steps of x4" in " ".join(text.split())
    assert scenario.DEFAULT_GPU_SIZES == (4, 4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20)
    assert (f"within +-{robust.PRECISION:.0%} ({robust.WIDE_MIN_SAMPLES}, or --max-samples if fewer, when the "
            "spread is wide)") in text
    assert f"[default: {robust.MIN_SAMPLES}]" in text and f"at most. [default: {scenario.DEFAULT_SAMPLES[1]}]" in text
    assert (f"each batch also queues {WARMUP_OPS} untimed operations before its start event, 1 for transfers of "
            f"{format_size(LARGE_TRANSFER_BYTES)} or more") in " ".join(text.split())


def test_the_run_writes_its_total_time_at_the_clean_end_only(tmp_path, monkeypatch):
    """`seconds.total` (schema 3) is the run's wall time, in the header only once the run ended."""
    out = tmp_path / "r.csv"
    seen = headers_while_running(out, monkeypatch)
    assert CliRunner().invoke(cli, ["run", "-s", "host", "-s", "barrier", "--out", str(out), "-q"]).exit_code == 0
    assert not any("seconds.total" in meta for meta in seen)
    assert float(read_results(out)[1]["seconds.total"]) >= 0
