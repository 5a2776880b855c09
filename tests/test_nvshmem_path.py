"""The nvshmem path: its skip reason here (nvshmem4py is not installed on CI), its registry
entry, and on a GPU with nvshmem4py a short verified run."""

from __future__ import annotations

import importlib.util

import pytest

from gpuipc_bench.errors import BenchError
from gpuipc_bench.scenarios import SCENARIOS
from gpuipc_bench.scenarios import nvshmem as path
from test_bad_input import fake_machine

HAVE = importlib.util.find_spec("nvshmem") is not None


def test_without_nvshmem4py_it_is_waived_naming_the_extra(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    reason = SCENARIOS["nvshmem"].waive_reason(fake_machine((80 << 30,)))
    assert reason == "needs nvshmem4py: pip install -e '.[nvshmem12]' (or '.[nvshmem13]')"


def test_without_a_gpu_the_reason_is_the_gpu():
    assert SCENARIOS["nvshmem"].waive_reason(fake_machine(())).startswith("needs a CUDA GPU")


def test_its_small_put_rows_are_a_reference_never_ranked():
    facts = {p.name: p for p in SCENARIOS["nvshmem"].paths}
    assert facts["nvshmem"].role == "transfer" and facts["nvshmem"].setup == ("nvshmem_init",)
    assert facts["nvshmem-call"].role == "reference" and not facts["nvshmem-call"].ranked
    assert path.NVSHMEM_ENV["NVSHMEM_DISABLE_NVLS"] == "1"


def test_the_device_kernel_says_why_it_cannot_be_built(monkeypatch, tmp_path):
    monkeypatch.setattr(path.shutil, "which", lambda name: None)
    with pytest.raises(BenchError, match="needs nvcc"):
        path.build_putsig(str(tmp_path))
    monkeypatch.setattr(path.shutil, "which", lambda name: "/usr/bin/true")
    monkeypatch.setattr(path, "nvshmem_home", lambda: None)
    with pytest.raises(BenchError, match="found no NVSHMEM headers"):
        path.build_putsig(str(tmp_path))


def test_each_variant_is_bounded_by_a_ceiling_its_own_process_measures():
    worker = path.NvshmemWorker.__new__(path.NvshmemWorker)
    worker.pdev = worker.cdev = 0
    assert (worker.ceiling_for("put"), worker.ceiling_for("get")) == ("d2d@0/producer", "d2d@0/consumer")
    assert (worker.ceiling_for("device-put"), worker.ceiling_for("device-get")) == ("d2d-sm@0/producer",
                                                                                    "d2d-sm@0/consumer")
    worker.cdev = 1
    assert (worker.ceiling_for("put"), worker.ceiling_for("get")) == ("peer@0>1/producer", "peer@0>1/consumer")
    assert (worker.ceiling_for("device-put"), worker.ceiling_for("device-get")) == ("peer-sm@0>1/producer",
                                                                                    "peer-sm@0>1/consumer")


def test_a_ceiling_key_may_name_who_measured_it_and_nothing_else():
    from gpuipc_bench.gpu.ceilings import parse_ceiling

    assert parse_ceiling("d2d@0/producer") == parse_ceiling("d2d@0") == ("d2d", "ce", 0, 0)
    assert parse_ceiling("peer@0>1/consumer") == ("peer", "ce", 0, 1)
    with pytest.raises(ValueError, match="unknown ceiling"):
        parse_ceiling("d2d@0/rank3")


def check_put_and_get(rows, link: str, sm_link: str) -> None:
    """Every variant verified and bounded by a ceiling sample its own process took right after each
    of its samples; the device-initiated ones wherever nvcc could build their kernel."""
    from test_gpu import groups

    data = [r for r in rows if r["path"] == "nvshmem" and r["metric"] == "bandwidth"]
    device = {r["variant"] for r in data} - {"put", "get"}
    assert device in (set(), {"device-put", "device-get"})
    keys = {"put": f"{link}/producer", "get": f"{link}/consumer",
            "device-put": f"{sm_link}/producer", "device-get": f"{sm_link}/consumer"}
    keys = {v: k for v, k in keys.items() if v in {"put", "get"} | device}
    assert set(groups(data, "variant", "bytes")) == {(v, n) for v in keys for n in (4096, 64 << 20)}
    assert all(r["verified"] is True and r["seconds"] > 0 for r in data)
    assert {(r["variant"], r["ceiling"]) for r in data} == set(keys.items())
    assert {r["variant"] for r in rows if r["path"] == "ceiling"} == set(keys.values())
    for variant, key in keys.items():  # one ceiling sample per sample
        for n in (4096, 64 << 20):
            mine = [r for r in data if r["variant"] == variant and r["bytes"] == n]
            paired = [r for r in rows if r["variant"] == key and r["bytes"] == n]
            assert [r["batch"] for r in paired] == [r["batch"] for r in mine]
            assert all(r["verified"] is True and r["seconds"] > 0 for r in paired)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE, reason="needs nvshmem4py (pip install -e '.[nvshmem13]')")
def test_put_and_get_move_verified_bytes(monkeypatch, no_leaks):
    from test_gpu import run

    outcome, rows = run(monkeypatch, "nvshmem", sizes=(4096, 64 << 20))
    assert outcome.ok, outcome.error
    check_put_and_get(rows, "d2d@0", "d2d-sm@0")
    calls = {r["variant"] for r in rows if r["path"] == "nvshmem-call"}
    assert calls == {f"{c}:{k}" for c in ("core.put", "putmem_on_stream", "cudaMemcpyAsync") for k in ("host", "done")}
    assert [r for r in rows if r["variant"] == "nvshmem_init"]
    putsig = [r for r in rows if r["variant"] == "device-putsig"]  # where nvcc could build the kernel
    assert all(r["verified"] is True and r["bytes"] == 4096 and r["seconds"] > 0 for r in putsig)


@pytest.mark.gpu2
@pytest.mark.skipif(not HAVE, reason="needs nvshmem4py (pip install -e '.[nvshmem13]')")
def test_put_and_get_across_two_gpus(monkeypatch, no_leaks):
    from test_gpu import run

    outcome, rows = run(monkeypatch, "nvshmem", sizes=(4096, 64 << 20), devices=(0, 1))
    assert outcome.ok, outcome.error
    check_put_and_get(rows, "peer@0>1", "peer-sm@0>1")
