#!/usr/bin/env bash
# The lane counters (issue 36), on one GPU and on two NVLink GPUs: the probe of NVML's NVLink and
# PCIe byte counters around known copies (scripts/probes/lane_counters.py), then runs with the
# lanes on, whose rows carry lane, lane_nvlink_bytes and lane_pcie_bytes, summarised per figure
# (the lane seen, and the bytes it carried over the bytes the samples moved), and one run with
# the lanes off (GPUIPC_BENCH_LANES=0) to show what reading them costs in wall time.
# Usage: bash scripts/device/lanes.sh   (outputs under $OUT; about 4-6 minutes on two H200s)
set -uo pipefail
prefix=lanes
. scripts/device/lib.sh
nvidia-smi -L; nvidia-smi topo -m | head -4
python3 scripts/probes/lane_counters.py 2>&1 | tee "$W/probe.txt"
gpus=$(nvidia-smi -L | wc -l)
run one-gpu 300 -s ipc -s staging -s mmap --devices 0 --sizes 64K,4M,64M,256M
if [ "$gpus" -ge 2 ]; then
  run pair 420 -s ipc -s staging -s peer --pairs 0-1 --sizes 64K,4M,64M,256M
  GPUIPC_BENCH_LANES=0 run pair-off 420 -s ipc -s staging -s peer --pairs 0-1 --sizes 64K,4M,64M,256M
fi
for f in "$W"/lanes-one-gpu.csv "$W"/lanes-pair.csv; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f")"; grep "^# lanes\." "$f"
  python3 - "$f" <<'PY'
import sys, pandas as pd
df = pd.read_csv(sys.argv[1], comment="#", keep_default_na=False, na_values=[""])
df = df[(df.metric == "bandwidth") & df.lane.notna()]
df["moved"] = df.bytes * df.batch
df["nv"] = df.lane_nvlink_bytes / df.moved
df["pcie"] = df.lane_pcie_bytes / df.moved
g = df.groupby(["scenario", "path", "variant", "measure", "src", "dst", "bytes"])
out = g.agg(lane=("lane", lambda s: ",".join(sorted(set(map(str, s))))), n=("lane", "size"),
            nv=("nv", "median"), pcie=("pcie", "median"))
print(out.round(3).to_string())
PY
done
cp "$W"/*.csv "$W"/*.err "$W"/probe.txt "$OUT"/ 2>/dev/null
