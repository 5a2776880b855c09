"""Where a sample's wall time goes, step by step, from the timeline GPUIPC_BENCH_TRACE=DIR wrote.
Usage: python scripts/trace/trace_samples.py DIR [TOP]

Inside a sample the worker marks: phase (the sample begins), enqueue (the gate armed), enqueued
(the batch queued), released (the other worker queued too: the gate let go), ran (the stream
synchronised), verify / verified, took (the sample's figure) and decided (the stop rule's word).
Prints, per scenario, sharing mode and worker, the seconds between each pair of consecutive marks
summed over its samples (so 'enqueued>released' is the wait for the other worker to queue, and
'released>ran' the batch on the GPU), then the groups (label and size) whose samples cost the most
wall time beyond what they timed."""

import collections
import json
import sys
from pathlib import Path

folder, top = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 12
SAMPLING = ("sample", "warmup", "ceiling")
steps_all: collections.Counter = collections.Counter()
# (scenario, sharing, rank, label, bytes) -> wall, took, n
groups: dict = collections.defaultdict(lambda: [0.0, 0.0, 0])
for path in sorted(folder.glob("*.jsonl")):
    if path.name.startswith("parent-"):
        continue
    scenario, rank, sharing = path.stem.split("-")[:3]
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    steps: collections.Counter = collections.Counter()
    phase, label, nbytes, last, start, last_t = None, "", 0, None, None, 0.0
    took = 0.0
    for entry in entries + [[entries[-1][0] if entries else 0, "phase", "end", 0, ""]]:
        t, event = entry[0], entry[1]
        if event in ("phase", "end"):
            if phase in SAMPLING and start is not None:
                key = (scenario, sharing, rank, f"{phase}:{label}", nbytes)
                groups[key][0] += t - start
                groups[key][1] += took
                groups[key][2] += 1
                steps[(last, "next")] += t - last_t
            phase = entry[2] if event == "phase" else "end"
            nbytes = entry[3] if event == "phase" and len(entry) > 3 else 0
            label = entry[4] if event == "phase" and len(entry) > 4 else ""
            last, last_t, start, took = "phase", t, t, 0.0
            continue
        if phase not in SAMPLING:
            continue
        if event == "took":
            took += entry[2]
        steps[(last, event)] += t - last_t
        last, last_t = event, t
    total = sum(steps.values())
    if total < 0.05:
        continue
    print(f"\n== {scenario} rank {rank} {sharing}: {total:.2f} s in samples")
    for (a, b), secs in steps.most_common(top):
        print(f"   {secs:7.3f} s  {a}>{b}")
    for k, v in steps.items():
        steps_all[k] += v

print("\n== every worker together")
for (a, b), secs in steps_all.most_common(top):
    print(f"   {secs:7.3f} s  {a}>{b}")

print("\n== the groups with the most wall time beyond what they timed (its timing worker)")
print(f"{'scenario':<9} {'sharing':<12} {'rk':>2} {'what':<40} {'bytes':>10} {'n':>5} {'wall':>7} {'took':>7} "
      f"{'over/n ms':>9}")
rows = sorted(groups.items(), key=lambda kv: kv[1][0] - kv[1][1], reverse=True)
for (scenario, sharing, rank, what, nbytes), (wall, took, n) in rows[:top * 4]:
    if not took:
        continue  # the worker that does not time the group
    print(f"{scenario:<9} {sharing:<12} {rank:>2} {what[:40]:<40} {nbytes:>10} {n:>5} {wall:7.3f} {took:7.3f} "
          f"{1000 * (wall - took) / max(n, 1):9.2f}")
