#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl; an untracked old-<commit>/ holding that commit's
# gpuipc_bench/ and scenarios/): the previous version's default run, then this version's twice
# (the first with its timeline kept whole, the second with plots: the reference), --quick cold and
# warm. One tar.
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
timed quick-warmup 60 gpuipc-bench run --quick
timed old-default 150 bash -c "$OLDRUN \"\$@\"" old run
GPUIPC_BENCH_TRACE=$W/trace-new timed new-default 150 gpuipc-bench run
python3 scripts/trace_summary.py "$W/trace-new" >"$W/trace-new.txt" 2>&1
python3 scripts/trace_samples.py "$W/trace-new" 14 >"$W/trace-new-samples.txt" 2>&1; rm -rf "$W/trace-new"
timed new-default-2 150 gpuipc-bench run --plot "$W/plots"
rm -rf "$W/cache"; timed quick-cold 60 gpuipc-bench run --quick
timed quick 60 gpuipc-bench run --quick
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/final-$prefix.tgz" .
