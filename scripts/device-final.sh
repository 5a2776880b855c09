#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl; an untracked old-<commit>/ holding that commit's
# gpuipc_bench/ and scenarios/): the previous version's default run, then this version's twice
# (the first with its timeline kept whole, the second with plots: the reference), --quick cold and
# warm. One tar.
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
wheels
timed quick-warmup 60 gpuipc-bench run --quick
oldrun old-default 150
GPUIPC_BENCH_TRACE=$W/trace-new timed new-default 150 gpuipc-bench run
python3 scripts/trace_summary.py "$W/trace-new" >"$W/trace-new.txt" 2>&1
python3 scripts/trace_samples.py "$W/trace-new" 14 >"$W/trace-new-samples.txt" 2>&1; rm -rf "$W/trace-new"
timed new-default-2 150 gpuipc-bench run --plot "$W/plots"
rm -rf "$W/cache"; timed quick-cold 60 gpuipc-bench run --quick
timed quick 60 gpuipc-bench run --quick
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/final-$prefix.tgz" .
