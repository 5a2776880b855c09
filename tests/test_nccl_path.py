"""The nccl path: its skip reason on one GPU, the transport read from NCCL's own output, the
unique id's round trip through the handle table; on two GPUs, a short verified run."""

from __future__ import annotations

import pytest

from gpuipc_bench.scenarios import SCENARIOS
from gpuipc_bench.scenarios import nccl
from fakes import fake_machine

LOG = """vm:123:456 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
vm:123:456 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
vm:124:457 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via SHM/direct/direct
vm:124:457 [1] NCCL INFO Connected all rings
"""


@pytest.mark.parametrize("name", ["nccl", "nccl-ce", "nccl-shm", "nccl-net"])
def test_on_one_gpu_nccl_is_waived_with_the_reason(name):
    reason = SCENARIOS[name].waive_reason(fake_machine((80 << 30,)))
    assert reason == nccl.ONE_GPU and "two ranks on one GPU" in reason


def test_the_transport_comes_from_nccls_own_lines():
    assert nccl.chosen_transport(LOG) == "P2P/CUMEM/read, SHM/direct/direct"
    assert nccl.chosen_transport("NCCL INFO Bootstrap : Using eth0") == "not reported"


@pytest.mark.parametrize("uid", [bytes(range(128)), tuple((i * 37) % 256 - 128 for i in range(128))])
def test_the_unique_id_survives_the_handle_table(uid):
    data = nccl.uid_to_bytes(uid)
    assert len(data) == 128
    assert nccl.uid_from_bytes(data, isinstance(uid, bytes)) == uid


def test_each_transport_is_forced_in_its_own_processes_and_nvls_stays_off():
    assert nccl.TRANSPORTS["nccl-shm"] == {"NCCL_P2P_DISABLE": "1"}
    assert nccl.TRANSPORTS["nccl-net"] == {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    assert nccl.TRANSPORTS["nccl-ce"] == {"NCCL_P2P_USE_CUDA_MEMCPY": "1"}
    assert SCENARIOS["nccl"].in_default_run and not SCENARIOS["nccl-shm"].in_default_run
    env = nccl.worker_environment("nccl-shm", "/tmp/x", 1)
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["NCCL_P2P_DISABLE"] == "1"
    assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_FILE"] == "/tmp/x/nccl.1.%p.log"


@pytest.mark.gpu2
@pytest.mark.parametrize("name", ["nccl", "nccl-shm"])
def test_send_recv_moves_verified_bytes(monkeypatch, no_leaks, name):
    from fakes import run_scenario_rows

    outcome, rows = run_scenario_rows(monkeypatch, name, sizes=(4096, 64 << 20), devices=(0, 1))
    assert outcome.ok, outcome.error
    data = [r for r in rows if r["path"] == "nccl" and r["metric"] == "bandwidth"]
    suffix = nccl.FORCED[name]  # a forced transport is a variant of its own
    assert {r["variant"] for r in data} == {"send-recv" + suffix, "sendrecv" + suffix}
    assert all(r["verified"] is True and r["seconds"] > 0 for r in data)
    # peer access is the harness's (both ways, before set-up): every ceiling is peer@0>1 with P2P on
    assert {r["variant"] for r in rows if r["metric"] == "setup"} == {"nccl_init", "nccl_first", "peer_enable"}
    assert {r["ceiling"] for r in data} == {"peer@0>1"}
    transports = {r["transport"] for r in data}  # what NCCL reported, on every figure
    assert len(transports) == 1 and "" not in transports
    assert name != "nccl-shm" or transports.pop().startswith("SHM")


def test_the_run_notes_which_nccl_it_loaded_as_nccl_tests_prints_it():
    from types import SimpleNamespace

    from scenarios.nccl import nccl_version

    assert nccl_version(SimpleNamespace(get_version=lambda: 22809)) == "22809"
    assert nccl_version(SimpleNamespace()) == "unknown (AttributeError)"
