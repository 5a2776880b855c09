"""Each worker sees only its own GPUs (gpuipc_bench.gpu.visible): the parent names a process set's
GPUs by UUID in CUDA_VISIBLE_DEVICES (producer first), the worker maps the run's GPU numbers to its
CUDA ordinals at every call into CUDA, and asking for a GPU it does not see is a loud error."""

from __future__ import annotations

import multiprocessing
import re

import pytest

from gpuipc_bench.engine.scenario import WorkerSpec
from gpuipc_bench.errors import BenchError
from gpuipc_bench.gpu import visible
from gpuipc_bench.gpu.visible import SEES_ENV, cuda_index, visibility_env
from gpuipc_bench.harness import launcher, pool
from gpuipc_bench.harness.pool import WorkerSets
from gpuipc_bench.harness.session import gpu_uuids
from gpuipc_bench.scenarios import SCENARIOS

UUIDS = {k: f"GPU-{k}{k}{k}{k}aaaa-0000-0000-0000-00000000000{k}" for k in range(4)}


def test_a_set_sees_its_own_gpus_the_producer_first():
    assert visibility_env([2, 2], UUIDS) == {"CUDA_VISIBLE_DEVICES": UUIDS[2], SEES_ENV: "2"}
    assert visibility_env([3, 1], UUIDS) == {"CUDA_VISIBLE_DEVICES": f"{UUIDS[3]},{UUIDS[1]}", SEES_ENV: "3,1"}


@pytest.mark.parametrize("devices, uuids", [
    ([0, 1], {0: UUIDS[0], 1: UUIDS[1]}),  # it sees every GPU of the node anyway
    ([None, None], UUIDS),  # workers on CPUs
    ([1], {0: UUIDS[0], 1: "", 2: UUIDS[2]}),  # a UUID unknown
    ([1], {0: "MIG-x", 1: "MIG-y"}),  # not a GPU's UUID
    ([], UUIDS),
])
def test_nothing_is_hidden_where_it_saves_nothing_or_cannot_be_named(devices, uuids):
    assert visibility_env(devices, uuids) == {}


def test_the_worker_maps_the_run_s_numbers_to_its_ordinals_and_refuses_another_gpu():
    try:
        visible.enter({SEES_ENV: "3,1"})
        assert (cuda_index(3), cuda_index(1)) == (0, 1)
        with pytest.raises(BenchError, match="GPU 2 is not among the GPUs this worker sees"):
            cuda_index(2)
        visible.enter({})
        assert cuda_index(2) == 2  # nothing hidden: the run's numbers are CUDA's
    finally:
        visible.enter({})


def _entered(spec, env, conn):
    launcher.enter_worker(spec, env)
    import os

    conn.send((os.environ.get("CUDA_VISIBLE_DEVICES"), cuda_index(3), cuda_index(1)))


def test_a_forked_worker_takes_its_gpus_before_cuda_starts():
    reader, writer = multiprocessing.get_context("fork").Pipe(duplex=False)
    env = visibility_env([3, 1], UUIDS)
    child = multiprocessing.get_context("fork").Process(target=_entered, args=(WorkerSpec(0, "producer", 3), env,
                                                                                 writer))
    child.start()
    assert reader.recv() == (f"{UUIDS[3]},{UUIDS[1]}", 0, 1)
    child.join(10)
    assert child.exitcode == 0


def test_the_pool_forks_each_set_with_its_gpus_and_keeps_one_set_per_pair(monkeypatch):
    forked: list[dict] = []
    real = pool.WorkerSet

    class Recording(real):
        def __init__(self, specs, env, worker_log="", members=None, after=()):
            if members is None:
                forked.append(dict(env))
                members = [(None, None) for _ in specs]  # nothing forked on this machine
            super().__init__(specs, env, worker_log, members, after)

    monkeypatch.setattr(pool, "WorkerSet", Recording)
    sets = WorkerSets(uuids=UUIDS)
    scenario = SCENARIOS["ipc"]
    sets.assemble(scenario, [WorkerSpec(0, "producer", 2), WorkerSpec(1, "consumer", 2)], "mps", {"X": "1"})
    sets.assemble(scenario, [WorkerSpec(0, "producer", 3), WorkerSpec(1, "consumer", 1)], None, {})
    assert forked[0] == {"X": "1", "CUDA_VISIBLE_DEVICES": UUIDS[2], SEES_ENV: "2"}
    assert forked[1] == {"CUDA_VISIBLE_DEVICES": f"{UUIDS[3]},{UUIDS[1]}", SEES_ENV: "3,1"}
    mig = [WorkerSpec(0, "producer", 0, mig="MIG-a"), WorkerSpec(1, "consumer", 0, mig="MIG-b")]
    assert sets.visibility(mig) == {}
    sets.members.clear()


def test_a_node_with_mig_on_hides_nothing():
    from types import SimpleNamespace

    gpus = [SimpleNamespace(index=k, uuid=UUIDS[k], mig_mode="disabled") for k in range(2)]
    assert gpu_uuids(SimpleNamespace(gpus=gpus)) == {0: UUIDS[0], 1: UUIDS[1]}
    gpus[1].mig_mode = "enabled"
    assert gpu_uuids(SimpleNamespace(gpus=gpus)) == {} and gpu_uuids(None) == {}


def test_a_warmed_worker_makes_its_context_on_its_own_gpu(monkeypatch):
    """launcher.warm_worker (the check's sets forked together start their contexts at once): its
    setDevice and free(0) on the GPU's ordinal inside the worker (it once called through a function
    that returns nothing, and every warm-up failed unseen)."""
    import cupy

    calls = []
    monkeypatch.setattr(cupy.cuda.runtime, "setDevice", lambda device: calls.append(("setDevice", device)))
    monkeypatch.setattr(cupy.cuda.runtime, "free", lambda ptr: calls.append(("free", ptr)))
    try:
        visible.enter({SEES_ENV: "3,1"})
        launcher.warm_worker(WorkerSpec(1, "consumer", 1))
    finally:
        visible.enter({})
    assert calls == [("setDevice", 1), ("free", 0)]


# Calls that take a CUDA device ordinal, and the places allowed to pass them a run's GPU number unmapped:
# the probe child and the busy neighbour see every GPU of the run (no SEES_ENV), torch's and symm's
# helpers map theirs once when made (self.device = cuda_index(device))
ORDINAL_CALLS = re.compile(r"cupy\.cuda\.Device\(|\.setDevice\(|deviceCanAccessPeer\(|deviceEnablePeerAccess\(|"
                           r"deviceDisablePeerAccess\(|memcpyPeer(Async)?\(|deviceGetAttribute\(|deviceGetPCIBusId\(|"
                           r"torch\.cuda\.set_device\(|torch\.device\(\"cuda\"|f\"cuda:\{|location\.id = |"
                           r"[^.\w]Device\(")
UNMAPPED = {"gpuipc_bench/machine/probe.py", "gpuipc_bench/modes/neighbour.py", "gpuipc_bench/machine/mig.py"}
MAPPED_ONCE = {"scenarios/torch_support.py", "scenarios/symm_support.py"}  # self.device = cuda_index(device)


def test_every_device_ordinal_given_to_cuda_in_a_worker_is_mapped():
    from conftest import ROOT

    unmapped = []
    for path in sorted([*ROOT.glob("gpuipc_bench/**/*.py"), *ROOT.glob("scenarios/*.py")]):
        name = path.relative_to(ROOT).as_posix()
        if name in UNMAPPED:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if not ORDINAL_CALLS.search(code) or "cuda_index(" in code or "fn(dst, here, src, there" in code:
                continue
            if name in MAPPED_ONCE and "self.device" in code:
                continue
            if "host_numa_node(" in code:  # a NUMA node's id, not a GPU's
                continue
            unmapped.append(f"{name}:{number}: {line.strip()}")
    assert not unmapped, "a device ordinal into CUDA without gpu.visible.cuda_index:\n" + "\n".join(unmapped)
    for name in MAPPED_ONCE:
        assert "cuda_index(device)" in (ROOT / name).read_text()
