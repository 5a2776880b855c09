#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl and .whl-nixl-slim): the default run and --quick (cold,
# warm) with their timelines; where a sample's time goes in ipc and staging (cProfile of the
# workers, each mode); NIXL's READ with UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y; `check`; the GPU tests.
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
wheels
traced quick-cold 60 --quick
traced quick 60 --quick
traced default 150
for mode in time-sliced mps; do
  GPUIPC_BENCH_PROFILE=$W/prof-$mode run profiled-$mode 90 -s ipc -s staging --sharing $mode
  python3 scripts/profile_summary.py "$W/prof-$mode" 40 >"$W/profile-$mode.txt" 2>&1; rm -rf "$W/prof-$mode"
done
UCX_CUDA_IPC_ENABLE_GET_ZCOPY=y run nixl-read-get-zcopy 60 -s nixl-read --sizes 1M,256M --sharing time-sliced
start=$(date +%s%N); COLUMNS=80 timeout 90 gpuipc-bench check -o "$W/$prefix-check.csv" --table "$W/$prefix-check.md" \
  --force >"$W/$prefix-check.out" 2>"$W/$prefix-check.err"
echo "== check: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms"; grep "^FAIL\|^SKIP" "$W/$prefix-check.err" | head
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ >"$W/pytest.log" 2>&1; tail -3 "$W/pytest.log"
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/speed-$prefix.tgz" .
