#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl; an untracked old-<commit>/ holding that commit's
# gpuipc_bench/ and scenarios/): the previous version's default run and this version's, back to
# back on one machine (the speed and every figure's meaning, before and after), then this
# version's reference runs: the default with plots, --quick cold and warm; the GPU tests. One tar.
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
wheels
old=$(ls -d old-* | head -1)
timed() {  # NAME SECONDS COMMAND...: a command's wall time
  local name=$1 limit=$2; shift 2; local start=$(date +%s%N)
  COLUMNS=80 timeout -s INT "$limit" "$@" -o "$W/$prefix-$name.csv" --force >"$W/$prefix-$name.out" 2>"$W/$prefix-$name.err"
  echo "== $name: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms; $(grep -h '^# seconds.total' "$W/$prefix-$name.csv")"
}
OLDRUN="cd $PWD/$old && env PYTHONPATH=$PWD/$old:${PYTHONPATH:-} python3 -c 'from gpuipc_bench.cli import main; main()'"
timed quick-warmup 60 gpuipc-bench run --quick   # fills the kernel caches of both versions' kernels alike
timed old-default 150 bash -c "$OLDRUN \"\$@\"" old run
GPUIPC_BENCH_TRACE=$W/trace-new timed new-default 150 gpuipc-bench run
python3 scripts/trace_summary.py "$W/trace-new" >"$W/trace-new.txt" 2>&1
python3 scripts/trace_samples.py "$W/trace-new" 14 >"$W/trace-new-samples.txt" 2>&1
timed old-default-2 150 bash -c "$OLDRUN \"\$@\"" old run
timed new-default-2 150 gpuipc-bench run --plot "$W/plots"
rm -rf "$W/cache"; timed quick-cold 60 gpuipc-bench run --quick
timed quick 60 gpuipc-bench run --quick
timed old-quick 60 bash -c "$OLDRUN \"\$@\"" old run --quick
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ >"$W/pytest-gpu.log" 2>&1; tail -n 3 "$W/pytest-gpu.log"
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left after the GPU tests"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/before-after-$prefix.tgz" .
