#!/usr/bin/env bash
# On a lent GPU machine: `gpuipc-bench check --preset health`, the contract of issue 38 (at most 45 s
# on four GPUs; `{node} | Healthy` or `{node} | DRAIN: <reason>`). Two runs, each under /usr/bin/time:
#   1. the health check as it is, its timeline traced (GPUIPC_BENCH_TRACE=$W/trace: the check's steps, each
#      session, each process set's start and its contexts made ahead, each worker's phases), summarised by
#      scripts/trace/trace_summary.py into trace.txt and summary.txt: expect exit 0 and `NODE | Healthy`
#   2. GPU 2's h2d planted at half (GPUIPC_BENCH_CHECK_PLANT='slow:*:h2d@2:0.5', a test-only plant; h2d@1 on
#      two GPUs, h2d@0 on one): h2d has a band of two hosts on H200, so expect exit 1 and
#      `NODE | DRAIN: figure h2d GPU 2 ...`, staging measured again on GPU 2 alone (check.remeasured)
# Each run's header lines that say how it went (the check's estimate, the peer rounds and their proof,
# what was measured again) and its figures per GPU and pair are in summary.txt. Everything ends in ONE
# file, $OUT/health.tar.gz (health.csv, slow-h2d.csv, their .out/.err/.time, trace/, trace.txt,
# summary.txt, pip.log).
# Usage: bash scripts/device/health.sh   (about 1.5 minutes on four H200s: two checks of ~40 s, a trace)
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/gpuipc-out}; mkdir -p "$OUT"
W=$(mktemp -d)/health; mkdir -p "$W"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$W/pip.log" 2>&1 || { cat "$W/pip.log"; exit 1; }
gpus=$(nvidia-smi -L | grep -c '^GPU')
{ nvidia-smi -L; nvidia-smi topo -m; } >"$W/summary.txt" 2>&1

check() {  # NAME [ENV=VALUE...]: one health check, timed; its exit, wall time and lines into summary.txt
  local name=$1; shift
  env "$@" timeout -s INT 100 /usr/bin/time -f "%e s wall, %M KiB max RSS" -o "$W/$name.time" \
    gpuipc-bench check --preset health -o "$W/$name.csv" --force >"$W/$name.out" 2>"$W/$name.err"
  local code=$?
  {
    echo "== $name ${*:-(no plant)}: exit $code, $(cat "$W/$name.time" 2>/dev/null)"
    cat "$W/$name.out"
    grep "^FAIL" "$W/$name.err"
    grep -h "check.estimate_seconds\|check.remeasured\|check\.peer\.rounds\|^# status" "$W/$name.csv"
    python3 - "$W/$name.csv" <<'PY'
import sys
from gpuipc_bench.check.figures import figures_of
from gpuipc_bench.results import read_results
frame, _ = read_results(sys.argv[1])
print("figures:", "; ".join(f"{f.name}@{f.gpus} {f.text()}" for f in figures_of(frame)))
PY
  } >>"$W/summary.txt" 2>&1
  echo "$code"
}

healthy=$(check health "GPUIPC_BENCH_TRACE=$W/trace")
python3 scripts/trace/trace_summary.py "$W/trace" >"$W/trace.txt" 2>&1
{ echo "== where the healthy run's time went (trace.txt)"; cat "$W/trace.txt"; } >>"$W/summary.txt"
gpu=$(( gpus >= 3 ? 2 : gpus - 1 )); plant="slow:*:h2d@$gpu:0.5"
planted=$(check slow-h2d "GPUIPC_BENCH_CHECK_PLANT=$plant")
echo "== healthy run exit $healthy (expect 0); planted ($plant) exit $planted (expect 1)" >>"$W/summary.txt"
cat "$W/summary.txt"
tar -czf "$OUT/health.tar.gz" -C "$(dirname "$W")" health
