"""Where a run's wall time went, from the timeline GPUIPC_BENCH_TRACE=DIR wrote (gpuipc_bench.hooks.profiling).
Usage: python scripts/trace/trace_summary.py DIR

Prints the parent's steps with the seconds between them, then per scenario, worker and sharing
mode: its span, the seconds spent in each phase (a phase lasts until the next phase change:
warm-up, sample, ceiling, setup, teardown...), how many samples, the timed seconds the samples
reported ('took') and what is left of the sample phases beyond them (the per-sample overhead)."""

import collections
import json
import sys
from pathlib import Path

folder = Path(sys.argv[1])
for path in sorted(folder.glob("parent-*.jsonl")):
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    start = entries[0][0]
    print(f"== {path.name}")
    for before, entry in zip([entries[0]] + entries, entries):
        print(f"  {entry[0] - start:8.2f} s  (+{entry[0] - before[0]:6.2f})  {' '.join(map(str, entry[1:]))}")

timers = {}  # (scenario, sharing, n-th run) -> the timing worker's (span, took, over)
seen: dict = {}
print(f"\n{'scenario':<10} {'rank':>4} {'sharing':<12} {'span':>6}  {'n':>5} {'took':>6} {'over':>6} {'ms/n':>5}  "
      "phases (s)")
for path in sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_mtime):
    if path.name.startswith("parent-"):
        continue
    scenario, rank, sharing = path.stem.split("-")[:3]
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    if not entries:
        continue
    by_phase, count = collections.Counter(), collections.Counter()
    took = 0.0
    current, since = "start", entries[0][0]
    for entry in entries:
        t, event = entry[0], entry[1]
        if event in ("phase", "end"):
            by_phase[current] += t - since
            current, since = (entry[2] if event == "phase" else "end"), t
            count[current] += 1
        elif event == "took":
            took += entry[2]
    span = entries[-1][0] - entries[0][0]
    sampled = by_phase["sample"] + by_phase["ceiling"] + by_phase["warmup"]
    n = count["sample"] + count["ceiling"] + count["warmup"]
    over = sampled - took
    phases = ", ".join(f"{name} {secs:.2f}/{count[name]}" for name, secs in by_phase.most_common() if secs >= 0.01)
    print(f"{scenario:<10} {rank:>4} {sharing:<12} {span:6.2f}  {n:5d} {took:6.2f} {over:6.2f} "
          f"{1000 * over / max(n, 1):5.2f}  {phases}")
    # a plain mode's workers carry no sharing label: the n-th run of a scenario by this rank is its n-th mode
    nth = seen[(scenario, rank)] = seen.get((scenario, rank), -1) + 1
    best = timers.get((scenario, sharing, nth))
    if best is None or took > best[1]:
        timers[(scenario, sharing, nth)] = (span, took, over)
span, took, over = (sum(v[i] for v in timers.values()) for i in range(3))
print(f"\nthe timing workers together: span {span:.1f} s, took {took:.1f} s, sample phases beyond it {over:.1f} s")
