"""The sharing-mode axis (gpuipc_bench.modes, plan.plan_modes/modes_for): which modes a run
takes, what each sets in its workers, the daemon's life, and a same-GPU pair measured once per
mode with the fake GPU (rows carry the mode)."""

from __future__ import annotations

import dataclasses
import os

import pytest

import fake_gpu
from conftest import ours
from gpuipc_bench import modes
from gpuipc_bench.modes import daemon as mps
from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import UsageError
from gpuipc_bench.harness.launcher import run_scenario
from gpuipc_bench.harness.plan import modes_for, plan_modes
from gpuipc_bench.scenarios import SCENARIOS
from fakes import fake_machine


def test_parse_names_the_option_and_keeps_the_registry_order():
    assert modes.parse("mps,time-sliced") == ("time-sliced", "mps")
    for text, words in (("foo", "unknown sharing mode 'foo'"), ("mps,mps", "names a mode twice"),
                        (" , ", "give one or more of time-sliced, mps")):
        with pytest.raises(UsageError, match="--sharing") as exc:
            modes.parse(text)
        assert words in str(exc.value)


def test_default_is_both_where_mps_can_start(fake_mps):
    chosen, note = plan_modes(None, fake_machine((80 << 30,)))
    assert [m.name for m in chosen] == ["time-sliced", "mps"] and note is None


def test_default_without_mps_says_why_and_an_explicit_mps_is_refused(no_mps):
    chosen, note = plan_modes(None, fake_machine((80 << 30,)))
    assert [m.name for m in chosen] == ["time-sliced"]
    assert "the mps mode for same-GPU pairs: nvidia-cuda-mps-control" in note
    with pytest.raises(UsageError, match="^--sharing mps: cannot run here: nvidia-cuda-mps-control"):
        plan_modes("mps", fake_machine((80 << 30,)))


def test_no_gpu_and_mpi_have_no_modes():
    no_gpu = dataclasses.replace(fake_machine((80 << 30,)), gpus=[])
    assert plan_modes(None, no_gpu) == ([], None)
    with pytest.raises(UsageError, match="no GPU to share"):
        plan_modes("mps", no_gpu)
    with pytest.raises(UsageError, match="under MPI"):
        plan_modes("mps", fake_machine((80 << 30,)), job=object())


def test_only_same_gpu_pairs_of_scenarios_that_declare_it_run_per_mode():
    machine = fake_machine((80 << 30,) * 2)
    both = modes.make(("time-sliced", "mps"))
    config = RunConfig(scenarios=("ipc",))
    same = SCENARIOS["ipc"].workers(config, machine)
    across = SCENARIOS["ipc"].workers(dataclasses.replace(config, devices=(0, 1)), machine)
    assert modes_for(SCENARIOS["ipc"], same, both) == both
    assert modes_for(SCENARIOS["latency"], SCENARIOS["latency"].workers(config, machine), both) == both
    assert modes_for(SCENARIOS["ipc"], across, both) == [None]  # one process per GPU: exclusive
    assert modes_for(SCENARIOS["sharing"], SCENARIOS["sharing"].workers(config, machine), both) == both
    assert modes_for(SCENARIOS["host"], SCENARIOS["host"].workers(config, machine), both) == [None]
    assert modes_for(SCENARIOS["ipc"], same, []) == [None]


def test_runs_go_mode_by_mode():
    from gpuipc_bench.harness.plan import plan_runs

    machine = fake_machine((80 << 30,))
    config = RunConfig(scenarios=("ipc", "latency", "host"))
    plan = [(SCENARIOS[n], SCENARIOS[n].workers(config, machine)) for n in ("ipc", "latency", "host")]
    ts, mps_mode = modes.make(("time-sliced", "mps"))
    got = [(s.name, m.name if m else None) for s, _, m in plan_runs(plan, [ts, mps_mode])]
    assert got == [("ipc", "time-sliced"), ("latency", "time-sliced"), ("host", None), ("ipc", "mps"),
                   ("latency", "mps")]
    assert [(s.name, m) for s, _, m in plan_runs(plan, [])] == [("ipc", None), ("latency", None), ("host", None)]


def test_a_thread_percentage_is_a_mode_of_its_own_on_the_sm_bound_scenarios(fake_mps):
    from gpuipc_bench.harness.plan import plan_runs

    assert modes.parse("mps:25,time-sliced,mps") == ("time-sliced", "mps", "mps:25")
    for bad, words in (("mps:0", "whole number from 1 to 99"), ("mps:100", "whole number from 1 to 99"),
                       ("time-sliced:5", "unknown sharing mode"), ("mps:x", "whole number")):
        with pytest.raises(UsageError, match=words):
            modes.parse(bad)
    ts, full, quarter = modes.make(("time-sliced", "mps", "mps:25"))
    assert quarter.name == "mps:25" and quarter.owner is full  # one daemon for the run
    machine = fake_machine((80 << 30,))
    config = RunConfig(scenarios=("staging", "ipc"))
    plan = [(SCENARIOS[n], SCENARIOS[n].workers(config, machine)) for n in ("staging", "ipc")]
    got = [(s.name, m.name) for s, _, m in plan_runs(plan, [ts, full, quarter])]
    assert got == [("staging", "time-sliced"), ("ipc", "time-sliced"), ("staging", "mps"), ("ipc", "mps"),
                   ("ipc", "mps:25")]
    assert [(s.name, m.name) for s, _, m in plan_runs(plan, [quarter])] == [("ipc", "mps:25")]
    full.start()
    try:
        quarter.start()
        assert quarter.env()["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
        assert quarter.env()[mps.PIPE_ENV] == full.env()[mps.PIPE_ENV]
        assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in full.env()
    finally:
        quarter.stop()
        assert full.daemon is not None and full.daemon.running()  # the owner stops it
        full.stop()


def test_time_sliced_points_workers_at_an_empty_private_pipe_directory():
    mode = modes.TimeSliced()
    mode.start()
    pipe = mode.env()[mps.PIPE_ENV]
    assert os.path.isdir(pipe) and os.listdir(pipe) == []
    assert not mps.serves_this_process(mode.env())
    mode.stop()
    assert not os.path.exists(pipe) and mode.env() == {}


def test_mps_mode_starts_one_daemon_and_stops_it(fake_mps):
    mode = modes.Mps()
    mode.start()
    mode.start()  # once per run
    daemon = mode.daemon
    assert daemon is not None and daemon.running() and mps.serves_this_process(mode.env())
    assert mode.facts() == {"sharing.mps": "a private MPS daemon started for this run"}
    mode.stop()
    assert not daemon.running() and not os.path.exists(daemon.pipe_dir)
    assert mode.stop() == []  # twice is harmless


def test_mps_mode_that_cannot_start_says_so_once(no_mps):
    from gpuipc_bench.errors import BenchError

    mode = modes.Mps()
    for _ in range(2):
        with pytest.raises(BenchError, match="the mps mode: cannot start a private MPS daemon"):
            mode.start()


def test_a_same_gpu_pair_is_measured_in_each_mode(monkeypatch, fake_mps, no_leaks):
    """The fake GPU's ipc pair run once per mode: every row says the mode its workers were in
    (the worker sets the mode's environment before anything else)."""
    fake_gpu.install(monkeypatch)
    config = RunConfig(scenarios=("ipc",), sizes=(4099,), min_samples=2, max_samples=2, timeout=20.0)
    scenario = SCENARIOS["ipc"]
    seen = {}
    for mode in modes.make(("time-sliced", "mps")):
        mode.start()
        try:
            rows: list[dict] = []
            outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append,
                                   env=mode.env())
            assert outcome.ok, outcome.error
            seen[mode.name] = {r["sharing"] for r in rows}
        finally:
            mode.stop()
    assert seen == {"time-sliced": {"time-sliced"}, "mps": {"mps"}}
    assert ours(fake_mps) == []  # no pipe or log folder left


def test_rows_under_mps_carry_the_thread_percentage(monkeypatch, fake_mps, no_leaks):
    fake_gpu.install(monkeypatch)
    config = RunConfig(scenarios=("ipc",), sizes=(4099,), min_samples=2, max_samples=2, timeout=20.0)
    scenario = SCENARIOS["ipc"]
    full, quarter = modes.make(("mps", "mps:25"))
    full.start()
    try:
        got = {}
        for mode in (full, quarter):
            rows: list[dict] = []
            outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append,
                                   env=mode.env())
            assert outcome.ok, outcome.error
            got[mode.name] = {(r["sharing"], r["mps_thread_pct"]) for r in rows}
    finally:
        full.stop()
    assert got == {"mps": {("mps", 100)}, "mps:25": {("mps", 25)}}


def test_the_mode_handed_to_the_workers_names_their_rows_as_their_environment_did(monkeypatch, fake_mps, no_leaks):
    """The harness hands each worker its mode's name (fresh workers and a persistent set): the rows
    say what the workers, told only the mode's environment, found themselves."""
    from gpuipc_bench.harness.pool import WorkerSets

    fake_gpu.install(monkeypatch)
    config = RunConfig(scenarios=("ipc",), sizes=(4099,), min_samples=2, max_samples=2, timeout=20.0)
    scenario = SCENARIOS["ipc"]
    specs = scenario.workers(config, None)
    sliced, quarter = modes.make(("time-sliced", "mps:25"))
    sets = WorkerSets()
    try:
        for mode in (sliced, quarter):
            mode.start()
            seen = {}
            for how in ("environment", "fresh", "set"):
                rows: list[dict] = []
                if how == "set":
                    outcome = sets.run(scenario, config, specs, mode_name=mode.name, env=mode.env(),
                                       on_row=rows.append)
                else:
                    outcome = run_scenario(scenario, config, specs, on_row=rows.append, env=mode.env(),
                                           mode_name=mode.name if how == "fresh" else None)
                assert outcome.ok, outcome.error
                seen[how] = {(r["sharing"], r["mps_thread_pct"]) for r in rows}
            assert seen["fresh"] == seen["set"] == seen["environment"], mode.name
            assert seen["set"] == ({("time-sliced", None)} if mode is sliced else {("mps", 25)})
    finally:
        sets.end()
        modes.end_all([sliced, quarter])


def test_latency_under_mps_keeps_its_cpu_rows_apart(monkeypatch, fake_mps, no_leaks):
    """The flag ping-pong and the barrier are CPU rows ('none'): no thread percentage on them."""
    fake_gpu.install(monkeypatch)
    config = RunConfig(scenarios=("latency",), sizes=(0, 4), min_samples=2, max_samples=2, timeout=20.0)
    scenario = SCENARIOS["latency"]
    (quarter,) = modes.make(("mps:25",))
    quarter.start()
    try:
        rows: list[dict] = []
        outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append,
                               env=quarter.env())
    finally:
        quarter.stop()
    assert outcome.ok, outcome.error
    assert {(r["sharing"], r["mps_thread_pct"]) for r in rows} == {("mps", 25), ("none", None)}


# --------------------------------------------------------------------------- on a GPU

needs_mps = pytest.mark.skipif(mps.find_binary() is None, reason="needs nvidia-cuda-mps-control on PATH")


def _our_daemons() -> list[str]:
    """Live MPS daemons and servers whose environment names one of our pipe directories."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm.startswith("nvidia-cuda-mps") and mps.PREFIX.encode() in env:
            found.append(f"{pid} {comm}")
    return found


@pytest.mark.gpu
@needs_mps
def test_gpu_both_modes_in_one_run_and_no_daemon_left(tmp_path):
    import subprocess
    import sys

    from gpuipc_bench.results import read_results

    out = tmp_path / "modes.csv"
    done = subprocess.run([sys.executable, "-m", "gpuipc_bench.cli", "run", "-s", "ipc", "--sizes", "4K,1M", "-n", "3",
                           "--sharing", "time-sliced,mps", "-o", str(out), "-q"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    df, meta = read_results(out)
    ipc = df[(df.path == "ipc") & (df.metric == "bandwidth")]
    same_gpu = ipc[ipc.src == ipc.dst]  # on a node of several GPUs the run adds a pair across two ('exclusive')
    assert set(same_gpu.sharing) == {"time-sliced", "mps"} and meta["sharing.modes"] == "time-sliced,mps"
    assert set(ipc[ipc.src != ipc.dst].sharing) <= {"exclusive"}
    assert ipc.verified.all()
    assert _our_daemons() == []


@pytest.mark.gpu
@needs_mps
def test_gpu_sigkill_of_the_parent_during_the_mps_half_leaves_no_daemon(tmp_path):
    import glob
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "gpuipc_bench.cli", "run", "-s", "ipc", "--sharing", "mps",
                             "-o", str(tmp_path / "killed.csv"), "-q"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while not _our_daemons() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _our_daemons(), "the run's MPS daemon never started"
    time.sleep(2)  # its workers are clients now
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while _our_daemons() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _our_daemons() == [], "the guard stops the daemon when the run is killed"
    assert not glob.glob(f"/tmp/{mps.PREFIX}pipe-*/{mps.PID_FILE}")


def test_a_killed_run_s_time_sliced_pipe_folder_is_removed_by_the_next_run(tmp_path, monkeypatch):
    """SIGKILL leaves the run's empty time-sliced pipe folder; the next run's stale clean-up (with the
    MPS daemons') removes it, and never a live run's, a folder with something in it or another name."""
    import subprocess
    import sys
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    code = ("import os, tempfile; tempfile.tempdir = %r; from gpuipc_bench.modes import TimeSliced; m = TimeSliced(); "
            "m.start(); print(m.pipe_dir, flush=True); os.kill(os.getpid(), 9)" % str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    killed = done.stdout.strip()
    assert done.returncode == -9 and os.path.isdir(killed) and os.path.dirname(killed) == str(tmp_path)
    live = modes.TimeSliced()
    live.start()  # this process's: still going
    kept = tmp_path / (mps.TIME_SLICED_FOLDER + "1-2-notempty")
    kept.mkdir()
    (kept / "control").write_text("")
    other = tmp_path / (mps.TIME_SLICED_FOLDER + "abcdefgh")  # a name of an earlier version: left alone
    other.mkdir()
    try:
        assert mps.stop_stale_daemons(str(tmp_path)) == []
        assert not os.path.exists(killed)
        assert os.path.isdir(live.pipe_dir) and kept.is_dir() and other.is_dir()
    finally:
        live.stop()
