"""GPU tests of the latency scenario: device-initiated ping-pong through IPC-mapped flags, next to
the host-driven ping-pong, the shared-memory flags and the barrier.

They skip with the reason where there is no GPU. The pytest process never initialises CUDA: the
scenario runs in forked workers (launcher.run_scenario).
"""

from __future__ import annotations

import statistics
import time

import pytest

from gpuipc_bench.config import RunConfig
from gpuipc_bench.errors import BarrierAborted, WorkerFailed
from gpuipc_bench.launcher import run_scenario
from gpuipc_bench.scenarios.latency import DevicePingPong, LatencyScenario, LatencyWorker

SIZES = (0, 4, 4099)  # the flags alone, one word, and an odd size (vector copy + byte tail)


def run(monkeypatch, scenario=None, fault=None, **overrides):
    if fault:
        monkeypatch.setenv("GPUIPC_BENCH_FAULT", fault)
    else:
        monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    settings = dict(scenarios=("latency",), sizes=SIZES, iterations=3, warmup=1, timeout=60.0)
    settings.update(overrides)
    config = RunConfig(**settings)
    scenario = scenario or LatencyScenario()
    rows: list[dict] = []
    outcome = run_scenario(scenario, config, scenario.workers(config, None), on_row=rows.append)
    return outcome, rows


def median(rows, variant, nbytes):
    return statistics.median(r["seconds"] for r in rows if r["variant"] == variant and r["bytes"] == nbytes)


def check_shape(rows, path, sharing):
    expected = {("device-pingpong", 0), ("device-pingpong", 4), ("device-pingpong", 4099),
                ("device-ll", 4), ("device-ll", 4099), ("host-pingpong", 4), ("host-pingpong", 4099),
                ("barrier", 0), ("flag-pingpong", 0)}
    assert {(r["variant"], r["bytes"]) for r in rows} == expected
    for variant, nbytes in expected:
        got = [r for r in rows if r["variant"] == variant and r["bytes"] == nbytes]
        assert sorted(r["iteration"] for r in got) == [0, 1, 2], (variant, nbytes)
    for r in rows:
        assert r["scenario"] == "latency" and r["path"] == path and r["metric"] == "latency"
        assert r["seconds"] > 0 and r["workers"] == 2
        if r["variant"] in ("barrier", "flag-pingpong"):
            assert r["src"] == r["dst"] == "host" and r["sharing"] == "none"
        else:
            assert r["verified"] is True and r["sharing"] in sharing
    device = [r for r in rows if r["variant"].startswith("device")]
    assert all(10 <= r["batch"] <= 1000 for r in device)


@pytest.mark.gpu
def test_latency_on_one_gpu(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch)
    assert outcome.ok, outcome.error
    check_shape(rows, "ipc", {"time-sliced", "mps"})
    assert all(r["src"] == "0" and r["dst"] == "0" for r in rows if r["variant"].startswith("device"))
    one_way = median(rows, "device-pingpong", 0)
    if rows[0]["sharing"] == "time-sliced" or any(r["sharing"] == "time-sliced" for r in rows):
        # Both kernels spin; each hop waits for the other context's time slice.
        assert one_way > 20e-6, f"time-sliced device ping-pong took only {one_way * 1e6:.2f} us one way"
    assert one_way < 50e-3


@pytest.mark.gpu
def test_latency_catches_corruption(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, fault="corrupt", sizes=(64,), iterations=1, warmup=0)
    assert isinstance(outcome.error, WorkerFailed)
    assert "verification failed on path ipc/device-pingpong at size 64 B" in str(outcome.error)
    assert not [r for r in rows if r["variant"] == "device-pingpong"]


class _SilentPingPong(DevicePingPong):
    """A responder whose kernel never runs for one protocol: the initiator must give up."""

    silent_for = "device-pingpong"

    def launch(self, protocol, nbytes, first, rounds):
        if self.initiator or protocol != self.silent_for:
            return super().launch(protocol, nbytes, first, rounds)
        while not self.seg.aborted:  # never answers; leaves when the initiator's error ends the run
            time.sleep(0.01)
        raise BarrierAborted("run aborted")


@pytest.mark.gpu
@pytest.mark.parametrize("protocol, nbytes", [("device-pingpong", 0), ("device-pingpong", 64), ("device-ll", 64)])
def test_a_silent_peer_ends_the_kernel_within_the_spin_timeout(monkeypatch, no_leaks, protocol, nbytes):
    silent = type("Silent", (_SilentPingPong,), {"silent_for": protocol})
    worker = type("Worker", (LatencyWorker,), {"pingpong_class": silent})

    class Scenario(LatencyScenario):
        def run(self, ctx):
            from gpuipc_bench.scenarios.latency import latency_sizes

            return worker(ctx, latency_sizes(ctx.config, self.default_sizes())).run()

    t0 = time.monotonic()
    outcome, rows = run(monkeypatch, scenario=Scenario(), sizes=(nbytes,), iterations=1, warmup=0,
                        extra=(("spin_timeout", "0.5"),))
    elapsed = time.monotonic() - t0
    assert isinstance(outcome.error, WorkerFailed), outcome.error
    message = str(outcome.error)
    assert f"device ping-pong {protocol} at {nbytes} B on GPU 0: worker 1 (GPU 0) did not answer the handshake " \
           "(round 0) within the 0.5 s spin timeout" in message, message
    assert "worker 0 (producer, GPU 0)" in message
    assert elapsed < 30, f"took {elapsed:.1f} s"


@pytest.mark.gpu2
def test_latency_across_two_gpus(monkeypatch, no_leaks):
    outcome, rows = run(monkeypatch, devices=(0, 1))
    assert outcome.ok, outcome.error
    check_shape(rows, "peer", {"exclusive"})
    assert all(r["src"] == "0" and r["dst"] == "1" for r in rows if r["variant"].startswith("device"))
    # Two GPUs run both kernels at once: microseconds, not time slices.
    assert median(rows, "device-pingpong", 0) < 20e-6
    assert median(rows, "device-ll", 4) < 20e-6
