#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl-nixl-slim): the nixl path's complete run on one GPU at
# the issue's sizes (UCX's own choice), and `check` as a user sees it at 80 columns. One tar.
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
wheels
run nixl-1gpu 200 -s nixl --sizes 4K,1M,256M --sharing time-sliced
grep -A3 "transport fallback" "$W/$prefix-nixl-1gpu.out" | head -8
COLUMNS=80 timeout 90 gpuipc-bench check -o "$W/$prefix-check.csv" --force >"$W/$prefix-check.out" 2>"$W/$prefix-check.err"
echo "== check: exit $?"; head -5 "$W/$prefix-check.out"
tar -C "$W" -czf "$OUT/nixl-1gpu-$prefix.tgz" .
