"""Healthy fleet checks in a row, with real Open MPI on one machine: does `check` ever cry wolf?

    python scripts/check_healthy_runs.py --runs 10 --nodes 3 --out results/check-ten-healthy-runs.txt

Each run is `mpirun -np 2N gpuipc-bench check` with the test-only node names
(GPUIPC_BENCH_TEST_NODE_NAMES=a,a,b,b,c,c: each pair of ranks acts as a node, as the fleet tests
do) and the GPUs hidden (CUDA_VISIBLE_DEVICES='': the CPU check, as on the CI machine; the nodes
would otherwise share one machine's GPUs), nothing planted: every node healthy, so every run
should exit 0. The nodes measure one at a time (GPUIPC_BENCH_TEST_NODES_IN_TURN: separate
machines share no memory bandwidth, nodes simulated on one machine do), and the runs judge by
expectations learned on this machine first, as an operator learns a fleet's bands from a healthy
run (--learn-runs runs with no expectations, then `check --learn`): the shipped references are
keyed by CPU model name, and a cloud VM's generic name ('Intel(R) Xeon(R) Processor') covers
hosts whose memory bandwidth differs by more than the tolerance. Give the machine a core per
rank (six ranks for three nodes: a 16-core machine leaves the check's workers room); on fewer
cores the nodes' CPU figures stray (the CI test's tolerance says so). Writes, to --out (and to
standard output), one line per run: its exit status, its wall time, and each FAIL line it
printed, and each node's measured figures; then the count of runs that exited 0. Exit 0 when
every run did.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


NO_EXPECTATIONS = '{"format": "gpuipc-bench expectations", "version": 1, "tolerance": 0.1, "expectations": []}'


def values(path: Path) -> str:
    """'a: host-memcpy 12.5, barrier 1.02; b: ...': each node's measured figures in a run's JSON lines."""
    found: dict[str, list[str]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return "no JSON lines"
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("kind") == "figure" and isinstance(event.get("measured"), (int, float)):
            found.setdefault(str(event["node"]), []).append(f"{event['figure']} {event['measured']:.3g}")
    return "; ".join(f"{node}: {', '.join(v)}" for node, v in sorted(found.items())) or "no figures"


def one_run(nodes: int, deadline: float, folder: Path, k: int, expect: Path) -> tuple[int, float, list[str]]:
    """(exit status, seconds, its FAIL lines) of one healthy fleet check, judged by `expect`."""
    names = ",".join(n for n in string.ascii_lowercase[:nodes] for _ in range(2))
    # CUDA_VISIBLE_DEVICES='': the CPU check (the host path, the barrier, NIXL where installed); the
    # simulated nodes would otherwise share one machine's GPUs
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", CUDA_VISIBLE_DEVICES="")
    command = ["mpirun", "--oversubscribe", "-np", str(2 * nodes), "-x", "CUDA_VISIBLE_DEVICES",
               "-x", f"GPUIPC_BENCH_TEST_NODE_NAMES={names}",
               "-x", f"GPUIPC_BENCH_TEST_NODES_IN_TURN={folder / 'nodes.lock'}",
               sys.executable, "-m", "gpuipc_bench.cli", "check", "-o", str(folder / f"run{k}.csv"),
               "--expect", str(expect),
               "--deadline", f"{deadline:g}", "--format", "json", "--output", str(folder / f"run{k}.jsonl")]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO, timeout=deadline + 120)
    fails = [line for line in done.stderr.splitlines() if line.startswith(("FAIL", "Error"))]
    return done.returncode, time.monotonic() - start, fails


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=600.0)
    parser.add_argument("--learn-runs", type=int, default=2, help="healthy runs the bands are learned from")
    parser.add_argument("--control", action="store_true", help="then one more run with no expectations")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "check-ten-healthy-runs.txt")
    args = parser.parse_args()
    if shutil.which("mpirun") is None:
        print("Error: no mpirun on PATH (Open MPI, and mpi4py: pip install -e '.[mpi]')", file=sys.stderr)
        return 2
    if not 1 <= args.nodes <= 26 or args.runs < 1:
        print("Error: --nodes from 1 to 26, --runs 1 or more", file=sys.stderr)
        return 2
    lines = [f"# {args.runs} healthy {args.nodes}-node fleet checks in a row, "
             f"{2 * args.nodes} MPI ranks on one machine",
             f"# {platform.node()}: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the start; "
             f"Python {platform.python_version()}"]
    mpi = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout.splitlines()
    lines.append(f"# {mpi[0] if mpi else 'mpirun'}")
    lines = [line[:80] for line in lines]
    for line in lines:
        print(line, flush=True)
    passed = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        none, learned = folder / "none.json", folder / "learned.json"
        none.write_text(NO_EXPECTATIONS, encoding="utf-8")
        learning = []
        for k in range(1, args.learn_runs + 1):  # the machine's bands first, from healthy runs
            code, seconds, fails = one_run(args.nodes, args.deadline, folder, -k, none)
            learning.append(str(folder / f"run{-k}.csv"))
            lines += [f"learning run {k}: exit {code} in {seconds:.1f} s",
                      f"  {values(folder / f'run{-k}.jsonl')}"]
            print("\n".join(lines[-2:]), flush=True)
        done = subprocess.run([sys.executable, "-m", "gpuipc_bench.cli", "check", "--learn", str(learned),
                               "--learn-partial", *learning], capture_output=True, text=True, cwd=REPO)
        if done.returncode != 0:
            print(f"Error: check --learn failed: {done.stderr.strip()[:200]}", file=sys.stderr)
            return 1
        bands = json.loads(learned.read_text(encoding="utf-8"))["expectations"]
        lines.append(f"# learned from {len(learning)} runs: " + "; ".join(
            f"{b['figure']} {b['low']:.3g}-{b['high']:.3g} {b['unit']}" for b in bands))
        print(lines[-1], flush=True)
        for k in range(1, args.runs + 1):
            code, seconds, fails = one_run(args.nodes, args.deadline, folder, k, learned)
            passed += code == 0
            said = [f"run {k}: exit {code} in {seconds:.1f} s", f"  {values(folder / f'run{k}.jsonl')}"]
            said += [f"  {f}"[:80] for f in fails]
            lines += said
            for line in said:
                print(line, flush=True)
        if args.control:  # one more run judged by nothing: do a run's figures depend on its expectations?
            code, seconds, _ = one_run(args.nodes, args.deadline, folder, 0, none)
            lines += [f"control run (no expectations): exit {code} in {seconds:.1f} s",
                      f"  {values(folder / 'run0.jsonl')}"]
            print("\n".join(lines[-2:]), flush=True)
    lines.append(f"{passed} of {args.runs} runs exited 0")
    print(lines[-1])
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0 if passed == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
