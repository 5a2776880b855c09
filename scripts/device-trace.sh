#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl): the default run with its timeline kept whole (for
# scripts/trace_samples.py) and the workers' cProfile of mmap and staging in both modes.
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
wheels
GPUIPC_BENCH_TRACE=$W/trace-default run default 150
python3 scripts/trace_summary.py "$W/trace-default" >"$W/trace-default.txt" 2>&1
python3 scripts/trace_samples.py "$W/trace-default" 14 >"$W/trace-samples.txt" 2>&1
tail -n 1 "$W/trace-default.txt"
GPUIPC_BENCH_PROFILE=$W/prof run profiled 90 -s mmap -s staging
python3 scripts/profile_summary.py "$W/prof" 30 >"$W/profile.txt" 2>&1; rm -rf "$W/prof"
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/trace-$prefix.tgz" .
