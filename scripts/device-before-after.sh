#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl; an untracked old-<commit>/ holding that commit's
# gpuipc_bench/ and scenarios/): the previous version's default run and this version's, back to
# back on one machine (the speed and every figure's meaning, before and after), then this
# version's reference runs: the default with plots, --quick cold and warm; the GPU tests. One tar.
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
wheels
timed quick-warmup 60 gpuipc-bench run --quick   # fills the kernel caches of both versions' kernels alike
oldrun old-default 150
GPUIPC_BENCH_TRACE=$W/trace-new timed new-default 150 gpuipc-bench run
python3 scripts/trace_summary.py "$W/trace-new" >"$W/trace-new.txt" 2>&1
python3 scripts/trace_samples.py "$W/trace-new" 14 >"$W/trace-new-samples.txt" 2>&1
oldrun old-default-2 150
timed new-default-2 150 gpuipc-bench run --plot "$W/plots"
rm -rf "$W/cache"; timed quick-cold 60 gpuipc-bench run --quick
timed quick 60 gpuipc-bench run --quick
oldrun old-quick 60 --quick
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ >"$W/pytest-gpu.log" 2>&1; tail -n 3 "$W/pytest-gpu.log"
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left after the GPU tests"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/before-after-$prefix.tgz" .
