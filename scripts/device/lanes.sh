#!/usr/bin/env bash
# The lane counters (issue 36), on one GPU and on two NVLink GPUs: the probe of NVML's NVLink and
# PCIe byte counters around known copies (scripts/probes/lane_counters.py), then runs with the
# lanes on, whose rows carry lane, lane_nvlink_bytes and lane_pcie_bytes, summarised per figure
# (the lane seen, the samples read, and the bytes each lane carried over the bytes the samples
# moved), and runs with the lanes off (GPUIPC_BENCH_LANES=0) to show what reading them costs in wall
# time: the pair's, and the default run on one GPU on and off (its samples under 16 MiB are not read,
# a group's first 2 above it are: the cost should be well under a second of the default run's).
# Usage: bash scripts/device/lanes.sh   (outputs under $OUT; about 6-8 minutes on two H200s)
set -uo pipefail
prefix=lanes
. scripts/device/lib.sh
nvidia-smi -L; nvidia-smi topo -m | head -4
python3 scripts/probes/lane_counters.py 2>&1 | tee "$W/probe.txt"
gpus=$(nvidia-smi -L | wc -l)
run one-gpu 300 -s ipc -s staging -s mmap --devices 0 --sizes 64K,4M,64M,256M
run default-on 240 --devices 0
GPUIPC_BENCH_LANES=0 run default-off 240 --devices 0
if [ "$gpus" -ge 2 ]; then
  run pair 420 -s ipc -s staging -s peer --pairs 0-1 --sizes 64K,4M,64M,256M
  GPUIPC_BENCH_LANES=0 run pair-off 420 -s ipc -s staging -s peer --pairs 0-1 --sizes 64K,4M,64M,256M
fi
for f in "$W"/lanes-one-gpu.csv "$W"/lanes-pair.csv "$W"/lanes-default-on.csv; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f")"; grep "^# lanes\." "$f"
  python3 - "$f" <<'PY'
import sys, pandas as pd
from gpuipc_bench.gpu.timing import warmup_ops
df = pd.read_csv(sys.argv[1], comment="#", keep_default_na=False, na_values=[""])
df = df[(df.metric == "bandwidth") & df.lane.notna()]
print(f"{len(df)} bandwidth rows with a lane, {df.lane_pcie_bytes.notna().sum()} of them read;",
      df.lane.value_counts().to_dict())
df["moved"] = df.bytes * (df.batch + df.bytes.map(warmup_ops))  # with the batch's untimed warm-up ops (push and bidir: without)
df["nv"] = df.lane_nvlink_bytes / df.moved
df["pcie"] = df.lane_pcie_bytes / df.moved
g = df.groupby(["scenario", "path", "variant", "measure", "src", "dst", "bytes"])
out = g.agg(lane=("lane", lambda s: ",".join(sorted(set(map(str, s))))), n=("lane", "size"),
            read=("lane_pcie_bytes", "count"),
            nv=("nv", "median"), pcie=("pcie", "median"))
print(out.round(3).to_string())
PY
done
for name in one-gpu pair default-on; do  # the answers, with each class's lane where it fits
  [ -f "$W/lanes-$name.out" ] && { echo "== $name answer"; cat "$W/lanes-$name.out"; }
done
cp "$W"/*.csv "$W"/*.err "$W"/probe.txt "$OUT"/ 2>/dev/null
