#!/usr/bin/env bash
# On a lent two-GPU machine (carry .whl and .whl-nixl-slim): `check` as the node is (issue 25;
# NIXL's READ across NVLink), then with NIXL forced onto tcp (must fail, naming why); the
# two-GPU tests; the default run across the pair if time is left. One tar.
set -uo pipefail
prefix=${1:-h100x2}
. scripts/device-lib.sh
T0=$(date +%s)
wheels
nvidia-smi topo -m >"$W/topo.txt" 2>&1; head -4 "$W/topo.txt"
check() {  # NAME [ENV...]: gpuipc-bench check at 80 columns
  local name=$1; shift; local start=$(date +%s%N)
  env "$@" COLUMNS=80 timeout 120 gpuipc-bench check -o "$W/$prefix-$name.csv" --table "$W/$prefix-$name.md" --force \
    >"$W/$prefix-$name.out" 2>"$W/$prefix-$name.err"
  echo "== $name: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms"; grep "^FAIL" "$W/$prefix-$name.err" | head -5
}
check check
check check-ucx-tls-tcp UCX_TLS=tcp
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu2 tests/ >"$W/pytest-gpu2.log" 2>&1; tail -3 "$W/pytest-gpu2.log"
[ $(( $(date +%s) - T0 )) -lt 330 ] && run pair-default 200 --devices 0,1
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/pair-check-$prefix.tgz" .
