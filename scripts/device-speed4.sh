#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl; an untracked old-<commit>/ holding that commit's
# gpuipc_bench/ and scenarios/): the GPU tests of the CUDA layer, the previous version's default
# run, and this version's twice (the first with its timeline kept whole). One tar.
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
wheels
old=$(ls -d old-* | head -1)
OLDRUN="cd $PWD/$old && env PYTHONPATH=$PWD/$old:${PYTHONPATH:-} python3 -c 'from gpuipc_bench.cli import main; main()'"
oldrun() {  # NAME SECONDS ARGS...: the previous version's run
  local name=$1 limit=$2; shift 2; local start=$(date +%s%N)
  COLUMNS=80 timeout -s INT "$limit" bash -c "$OLDRUN \"\$@\"" old run -o "$W/$prefix-$name.csv" --force "$@" \
    >"$W/$prefix-$name.out" 2>"$W/$prefix-$name.err"
  echo "== $name: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms; $(grep -h '^# seconds.total' "$W/$prefix-$name.csv")"
}

timeout 120 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_gpu.py tests/test_launch.py >"$W/pytest-gpu.log" 2>&1
tail -n 2 "$W/pytest-gpu.log"
run quick-warmup 60 --quick   # fills the kernel caches
oldrun old-default 150
GPUIPC_BENCH_TRACE=$W/trace-new run new-default 150
python3 scripts/trace_summary.py "$W/trace-new" >"$W/trace-new.txt" 2>&1
python3 scripts/trace_samples.py "$W/trace-new" 14 >"$W/trace-new-samples.txt" 2>&1
run new-default-2 150
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/speed4-$prefix.tgz" .
