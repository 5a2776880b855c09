#!/usr/bin/env bash
# On a lent machine of two to eight GPUs (issue 34, the multi-GPU half): the wall time (/usr/bin/time)
# of a plain `run` and of `run --pairs all`, each beside the plan's estimate (`estimate.seconds`), its
# process sets (`worker_sets`) and, for --pairs all, its rounds of disjoint pairs (`rounds.*`: which pairs
# ran together, the proof's outcome) and re-sweeps (`pairs.resweep.*`); then nvbandwidth's device-to-
# device read and write CE matrices and SM latency in the same call, where $NVBANDWIDTH names its binary.
# Outputs under $OUT: h200xN-plain.csv, h200xN-pairs-all.csv, their .err, nvbandwidth.txt, summary.txt.
# Usage: [NVBANDWIDTH=/path/to/nvbandwidth] [prefix=h200xN] bash scripts/device/pairs-speed.sh
# Needs about: two GPUs 2-3 min (plain ~65 s, --pairs all ~35 s, nvbandwidth ~10 s); four GPUs 3-4 min.
set -uo pipefail
gpus=$(nvidia-smi -L | grep -c '^GPU ')
prefix=${prefix:-h200x$gpus}
. scripts/device/lib.sh
wheels
nvidia-smi -L; nvidia-smi topo -m | head -$((gpus + 1))
summary=$OUT/summary.txt
: >"$summary"
timed_run() {  # NAME ARGS...: /usr/bin/time of one `run`, its header's timeline and rounds, copied to $OUT
  local name=$1; shift
  COLUMNS=80 /usr/bin/time -f "$name: %e s wall (/usr/bin/time)" -o "$W/$name.time" timeout -s INT 580 \
    gpuipc-bench run -o "$OUT/$prefix-$name.csv" --force "$@" >"$OUT/$prefix-$name.out" 2>"$OUT/$prefix-$name.err"
  local code=$?
  { cat "$W/$name.time"; echo "exit $code"
    grep -h '^# \(estimate\|seconds\|worker_sets\|rounds\|pairs\.\(full\|resweep\)\)' "$OUT/$prefix-$name.csv"
    grep -h 'note' "$OUT/$prefix-$name.err"; } | tee -a "$summary"
}
timed_run plain
timed_run pairs-all --pairs all
if [ -n "${NVBANDWIDTH:-}" ] && [ -x "$NVBANDWIDTH" ]; then
  /usr/bin/time -f "nvbandwidth: %e s wall (/usr/bin/time)" -o "$W/nv.time" "$NVBANDWIDTH" \
    -t device_to_device_memcpy_read_ce device_to_device_memcpy_write_ce \
    device_to_device_latency_sm >"$OUT/$prefix-nvbandwidth.txt" 2>&1
  cat "$W/nv.time" | tee -a "$summary"
  sed -i "1i $(cat "$W/nv.time")" "$OUT/$prefix-nvbandwidth.txt"
else
  echo "nvbandwidth: not run (set NVBANDWIDTH to its binary)" | tee -a "$summary"
fi
# each pair's largest-size ipc/ce stream (GB/s), to set beside nvbandwidth's read CE matrix
python3 - "$OUT/$prefix-pairs-all.csv" <<'PY' | tee -a "$summary"
import sys
import pandas as pd
df = pd.read_csv(sys.argv[1], comment="#")
big = df[(df.path == "ipc") & (df.variant == "ce") & (df.measure == "stream") & (df.bytes == df.bytes.max())]
print(big.groupby(["src", "dst"]).bandwidth_gbps.median().round(2).to_string())
PY
