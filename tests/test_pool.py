"""Persistent workers (gpuipc_bench.harness.pool): one process set serves scenario after scenario; a
failure ends the set (named, rows kept) and the next scenario gets a fresh one; a mode's sets end
before another mode's start; nothing is left behind. On CPUs, with the host scenario (persistent)
and the barrier scenario (its own processes)."""

from __future__ import annotations

import multiprocessing
import os
import time

import pytest

from conftest import FAULT_ENV, our_segments
from gpuipc_bench.config import RunConfig
from gpuipc_bench.harness.pool import WorkerSets
from gpuipc_bench.results import read_results
from gpuipc_bench.scenarios import SCENARIOS


def _run(sets, name="host", mode=None, **config):
    scenario = SCENARIOS[name]
    run_config = RunConfig(scenarios=(name,), sizes=(64, 4096), iterations=3, warmup=1, timeout=10, **config)
    rows: list[dict] = []
    outcome = sets.run(scenario, run_config, scenario.workers(run_config, None), mode_name=mode, on_row=rows.append)
    return outcome, rows


def _gone(pids, within=5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(os.path.exists(f"/proc/{pid}") and _state(pid) != "Z" for pid in pids):
            return True
        time.sleep(0.05)
    return False


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.fixture
def sets(monkeypatch):
    monkeypatch.delenv(FAULT_ENV, raising=False)
    before = our_segments()
    found = WorkerSets()
    yield found
    found.close()
    assert multiprocessing.active_children() == [], "a worker process was left behind"
    assert our_segments() == before, "a shared-memory segment was left in /dev/shm"


def test_one_set_serves_scenario_after_scenario(sets):
    first, rows1 = _run(sets)
    (only,) = sets.sets.values()
    pids = only.pids
    second, rows2 = _run(sets)
    assert first.ok and second.ok and rows1 and rows2
    assert sets.started == 1 and list(sets.sets.values())[0].pids == pids and only.scenarios == 2
    assert all(os.path.exists(f"/proc/{pid}") for pid in pids)  # alive between scenarios
    assert {r["scenario"] for r in rows2} == {"host"} and all(r["verified"] is not False for r in rows2)
    sets.close()
    assert _gone(pids)


def test_a_path_that_must_be_first_in_its_set_gets_a_fresh_one_where_another_ran_before(sets, monkeypatch):
    """peer's full form measures with peer access off first: it runs in the pair's set only as the set's first
    path; where another path of the set ran before, that set leaves and a fresh one is forked. The next
    paths run in its set."""
    first_run, _ = _run(sets)
    (used,) = sets.sets.values()
    monkeypatch.setattr(type(SCENARIOS["host"]), "first_in_set", True, raising=False)
    first_path, rows = _run(sets)
    (fresh,) = sets.sets.values()
    assert first_run.ok and first_path.ok and rows
    assert fresh is not used and set(fresh.pids).isdisjoint(used.pids) and sets.started == 2
    assert _gone(used.pids)
    monkeypatch.setattr(type(SCENARIOS["host"]), "first_in_set", False)
    _run(sets)
    assert list(sets.sets.values()) == [fresh] and fresh.scenarios == 2


def test_a_worker_killed_mid_scenario_is_named_its_rows_kept_and_the_next_runs_fresh(sets, monkeypatch):
    _run(sets)
    (old,) = sets.sets.values()
    pids = old.pids
    monkeypatch.setenv(FAULT_ENV, "kill:1:sample:3")
    broken, rows = _run(sets)
    assert not broken.ok and "worker 1" in str(broken.error) and "SIGKILL" in str(broken.error)
    assert broken.rows == len(rows) > 0  # samples taken before the kill are kept
    assert sets.sets == {} and _gone(pids)  # the broken set is ended, the other worker too
    monkeypatch.delenv(FAULT_ENV)
    after, rows = _run(sets)
    assert after.ok and rows and sets.started == 2
    assert not set(list(sets.sets.values())[0].pids) & set(pids)  # never the broken workers


def test_a_raise_in_one_worker_ends_the_set(sets, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, "raise:0:sample:2")
    failed, _ = _run(sets)
    assert not failed.ok and "worker 0" in str(failed.error) and sets.sets == {}


def test_a_mode_s_sets_end_before_another_mode_starts(sets):
    _run(sets, mode="time-sliced")
    (ts,) = sets.sets.values()
    _run(sets, mode="mps")
    assert [k[0] for k in sets.sets] == ["mps"] and _gone(ts.pids)


def test_before_mps_another_mode_s_sets_are_reaped_and_after_it_they_leave_while_the_next_start(sets):
    _run(sets, mode="mps")
    (mps,) = sets.sets.values()
    sets.end_mode_other_than("time-sliced")  # no daemon starts: its workers wait for these (wait_for_leavers)
    assert sets.members == {} and [mode for _, mode in sets.retired] == ["mps"]
    outcome, rows = _run(sets, mode="time-sliced")
    assert outcome.ok and rows and _gone(mps.pids)
    (ts,) = sets.sets.values()
    sets.end_mode_other_than("mps+copy")  # an MPS daemon may start now: nothing of another mode is left
    assert sets.members == {} and sets.retired == [] and all(_state(pid) in ("gone", "Z") for pid in ts.pids)


def test_a_scenario_of_its_own_processes_ends_the_sets_first(sets):
    _run(sets)
    (host,) = sets.sets.values()
    outcome, rows = _run(sets, name="barrier")
    assert outcome.ok and rows and sets.sets == {} and _gone(host.pids)


def test_a_scenario_of_its_own_processes_starts_while_the_sets_leave_and_waits_for_them(sets, monkeypatch):
    from gpuipc_bench.harness import launcher

    _run(sets)
    (host,) = sets.sets.values()
    seen: list[tuple] = []
    real = launcher.run_scenario

    def spy(*args, **kwargs):
        seen.append(kwargs.get("after", ()))
        return real(*args, **kwargs)

    monkeypatch.setattr(launcher, "run_scenario", spy)
    outcome, rows = _run(sets, name="barrier")
    assert outcome.ok and rows and sets.sets == {}
    assert seen and set(seen[0]) <= set(host.pids)  # its workers waited for the set's (those still there)
    assert _gone(host.pids)
    (left, mode), = sets.retired  # its own workers exit on their own, reaped by the next scenario or the end
    assert mode is None and len(left.workers) == 2
    again, _ = _run(sets)
    assert again.ok and _gone(left.pids)


def test_a_worker_waits_for_the_processes_before_it(monkeypatch):
    from gpuipc_bench.engine.scenario import WorkerSpec
    from gpuipc_bench.harness import launcher
    from gpuipc_bench.ipc.process import FORK, running

    leaving = FORK.Process(target=time.sleep, args=(0.4,))
    leaving.start()
    started = time.monotonic()
    launcher.wait_for_leavers(WorkerSpec(rank=0, role="host", device=None), (leaving.pid,))
    assert time.monotonic() - started >= 0.3 and not running(leaving.pid)  # a zombie has ended
    leaving.join()
    assert not running(leaving.pid)
    stuck = FORK.Process(target=time.sleep, args=(30,))
    stuck.start()
    try:
        monkeypatch.setattr(launcher, "LEAVE_WAIT_S", 0.2)
        started = time.monotonic()
        launcher.wait_for_leavers(WorkerSpec(rank=0, role="host", device=None), (stuck.pid,))
        assert 0.15 <= time.monotonic() - started < 5  # one that does not leave: the parent's to kill
        assert running(stuck.pid)
    finally:
        stuck.kill()
        stuck.join()


def test_the_run_says_how_many_sets_it_started(tmp_path):
    from click.testing import CliRunner

    from gpuipc_bench.cli import cli

    out = tmp_path / "run.csv"
    result = CliRunner().invoke(cli, ["run", "-s", "host", "-s", "barrier", "--sizes", "64", "--iterations", "3",
                                      "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    _, meta = read_results(out)
    assert meta["worker_sets"] == "1"  # host's; barrier forks its own


def test_fork_fresh_gives_every_scenario_its_own_processes(tmp_path):
    from click.testing import CliRunner

    from gpuipc_bench.cli import cli

    out = tmp_path / "run.csv"
    result = CliRunner().invoke(cli, ["run", "-s", "host", "--sizes", "64", "--iterations", "3", "--launcher",
                                      "fork-fresh", "-o", str(out), "-q"])
    assert result.exit_code == 0, result.output
    frame, meta = read_results(out)
    assert meta["worker_sets"] == "0" and meta["launcher"] == "fork-fresh" and len(frame) > 0


# --------------------------------------------------------------------------- on a GPU

GPU_SET_PATHS = ["ipc", "staging", "vmm", "mempool", "mmap", "latency"]


def _gpu_run(sets, name, **config):
    scenario = SCENARIOS[name]
    run_config = RunConfig(scenarios=(name,), sizes=(4096, 4 << 20), iterations=2, warmup=1, timeout=30, **config)
    rows: list[dict] = []
    outcome = sets.run(scenario, run_config, scenario.workers(run_config, None), mode_name="time-sliced",
                       on_row=rows.append)
    return outcome, rows


@pytest.mark.gpu
def test_on_a_gpu_one_set_times_every_path_with_verified_data(sets, machine):
    from fakes import assert_gpu_memory_back, gpu_memory_used

    before = gpu_memory_used(machine)
    pids = None
    for name in GPU_SET_PATHS:
        outcome, rows = _gpu_run(sets, name)
        assert outcome.ok, f"{name}: {outcome.error}"
        measured = [r for r in rows if r["scenario"] == name and r["metric"] in ("bandwidth", "latency")]
        assert {r["bytes"] for r in measured} >= {4096}, name
        assert all(r["verified"] is not False for r in rows), name
        (only,) = sets.sets.values()
        pids = pids or only.pids
        assert only.pids == pids, f"{name} ran in new processes"
    assert sets.started == 1 and list(sets.sets.values())[0].scenarios == len(GPU_SET_PATHS)
    sets.close()
    assert _gone(pids)
    assert_gpu_memory_back(machine, before)


@pytest.mark.gpu
def test_on_a_gpu_a_worker_killed_mid_path_ends_its_set_and_the_next_path_runs_fresh(sets, machine, monkeypatch):
    from fakes import assert_gpu_memory_back, gpu_memory_used

    before = gpu_memory_used(machine)
    assert _gpu_run(sets, "staging")[0].ok
    (old,) = sets.sets.values()
    monkeypatch.setenv(FAULT_ENV, "kill:1:sample:2")
    broken, rows = _gpu_run(sets, "ipc")
    assert not broken.ok and "worker 1 (consumer, GPU 0) was killed by SIGKILL" in str(broken.error)
    assert broken.rows == len(rows) and sets.sets == {} and _gone(old.pids)
    monkeypatch.delenv(FAULT_ENV)
    after, rows = _gpu_run(sets, "ipc")
    assert after.ok and any(r["path"] == "ipc" and r["metric"] == "bandwidth" for r in rows)
    assert sets.started == 2
    sets.close()
    assert_gpu_memory_back(machine, before)


def test_the_fork_server_starts_with_the_run_imports_its_modules_once_and_ends_with_it():
    import multiprocessing.forkserver
    import types

    server = multiprocessing.forkserver._forkserver
    forked = types.SimpleNamespace(start_method="forkserver", preload=("json",))
    plain = types.SimpleNamespace(start_method="fork")
    found = WorkerSets()
    found.prestart([plain])
    assert not found.forkserver and server._forkserver_pid is None  # nothing asks for it: not started
    found.prestart([plain, forked])
    pid = server._forkserver_pid
    assert found.forkserver and pid and _state(pid) not in ("gone", "Z")
    assert "json" in server._preload_modules and "gpuipc_bench.harness.launcher" in server._preload_modules
    found.end()
    assert server._forkserver_pid is None and _gone([pid])


def test_a_signal_keeps_the_rows_still_unread_in_the_pipes(sets, monkeypatch):
    """A signal can reach the parent after a worker sent rows but before the parent read them (the
    host ping-pong's row, in one CI run): the set's end reads what its pipes still hold."""
    import signal

    from gpuipc_bench.errors import Interrupted
    from gpuipc_bench.harness import pool

    _run(sets)  # the set exists; its next scenario is interrupted before the parent reads a row

    def interrupted(workers, *args, **kwargs):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(w.conn.poll() for w in workers):
            time.sleep(0.01)
        time.sleep(0.3)  # the workers go on sending; the parent reads none of it
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(pool, "supervise", interrupted)
    scenario = SCENARIOS["host"]
    config = RunConfig(scenarios=("host",), sizes=(64, 4096), iterations=3, warmup=1, timeout=10)
    rows: list[dict] = []
    with pytest.raises(Interrupted):
        sets.run(scenario, config, scenario.workers(config, None), on_row=rows.append)
    assert rows and {r["scenario"] for r in rows} == {"host"}  # samples taken before the signal are kept


# --------------------------------------------------------------------------- a persistent worker lost


def _signal_when_started(sets, signum, rank=1, env=None, after=0.0):
    """Send `signum` to worker `rank` of the set (of `env`) once it has started its scenario; the
    monotonic time it was sent, in a list filled from a thread."""
    import signal as signals
    import threading

    sent: list[float] = []

    def send() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = [s for k, s in list(sets.sets.items()) if k[1] == tuple(sorted((env or {}).items()))]
            if found and found[0].scenarios:
                time.sleep(after)
                sent.append(time.monotonic())
                os.kill(found[0].pids[rank], getattr(signals, signum))
                return
            time.sleep(0.01)

    threading.Thread(target=send, daemon=True).start()
    return sent


def _long_run(sets, env=None, timeout=30):
    scenario = SCENARIOS["host"]
    config = RunConfig(scenarios=("host",), sizes=(64, 4096), iterations=100000, warmup=1, timeout=timeout)
    rows: list[dict] = []
    outcome = sets.run(scenario, config, scenario.workers(config, None), env=env, on_row=rows.append)
    return outcome, rows, time.monotonic()


def test_a_worker_killed_from_outside_ends_its_scenario_at_once_rows_kept(sets):
    from gpuipc_bench.harness.supervision import WorkerLost

    sent = _signal_when_started(sets, "SIGKILL", after=0.5)
    outcome, rows, ended = _long_run(sets, timeout=30)
    assert isinstance(outcome.error, WorkerLost) and "worker 1 (consumer, CPU) was killed by SIGKILL" in str(
        outcome.error)
    assert ended - sent[0] < 30, "ended by the death, not by the --timeout"
    assert outcome.rows == len(rows) and sets.sets == {}


def test_a_stopped_worker_is_named_at_the_timeout_even_while_another_works(sets):
    from gpuipc_bench.harness.supervision import WorkerLost

    sent = _signal_when_started(sets, "SIGSTOP", after=0.2)
    outcome, rows, ended = _long_run(sets, timeout=2)
    assert isinstance(outcome.error, WorkerLost), outcome.error
    assert "worker 1 (consumer, CPU) was stopped (SIGSTOP?) for 2 s" in str(outcome.error)
    assert ended - sent[0] >= 2 and sets.sets == {}


def test_a_worker_dead_between_scenarios_is_named_when_the_run_goes_on(sets):
    from gpuipc_bench.harness.supervision import WorkerLost

    _run(sets)
    (idle,) = sets.sets.values()
    os.kill(idle.pids[0], 9)
    assert _gone(idle.pids[:1])
    outcome, rows = _run(sets)
    assert isinstance(outcome.error, WorkerLost) and not rows
    assert str(outcome.error) == "worker 0 (producer, CPU) was killed by SIGKILL while idle between scenarios"
    assert sets.sets == {} and _gone(idle.pids)


def test_a_worker_dead_between_scenarios_is_named_before_a_scenario_of_its_own_processes(sets):
    _run(sets)
    (idle,) = sets.sets.values()
    os.kill(idle.pids[1], 9)
    assert _gone(idle.pids[1:])
    outcome, rows = _run(sets, name="barrier")
    assert "worker 1 (consumer, CPU) was killed by SIGKILL while idle" in str(outcome.error) and not rows


def test_before_a_mode_starts_an_idle_death_is_named_at_once_else_the_other_modes_end(sets):
    """ready_for, asked before a mode starts (an MPS daemon: seconds): a worker dead while idle is
    named then, within 2 s, and the mode need not start; else no other mode's worker is left."""
    from gpuipc_bench.harness.supervision import WorkerLost

    _run(sets, mode="time-sliced")
    (sliced,) = sets.sets.values()
    os.kill(sliced.pids[0], 9)
    killed = time.monotonic()
    assert _gone(sliced.pids[:1])
    lost = sets.ready_for(SCENARIOS["host"], "mps")
    assert time.monotonic() - killed < 2 and isinstance(lost.error, WorkerLost) and lost.rows == 0
    assert str(lost.error) == "worker 0 (producer, CPU) was killed by SIGKILL while idle between scenarios"
    assert sets.sets == {} and _gone(sliced.pids)
    _run(sets, mode="time-sliced")
    (sliced,) = sets.sets.values()
    assert sets.ready_for(SCENARIOS["host"], "time-sliced") is None and sets.sets  # its own mode stays
    assert sets.ready_for(SCENARIOS["host"], "mps") is None
    assert sets.sets == {} and sets.members == {} and _gone(sliced.pids)


def test_a_worker_of_an_idle_set_killed_while_another_set_runs_ends_that_scenario(sets):
    """Two sets of one mode (told apart here by their environment): the idle one's death is seen
    while the other runs, not when its set is next used."""
    from gpuipc_bench.harness.supervision import WorkerLost

    scenario = SCENARIOS["host"]
    config = RunConfig(scenarios=("host",), sizes=(64,), iterations=3, warmup=1, timeout=10)
    first = sets.run(scenario, config, scenario.workers(config, None), env={"SET": "a"}, on_row=lambda row: None)
    assert first.ok
    (idle,) = sets.sets.values()
    import threading

    sent: list[float] = []

    def kill_idle() -> None:
        while len(sets.sets) < 2:
            time.sleep(0.01)
        time.sleep(0.5)
        sent.append(time.monotonic())
        os.kill(idle.pids[0], 9)

    threading.Thread(target=kill_idle, daemon=True).start()
    outcome, rows, ended = _long_run(sets, env={"SET": "b"}, timeout=30)
    assert isinstance(outcome.error, WorkerLost)
    assert "worker 0 (producer, CPU) was killed by SIGKILL while idle between scenarios" in str(outcome.error)
    assert ended - sent[0] < 30 and outcome.rows == len(rows) > 0
    assert sets.sets == {} and _gone(idle.pids)


PHASES = ["setup", "warmup:2", "sample:3", "latency:2", "barrier:4", "teardown"]


@pytest.mark.parametrize("action", ["kill", "stop"])
@pytest.mark.parametrize("phase", PHASES)
def test_a_worker_killed_or_stopped_in_each_phase_ends_its_set_named_rows_kept(sets, monkeypatch, action, phase):
    """kill -9 or SIGSTOP of a persistent worker (the second scenario of its set) in each phase:
    WorkerLost naming it, the rows before kept, the set ended (the fixture: no process, no segment)."""
    from gpuipc_bench.harness.supervision import WorkerLost

    _run(sets)
    (old,) = sets.sets.values()
    rank = 0 if phase.startswith("latency") else 1  # the host ping-pong's latency phase is the producer's
    monkeypatch.setenv(FAULT_ENV, f"{action}:{rank}:{phase}")
    scenario = SCENARIOS["host"]
    timeout = 30 if action == "kill" else 2  # a kill is seen at once; a stop at the timeout
    config = RunConfig(scenarios=("host",), sizes=(64, 4096), iterations=3, warmup=1, timeout=timeout)
    rows: list[dict] = []
    outcome = sets.run(scenario, config, scenario.workers(config, None), on_row=rows.append)
    assert isinstance(outcome.error, WorkerLost), outcome.error
    how = "was killed by SIGKILL" if action == "kill" else "was stopped (SIGSTOP?) for 2 s"
    role = "producer" if rank == 0 else "consumer"
    assert f"worker {rank} ({role}, CPU) {how}" in str(outcome.error)
    assert outcome.rows == len(rows) and sets.sets == {} and _gone(old.pids)


def test_every_gpu_pair_has_workers_of_its_own(sets):
    """Pairs 0>1, 1>0 and 0>2 each get their own two workers, and a pair's later scenarios reuse
    them: sharing a worker between pairs made cudaIpcOpenEventHandle fail on four H200s (set_key).
    The workers are only forked here (no scenario runs: no CUDA on this machine)."""
    from gpuipc_bench.engine.scenario import WorkerSpec

    def pair(a, b):
        return [WorkerSpec(0, "producer", a), WorkerSpec(1, "consumer", b)]

    scenario = SCENARIOS["ipc"]
    first = sets.assemble(scenario, pair(0, 1), None, {})
    back = sets.assemble(scenario, pair(1, 0), None, {})
    other = sets.assemble(scenario, pair(0, 2), None, {})
    again = sets.assemble(scenario, pair(0, 1), None, {})
    assert sets.started == 3 and len(sets.members) == 6 and again.workers == first.workers
    assert not {id(w) for w in first.workers} & {id(w) for w in back.workers + other.workers}
    pids = [w.process.pid for w, _ in sets.members.values()]
    sets.close()
    assert _gone(pids) and sets.members == {}


def test_a_round_s_sets_are_forked_before_it_and_retired_after_it(sets):
    """harness.rounds: prepare() forks a set where none is alive (once), retire() tells its workers to
    leave at once and takes them out of the pool (no idle loss named for them), close() reaps them; a
    later run of that set forks a fresh one."""
    scenario = SCENARIOS["host"]
    specs = scenario.workers(RunConfig(scenarios=("host",)), None)
    sets.prepare(scenario, specs)
    sets.prepare(scenario, specs)
    assert sets.started == 1
    pids = [w.process.pid for w, _ in sets.members.values()]
    sets.retire(specs)
    assert sets.members == {} and sets.sets == {} and sets.idle_loss() is None
    assert _gone(pids)  # they left on their own, told to
    outcome, rows = _run(sets)
    assert outcome.ok and rows and sets.started == 2
    sets.close()
    assert sets.retired == []
