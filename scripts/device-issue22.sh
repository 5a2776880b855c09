#!/usr/bin/env bash
# On a lent one-GPU machine (issue 22): the default run's wall time and figures with persistent
# workers (--launcher fork) against fresh processes per scenario (--launcher fork-fresh), both
# sharing modes; --quick with a cold and a warm kernel cache. One tar under $OUT.
# Usage: bash scripts/device-issue22.sh [PREFIX]   (LIMIT_FORK, LIMIT_FRESH seconds)
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
prefix=${1:-h100}
OUT=${OUT:-/tmp/gpuipc-out}; W=$(mktemp -d); mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$W/pip.log" 2>&1 || { cat "$W/pip.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv >"$W/smi-before.txt"
run() {  # NAME SECONDS ARGS...
  local name=$1 limit=$2; shift 2; local start=$(date +%s%N)
  COLUMNS=80 timeout -s INT "$limit" gpuipc-bench run -o "$W/$prefix-$name.csv" --force "$@" \
    >"$W/$prefix-$name.out" 2>"$W/$prefix-$name.err"
  local code=$?
  echo "== $name: exit $code in $(( ($(date +%s%N) - start) / 1000000 )) ms;" \
    "$(grep -h '^# seconds.total\|^# worker_sets' "$W/$prefix-$name.csv" | tr '\n' ' ')"
  tail -n 2 "$W/$prefix-$name.err"
}
export XDG_CACHE_HOME=$W/cache-cold
run quick-cold 70 --quick
run quick-warm 50 --quick
run default-fork "${LIMIT_FORK:-200}"
run default-fresh "${LIMIT_FRESH:-240}" --launcher fork-fresh
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left"
nvidia-smi --query-gpu=memory.used --format=csv,noheader >"$W/smi-after.txt"; cat "$W/smi-after.txt"
rm -rf "$W/cache-cold"
tar -C "$W" -czf "$OUT/issue22-$prefix.tgz" .
