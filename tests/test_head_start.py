"""The head start (harness.head_start): a plain run on one GPU forks its first process set while the
probe starts CUDA; the session takes it over as the set its first time-sliced scenario runs in; a
head start the run does not take is ended with its pipe folder. On CPUs, with the fake GPU layer."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest

import fake_gpu
from gpuipc_bench import modes
from gpuipc_bench.config import RunConfig
from gpuipc_bench.harness.head_start import HeadStart
from gpuipc_bench.harness.plan import PlanOptions, plan_modes
from gpuipc_bench.harness.pool import WorkerSets, set_key
from gpuipc_bench.scenarios import SCENARIOS
from fakes import fake_machine

GiB = 1 << 30


def _nvml(gpus: int = 1, mig: str = "disabled") -> dict:
    return {"gpus": {f"0000:0{i}:00.0": {"uuid": f"GPU-{i}", "cpus": (0,), "mig_mode": mig} for i in range(gpus)}}


def _gone(pids, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(os.path.exists(f"/proc/{pid}") for pid in pids):
            return True
        time.sleep(0.05)
    return False


def test_only_the_plain_run_gets_a_head_start():
    plain = PlanOptions()
    assert HeadStart.wanted(plain) and HeadStart.wanted(dataclasses.replace(plain, preset="quick"))
    for changed in (dict(devices=(0,)), dict(pairs="all"), dict(sharing="mps"), dict(scenario_names=("ipc",)),
                    dict(fresh=True), dict(job=object()), dict(visible="GPU-1")):
        assert not HeadStart.wanted(dataclasses.replace(plain, **changed)), changed


@pytest.mark.parametrize("facts", [{}, _nvml(2, "enabled"), _nvml(1, "enabled"),
                                   {"gpus": {"x": {"uuid": "", "cpus": ()}}}])
def test_nothing_is_started_where_nvml_sees_no_gpu_a_mig_gpu_or_one_without_uuid(facts, no_leaks):
    head = HeadStart()
    head.begin(facts)
    assert head.workers is None and head.mode is None
    head.close()


@pytest.mark.parametrize("variable", ["CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"])
def test_nothing_is_started_on_several_gpus_the_environment_numbers(variable, monkeypatch, no_leaks):
    """Which GPU CUDA calls 0 is the environment's then, not the lowest bus id's."""
    monkeypatch.setenv(variable, "1" if variable == "CUDA_VISIBLE_DEVICES" else "PCI_BUS_ID")
    head = HeadStart()
    head.begin(_nvml(2))
    assert head.workers is None and head.mode is None
    head.close()


def test_on_several_gpus_the_set_sees_the_lowest_bus_id_alone_and_only_that_gpu_0_takes_it(no_leaks):
    """Two GPUs (NVML's order reversed here): the set is forked on the GPU of lowest bus id, seeing it alone
    (CUDA_VISIBLE_DEVICES its UUID, numbered 0), as the run's sets on GPU 0 see theirs. A run whose probe
    numbers another GPU 0 does not take it: it is ended."""
    facts = {"gpus": {"0000:41:00.0": {"uuid": "GPU-b", "cpus": (0,), "mig_mode": "disabled"},
                      "0000:05:00.0": {"uuid": "GPU-a", "cpus": (0,), "mig_mode": "disabled"}}}
    head = HeadStart()
    head.begin(facts)
    try:
        assert head.workers is not None and head.uuid == "GPU-a"
        assert head.workers.env["CUDA_VISIBLE_DEVICES"] == "GPU-a" and head.workers.env["GPUIPC_BENCH_SEES"] == "0"
        assert head.key == set_key(head.workers.specs, head.mode.name, head.mode.env())  # the key without them
        pids, mode = head.workers.pids, head.mode
        sets = WorkerSets(uuids={0: "GPU-b", 1: "GPU-a"})
        assert not head.hand_to(sets, "", timeout=20.0, modes=[mode])
        assert sets.members == {} and _gone(pids)
    finally:
        head.close()


def test_the_first_time_sliced_scenario_runs_in_the_head_start_s_set(monkeypatch, no_leaks, tmp_path):
    """Its workers, forked and warmed before the plan, are the set's: no other fork, the same key as the
    pair scenarios' producer and consumer on GPU 0 in the time-sliced mode, their output sent to the
    run's worker log once it is named."""
    fake_gpu.install(monkeypatch)
    head = HeadStart()
    head.begin(_nvml())
    assert head.workers is not None and head.mode is not None
    mode, pids = head.mode, head.workers.pids
    config = RunConfig(scenarios=("ipc",), sizes=(4099,), min_samples=2, max_samples=2, timeout=20.0)
    scenario = SCENARIOS["ipc"]
    specs = [dataclasses.replace(spec, cpus=(0,)) for spec in scenario.workers(config, None)]
    assert head.key == set_key(specs, mode.name, mode.env())
    sets = WorkerSets()
    log = tmp_path / "workers.log"
    try:
        assert head.hand_to(sets, str(log), timeout=20.0, modes=[mode])
        rows: list[dict] = []
        outcome = sets.run(scenario, config, specs, mode_name=mode.name, env=mode.env(), on_row=rows.append)
        assert outcome.ok, outcome.error
        assert rows and {r["sharing"] for r in rows} == {"time-sliced"}
        assert sets.started == 1 and list(sets.sets.values())[0].pids == pids  # the head start's, not a fork
        assert log.exists()  # the workers write there from now on
        head.close()  # taken over: the workers stay the run's (the run's end stops the mode)
        assert all(os.path.exists(f"/proc/{pid}") for pid in pids)
    finally:
        sets.end()
        mode.stop()
    assert _gone(pids)


def test_a_plan_without_the_head_start_s_mode_ends_it_before_the_run(no_leaks):
    """CUDA sees no GPU where NVML saw one (CUDA_VISIBLE_DEVICES empty, say): the plan has no sharing mode,
    and no worker of the head start may wait idle through the run's CPU paths."""
    head = HeadStart()
    head.begin(_nvml())
    pids, folder = head.workers.pids, head.mode.pipe_dir
    sets = WorkerSets()
    try:
        assert not head.hand_to(sets, "", timeout=20.0, modes=[])
        assert sets.members == {} and _gone(pids) and not os.path.exists(folder)
    finally:
        sets.end()


def test_a_head_start_the_run_does_not_take_ends_with_its_pipe_folder(no_leaks):
    head = HeadStart()
    head.begin(_nvml())
    pids, folder = head.workers.pids, head.mode.pipe_dir
    assert os.path.isdir(folder)
    head.close()
    assert _gone(pids) and not os.path.exists(folder)
    head.close()  # twice: nothing more


def test_the_plan_takes_the_head_start_s_time_sliced_mode():
    started = modes.TimeSliced()
    chosen, _ = plan_modes(None, fake_machine((80 * GiB,)), time_sliced=started)
    assert chosen[0] is started
    chosen, _ = plan_modes(None, fake_machine((80 * GiB,)))
    assert chosen[0] is not started


def test_the_probe_hands_nvml_s_facts_over_before_any_thread_of_its_own_starts(monkeypatch):
    from gpuipc_bench.machine import probe as probe_module

    facts = {"gpus": {}, "links": {}, "driver": None}
    seen = []
    monkeypatch.setattr(probe_module, "nvml_facts", lambda: facts)
    probe_module.probe(timeout=30, early=lambda nvml: seen.append((nvml, threading.active_count())))
    assert seen == [(facts, 1)]  # the caller may fork there


def test_the_session_takes_the_head_start_over_for_its_first_time_sliced_path(monkeypatch, no_leaks, tmp_path):
    """Session.run hands the head start's set to the run's sets before its first path: that path runs in
    it (no set forked), and the file's header counts it as the run's one process set."""
    from gpuipc_bench.harness.plan import Plan
    from gpuipc_bench.harness.session import Session
    from gpuipc_bench.results import read_results

    fake_gpu.install(monkeypatch)
    machine = fake_machine((80 * GiB,))
    head = HeadStart()
    head.begin({"gpus": {"0000:01:00.0": {"uuid": "GPU-0", "cpus": tuple(machine.gpus[0].cpus), "mig_mode": "n/a"}}})
    pids = head.workers.pids
    scenario = SCENARIOS["ipc"]
    config = RunConfig(scenarios=("ipc",), sizes=(4099,), min_samples=2, max_samples=2, timeout=20.0,
                       preset="quick")  # (no resampling pass: its fresh set would be a second)
    plan = Plan(config, machine, [(scenario, scenario.workers(config, machine))], [head.mode], {}, [])
    sets = WorkerSets()
    try:
        outcome = Session(tmp_path / "run.csv", sets=sets, head_start=head).run(plan)
    finally:
        sets.end()
        head.close()
    assert not outcome.failures and head.adopted
    frame, meta = read_results(tmp_path / "run.csv")
    assert meta["worker_sets"] == "1" and len(frame) and set(frame["sharing"]) == {"time-sliced"}
    assert _gone(pids)


def test_on_several_gpus_the_run_takes_the_set_where_its_gpu_0_is_the_set_s(monkeypatch, no_leaks):
    fake_gpu.install(monkeypatch)
    head = HeadStart()
    head.begin(_nvml(2))
    sets = WorkerSets(uuids={0: "GPU-0", 1: "GPU-1"})
    try:
        pids = head.workers.pids
        assert head.hand_to(sets, "", timeout=20.0, modes=[head.mode])
        assert sets.started == 1 and sorted(w.process.pid for w, _ in sets.members.values()) == sorted(pids)
    finally:
        sets.end()
        head.close()
