#!/usr/bin/env bash
# On a lent GPU machine: the default run (every scenario that can run, default sizes and
# sample counts), timed, into $OUT/<name>.csv, then the reference check of it.
# Usage: bash scripts/device/reference-run.sh NAME [run options]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
name=$1; shift
OUT=${OUT:-/tmp/gpuipc-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
start=$(date +%s%N)
COLUMNS=80 gpuipc-bench run -o "$OUT/$name.csv" --force "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
code=$?
echo "exit $code, wall $(( ($(date +%s%N) - start) / 1000000 )) ms"
grep "^# seconds\." "$OUT/$name.csv"
tail -n 3 "$OUT/$name.err"
wc -l "$OUT/$name.out"
python3 scripts/readme/check_reference.py "$OUT/$name.csv" --size 256MiB
