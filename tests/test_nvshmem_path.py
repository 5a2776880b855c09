"""The nvshmem path: its skip reason here (nvshmem4py is not installed on CI), its registry
entry, and on a GPU with nvshmem4py a short verified run."""

from __future__ import annotations

import importlib.util

import os

import pytest

from gpuipc_bench.errors import BenchError
from gpuipc_bench.scenarios import SCENARIOS
from gpuipc_bench.scenarios import nvshmem as path
from fakes import fake_machine

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
    from fakes import count_by

    data = [r for r in rows if r["path"] == "nvshmem" and r["metric"] == "bandwidth"]
    device = {r["variant"] for r in data} - {"put", "get"}
    assert device in (set(), {"device-put", "device-get"})
    keys = {"put": f"{link}/producer", "get": f"{link}/consumer",
            "device-put": f"{sm_link}/producer", "device-get": f"{sm_link}/consumer"}
    keys = {v: k for v, k in keys.items() if v in {"put", "get"} | device}
    assert set(count_by(data, "variant", "bytes")) == {(v, n) for v in keys for n in (4096, 64 << 20)}
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
    from fakes import run_scenario_rows

    outcome, rows = run_scenario_rows(monkeypatch, "nvshmem", sizes=(4096, 64 << 20))
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
    from fakes import run_scenario_rows

    outcome, rows = run_scenario_rows(monkeypatch, "nvshmem", sizes=(4096, 64 << 20), devices=(0, 1))
    assert outcome.ok, outcome.error
    check_put_and_get(rows, "peer@0>1", "peer-sm@0>1")


FAKE_NVCC = """#!/bin/sh
# a stand-in for nvcc: logs each call, writes what -o names, and says its version
echo "$@" >> "$NVCC_LOG"
case "$1" in --version) echo "Cuda compilation tools, release ${NVCC_RELEASE:-12.9}"; exit 0;; esac
[ -n "$NVCC_FAIL" ] && { echo "fatal: $NVCC_FAIL" >&2; exit 1; }
[ -n "$NVCC_SLEEP" ] && sleep "$NVCC_SLEEP"
while [ $# -gt 0 ]; do [ "$1" = "-o" ] && { echo built > "$2"; }; shift; done
"""


@pytest.fixture
def fake_toolchain(monkeypatch, tmp_path):
    """A fake nvcc on PATH, a fake NVSHMEM folder, a private kernel cache; the run's memo cleared."""
    bin_dir, home = tmp_path / "bin", tmp_path / "nvshmem"
    bin_dir.mkdir()
    (bin_dir / "nvcc").write_text(FAKE_NVCC)
    (bin_dir / "nvcc").chmod(0o755)
    (home / "include").mkdir(parents=True)
    (home / "include" / "nvshmem.h").write_text("")
    (home / "lib").mkdir()
    (home / "lib" / "libnvshmem_device.a").write_bytes(b"v1")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("NVCC_LOG", str(tmp_path / "nvcc.log"))
    monkeypatch.setenv("GPUIPC_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(path, "nvshmem_home", lambda: str(home))
    monkeypatch.setattr(path, "_BUILT", {})

    def builds() -> int:  # nvcc calls that compiled or linked (not --version)
        log = tmp_path / "nvcc.log"
        return sum(1 for line in log.read_text().splitlines() if "--version" not in line) if log.exists() else 0

    return tmp_path, home, builds


def test_the_device_kernel_is_built_once_and_kept_between_runs(fake_toolchain, monkeypatch):
    tmp_path, home, builds = fake_toolchain
    first = path.putsig_for_run()
    assert builds() == 2 and first.startswith(str(tmp_path / "cache")) and open(first).read() == "built\n"
    monkeypatch.setattr(path, "_BUILT", {})  # the next run
    assert path.putsig_for_run() == first and builds() == 2  # from the cache: no nvcc
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [os.path.basename(first)]  # no work folder left
    # a new device library, or another nvcc, builds anew under another key
    (home / "lib" / "libnvshmem_device.a").write_bytes(b"version 2")
    monkeypatch.setattr(path, "_BUILT", {})
    second = path.putsig_for_run()
    assert second != first and builds() == 4
    monkeypatch.setenv("NVCC_RELEASE", "13.0")
    monkeypatch.setattr(path, "_BUILT", {})
    assert path.putsig_for_run() not in (first, second) and builds() == 6


def test_the_kernel_is_built_in_the_background_while_other_paths_run(fake_toolchain, monkeypatch):
    """prebuild() starts nvcc in a thread of the parent; the scenario's own ask waits for it and
    builds nothing twice."""
    tmp_path, _, builds = fake_toolchain
    monkeypatch.setenv("NVCC_SLEEP", "0.5")
    thread = path.NvshmemScenario().prebuild()
    assert thread.is_alive()  # still building: the run goes on meanwhile
    cubin = path.putsig_for_run()  # what prepare() asks: waits for the thread's build
    thread.join(5)
    assert not thread.is_alive() and builds() == 2 and open(cubin).read() == "built\n"


def test_a_failed_background_build_is_said_by_the_scenario(fake_toolchain, monkeypatch):
    monkeypatch.setenv("NVCC_FAIL", "unsupported gpu architecture")
    path.NvshmemScenario().prebuild().join(5)  # fails quietly in its thread
    with pytest.raises(BenchError, match="unsupported gpu architecture"):
        path.putsig_for_run()


def test_a_failed_build_leaves_no_cache_entry_and_says_why(fake_toolchain, monkeypatch):
    tmp_path, _, builds = fake_toolchain
    monkeypatch.setenv("NVCC_FAIL", "unsupported gpu architecture")
    with pytest.raises(BenchError, match="nvcc could not build the put\\+signal kernel: fatal: unsupported gpu"):
        path.putsig_for_run()
    assert list((tmp_path / "cache").iterdir()) == []  # neither a cubin nor a work folder


def test_an_unwritable_cache_builds_for_this_run_only(fake_toolchain, monkeypatch):
    tmp_path, _, builds = fake_toolchain
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be")
    monkeypatch.setenv("GPUIPC_BENCH_CACHE", str(blocked / "cache"))
    cubin = path.putsig_for_run()
    assert builds() == 2 and not cubin.startswith(str(blocked)) and open(cubin).read() == "built\n"
