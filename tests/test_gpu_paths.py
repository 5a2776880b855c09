"""GPU tests of the staging and mmap paths (peer in test_gpu_peer.py, ipc in test_gpu_ipc.py).

Each moves the right bytes at a few odd sizes, catches a corrupted byte, and gives
back its GPU memory. They skip with the reason where there is no GPU.
"""

from __future__ import annotations

import pytest

from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import WorkerFailed
from gpuipc_bench.launcher import run_scenario
from gpuipc_bench.scenarios import SCENARIOS

MiB = 1 << 20
SIZES = (4, 4096 + 3, 8 * MiB + 16)  # odd sizes: tails and unaligned chunk ends


def run(monkeypatch, name, scenario=None, fault=None, sizes=SIZES, iterations=3, warmup=1, chunk=1 * MiB):
    if fault:
        monkeypatch.setenv("GPUIPC_BENCH_FAULT", fault)
    else:
        monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    scenario = scenario or SCENARIOS[name]
    config = RunConfig(scenarios=(name,), sizes=sizes, iterations=iterations, warmup=warmup,
                       timeout=60.0, chunk_bytes=chunk)
    rows: list[dict] = []
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append)
    return outcome, rows


def memory_checked(name):
    """The scenario, with each worker checking that its GPU memory returns to where it was."""
    base = type(SCENARIOS[name])

    def checked_run(self, ctx):
        from cupy.cuda import runtime

        from gpuipc_bench import cuda

        cuda.Gpu(ctx.spec.device).close()  # context and module exist before we look
        ctx.sync()
        free_before = runtime.memGetInfo()[0]
        ctx.sync()
        yield from base.run(self, ctx)
        ctx.sync()
        lost = free_before - runtime.memGetInfo()[0]
        if lost > 16 * MiB:
            raise AssertionError(f"worker {ctx.rank}: {lost / MiB:.0f} MiB of GPU memory not returned")

    return type(f"Checked{base.__name__}", (base,), {"run": checked_run})()


@pytest.mark.gpu
def test_staging_moves_the_right_bytes(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, "staging")
    assert outcome.ok, outcome.error
    for variant in ("pinned", "pipelined", "pinned-hostsync", "pageable"):
        got = [r for r in rows if r["path"] == "staging" and r["variant"] == variant]
        assert sorted({r["bytes"] for r in got}) == list(SIZES), variant
        assert len(got) == 3 * len(SIZES) and all(r["verified"] is True and r["seconds"] > 0 for r in got)
        assert {r["ceiling"] for r in got} == {"h2d@0"}
    ceilings = {r["variant"] for r in rows if r["path"] == "ceiling"}
    assert {"h2d@0", "d2h@0"} <= ceilings
    assert [r for r in rows if r["variant"] == "pinned-pingpong" and r["metric"] == "latency"]
    assert [r for r in rows if r["metric"] == "setup" and r["variant"] == "host_register"]


@pytest.mark.gpu
@pytest.mark.parametrize("name,words", [("staging", "staging/pinned"), ("mmap", "mmap/h2d")])
def test_corruption_is_caught(monkeypatch, no_leaks, name, words):
    outcome, rows = run(monkeypatch, name, fault="corrupt", sizes=(4096,))
    assert isinstance(outcome.error, WorkerFailed)
    assert f"verification failed on path {words} at size 4096 B: first bad byte at offset 2048" in str(outcome.error)


@pytest.mark.gpu
def test_mmap_moves_the_right_bytes(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, "mmap")
    assert outcome.ok, outcome.error
    for variant, ceiling in (("d2h", "d2h@0"), ("h2d", "h2d@0"), ("zero-copy-read", "h2d@0"),
                             ("zero-copy-write", "d2h@0")):
        got = [r for r in rows if r["path"] == "mmap" and r["variant"] == variant]
        assert len(got) == 3 * len(SIZES), variant
        assert all(r["verified"] is True and r["seconds"] > 0 and r["ceiling"] == ceiling for r in got)
    registered = [r for r in rows if r["metric"] == "setup" and r["variant"] == "host_register"]
    assert sorted(r["bytes"] for r in registered) == list(SIZES)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["staging", "mmap"])
def test_gpu_memory_is_returned(monkeypatch, no_leaks, name):
    outcome, _ = run(monkeypatch, name, scenario=memory_checked(name), sizes=(4096, 64 * MiB), iterations=2)
    assert outcome.ok, outcome.error


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["staging", "mmap"])
def test_killed_worker_frees_everything(monkeypatch, no_leaks, name):
    outcome, rows = run(monkeypatch, name, fault="kill:1:sample:2", sizes=(4096,))
    assert "worker 1 (consumer, GPU 0) was killed by SIGKILL" in str(outcome.error)


@pytest.mark.gpu2
def test_peer_moves_the_right_bytes(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, "peer", sizes=(4096 + 3, 8 * MiB))
    assert outcome.ok, outcome.error
    for variant in ("p2p-off", "ce", "sm", "push"):
        got = [r for r in rows if r["path"] == "peer" and r["variant"] == variant]
        assert len(got) == 3 * 2 and all(r["verified"] is True for r in got), variant
    off = [r for r in rows if r["variant"] == "p2p-off"]
    assert {(r["src"], r["dst"], r["ceiling"]) for r in off} == {("0", "1", "peer@0>1")}
    assert {"peer@0>1", "peer@1>0"} <= {r["variant"] for r in rows if r["path"] == "ceiling"}
    assert {r["sharing"] for r in rows} == {"exclusive"}


def test_mmap_region_refuses_a_full_tmpfs(monkeypatch):
    """No GPU needed: the region is made in the parent, before any worker."""
    import os as _os

    from gpuipc_bench.errors import BenchError
    from gpuipc_bench.scenarios import mmap as mmap_scenario

    class Tiny:
        f_bavail, f_frsize = 10, 4096

    monkeypatch.setattr(mmap_scenario.os, "statvfs", lambda path: Tiny())
    with pytest.raises(BenchError, match="needs 1 MiB in .* which has 40 KiB free"):
        mmap_scenario.shared_region(1 << 20)
    assert not [n for n in _os.listdir(mmap_scenario._shm_dir()) if "mmap-" in n]
