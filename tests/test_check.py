"""`gpuipc-bench check` on one node: the path probes with their failures provoked (a second PID
namespace with unshare, a tiny /dev/shm, a hidden GPU), the figures, the expectations and their
--learn round trip, the judging rules, the outputs fleet tools read, and bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner

from gpuipc_bench.check import conditions, expect, judge, output, paths, table

from gpuipc_bench.hooks import plant
from gpuipc_bench.check.figures import Figure, figures_of
from gpuipc_bench.check.node import path_event
from gpuipc_bench.cli import cli
from gpuipc_bench.errors import UsageError
from gpuipc_bench.results import read_results

REPO = Path(__file__).resolve().parent.parent
REFERENCES = [REPO / "results" / f for f in ("h100-default-modes.csv", "h100-both-modes-default.csv",
                                             "h100-fork-vs-fresh-fork.csv", "h100-default.csv",
                                             "h100x2-nvlink-default.csv", "h100x2-nvlink-pairs-all.csv",
                                             "h200-default.csv", "h200x2-nixl-default.csv", "h200x2-nixl-pair.csv",
                                             "h200x2-nvshmem-pair.csv")]
H100 = "NVIDIA H100 80GB HBM3, PCIe Gen5 x16"
H100_FACTS = {"gpu_count": "1", "gpu.0.name": "NVIDIA H100 80GB HBM3", "gpu.0.pcie": "Gen5 x16 (max Gen5 x16)",
              "cpu": "Some CPU"}
BENCH = [sys.executable, "-m", "gpuipc_bench.cli"]


WITHOUT_NIXL = "without:nixl-host-read"  # a check whose subject is not NIXL's figure (it takes a third of one)


def bench(*args, env=None, cwd=None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("GPUIPC_BENCH_")}
    full.update(env or {})
    return subprocess.run(BENCH + list(args), capture_output=True, text=True, timeout=180, env=full, cwd=cwd)


def one_gpu(**extra) -> paths.Facts:
    base = dict(gpu_count=1, nvml_gpu_count=1, pid_ns="pid:[1]", net_ns="net:[1]", peer_pid_ns="pid:[1]",
                peer_net_ns="net:[1]", shm_free=64 << 30, mps_binary="/usr/bin/nvidia-cuda-mps-control")
    base.update(extra)
    return paths.Facts(**base)


def verdict(facts: paths.Facts, name: str) -> paths.PathVerdict:
    return next(v for v in paths.decide(facts) if v.name == name)


# ---------------------------------------------------------------- which paths work here


def test_a_peer_in_another_pid_namespace_fails_ipc_with_the_reason():
    try:  # a real second PID namespace where the machine allows it, else a made-up one
        peer_pid, peer_net = paths.command_namespaces(["unshare", "--pid", "--fork"])
    except (OSError, subprocess.SubprocessError):
        peer_pid, peer_net = "pid:[4026599999]", paths.namespaces()[1]
    pid, net = paths.namespaces()
    assert peer_pid != pid and peer_net == net
    facts = one_gpu(pid_ns=pid, net_ns=net, peer_pid_ns=peer_pid, peer_net_ns=peer_net, peer_where="rank 1")
    v = verdict(facts, "ipc")
    assert v.ok is False
    assert f"its peer (rank 1) runs in another PID namespace ({peer_pid}, this one {pid})" in v.reason
    assert "invalid device context" in v.reason
    assert verdict(facts, "vmm").ok is True  # descriptors still pass: the network namespace is shared


def test_a_peer_in_another_network_namespace_fails_the_descriptor_paths():
    try:
        _, peer_net = paths.command_namespaces(["unshare", "--net"])
    except (OSError, subprocess.SubprocessError):
        peer_net = "net:[4026599998]"
    facts = one_gpu(net_ns=paths.namespaces()[1], peer_net_ns=peer_net)
    for name in ("vmm", "mempool"):
        v = verdict(facts, name)
        assert v.ok is False and "another network namespace" in v.reason and "pidfd_getfd" in v.reason


def test_two_gpus_without_peer_access_say_what_nvml_says():
    facts = one_gpu(gpu_count=2, nvml_gpu_count=2, links={(0, 1): "PHB", (1, 0): "PHB"},
                    nvml_p2p={(0, 1): "chipset not supported", (1, 0): "chipset not supported"})
    v = verdict(facts, "peer")
    assert v.ok is False
    assert v.reason == ("no peer access between GPUs 0-1 (PHB; NVML P2P read: chipset not supported) "
                        "(cudaDeviceCanAccessPeer)")
    assert verdict(one_gpu(gpu_count=2, peer_access=frozenset({(0, 1), (1, 0)})), "peer").ok is True


def test_the_same_namespaces_as_a_forked_child_pass():
    assert paths.child_namespaces() == paths.namespaces()
    assert verdict(one_gpu(), "ipc").ok is True


def test_a_tiny_dev_shm_fails_the_mmap_path():
    class Tiny:
        f_bavail, f_frsize = 16, 4 << 20  # 64 MiB

    free = paths.shm_free(statvfs=lambda folder: Tiny())
    v = verdict(one_gpu(shm_free=free, largest=256 << 20), "mmap")
    assert v.ok is False
    assert v.reason.startswith("/dev/shm has 64 MiB free, the largest transfer needs 256 MiB")
    assert verdict(one_gpu(shm_free=1 << 30), "mmap").ok is True


def test_a_hidden_gpu_is_named():
    facts = one_gpu(gpu_count=1, nvml_gpu_count=2, visible="0")
    assert verdict(facts, "peer").reason == ("CUDA sees 1 of the 2 GPUs NVML lists (CUDA_VISIBLE_DEVICES='0'): "
                                             "both GPUs must be visible")
    none = one_gpu(gpu_count=0, nvml_gpu_count=1, visible="", no_gpu_reason="cudaErrorNoDevice: no CUDA device")
    v = verdict(none, "ipc")
    assert v.ok is None and "CUDA_VISIBLE_DEVICES='' hides them" in v.reason


def test_check_with_the_gpu_hidden_reports_no_gpu_cleanly(tmp_path):
    done = bench("check", "--format", "json", "-o", str(tmp_path / "c.csv"),
                 env={"CUDA_VISIBLE_DEVICES": "", plant.PLANT_ENV: WITHOUT_NIXL})
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    gpu_paths = [e for e in events if e["kind"] == "path" and e["figure"] in ("ipc", "vmm", "mempool", "peer")]
    assert len(gpu_paths) == 4 and all(e["status"] == "skip" and "no GPU" in e["reason"] for e in gpu_paths)
    assert "Traceback" not in done.stderr
    assert {e["figure"] for e in events if e["kind"] == "figure"} >= {"host-memcpy", "barrier"}


def test_descriptor_passing_and_pidfd_getfd_are_tried_for_real():
    assert paths.scm_rights_works() is None
    got = paths.pidfd_getfd_works()
    assert got is None or got.startswith(("pidfd_getfd:", "pidfd_open:", "os.pidfd_open"))


@pytest.mark.parametrize("env, words", [
    ({"NCCL_P2P_DISABLE": "1"}, "NCCL_P2P_DISABLE=1 takes NCCL off its GPU transport (SHM instead)"),
    ({"UCX_TLS": "tcp"}, "UCX_TLS=tcp leaves out cuda_ipc"),
])
def test_a_library_forced_off_its_gpu_transport_is_named(env, words):
    facts = one_gpu(env=env, ucx_info="Transport: cuda_ipc")
    name = "nccl" if "NCCL_P2P_DISABLE" in env else "ucx"
    v = verdict(facts, name)
    assert v.ok is False and words in v.reason


def test_a_path_that_cannot_work_fails_only_where_the_model_says_it_works():
    refs = expect.load()
    cannot = paths.PathVerdict("vmm", False, "needs cuda-bindings")
    assert path_event(cannot, "n1", "NVIDIA H100 80GB HBM3 x1", refs).status == "fail"
    assert "it works on NVIDIA H100 80GB HBM3 x1" in path_event(cannot, "n1", "NVIDIA H100 80GB HBM3 x1", refs).reason
    assert path_event(cannot, "n1", "Some GPU x1", refs).status == "skip"
    assert path_event(paths.PathVerdict("imex", False, "no IMEX"), "n1", "NVIDIA H100 80GB HBM3 x1",
                      refs).status == "skip"
    assert path_event(paths.PathVerdict("ipc", None, "no GPU"), "n1", "", refs).status == "skip"


# ---------------------------------------------------------------- figures and expectations


def test_the_shipped_references_are_learned_from_results():
    learned = expect.learn(REFERENCES)
    assert learned.to_json() == expect.load().to_json() | {"tolerance": learned.tolerance}
    h2d = learned.get(H100, "h2d")
    assert h2d.hosts == 5 and h2d.band and 54 < h2d.low <= h2d.high < 56  # five H100 hosts (GPU UUIDs)
    assert "h100-default-modes.csv" in h2d.sources and "h100-default.csv" in h2d.older
    peer = learned.get(H100 + ", link NV18", "peer")
    assert peer.hosts == 1 and not peer.band and 390 < peer.low < 400
    assert learned.get("NVIDIA H200, PCIe Gen5 x16", "d2d").hosts == 2  # two H200 nodes
    nixl = learned.get("NVIDIA H200, PCIe Gen5 x16", "nixl-read")  # NIXL's READ on one H200, UCX's cuda_ipc
    assert nixl.hosts == 1 and 800 < nixl.low < 870 and 0.35 < nixl.of_ceiling < 0.45
    assert learned.get("NVIDIA H200, PCIe Gen5 x16, link NV18", "peer").hosts == 1
    assert "vmm" in learned.paths["NVIDIA H100 80GB HBM3 x1"] and "peer" in learned.paths["NVIDIA H100 80GB HBM3 x2"]


def test_schema_1_files_are_refused_for_learning():
    with pytest.raises(Exception, match="schema 1"):
        expect.learn([REPO / "results" / "h200x2-nvlink-all.csv"])


def test_figures_of_a_reference_run():
    frame, _ = read_results(REPO / "results" / "h100x2-nvlink-default.csv")
    got = {(f.name, f.gpus): f for f in figures_of(frame)}
    assert {("h2d", "0"), ("h2d", "1"), ("d2d", "0"), ("ipc-ce", "0"), ("peer", "0>1"), ("peer", "1>0"),
            ("peer-ce", "0>1"), ("host-memcpy", "host"), ("barrier", "host")} <= set(got)
    assert 390 < got[("peer-ce", "0>1")].value <= got[("peer-ce", "0>1")].ceiling * 1.01
    assert 200 < got[("ipc-handoff-4k", "0")].value < 400 and got[("ipc-handoff-4k", "0")].ceiling is None


def test_a_planted_figure_is_scaled_for_its_node_only(monkeypatch):
    frame, _ = read_results(REPO / "results" / "h100-default-modes.csv")
    monkeypatch.setenv(plant.PLANT_ENV, "slow:n2:h2d:0.5;flutter:n2:d2d:0.5")
    base = {f.name: f.value for f in figures_of(frame, "n1")}
    slow = {f.name: f.value for f in figures_of(frame, "n2")}
    again = {f.name: f.value for f in figures_of(frame, "n2", attempt=1)}
    assert slow["h2d"] == pytest.approx(base["h2d"] / 2) and again["h2d"] == pytest.approx(base["h2d"] / 2)
    assert slow["d2d"] == pytest.approx(base["d2d"] / 2) and again["d2d"] == pytest.approx(base["d2d"])


def test_a_fixed_figure_takes_its_value_before_a_slow_plant_scales_it(monkeypatch):
    """fixed:NODE:FIGURE:VALUE: the fleet tests' healthy figures without a shared machine's noise."""
    frame, _ = read_results(REPO / "results" / "h100-default-modes.csv")
    monkeypatch.setenv(plant.PLANT_ENV, "fixed:*:h2d:12.5;slow:n2:h2d:0.5;fixed:n1:barrier:3")
    n1 = {f.name: f.value for f in figures_of(frame, "n1")}
    n2 = {f.name: f.value for f in figures_of(frame, "n2")}
    monkeypatch.delenv(plant.PLANT_ENV)
    measured = {f.name: f.value for f in figures_of(frame, "n1")}
    assert n1["h2d"] == 12.5 and n2["h2d"] == 6.25  # a bandwidth at half
    assert n1["barrier"] == 3 and n2["barrier"] == measured["barrier"] != 3
    assert n1["d2d"] == measured["d2d"]  # the other figures as measured
    for bad in ("0", "-1", "nan", "inf", "fast"):
        monkeypatch.setenv(plant.PLANT_ENV, f"fixed:*:h2d:{bad}")
        with pytest.raises(ValueError, match=f"fixed:\\*:h2d:{bad}: VALUE must be a finite number above 0"):
            figures_of(frame, "n1")


def _fig(name="h2d", value=55.0, ceiling=None, gpus="0", unit="GB/s"):
    return Figure(name, gpus, value, unit, ceiling)


def test_a_figure_fails_below_the_band_and_only_warns_against_one_host():
    refs = expect.load()
    ok = judge.judge_figure(_fig(value=54.0), "n1", H100_FACTS, refs)
    assert ok.status == "pass" and ok.expected.startswith("54.8-55.2 GB/s (band of 5 hosts")
    low = judge.judge_figure(_fig(value=40.0), "n1", H100_FACTS, refs)
    assert low.status == "fail" and "40 GB/s is 27% below 54.8-55.2 GB/s" in low.reason
    two = {**H100_FACTS, "gpu_count": "2", "gpu.1.name": H100_FACTS["gpu.0.name"], "gpu.1.pcie": "Gen5 x16",
           "link.0-1": "NV18"}
    single = judge.judge_figure(_fig("peer", 200.0, gpus="0>1"), "n1", two, refs)
    assert single.status == "warn" and "single-host reference" in single.reason
    unknown = judge.judge_figure(_fig(value=1.0), "n1", {**H100_FACTS, "gpu.0.name": "Other"}, refs)
    assert unknown.status == "measured" and unknown.reason.startswith("not judged: no expectation for Other, PCIe Gen5")


def test_a_path_at_its_own_ceiling_is_not_blamed_for_a_slow_link():
    refs = expect.load()
    at_ceiling = judge.judge_figure(_fig("ipc-ce", 1000.0, ceiling=1001.0), "n1", H100_FACTS, refs)
    assert at_ceiling.status == "pass" and "the link it rides on is slow, not the path" in at_ceiling.reason
    below = judge.judge_figure(_fig("ipc-ce", 1000.0, ceiling=1480.0), "n1", H100_FACTS, refs)
    assert below.status == "fail"


def test_a_latency_fails_above_its_band():
    refs = expect.load()
    slow = judge.judge_figure(_fig("ipc-handoff-4k", 900.0, unit="µs"), "n1", H100_FACTS, refs)
    assert slow.status == "fail" and "above" in slow.reason
    assert judge.judge_figure(_fig("ipc-handoff-4k", 280.0, unit="µs"), "n1", H100_FACTS, refs).status == "pass"


def test_busy_throttled_and_down_trained_are_named_as_the_cause():
    found = conditions.describe("0", {"pids": [10, 11, 99], "reasons": 0x8 | 0x1, "gen": 5, "width": 8,
                                      "max_gen": 5, "max_width": 16}, ours={99})
    assert found == ["GPU 0 busy (2 other processes: 10, 11)", "GPU 0 clock throttled (HW slowdown)",
                     "PCIe link of GPU 0 at Gen5 x8 (max Gen5 x16)"]
    idle = conditions.describe("0", {"pids": [], "reasons": 0x1, "gen": 1, "width": 16, "max_gen": 5,
                                     "max_width": 16}, ours=set())
    assert idle == []  # an idle GPU drops its link generation: not a finding
    refs = expect.load()
    h2d = judge.judge_figure(_fig(value=30.0), "n1", H100_FACTS, refs, causes={"0": found})
    assert h2d.reason.endswith("likely cause: GPU 0 busy (2 other processes: 10, 11); GPU 0 clock throttled "
                               "(HW slowdown); PCIe link of GPU 0 at Gen5 x8 (max Gen5 x16)")
    d2d = judge.judge_figure(_fig("d2d", 500.0), "n1", H100_FACTS, refs, causes={"0": found})
    assert "PCIe" not in d2d.reason and "busy" in d2d.reason


def test_a_figure_that_passes_when_measured_again_is_flutter():
    refs = expect.load()
    first = judge.judge_figure(_fig(value=30.0), "n1", H100_FACTS, refs)
    again = judge.remeasured(first, judge.judge_figure(_fig(value=55.0), "n1", H100_FACTS, refs))
    assert again.status == "pass" and "passed when measured again (first 30 GB/s: flutter)" in again.reason
    still = judge.remeasured(first, judge.judge_figure(_fig(value=31.0), "n1", H100_FACTS, refs))
    assert still.status == "fail" and "measured twice; first 30 GB/s" in still.reason


def test_fleet_outliers_by_megatrons_rule_median_and_mad_with_a_10_percent_floor():
    by_node = {f"n{k}": [_fig(value=v), _fig("barrier", 1.0 + 0.01 * k, gpus="host", unit="µs")]
               for k, v in enumerate([55.0, 54.6, 55.2, 54.9, 30.0, 55.1])}
    by_node["n6"] = [_fig(value=55.0), _fig("barrier", 5.0, gpus="host", unit="µs")]
    found = judge.fleet_outliers(by_node)
    assert set(found) == {("n4", "h2d", "0"), ("n6", "barrier", "host")}
    assert "0.55 of the fleet median" in found[("n4", "h2d", "0")]
    assert "further from it than 10% of it" in found[("n4", "h2d", "0")]
    noisy = {f"n{k}": [_fig(value=v)] for k, v in enumerate([55.0, 52.0, 53.5, 54.0])}
    assert judge.fleet_outliers(noisy) == {}  # within 10% of the median: never an outlier
    # beyond 10% of the median but within the fleet's own spread (the MAD): not an outlier either
    spread = {f"n{k}": [_fig(value=v)] for k, v in enumerate([48.0, 62.0, 48.0, 55.0, 65.0])}
    assert judge.fleet_outliers(spread) == {}
    assert judge.outside(30.0, [30.0, 55.0, 55.0]) and not judge.outside(50.0, [50.0, 55.0, 55.0])
    # a node better than the fleet is not broken; a fleet of two has no median to be far from
    assert judge.fleet_outliers({n: [_fig(value=v)] for n, v in (("a", 55.0), ("b", 55.0), ("c", 90.0))}) == {}
    assert judge.fleet_outliers({n: [_fig(value=v)] for n, v in (("a", 55.0), ("b", 5.0))}) == {}


def test_learn_leaves_an_outlier_host_out_of_the_band_and_refuses_unhealthy_runs(tmp_path):
    from gpuipc_bench.results import write_results

    hosts = {f"h{k}": [(_fig("barrier", v, gpus="host", unit="µs"), f"f:{k}", 3)]
             for k, v in enumerate([1.0, 1.05, 0.98, 7.0])}
    band = expect._expectation(("CPU x", "barrier"), hosts)
    assert (band.low, band.high, band.hosts) == (0.98, 1.05, 3)
    assert expect.unhealthy({"status": "complete", "partial": "false"}) == ("", set())
    assert expect.unhealthy({"status": "complete; failed nodes: b", "partial": "false"})[1] == {"b"}
    assert "partial run" in expect.unhealthy({"status": "running", "partial": "true", "check.missing": "c"})[0]
    frame, meta = read_results(REPO / "results" / "h200x2-check.csv")
    bad = tmp_path / "bad.csv"
    write_results(bad, frame, {**meta, "status": "complete; failed nodes: vm"})
    with pytest.raises(UsageError, match="failed nodes vm; .*--learn-partial"):
        expect.learn([bad])
    with pytest.raises(UsageError, match="none of the check's figures"):  # its one node failed: nothing left
        expect.learn([bad], partial=True)


def test_a_path_every_nvidia_node_has_fails_where_the_expectations_are_silent():
    refs = expect.Expectations({}, {})
    eight = {"gpu_count": "8", "gpu.0.name": "NVIDIA H100 80GB HBM3", "link.0-1": "NV18"}
    shape = expect.shape_of(eight)
    for name in ("ipc", "vmm", "mempool", "mmap", "peer"):
        event = path_event(paths.PathVerdict(name, False, "broken"), "n1", shape, refs, eight)
        assert event.status == "fail" and event.reason.startswith("broken (it works on"), name
    pcie = {**eight, "link.0-1": "PIX"}
    assert path_event(paths.PathVerdict("peer", False, "no P2P"), "n1", shape, refs, pcie).status == "skip"
    assert path_event(paths.PathVerdict("mps", False, "no binary"), "n1", shape, refs, eight).status == "skip"
    assert path_event(paths.PathVerdict("host", False, "broken"), "n1", "", refs, {}).status == "fail"
    assert path_event(paths.PathVerdict("ipc", None, "no GPU"), "n1", "", refs, {}).status == "skip"


def test_an_expected_figure_that_was_not_measured_fails():
    from gpuipc_bench.check.node import missing_figures

    refs = expect.load()
    events = missing_figures("n1", H100_FACTS, refs, ["staging", "ipc"], [_fig("h2d", 55.0)])
    names = {e.figure for e in events}
    assert {"d2h", "d2d", "ipc-ce"} <= names and "h2d" not in names and "peer" not in names
    assert all(e.status == "fail" and e.reason.startswith("expected on NVIDIA H100") for e in events)
    assert missing_figures("n1", H100_FACTS, refs, [], []) == []  # scenarios not run here: nothing expected


def test_a_figure_without_an_expectation_is_measured_not_judged_and_host_is_not_a_gpu():
    import io

    from rich.console import Console

    event = judge.judge_figure(_fig("host-memcpy", 10.0, gpus="host"), "n1", {"cpu": "Nowhere CPU"},
                               expect.Expectations({}, {}))
    assert event.status == "measured" and event.reason == "not judged: no expectation for CPU Nowhere CPU"
    assert judge.exit_code([event]) == 0
    buffer = io.StringIO()
    output.render_terminal([event], Console(file=buffer, width=80, no_color=True))
    assert "figure host-memcpy host" in buffer.getvalue() and "GPU host" not in buffer.getvalue()
    assert 'gpuipc_check_status{node="n1",kind="figure",check="host-memcpy",gpus="host",status="measured"} 1' in \
        output.to_prometheus([event])


def test_a_cpu_node_whose_every_scenario_fails_exits_1(tmp_path):
    done = bench("check", "-o", str(tmp_path / "f.csv"), "--format", "json",
                 env={"GPUIPC_BENCH_FAULT": "raise:1:setup:1", plant.PLANT_ENV: "without:nixl-host-read"})
    assert done.returncode == 1, done.stderr
    failed = {(e["kind"], e["figure"]) for e in map(json.loads, done.stdout.splitlines()) if e["status"] == "fail"}
    assert {("path", "host"), ("scenario", "barrier"), ("node", "rows")} <= failed


def test_a_planted_barrier_error_fails_the_node(tmp_path):
    done = bench("check", "-o", str(tmp_path / "b.csv"), "--format", "json",
                 env={plant.PLANT_ENV: "without:nixl-host-read;fault:barrier:raise:1:sample:1"})
    assert done.returncode == 1, done.stderr
    events = [json.loads(x) for x in done.stdout.splitlines()]
    barrier = [e for e in events if e["kind"] == "scenario" and e["figure"] == "barrier"]
    assert [e["status"] for e in barrier] == ["fail"] and "injected" in barrier[0]["reason"], done.stdout
    assert not [e for e in events if e["status"] == "fail" and e["figure"] != "barrier"], done.stdout


def test_a_gpu_nodes_scenarios_run_on_the_preset_each_in_a_session_of_its_own(monkeypatch):
    """What the check runs on two H100s (the fork launcher stood in for, no GPU): 5 samples after
    one warm-up at 4 KiB and 256 MiB, a path's proof one sample at 4 KiB, no figures handed from
    run to run, the same-GPU pairs time-sliced (the mode's name and environment to their workers),
    peer across each ordered pair, a planted fault around its own scenario only, each row kept."""
    from fakes import h100_node
    from gpuipc_bench.check import node
    from gpuipc_bench.harness import launcher
    from gpuipc_bench.results import new_row

    calls = []

    def run_scenario(scenario, config, specs, on_row, env=None, mode_name=None, **callbacks):
        calls.append((scenario.name, tuple(s.device for s in specs), mode_name, sorted(env or {}),
                      (config.min_samples, config.max_samples, config.warmup, config.sizes), config.known_best,
                      os.environ.get("GPUIPC_BENCH_FAULT")))
        on_row(new_row(scenario=scenario.name, path="ipc", variant="ce", measure="stream", metric="bandwidth",
                       src="0", dst="0", bytes=4096, iteration=0, batch=1, seconds=1e-5, verified=True, workers=2,
                       sharing=mode_name or "exclusive"))
        return launcher.Outcome(scenario.name, rows=1)

    monkeypatch.setattr(launcher, "run_scenario", run_scenario)
    monkeypatch.delenv("GPUIPC_BENCH_FAULT", raising=False)
    monkeypatch.setenv(plant.PLANT_ENV, "fault:ipc:raise:1:sample:1")
    rows: list[dict] = []
    found = node.measure(["staging", "ipc", "peer", "vmm"], h100_node(2), None, rows.append, 10.0)
    preset, proof = (5, 5, 1, (4096, 256 << 20)), (1, 1, 0, (4096,))
    # a same-GPU set sees its own GPU alone (gpu.visible); a pair of the two sees both, as the node
    pipe = ["CUDA_MPS_PIPE_DIRECTORY", "CUDA_VISIBLE_DEVICES", "GPUIPC_BENCH_SEES"]
    assert calls == [("staging", (0, 0), "time-sliced", pipe, preset, (), None),  # then again on GPU 1 (256 MiB)
                     ("staging", (1, 1), "time-sliced", pipe, preset, (), None),
                     ("ipc", (0, 0), "time-sliced", pipe, preset, (), "raise:1:sample:1"),
                     ("ipc", (1, 1), "time-sliced", pipe, preset, (), "raise:1:sample:1"),
                     ("peer", (0, 1), None, [], preset, (), None), ("peer", (1, 0), None, [], preset, (), None),
                     ("vmm", (0, 0), "time-sliced", pipe, proof, (), None)]
    assert found == dict.fromkeys(["staging", "ipc", "peer", "vmm"], "") and len(rows) == len(calls)


def test_an_interrupted_check_says_so_in_its_csv_and_keeps_its_rows(tmp_path):
    import signal
    import time

    out, fired = tmp_path / "i.csv", tmp_path / "fired"
    full = {k: v for k, v in os.environ.items() if not k.startswith("GPUIPC_BENCH_")}
    full.update({plant.PLANT_ENV: "without:nixl-host-read;fault:barrier:hang:1:sample:1",
                 "GPUIPC_BENCH_FAULT_FIRED": str(fired)})
    proc = subprocess.Popen(BENCH + ["check", "-o", str(out), "--timeout", "60"], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):  # the host scenario's rows are written by then; the barrier hangs
            if fired.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert fired.exists(), proc.communicate(timeout=60)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    df, meta = read_results(out)
    assert meta["status"].startswith("interrupted by SIGINT") and meta["partial"] == "true"
    assert "host" in set(df["path"])


def test_the_fleet_table_puts_the_worst_node_first_and_draws_a_heatmap(tmp_path):
    by_node = {f"node{k:03d}": [_fig(value=55.0 - (20 if k == 7 else k % 3)), _fig("d2d", 1480.0)]
               for k in range(120)}
    events = [judge.Event("fail", "node007", "fleet", "h2d", "0", 35.0)]
    rows = table.fleet_rows(by_node, events, {"node999": "did not report within 600 s"})
    assert [r["node"] for r in rows[:2]] == ["node999", "node007"]
    assert rows[1]["figures"]["h2d@0"]["outlier"] and rows[1]["figures"]["h2d@0"]["of_median"] < 0.7
    md = table.to_markdown(rows)
    assert md.splitlines()[2].startswith("| node999 | 1 | did not report") and " !" in md.splitlines()[3]
    assert json.loads(table.to_json(rows))["nodes"][1]["node"] == "node007"
    assert table.save(rows, tmp_path / "fleet.png") == [tmp_path / "fleet-host-link.png", tmp_path / "fleet-memory.png"]
    assert (tmp_path / "fleet-host-link.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_heatmap_of_a_thousand_nodes_is_one_tall_file_per_figure_family(tmp_path):
    """1,000 2-GPU nodes: one image per family (host link, memory, the pairs), a row of pixels per
    node (its name beside it), the figures' names and the colour scale above the grid; the worst
    node's row red, a healthy one's green."""
    from PIL import Image

    from gpuipc_bench.check import heatmap

    pairs = ["0>1", "1>0"]
    by_node = {f"node{k:04d}": [_fig(value=55.0 - (20 if k == 500 else k % 3), gpus=str(g)) for g in range(2)]
               + [_fig("d2d", 2600.0 + k % 7, gpus=str(g)) for g in range(2)]
               + [_fig("peer", 380.0, gpus=p) for p in pairs] for k in range(1000)}
    rows = table.fleet_rows(by_node, [], {})
    assert rows[0]["node"] == "node0500"
    written = table.save(rows, tmp_path / "fleet.png")
    assert [p.name for p in written] == ["fleet-host-link.png", "fleet-memory.png", "fleet-pairs.png"]
    images = {p.name: Image.open(p).convert("RGB") for p in written}
    for family, columns in heatmap.families(list(dict.fromkeys(k for r in rows for k in r["figures"]))).items():
        tall = heatmap.Layout(rows, columns, family).top + 1000 * heatmap.ROW_PX + heatmap.PAD
        assert images[f"fleet-{family}.png"].height == tall, family
    layout = heatmap.Layout(rows, ["h2d@0", "h2d@1"], "host-link")
    host_link = images["fleet-host-link.png"]
    first, second = (layout.top + k * heatmap.ROW_PX + heatmap.ROW_PX // 2 for k in (0, 1))
    red, green = host_link.getpixel((layout.left + 5, first)), host_link.getpixel((layout.left + 5, second))
    assert red[0] > 150 > red[1] and green[1] > max(150, green[0]), (red, green)
    dark = 80  # text: the node's name left of its row, each figure's name above its column
    beside = (heatmap.PAD, first - 4, layout.left - heatmap.PAD, first + 4)
    assert host_link.crop(beside).convert("L").getextrema()[0] < dark
    above = (layout.left, layout.top - 40, layout.left + heatmap.CELL_PX, layout.top)
    assert host_link.crop(above).convert("L").getextrema()[0] < dark
    assert table.save(rows[:3], tmp_path / "few.svg")[0].read_text().startswith("<svg")


# ---------------------------------------------------------------- outputs


EVENTS = [
    judge.Event("pass", "n1", "path", "host", reason="CPU processes"),
    judge.Event("skip", "n1", "path", "ipc", reason="no GPU: none"),
    judge.Event("fail", "n1", "figure", "h2d", "0", 30.0, "54.8-55.1 GB/s", "GB/s", 'slow "link"\nhere', 54.8),
    judge.Event("warn", "n2", "figure", "barrier", "host", 3.0, "1 µs", "µs", "above", 1.0),
]


def test_junit_parses_as_xml_with_failures_and_skips():
    root = ET.fromstring(output.to_junit(EVENTS))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == ["n1", "n2"]
    assert suites[0].get("tests") == "3" and suites[0].get("failures") == "1" and suites[0].get("skipped") == "1"
    failure = root.find(".//testcase[@name='h2d GPU 0']/failure")
    assert failure is not None and "measured 30 GB/s; expected 54.8-55.1 GB/s" in failure.get("message")
    assert root.find(".//testcase[@name='ipc']/skipped") is not None
    assert root.find(".//testcase[@name='barrier']/system-out").text.startswith("warning: ")


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\})? '
                     r'(-?[0-9.e+-]+|NaN|[+-]Inf)$')


def _parse_prometheus(text: str) -> list[tuple[str, str, float]]:
    """A small reader of the text exposition format: HELP/TYPE lines, then samples."""
    samples, typed = [], set()
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            parts = line.split(" ", 3)
            assert len(parts) == 4 and parts[2]
            if parts[1] == "TYPE":
                assert parts[3] in ("gauge", "counter", "untyped") and parts[2] not in typed
                typed.add(parts[2])
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        assert match.group(1) in typed
        samples.append((match.group(1), match.group(2) or "", float(match.group(3))))
    return samples


def test_prometheus_output_is_the_text_format():
    text = output.to_prometheus(EVENTS)
    samples = _parse_prometheus(text)
    assert ("gpuipc_check_figure", '{node="n1",figure="h2d",gpus="0",unit="GB/s"}', 30.0) in samples
    assert ("gpuipc_check_failures", '{node="n1"}', 1.0) in samples
    status = [s for s in samples if s[0] == "gpuipc_check_status" and 'check="h2d"' in s[1] and s[2] == 1.0]
    assert len(status) == 1 and 'status="fail"' in status[0][1]
    parser = pytest.importorskip("prometheus_client.parser")  # the dev extra: Prometheus's own parser
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert set(families) == {"gpuipc_check_status", "gpuipc_check_figure", "gpuipc_check_expected",
                             "gpuipc_check_failures", "gpuipc_check_timestamp_seconds"}
    assert {s.labels["unit"] for s in families["gpuipc_check_figure"].samples} == {"GB/s", "us"}


def test_json_lines_carry_one_event_per_check():
    lines = output.to_json_lines(EVENTS).splitlines()
    assert len(lines) == 4
    first = json.loads(lines[2])
    assert {k: first[k] for k in ("status", "node", "figure", "measured", "expected")} == {
        "status": "fail", "node": "n1", "figure": "h2d", "measured": 30.0, "expected": "54.8-55.1 GB/s"}
    assert first["reason"] == 'slow "link"\nhere'


# ---------------------------------------------------------------- the command


def test_check_of_this_node_learn_and_judge_round_trip(tmp_path):
    one, two = tmp_path / "one.csv", tmp_path / "two.csv"
    for out in (one, two):  # (NIXL's figure in a one-node check: tests/test_nixl_path.py)
        done = bench("check", "-o", str(out), "--format", "json", env={plant.PLANT_ENV: WITHOUT_NIXL})
        assert done.returncode == 0, done.stderr
    _, meta = read_results(one)
    node = meta["check.nodes"]
    assert node and meta[f"node.{node}.gpu_count"] == "0"
    learned = tmp_path / "node.json"
    done = bench("check", "--learn", str(learned), str(one), str(two))
    assert done.returncode == 0, done.stderr
    loaded = expect.load(learned)
    cpu = next(e for e in loaded.entries.values() if e.figure == "host-memcpy")
    assert cpu.hosts == 1 and not cpu.band and cpu.sources == (f"one.csv:{node}", f"two.csv:{node}")
    # two runs of one node are one host: a figure far below it warns, measured twice, and the check passes
    done = bench("check", "--expect", str(learned), "-o", str(tmp_path / "slow.csv"), "--format", "junit",
                 env={plant.PLANT_ENV: "slow:*:host-memcpy:0.05;" + WITHOUT_NIXL})
    assert done.returncode == 0, done.stderr
    root = ET.fromstring(done.stdout)
    assert root.find(".//failure") is None
    warning = root.find(".//testcase[@name='host-memcpy']/system-out").text
    assert warning.startswith("warning: measured") and "single-host reference" in warning
    assert "measured twice" in warning


@pytest.mark.parametrize("args, words", [
    (["check", "--tolerance", "2"], "--tolerance 2: must be a fraction from 0 to 1"),
    (["check", "--timeout", "0.001"], "--timeout 0.001: must be from 1 to 86400 seconds"),
    (["check", "--deadline", "1"], "--deadline 1: must be from 5 to 86400 seconds"),
    (["check", "--expect", "/nonexistent/e.json"], "--expect /nonexistent/e.json: no such file"),
    (["check", "--learn", "x.json"], "--learn FILE: give the healthy runs' CSV files"),
    (["check", "some.csv"], "some.csv: CSV files are read by --learn only"),
    (["check", "--format", "xml"], "'xml' is not one of"),
    (["check", "--learn", "x.json", str(REPO / "results" / "h200x2-nvlink-all.csv")], "schema 1"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    result = CliRunner().invoke(cli, args + (["-o", str(tmp_path / "c.csv")] if "--learn" not in args else []))
    assert result.exit_code == 2, result.output
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in result.output


def test_a_heatmap_table_refuses_to_overwrite_the_family_files_it_writes(tmp_path):
    """--table X.png writes X-<family>.png: an existing one of those is refused before any work."""
    taken = tmp_path / "fleet-host.png"
    taken.write_bytes(b"keep")
    result = CliRunner().invoke(cli, ["check", "-o", str(tmp_path / "c.csv"), "--table", str(tmp_path / "fleet.png")])
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert f"--table {taken}: file exists; use --force" in " ".join(result.output.split())
    assert taken.read_bytes() == b"keep" and not (tmp_path / "c.csv").exists()


def test_learn_does_not_overwrite_a_file_without_force(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text("keep")
    result = CliRunner().invoke(cli, ["check", "--learn", str(kept), str(REFERENCES[0])])
    assert result.exit_code == 2 and f"--learn {kept}: file exists; use --force" in result.output
    assert kept.read_text() == "keep"
    assert CliRunner().invoke(cli, ["check", "--learn", str(kept), str(REFERENCES[0]), "--force"]).exit_code == 0
    assert expect.load(kept).get(H100, "h2d").hosts == 1


@pytest.mark.parametrize("text, words", [
    ("{not json", "not JSON"),
    ('{"format": "other"}', "not an expectations file"),
    ('{"format": "gpuipc-bench expectations", "version": 1, "expectations": [{"model": "m"}]}',
     "expectation 1 is malformed"),
    ('{"format": "gpuipc-bench expectations", "version": 1, "tolerance": 3}', "tolerance must be a fraction"),
])
def test_a_bad_expectations_file_is_refused(tmp_path, text, words):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    result = CliRunner().invoke(cli, ["check", "--expect", str(bad), "-o", str(tmp_path / "c.csv")])
    assert result.exit_code == 2 and words in result.output


def _device_count_in_a_child() -> int:
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        return pool.apply(_device_count)


def _device_count() -> int:
    from cupy.cuda import runtime

    return runtime.getDeviceCount()


@pytest.mark.gpu
def test_check_of_a_gpu_node_never_initialises_cuda_in_this_process():
    from gpuipc_bench.check.node import check_node

    report = check_node("here", expect.load())
    names = {e.figure for e in report.events if e.kind == "figure"}
    assert {"h2d", "d2h", "d2d", "ipc-ce", "ipc-handoff-4k"} <= names
    assert next(e for e in report.events if e.figure == "ipc" and e.kind == "path").status == "pass"
    assert _device_count_in_a_child() >= 1  # a child forked after the check can still use CUDA


def test_the_terminal_output_fits_80_columns_with_each_reason_under_its_check():
    import io

    from rich.console import Console

    from gpuipc_bench.check.output import render_terminal

    long_reason = "UCX turns cuda_ipc's READ off where the GPU has no active NVLink " * 3
    events = [judge.Event("fail", "n1", "figure", "h2d", "0", 31.2, "54.8-55.2 GB/s", "GB/s", "31.2 GB/s is 43% below"),
              judge.Event("skip", "n1", "figure", "nixl-read", "0", 0.53, "", "GB/s", long_reason)]
    out = io.StringIO()
    render_terminal(events, Console(file=out, width=80, force_terminal=False))
    lines = out.getvalue().splitlines()
    assert lines[0] == "gpuipc-bench check · node n1" and all(len(line) <= 80 for line in lines)
    assert lines[1].startswith("fail      figure h2d GPU 0") and lines[1].endswith("31.2 GB/s")
    assert lines[2].strip() == "expected 54.8-55.2 GB/s" and lines[3].strip() == "31.2 GB/s is 43% below"
    assert lines[4].startswith("skip") and all(line.startswith(" " * 10) for line in lines[5:]) and len(lines) > 6


# ---------------------------------------------------------------- the contracts of node health tools


def test_preset_health_says_healthy_or_drains_through_scontrol_naming_the_figure(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    said = tmp_path / "scontrol.log"
    (fake / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {said}\n')
    (fake / "scontrol").chmod(0o755)
    path = f"{fake}:{os.environ['PATH']}"
    healthy = bench("check", "--preset", "health", "--drain", "-o", str(tmp_path / "h.csv"),
                    env={"PATH": path, "SLURMD_NODENAME": "n17"})
    assert healthy.returncode == 0 and healthy.stdout.endswith(" | Healthy\n"), healthy.stderr
    assert not said.exists()  # nothing to drain
    broken = bench("check", "--preset", "health", "--drain", "-o", str(tmp_path / "b.csv"),
                   env={"PATH": path, "SLURMD_NODENAME": "n17", plant.PLANT_ENV: "fault:host:raise:1:sample:1"})
    assert broken.returncode == 1, broken.stderr
    line = broken.stdout.strip()
    assert " | DRAIN: path host: " in line and len(line) <= 80 and "\n" not in line
    assert said.read_text().startswith("update NodeName=n17 State=DRAIN Reason=gpuipc-bench: path host: ")
    _, meta = read_results(tmp_path / "b.csv")
    assert set(meta["check.nodes"].split(",")) == {meta["host"]}
    nodes = read_results(tmp_path / "h.csv")[0]
    assert set(nodes["path"]) <= {"host", "ceiling"} and "barrier" not in set(nodes["path"])  # the short preset


def test_npd_format_exits_0_1_or_2_with_one_short_message(tmp_path):
    ok = bench("check", "--preset", "health", "--format", "npd", "-o", str(tmp_path / "o.csv"))
    assert ok.returncode == 0 and ok.stdout == "gpuipc-bench: healthy\n", ok.stderr
    bad = bench("check", "--preset", "health", "--format", "npd", "-o", str(tmp_path / "b.csv"),
                env={plant.PLANT_ENV: "fault:host:raise:1:sample:1"})
    assert bad.returncode == 1 and bad.stdout.startswith("gpuipc-bench: path host") and len(bad.stdout) <= 81
    (tmp_path / "dir.csv").mkdir()  # a check that cannot run (its CSV cannot be written): unknown, 2
    unknown = bench("check", "--preset", "health", "--format", "npd", "-o", str(tmp_path / "dir.csv"), "--force")
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr


def test_prometheus_output_is_written_atomically_with_a_timestamp(tmp_path, monkeypatch):
    import time

    event = judge.Event("pass", "n1", "figure", "h2d", "0", 55.0, "", "GB/s")
    text = output.to_prometheus([event], now=1700000000.0)
    assert "gpuipc_check_timestamp_seconds 1700000000.000" in text
    target = tmp_path / "gpuipc.prom"
    target.write_text("old\n")
    replaced = []
    monkeypatch.setattr(os, "replace", lambda a, b: replaced.append((a, b)) or os.rename(a, b))
    output.write_atomically(target, text)
    assert target.read_text() == text and replaced and Path(replaced[0][0]).name.startswith(".gpuipc.prom.")
    assert [p.name for p in tmp_path.iterdir()] == ["gpuipc.prom"]  # no temporary file left
    assert time.time() > 1700000000.0


def test_a_fleet_outliers_second_measurement_replaces_its_first(tmp_path):
    from gpuipc_bench.check.node import NodeReport
    from gpuipc_bench.cli.check import _take_second
    from gpuipc_bench.results import ResultsFile

    reports = {n: NodeReport(n, {}, figures=[_fig(value=v)]) for n, v in (("a", 55.0), ("b", 55.2), ("c", 2.0))}
    assert set(judge.fleet_outliers({n: r.figures for n, r in reports.items()})) == {("c", "h2d", "0")}
    results = ResultsFile(tmp_path / "f.csv", {"host": "a"})
    second = NodeReport("c", {}, figures=[_fig(value=54.0)])
    first = _take_second({"c": second}, reports, results)
    assert first == {("c", "h2d", "0"): 2.0} and reports["c"].figures[0].value == 54.0
    assert results.metadata["node.c.check.fleet_remeasured"] == "h2d@0"
    assert judge.fleet_outliers({n: r.figures for n, r in reports.items()}) == {}


def test_the_lane_of_each_figure_is_shown_and_a_peer_copy_over_pcie_fails_the_node():
    """Rows carrying lanes (NVML's byte counters, issue 36), crafted on a reference run of two
    NVLink GPUs: the peer copy across processes went over PCIe."""
    frame, meta = read_results(REPO / "results" / "h100x2-nvlink-default.csv")
    bandwidth, ends = frame["metric"] == "bandwidth", frame["src"] + ">" + frame["dst"]
    frame["lane"] = ""
    frame.loc[bandwidth & (frame["src"] == frame["dst"]) & frame["src"].str.isdigit(), "lane"] = "none"
    frame.loc[bandwidth & ((frame["src"] == "host") != (frame["dst"] == "host")), "lane"] = "pcie"  # GPU to host
    frame.loc[bandwidth & (ends == "0>1") & (frame["variant"] == "peer@0>1"), "lane"] = "nvlink"
    frame.loc[bandwidth & (ends == "0>1") & (frame["path"] == "peer"), "lane"] = "pcie"  # the wrong lane
    got = {(f.name, f.gpus): f for f in figures_of(frame, facts=meta)}
    assert (got[("peer", "0>1")].lane, got[("peer", "0>1")].lane_expected) == ("nvlink", "nvlink")
    assert got[("h2d", "0")].lane == "pcie" and got[("d2d", "0")].lane == "none"
    assert got[("peer-ce", "0>1")].lane == "pcie" and got[("host-memcpy", "host")].lane == ""  # no GPU: none
    facts = {**H100_FACTS, "gpu_count": "2", "gpu.1.name": H100_FACTS["gpu.0.name"], "link.0-1": "NV18"}
    events = [judge.judge_figure(got[k], "n1", facts, expect.load())
              for k in (("peer-ce", "0>1"), ("peer", "0>1"), ("host-memcpy", "host"))]
    wrong, right, none = events
    assert wrong.status == "fail" and wrong.reason.startswith("peer copy went over PCIe, not NVLink")
    assert right.status != "fail" and right.lane == "nvlink" and not right.wrong_lane
    assert output.to_health(events, ["n1"]) == "n1 | DRAIN: figure peer-ce GPU 0>1: peer copy went over PCIe, " \
                                              "not NVLink\n"
    records = [json.loads(line) for line in output.to_json_lines(events).splitlines()]
    assert [r.get("lane") for r in records] == ["pcie", "nvlink", None]
    assert records[0]["wrong_lane"] == "peer copy went over PCIe, not NVLink" and "wrong_lane" not in records[1]
    assert "| lane |" in output.to_markdown(events) and "| lane |" not in output.to_markdown([none])
    rows = table.fleet_rows({"n1": [got[("peer-ce", "0>1")]]}, events, {})
    assert rows[0]["figures"]["peer-ce@0>1"]["lane"] == "pcie"


# ---------------------------------------------------------------- every GPU of a node, its PCIe link under load


def _four_gpu_check(monkeypatch, busy_links: dict[int, tuple[int, int]], plants: str = "", preset: str = "full",
                    sets=None, hold_links: bool = True):
    """check_node on a fake node of four H100s (fakes.h100_node): a stand-in runner gives every
    scenario's headline rows (h2d, d2h, d2d at 55, 55 and 2600 GB/s on each GPU it runs on; peer
    at 400 and peer-ce at 380 on each pair), and holds each staging run under the check's link
    watch until NVML (fakes.FakeNvml, its links at `busy_links` while staging runs) has been read
    under it (`hold_links`). `sets(runner)`: the worker sets of a plan with rounds (check.node.round_sets).
    Returns (report, the runs as (scenario, devices, sizes), the expectations)."""
    import time

    from fakes import FakeNvml, figure, h100_node
    from gpuipc_bench.check import node
    from gpuipc_bench.check.expect import Expectation, Expectations, model_of
    from gpuipc_bench.harness.launcher import Outcome

    machine = h100_node(4)
    nvml = FakeNvml([g.pci_bus_id for g in machine.gpus], busy=busy_links)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(conditions, "IN_PROCESS", True)  # the watch reads the stand-in, in a thread here
    monkeypatch.setattr("gpuipc_bench.machine.probe.probe", lambda **k: machine)
    monkeypatch.setattr(node, "nixl_installed", lambda: False)
    monkeypatch.setenv(plant.PLANT_ENV, plants)
    runs = []

    def runner(sc, config, specs, on_row):
        a, b = specs[0].device, specs[-1].device
        runs.append((sc.name, (a, b), sc.sizes(config)))
        rows = []
        for n in sc.sizes(config):
            if sc.name == "staging":
                rows += figure("ceiling", f"h2d@{b}", n / 55e9, (n,), n=5, src=b, dst=b)
                rows += figure("ceiling", f"d2h@{a}", n / 55e9, (n,), n=5, src=a, dst=a)
            elif sc.name == "ipc":
                rows += figure("ceiling", f"d2d@{a}", n / 2600e9, (n,), n=5, src=a, dst=a)
                rows += figure("ipc", "ce", n / 2500e9, (n,), n=5, src=a, dst=b, ceiling=f"d2d@{a}")
            elif sc.name == "peer":
                rows += figure("ceiling", f"peer@{a}>{b}", n / 400e9, (n,), n=5, src=a, dst=b)
                rows += figure("peer", "ce", n / 380e9, (n,), n=5, src=a, dst=b, ceiling=f"peer@{a}>{b}",
                               sharing="exclusive")
        if sc.name == "staging" and nvml.users and hold_links:  # a host copy under the check's watch (polls: 20 ms)
            nvml.loaded, before, give_up = True, nvml.reads, time.monotonic() + 10
            while nvml.reads < before + 16 and time.monotonic() < give_up:
                time.sleep(0.005)
            nvml.loaded = False
        for row in rows:
            on_row(row)
        return Outcome(sc.name, len(rows))

    facts = machine.metadata()
    model = model_of(facts, "0")
    bands = {"h2d": (53.0, 57.0), "d2h": (53.0, 57.0), "d2d": (2500.0, 2700.0), "ipc-ce": (2400.0, 2600.0)}
    expected = Expectations({(model, f): Expectation(model, f, "GB/s", lo, hi, 2, sources=("test",))
                             for f, (lo, hi) in bands.items()}, {})
    pair = model_of(facts, "0>1")
    for f, (lo, hi) in {"peer": (390.0, 410.0), "peer-ce": (370.0, 390.0)}.items():
        expected.entries[(pair, f)] = Expectation(pair, f, "GB/s", lo, hi, 2, sources=("test",))
    from gpuipc_bench.harness import launcher

    def run_scenario(scenario, config, specs, on_row, env=None, mode_name=None, **callbacks):  # the fork launcher
        return runner(scenario, config, specs, on_row)

    monkeypatch.setattr(launcher, "run_scenario", run_scenario)
    if sets is not None:
        monkeypatch.setattr(node, "round_sets", lambda plan: sets(runner) if plan.rounds is not None else None)
        monkeypatch.setattr(node, "gpu_sets", lambda plan: sets(runner))
    return node.check_node("n1", expected, preset=preset), runs, expected


def test_every_gpus_host_link_and_memory_are_measured_and_a_slow_gpu_is_named(monkeypatch):
    from gpuipc_bench.check.figures import BIG
    from gpuipc_bench.check.node import missing_figures

    report, runs, expected = _four_gpu_check(monkeypatch, {}, plants="slow:*:h2d@2:0.5")
    for name in ("staging", "ipc"):  # GPU 0 at both sizes, then every other GPU at 256 MiB
        first = [(devices, sizes) for n, devices, sizes in runs if n == name][:4]
        assert first[0][0] == (0, 0) and len(first[0][1]) == 2
        assert first[1:] == [((g, g), (BIG,)) for g in (1, 2, 3)]
    figures = [e for e in report.events if e.kind == "figure"]
    failed = [(e.figure, e.gpus) for e in figures if e.status == "fail"]
    assert failed == [("h2d", "2")], [(e.figure, e.gpus, e.status, e.reason) for e in figures]
    slow = next(e for e in figures if e.status == "fail")
    assert "below" in slow.reason and "measured twice" in slow.reason and slow.measured == pytest.approx(27.5)
    for name in ("h2d", "d2h", "d2d", "ipc-ce"):  # judged on every GPU
        assert sorted(e.gpus for e in figures if e.figure == name) == ["0", "1", "2", "3"]
    assert not [e for e in report.events if e.kind == "link"]  # every link reached Gen5 x16 under load
    # a figure of one GPU missing on any GPU fails, naming that GPU
    without = [f for f in report.figures if (f.name, f.gpus) != ("d2d", "3")]
    missing = missing_figures("n1", report.facts, expected, ["staging", "ipc"], without)
    assert [(e.figure, e.gpus, e.status) for e in missing] == [("d2d", "3", "fail")]


class _PairSets:
    """Stands in for the persistent worker sets of a plan with rounds (check.node.round_sets): each
    run goes to the test's runner; what ran beside it is counted. Forks nothing."""

    def __init__(self, runner):
        import threading

        self.runner, self.lock = runner, threading.Lock()
        self.active, self.started = 0, 0
        self.calls: list[tuple] = []  # (scenario, its health form?, pair, runs in flight beside it)
        self.prepared: list[tuple] = []
        self.retired: list[tuple] = []

    def prestart(self, scenarios) -> None:
        pass

    def ready_for(self, scenario, mode_name) -> None:
        return None

    def prepare(self, scenario, specs, mode_name=None, env=None) -> None:
        import threading

        assert threading.current_thread() is threading.main_thread()  # forked in the session's thread only
        self.prepared.append((specs[0].device, specs[-1].device))

    def retire(self, specs, mode_name=None, env=None) -> None:
        self.retired.append((specs[0].device, specs[-1].device))

    def run(self, scenario, config, specs, mode_name=None, env=None, on_row=None, **callbacks):
        import time

        with self.lock:
            self.active += 1
        time.sleep(0.01)
        beside = self.active - 1
        outcome = self.runner(scenario, config, specs, on_row)
        time.sleep(0.01)
        with self.lock:
            self.active -= 1
            self.calls.append((scenario.name, scenario.health, (specs[0].device, specs[-1].device), beside))
        return outcome

    def close(self) -> None:
        pass

    def let_go(self) -> None:
        pass

    def end(self) -> None:
        pass


def test_the_health_preset_measures_every_pairs_peer_figures_in_rounds_and_says_healthy(monkeypatch):
    """On four NVLinked GPUs: peer's health form for each of the 12 ordered pairs, in the rounds of
    disjoint pairs (the first alone, then together: the proof; the later ones at once), staging
    and ipc once per GPU one after another; every GPU's and every pair's figures judged; Healthy."""
    from gpuipc_bench.check.figures import BIG, SMALL
    from gpuipc_bench.harness.rounds import tournament

    made: list = []

    def sets(runner):
        made.append(_PairSets(runner))
        return made[-1]

    report, runs, _ = _four_gpu_check(monkeypatch, {}, preset="health", sets=sets, hold_links=False)
    pairs = [(a, b) for a in range(4) for b in range(4) if a != b]
    assert len(made) == 2 and sorted(made[1].retired) == pairs
    gpu_block, calls = made[0].calls, made[1].calls  # staging and ipc GPU after GPU in one set each, then peer
    assert [(name, pair, beside) for name, _, pair, beside in gpu_block] == [
        (name, (g, g), 0) for g in range(4) for name in ("staging", "ipc")]
    assert all(health for _, health, _, _ in gpu_block)
    assert all(name == "peer" and health for name, health, _, _ in calls)
    assert len([run for run in runs if run[0] == "peer"]) == len(calls) == 12 + 2  # each through the sets
    proof = set(tournament(4)[0])
    beside = {}
    for _, _, pair, n in calls:
        beside.setdefault(pair, []).append(n)
    assert sorted(beside) == pairs and all(beside[p] == [1] for p in set(pairs) - proof)
    assert all(sorted(beside[p]) == [0, 1] for p in proof)  # alone, then together (the proof)
    assert [sizes for name, _, sizes in runs if name == "peer"][0] == (SMALL, BIG)
    staged = [(name, sizes) for name, _, sizes in runs if name in ("staging", "ipc")]
    assert staged == [("staging", (BIG,)), ("ipc", (SMALL, BIG))] + [("staging", (BIG,)), ("ipc", (BIG,))] * 3
    assert report.facts["check.peer.rounds.together"] == "yes"
    assert float(report.facts["check.estimate_seconds"]) > 0
    figures = [e for e in report.events if e.kind == "figure"]
    for name in ("peer", "peer-ce"):
        assert sorted(e.gpus for e in figures if e.figure == name) == sorted(f"{a}>{b}" for a, b in pairs)
    assert all(e.status == "pass" for e in figures), [(e.figure, e.gpus, e.status, e.reason) for e in figures]
    assert judge.exit_code(report.events) == 0, [e for e in report.events if e.status == "fail"]
    assert output.to_health(report.events, ["n1"]) == "n1 | Healthy\n"


def _planted_health_check(monkeypatch, plants: str):
    """The health preset on four fake NVLinked GPUs with `plants`: (report, runs, the sets made)."""
    made: list = []

    def sets(runner):
        made.append(_PairSets(runner))
        return made[-1]

    report, runs, _ = _four_gpu_check(monkeypatch, {}, plants=plants, preset="health", sets=sets, hold_links=False)
    return report, runs, made


def test_a_slow_host_link_in_the_health_preset_is_measured_again_on_its_gpu_and_drains_the_node(monkeypatch):
    """GPU 2's h2d at half its band (a plant, scripts/device/health.sh's): staging measured again on GPU 2
    alone (ipc and peer not), and the node's line names the figure."""
    report, runs, _ = _planted_health_check(monkeypatch, "slow:*:h2d@2:0.5")
    assert runs[-1][:2] == ("staging", (2, 2)) and len(runs) == 4 + 4 + 14 + 1
    assert report.facts["check.remeasured"] == "h2d@2"
    line = output.to_health(report.events, ["n1"]).rstrip("\n")
    assert line.startswith("n1 | DRAIN: figure h2d GPU 2") and len(line) <= 80, line


def test_sets_forked_together_make_their_contexts_at_once_and_are_waited_for():
    """check.node.CheckSets (real forks, no GPU here: each worker's context fails and says it is done
    all the same): the sets `ahead` forked at once, each told to warm, every one waited for and alive."""
    import time

    from fakes import h100_node
    from gpuipc_bench.check import node
    from gpuipc_bench.config import RunConfig

    ipc = node.registry()["ipc"]
    specs = [ipc.workers(RunConfig(scenarios=("ipc",), devices=(g,)), h100_node(2)) for g in (0, 1)]
    sets = node.CheckSets("", [(ipc, s) for s in specs], timeout=30.0)
    try:
        started = time.monotonic()
        sets.start_ahead("time-sliced", {})
        assert sets.started == 2 and len(sets.sets) == 2
        assert all(each.alive() for each in sets.sets.values()) and not sets.warming and not sets.ahead
        assert time.monotonic() - started < 30
    finally:
        sets.end()


def test_a_plan_in_rounds_forks_every_rounds_pairs_at_its_first_preparation(monkeypatch):
    """check.node.round_sets: the first round's preparation (the main thread) forks the sets of every
    pair of the plan, up to ROUND_PAIRS_AHEAD, then its own (already there); later preparations fork
    nothing more ahead. Beyond the cap, each round forks its own pairs."""
    from types import SimpleNamespace

    from gpuipc_bench.check import node
    from gpuipc_bench.harness.pool import WorkerSets

    forked: list = []
    monkeypatch.setattr(WorkerSets, "prepare", lambda self, scenario, specs, mode_name=None, env=None:
                        forked.append(node.run_gpus(specs)))

    def plan(gpus: int):
        pairs = [(a, b) for a in range(gpus) for b in range(gpus) if a != b]
        runs = [("peer", [SimpleNamespace(device=a, rank=0, role="producer", mig=""),
                          SimpleNamespace(device=b, rank=1, role="consumer", mig="")]) for a, b in pairs]
        return SimpleNamespace(rounds=object(), runs=runs, config=SimpleNamespace(worker_log="", timeout=60.0))

    four = plan(4)
    sets = node.round_sets(four)
    sets.prepare(*four.runs[3])
    assert forked == [node.run_gpus(specs) for _, specs in four.runs] + ["1>0"]
    forked.clear()
    sets.prepare(*four.runs[5])
    assert forked == ["1>3"]
    forked.clear()
    many = plan(8)  # 56 pairs: more than ROUND_PAIRS_AHEAD
    node.round_sets(many).prepare(*many.runs[0])
    assert forked == ["0>1"] and len(many.runs) > node.ROUND_PAIRS_AHEAD


def test_a_slow_pair_in_the_health_preset_is_measured_again_alone_and_drains_the_node(monkeypatch):
    """A pair's peer ceiling at half its band (a plant: every measurement of peer@1>2): the re-measure
    runs that pair's peer alone (not every pair again), and the node's line names the figure."""
    report, runs, made = _planted_health_check(monkeypatch, "slow:*:peer@1>2:0.5")
    assert len(made) == 2 and len({pair for _, _, pair, _ in made[1].calls}) == 12
    assert runs[-1][:2] == ("peer", (1, 2)) and len(runs) == 4 + 4 + 14 + 1  # the first pass, then 1>2 alone
    failed = [(e.figure, e.gpus) for e in report.events if e.status == "fail"]
    assert failed == [("peer", "1>2")] and report.facts["check.remeasured"] == "peer@1>2"
    line = output.to_health(report.events, ["n1"]).rstrip("\n")
    assert line.startswith("n1 | DRAIN: figure peer GPU 1>2") and len(line) <= 80, line


def test_a_pcie_link_below_its_maximum_under_a_host_copy_is_named(monkeypatch):
    """NVML reads every link at Gen1 when idle (as GPUs drop it): only what a link reached while
    staging's host copies ran counts. GPU 1 stays at Gen4 (warns), GPU 3 at x8 (fails)."""
    report, _, _ = _four_gpu_check(monkeypatch, {1: (4, 16), 3: (5, 8)})
    links = [(e.status, e.gpus, e.reason) for e in report.events if e.kind == "link"]
    assert links == [("warn", "1", "PCIe link of GPU 1 at Gen4 x16 under a host copy (max Gen5 x16)"),
                     ("fail", "3", "PCIe link of GPU 3 at Gen5 x8 under a host copy (max Gen5 x16)")]
    assert judge.exit_code(report.events) == 1


def test_a_link_watch_keeps_the_best_reading_under_load():
    from fakes import FakeNvml

    nvml = FakeNvml(["0000:17:00.0"], busy={0: (3, 16)})
    with conditions.LinkWatch({"0": "0000:17:00.0"}, poll_s=0.001, nvml=nvml) as watch:
        nvml.loaded = True
        while nvml.reads < 6:
            pass
        nvml.loaded = False
    assert watch.seen["0"] == {"gen": 3, "width": 16, "max_gen": 5, "max_width": 16, "loaded": True}
    assert conditions.link_findings(watch.seen) == {"0": (False, "PCIe link of GPU 0 at Gen3 x16 under a host "
                                                                 "copy (max Gen5 x16)")}
    assert conditions.LinkWatch({}, nvml=nvml).__enter__().seen == {}


FAKE_PYNVML = """
class NVMLError(Exception):
    pass
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(k): return k
def nvmlDeviceGetPciInfo(h): return type("PciInfo", (), {"busId": b"00000000:17:00.0"})()
def nvmlDeviceGetCurrPcieLinkGeneration(h): return 4
def nvmlDeviceGetCurrPcieLinkWidth(h): return 16
def nvmlDeviceGetMaxPcieLinkGeneration(h): return 5
def nvmlDeviceGetMaxPcieLinkWidth(h): return 16
"""


def test_the_link_watch_reads_in_a_process_of_its_own(tmp_path, monkeypatch):
    """The check forks its workers: no thread of its own may be inside NVML then. The watch's
    process (here with a stand-in pynvml first on its PYTHONPATH) answers what it read."""
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    with conditions.LinkWatch({"0": "0000:17:00.0"}) as watch:
        assert watch._child is not None and watch._child.poll() is None and watch.seen == {}
    assert watch.seen == {"0": {"gen": 4, "width": 16, "max_gen": 5, "max_width": 16, "loaded": True}}
    assert watch._child is None


def test_simulated_nodes_measure_in_turn_under_the_test_hook(tmp_path):
    """GPUIPC_BENCH_TEST_NODES_IN_TURN: while one simulated node measures, another cannot take the lock."""
    import fcntl

    lock = tmp_path / "nodes.lock"
    with plant.node_in_turn({plant.IN_TURN_ENV: str(lock)}):
        with open(lock, "a") as other, pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(lock, "a") as other:  # released after the node's measurement
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with plant.node_in_turn({}):  # unset: nothing taken
        pass


def test_a_cpu_figure_warns_within_three_times_its_band_and_fails_beyond():
    """On a shared or virtual host the CPU figures move by up to 2.2x from run to run (results/
    check-ten-healthy-runs.txt): within 3x of the band a warning, beyond it a failure; a GPU
    figure keeps the tolerance."""
    band = {"model": "CPU Test CPU", "unit": "µs", "low": 0.9, "high": 1.0, "hosts": 3, "of_ceiling": None,
            "sources": ["a", "b", "c"], "older": []}
    memcpy = {**band, "figure": "host-memcpy", "unit": "GB/s", "low": 12.0, "high": 13.0}
    refs = expect.parse({"format": "gpuipc-bench expectations", "version": 1, "tolerance": 0.1,
                         "expectations": [{**band, "figure": "barrier"}, memcpy]})
    facts = {"cpu": "Test CPU"}
    slow = judge.judge_figure(_fig("barrier", 2.2, gpus="host", unit="µs"), "n1", facts, refs)
    assert slow.status == "warn" and "a CPU figure: a warning within 3x" in slow.reason
    broken = judge.judge_figure(_fig("barrier", 3.5, gpus="host", unit="µs"), "n1", facts, refs)
    assert broken.status == "fail"
    assert judge.judge_figure(_fig("host-memcpy", 6.0, gpus="host"), "n1", facts, refs).status == "warn"
    assert judge.judge_figure(_fig("host-memcpy", 3.5, gpus="host"), "n1", facts, refs).status == "fail"
    # the fleet's rule alike: a CPU outlier within 3x of the median warns (6.06 against 13.1 GB/s was
    # seen on a healthy VM), a GPU figure's fails
    assert judge.fleet_status(_fig("host-memcpy", 6.06, gpus="host"), 13.1) == "warn"
    assert judge.fleet_status(_fig("host-memcpy", 4.0, gpus="host"), 13.1) == "fail"
    assert judge.fleet_status(_fig("barrier", 2.9, gpus="host", unit="µs"), 1.0) == "warn"
    assert judge.fleet_status(_fig("h2d", 40.0), 55.0) == "fail"


def test_a_gpu_or_pair_below_its_nodes_others_of_one_model_fails_by_the_fleet_rule():
    """judge.node_outliers: a pair's peer at half the other NV18 pairs' and GPU 2's d2d at half the
    other three GPUs' are named (median / MAD with a 10% floor, as across a fleet); a pair of another
    link class is judged among its own; a figure better than its node's others, a spread under the
    floor, fewer than three of a model, the host links and the CPU figures are not."""
    from gpuipc_bench.check.figures import Figure

    facts = {f"gpu.{g}.name": "NVIDIA H200" for g in range(4)}
    facts.update({f"link.{a}-{b}": "NV18" for a in range(4) for b in range(4) if a < b})
    facts["link.0-3"] = "NV12"  # another class: 0>3 and 3>0 are judged apart (two: too few)
    pairs = [f"{a}>{b}" for a in range(4) for b in range(4) if a != b]
    peer = {p: 393.0 - 0.3 * i for i, p in enumerate(pairs)}
    peer["1>2"], peer["2>1"], peer["0>3"] = 196.0, 430.0, 100.0  # slow; fast; another class, alone
    figures = [Figure("peer", p, v, "GB/s") for p, v in peer.items()]
    figures += [Figure("d2d", str(g), 2060.0 if g != 2 else 1030.0, "GB/s") for g in range(4)]
    figures += [Figure("ipc-ce", str(g), 2060.0 - 20 * g, "GB/s") for g in range(4)]  # 3% apart: under the floor
    figures += [Figure("h2d", str(g), 55.3 if g != 1 else 27.7, "GB/s") for g in range(4)]  # the host link: its band
    figures += [Figure("host-memcpy", "host", 1.0, "GB/s"), Figure("ipc-handoff-4k", "0", 286.0, "µs")]
    found = judge.node_outliers(figures, facts)
    assert sorted(found) == [("d2d", "2"), ("peer", "1>2")], found
    assert found[("peer", "1>2")].startswith("196 GB/s is 0.50 of the median (391 GB/s) of this node's 10 pairs")
    events = {k: judge.Event(judge.WARN, "n1", "figure", k[0], k[1]) for k in found}
    judge.flag_node_outliers(events, figures, facts)
    assert all(e.status == judge.FAIL for e in events.values())
