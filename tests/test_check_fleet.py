"""`gpuipc-bench check` on every node of an MPI job, with real Open MPI: `mpirun -np 6` acting as
3 nodes (the test-only node-name override, GPUIPC_BENCH_TEST_NODE_NAMES), the CPU figures as the
measured headline, planted faults (GPUIPC_BENCH_CHECK_PLANT) for a slow, a hung and a killed node.

Skipped where mpirun or mpi4py is missing. Each test looks only for its own processes, by its
own output path."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from gpuipc_bench.check import expect

from gpuipc_bench.hooks import plant
from gpuipc_bench.results import read_results

from fakes import needs_mpi

BENCH = [sys.executable, "-m", "gpuipc_bench.cli", "check"]
NODES = "a,a,b,b,c,c"
WITHOUT_NIXL = "without:nixl-host-read"  # six ranks on two cores: NIXL's agents are tested on their own below
# Three nodes' medians and MAD (the fleet rule) over figures measured by six ranks on two shared cores:
# there a healthy node's host-memcpy came out anywhere from 0.4 to 2.9 GB/s in one run. Of three
# nodes x1 < x2 < x3 the MAD is min(x2 - x1, x3 - x2), so a planted slow x1 is no outlier whenever
# the healthy x3 is at least twice x2, however slow x1 is. The tests of the fleet rule fix the
# figure on every node (the rows keep what was measured), inside the shipped band of the Intel Xeon
# CPU model (12.2-13.4 GB/s), so that a machine of that model judges the healthy nodes as passing.
FIXED_MEMCPY = "fixed:*:host-memcpy:12.8"
# The tests whose subject is not the host path run the barrier alone (a few seconds per node; the host
# path's figures are the fleet rule's tests): above all those of a node that does not report (its rank
# hung, killed or stopped), which wait for the deadline, so that a short one leaves the healthy nodes
# time to report even on a loaded machine.
BARRIER_ONLY = "without:host"


def env(**extra) -> dict:
    out = {k: v for k, v in os.environ.items() if not k.startswith("GPUIPC_BENCH_")}
    out.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
               **extra)
    return out


def fleet(out, *args, plants: str = "", mca: tuple[str, ...] = (), timeout: float = 240,
          nodes: str = NODES) -> subprocess.CompletedProcess:
    command = ["mpirun", "--oversubscribe", *mca, "-np", "6", "-x", f"{plant.NODE_NAMES_ENV}={nodes}"]
    plants = ";".join(p for p in (plants, WITHOUT_NIXL) if p)
    command += ["-x", f"{plant.PLANT_ENV}={plants}"]
    return subprocess.run(command + BENCH + ["-o", str(out), *args], capture_output=True, text=True,
                          timeout=timeout, env=env())


def fail_lines(stderr: str) -> list[str]:
    """The FAIL lines of a check's standard error, each joined with its indented continuation lines
    (the check wraps them at the terminal's width)."""
    out: list[str] = []
    for line in stderr.splitlines():
        if line.startswith("  ") and out:
            out[-1] += " " + line.strip()
        elif line.startswith("FAIL"):
            out.append(line)
    return out


def none_left(out) -> bool:
    time.sleep(0.5)
    return subprocess.run(["pgrep", "-f", f"gpuipc_bench.cli check.*{out}"], capture_output=True).stdout == b""


@needs_mpi
def test_three_nodes_write_one_fleet_csv_and_a_slow_node_is_named(tmp_path):
    out, junit, md = tmp_path / "fleet.csv", tmp_path / "fleet.xml", tmp_path / "fleet.md"
    # host-memcpy fixed on every node (FIXED_MEMCPY), then c's at 5% of it: the fleet rule judges
    # numbers the machine's load cannot move; --tolerance 0.5 (the fleet rule's floor: 50% of the
    # median) keeps the healthy nodes' other, measured figures from making them outliers too
    done = fleet(out, "--format", "junit", "--output", str(junit), "--table", str(md), "--tolerance", "0.5",
                 plants=f"{FIXED_MEMCPY};slow:c:host-memcpy:0.05")
    assert done.returncode != 0, done.stderr
    fails = fail_lines(done.stderr)
    assert any(line.startswith("FAIL node c host: fleet host-memcpy; measured") and "of the fleet median" in line
               for line in fails), done.stderr
    df, meta = read_results(out)
    assert set(df["node"]) == {"a", "b", "c"} and meta["check.nodes"] == "a,b,c" and meta["check.missing"] == ""
    assert meta["partial"] == "false" and "failed nodes: " in meta["status"] and "c" in meta["status"]
    for node in "abc":  # each node's facts travel in the header
        assert meta[f"node.{node}.host"] == node and meta[f"node.{node}.gpu_count"] == "0"
        assert meta[f"node.{node}.cpu"]
    assert set(df["workers"]) == {2}  # each node's two ranks were its workers
    root = ET.fromstring(junit.read_text())
    assert sorted(s.get("name") for s in root.findall("testsuite")) == ["a", "b", "c"]
    assert root.find(".//testsuite[@name='c']/testcase[@name='host-memcpy']/failure") is not None
    table = md.read_text().splitlines()
    c = next(line for line in table if line.startswith("| c |"))
    assert c.split(" | ")[2].endswith("!")  # host-memcpy, its first figure, marked an outlier
    worst = [min(float(x.split()[0]) for x in line.strip("| ").split(" | ")[2:]) for line in table[2:5]]
    assert worst == sorted(worst)  # the worst node first (CPU latencies are noisy here: any node may be)
    assert none_left(out)

    # --learn refuses a run with a failed node; --learn-partial learns from the nodes that passed: a band
    # of two hosts per CPU figure, which fails a slow node
    # (the run's header with c alone failed: on two shared cores a healthy node's latencies may fail too)
    from gpuipc_bench.results import write_results

    frame, meta = read_results(out)
    mixed = tmp_path / "mixed.csv"
    write_results(mixed, frame, {**meta, "status": "complete; failed nodes: c"})
    learned = tmp_path / "fleet.json"
    refused = subprocess.run(BENCH + ["--learn", str(learned), str(mixed)], env=env(), capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and "--learn-partial" in refused.stderr and "failed nodes c;" in refused.stderr
    assert subprocess.run(BENCH + ["--learn", str(learned), "--learn-partial", str(mixed)], env=env(),
                          capture_output=True, timeout=60).returncode == 0
    memcpy = next(e for e in expect.load(learned).entries.values() if e.figure == "host-memcpy")
    assert memcpy.hosts == 2 and memcpy.band and memcpy.sources == ("mixed.csv:a", "mixed.csv:b")
    one = subprocess.run(BENCH + ["--expect", str(learned), "-o", str(tmp_path / "one.csv"), "--format", "json"],
                         env=env(**{plant.PLANT_ENV: f"slow:*:host-memcpy:0.02;without:barrier;{WITHOUT_NIXL}"}),
                         capture_output=True,
                         text=True, timeout=120)
    assert one.returncode == 1, one.stderr
    event = next(json.loads(x) for x in one.stdout.splitlines() if '"host-memcpy"' in x)
    assert event["status"] == "fail" and "band of 2 hosts" in event["expected"] and "measured twice" in event["reason"]


@needs_mpi
def test_a_hung_node_and_a_killed_rank_are_named_at_the_deadline_and_the_others_rows_kept(tmp_path, wait_deadline):
    """b's leader hangs before its report, c's is SIGKILLed mid-check: under the README's
    `--mca orte_abort_on_non_zero_status 0` the job outlives the killed rank, both nodes are named
    at the deadline, a's rows and events kept; mpirun returns non-zero. (One run waits out the
    deadline for both: each wait is 20-90 s of CI.)"""
    out, events = tmp_path / "hang.csv", tmp_path / "hang.jsonl"
    start = time.monotonic()
    done = fleet(out, "--deadline", str(wait_deadline), "--timeout", "10", "--format", "json", "--output",
                 str(events), plants=f"hang:b;kill:c;{BARRIER_ONLY}",
                 mca=("--mca", "orte_abort_on_non_zero_status", "0"))
    assert done.returncode != 0
    assert ended_in_time(start, wait_deadline), done.stderr[-3000:]
    for node in "bc":
        assert (f"FAIL node {node}: node report; did not report within {wait_deadline} s (hung, or a rank died or "
                "stopped)") in fail_lines(done.stderr), done.stderr[-3000:]
    df, meta = read_results(out)
    assert set(df["node"]) == {"a"} and sorted(meta["check.missing"].split(",")) == ["b", "c"]
    assert meta["partial"] == "true"
    lost = [json.loads(x) for x in events.read_text().splitlines() if '"kind": "node"' in x]
    assert sorted((e["node"], e["status"]) for e in lost) == [("b", "fail"), ("c", "fail")]
    assert none_left(out)


@needs_mpi
def test_a_killed_node_leaves_the_others_rows_and_its_name_in_the_csv(tmp_path, healthy):
    """Open MPI ends the whole job when a rank dies: what rank 0 wrote as the reports came stays,
    and the header names the node it still waited for. b's leader kills itself when its report is
    ready, after as long as a whole healthy fleet took just now (a and c, doing the same work, have
    reported by then; a fixed 12 s was 60% of this test's time)."""
    out = tmp_path / "kill.csv"
    done = fleet(out, plants=f"kill:b:{kill_wait(healthy)};{BARRIER_ONLY}")
    assert done.returncode != 0
    df, meta = read_results(out)
    assert set(df["node"]) == {"a", "c"} and meta["partial"] == "true"
    # the rows were appended as the reports came; the header says the run did not end (or, when
    # rank 0 outran the launcher's kill, names b as missing)
    assert meta["status"].startswith("running") or meta["check.missing"] == "b"
    assert none_left(out)


@needs_mpi
def test_a_rank_in_another_pid_namespace_is_named_by_its_node(tmp_path):
    """Two ranks of one node, the second started by `unshare --pid --fork` (as a second container
    would be): the leader compares the namespaces the ranks said hello with."""
    if subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True).returncode != 0:
        pytest.skip("this machine does not allow a second PID namespace (unshare --pid --fork)")
    out, events = tmp_path / "ns.csv", tmp_path / "ns.jsonl"
    check = " ".join([*BENCH, "-o", str(out), "--format", "json", "--output", str(events)])
    script = f'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec unshare --pid --fork {check}; else exec {check}; fi'
    # (NIXL left out: across PID namespaces UCX loses CMA and the check rightly fails its figure)
    done = subprocess.run(["mpirun", "--oversubscribe", "-np", "2", "sh", "-c", script], capture_output=True,
                          text=True, timeout=180, env=env(**{plant.PLANT_ENV: WITHOUT_NIXL}))
    assert done.returncode == 0, done.stderr
    _, meta = read_results(out)
    node = meta["check.nodes"]
    assert meta[f"node.{node}.check.peer"] == "rank 1"
    assert meta[f"node.{node}.check.pid_ns"] != meta[f"node.{node}.check.peer_pid_ns"]
    ipc = next(json.loads(x) for x in events.read_text().splitlines() if '"figure": "ipc"' in x)
    assert "its peer (rank 1) runs in another PID namespace" in ipc["reason"]
    assert none_left(out)


@needs_mpi
def test_nodes_that_load_nixl_check_it_and_exit_cleanly(tmp_path):
    """Two nodes of two ranks, NIXL in each (where installed): its figure with UCX's transport, and
    no rank crashed at exit by NIXL's bundled libnl against Open MPI's."""
    from gpuipc_bench.scenarios.nixl_support import missing

    if missing() is not None:
        pytest.skip(missing())
    out = tmp_path / "nixl.csv"
    # NIXL's figure alone (the host path and the barrier are the other tests')
    done = subprocess.run(["mpirun", "--oversubscribe", "-np", "4", "-x", f"{plant.NODE_NAMES_ENV}=a,a,b,b", "-x",
                           f"{plant.PLANT_ENV}=without:host;without:barrier"] + BENCH
                          + ["-o", str(out), "--format", "json"], capture_output=True, text=True, timeout=240,
                          env=env())
    assert "Segmentation fault" not in done.stdout + done.stderr, done.stderr[-3000:]
    events = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    nixl = [e for e in events if e["figure"] == "nixl-host-read"]
    assert sorted(e["node"] for e in nixl) == ["a", "b"], done.stderr[-3000:]
    assert all("UCX used" in e["reason"] or "transport fallback" in e["reason"] for e in nixl)
    assert done.returncode == judge_code(events), done.stderr[-3000:]
    assert none_left(out)


def judge_code(events) -> int:
    return 1 if any(e["status"] == "fail" for e in events) else 0


# Under load (six ranks on two cores shared with other work) a node's full check takes up to a minute: the deadline
# leaves the healthy nodes time to report. The runs that end when every node has reported are bounded by
# DEADLINE; the tests of a rank that never reports wait for theirs (the wait_deadline fixture). The bound on
# each run's wall time is the contract's deadline + 10 s, plus SLACK_S to start six Pythons on this machine.
DEADLINE, SLACK_S = 90, 30
MIN_WAIT_S, MAX_WAIT_S = 20, 90
MIN_KILL_WAIT_S, MAX_KILL_WAIT_S = 5, 30


@dataclasses.dataclass
class Healthy:
    """The healthy fleet of the barrier alone, run once for this module."""

    folder: Path  # its CSV (three.csv) and each node's Prometheus textfile ({node}.prom)
    done: subprocess.CompletedProcess
    seconds: float  # from mpirun's start to its end


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Healthy:
    """Six ranks as two nodes of three, the barrier alone, deadline DEADLINE: what a healthy fleet takes on this
    machine just now (six Pythons started, the barrier measured, the CSV written), which sets the waits of
    the tests of a rank that never reports, and the run whose outputs the test of a node of three ranks
    reads (one run for both: each is 7-15 s of CI). Its third ranks leave at once, so two nodes measure
    where the tests that wait have three: wait_deadline's factor of three covers the third."""
    folder = tmp_path_factory.mktemp("healthy")
    start = time.monotonic()
    done = fleet(folder / "three.csv", "--deadline", str(DEADLINE), "--timeout", "10", "--format", "prometheus",
                 "--output", str(folder / "{node}.prom"), nodes="a,a,a,b,b,b", plants=BARRIER_ONLY)
    return Healthy(folder, done, time.monotonic() - start)


@pytest.fixture(scope="module")
def wait_deadline(healthy) -> int:
    """The deadline of the tests that wait it out (a hung, killed or stopped rank): three times what a
    healthy fleet of the barrier alone took on this machine just now, from 20 to 90 s. The healthy nodes
    of those tests do the same work, and must have said hello by half the deadline and reported by all of
    it. Six ranks of the barrier alone took 16 s from start to end with the machine's load at 8; with its
    load at 14 a fixed 30 s deadline left a healthy node unreported."""
    return min(MAX_WAIT_S, max(MIN_WAIT_S, math.ceil(3 * healthy.seconds)))


def kill_wait(healthy: Healthy) -> int:
    """Seconds a planted kill waits: what the healthy fleet took, from 5 to 30 s."""
    return min(MAX_KILL_WAIT_S, max(MIN_KILL_WAIT_S, math.ceil(healthy.seconds)))


def ended_in_time(start: float, deadline: float = DEADLINE) -> bool:
    return time.monotonic() - start < deadline + 10 + SLACK_S


@needs_mpi
def test_a_node_of_three_ranks_ends_and_its_third_rank_waits_for_nothing(healthy):
    """The barrier's MPI reference runs on the node's pair only: a third rank never joins it (the
    healthy fixture's run: two nodes of three ranks)."""
    done, folder = healthy.done, healthy.folder
    assert healthy.seconds < DEADLINE + 10 + SLACK_S and done.returncode == 0, done.stderr[-3000:]
    for node in "ab":  # each node's leader wrote its own textfile, its own node's checks only
        text = (folder / f"{node}.prom").read_text()
        assert "gpuipc_check_timestamp_seconds " in text and f'node="{node}"' in text
        assert 'node="' + ("b" if node == "a" else "a") + '"' not in text
    out = folder / "three.csv"
    df, meta = read_results(out)
    assert set(df["node"]) == {"a", "b"} and meta["check.missing"] == "" and meta["status"] == "complete"
    assert set(df[df["path"] == "barrier"]["variant"]) == {"shm", "mpi"}
    assert none_left(out)


@needs_mpi
def test_a_remeasured_barrier_ends_and_names_the_node(tmp_path):
    """b's barrier fails its band, so b measures its barrier scenario again (on its pair alone)."""
    from gpuipc_bench.check.expect import Expectation, Expectations, model_of, save
    from gpuipc_bench.machine.probe import probe

    model = model_of(probe().metadata(), "host")
    band = Expectation(model, "barrier", "µs", 0.01, 2000.0, 2, sources=("test",))
    learned = tmp_path / "cpu.json"
    save(Expectations({(model, "barrier"): band}, {}), learned)
    out = tmp_path / "again.csv"
    start = time.monotonic()
    done = fleet(out, "--deadline", str(DEADLINE), "--timeout", "10", "--expect", str(learned),
                 plants=f"slow:b:barrier:0.0001;{BARRIER_ONLY}")  # 10,000x: far beyond the band's 2 ms
    assert ended_in_time(start) and done.returncode == 1, done.stderr[-3000:]
    assert any(line.startswith("FAIL node b host: figure barrier;") and "measured twice" in line
               for line in fail_lines(done.stderr)), done.stderr[-3000:]
    df, meta = read_results(out)
    assert set(df["node"]) == {"a", "b", "c"} and meta["check.missing"] == ""
    assert meta["node.b.check.remeasured"] == "barrier@host"
    assert none_left(out)


@needs_mpi
def test_ranks_stopped_before_start_up_are_named_and_the_others_rows_kept(tmp_path, wait_deadline):
    """Rank 1 (rank 0's own partner) and rank 2 (b's leader) SIGSTOPped before their hello: nothing
    waits on them beyond the deadline; a and b are named, c's rows are kept, exit 1. (Both in one
    run: each wait for the deadline is 20-90 s of CI.)"""
    out, events = tmp_path / "stop.csv", tmp_path / "stop.jsonl"
    start = time.monotonic()
    done = fleet(out, "--deadline", str(wait_deadline), "--timeout", "10", "--format", "json", "--output",
                 str(events), plants=f"stop:1;stop:2;{BARRIER_ONLY}")
    assert ended_in_time(start, wait_deadline) and done.returncode == 1, done.stderr[-3000:]
    for node in "ab":
        assert f"FAIL node {node}: node report; 1 of its 2 ranks said hello" in done.stderr, done.stderr[-3000:]
    df, meta = read_results(out)
    assert set(df["node"]) == {"c"} and sorted(meta["check.missing"].split(",")) == ["a", "b"]
    assert meta["partial"] == "true"
    lost = [json.loads(x) for x in events.read_text().splitlines() if '"kind": "node"' in x]
    assert sorted((e["node"], e["status"]) for e in lost) == [("a", "fail"), ("b", "fail")]
    assert {json.loads(x)["node"] for x in events.read_text().splitlines()} == {"a", "b", "c"}
    assert none_left(out)


@needs_mpi
def test_a_fleet_outlier_is_measured_again_before_it_fails(tmp_path):
    """b's host-memcpy is planted at 5% on its first measurement only: an outlier, measured again
    on b, it passes (the second figure counts)."""
    out = tmp_path / "flutter.csv"
    # host-memcpy fixed on every node (FIXED_MEMCPY): b's first is 5% of the others', its second theirs;
    # --tolerance 0.5 as above
    # (the barrier left out: the host path's figures are the subject)
    done = fleet(out, "--deadline", str(DEADLINE), "--timeout", "10", "--tolerance", "0.5",
                 plants=f"{FIXED_MEMCPY};flutter:b:host-memcpy:0.05;without:barrier")
    assert "FAIL node b host: fleet host-memcpy" not in done.stderr, done.stderr[-3000:]
    df, meta = read_results(out)
    assert "host-memcpy@host" in meta["node.b.check.fleet_remeasured"].split(",")
    assert set(df["node"]) == {"a", "b", "c"} and meta["check.missing"] == ""
    assert none_left(out)


@needs_mpi
def test_rank_0_refusing_its_input_sends_every_rank_home_at_once(tmp_path):
    """Rank 0 alone reads --expect: its one Error line, exit 2, and the other ranks, which wait for
    its word, end with it (they waited out the deadline and its grace before: 630 s)."""
    start = time.monotonic()
    done = subprocess.run(["mpirun", "--oversubscribe", "-np", "3"] + BENCH
                          + ["-o", str(tmp_path / "refused.csv"), "--expect", str(tmp_path / "none.json")],
                          capture_output=True, text=True, timeout=150, env=env())
    assert done.returncode == 2 and f"Error: --expect {tmp_path / 'none.json'}: no such file" in done.stderr, \
        done.stderr[-3000:]
    assert time.monotonic() - start < 60  # Python's start-up on three loaded cores, far from the 630 s
    assert none_left(tmp_path / "refused.csv")
