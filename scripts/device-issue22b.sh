#!/usr/bin/env bash
# On a lent one-GPU machine (issue 22), after the default sweep's choices: GPU tests of the
# persistent sets and torch; --quick cold and warm; the default run; SIGKILL of the parent in
# its MPS half (no daemon, no memory, no process left). (A busy neighbour and MPS at 25%: device-issue22c.sh.)
# One tar under $OUT.  Usage: bash scripts/device-issue22b.sh [PREFIX]
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv >"$W/smi-before.txt"
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_pool.py tests/test_torch_path.py \
  >"$W/pytest.log" 2>&1; tail -2 "$W/pytest.log"
export XDG_CACHE_HOME=$W/cache
run quick-cold 60 --quick
run quick-warm 60 --quick
run default 150
# SIGKILL of the parent once the MPS half has started
COLUMNS=80 gpuipc-bench run -o "$W/$prefix-killed.csv" --force >"$W/killed.out" 2>"$W/killed.err" & pid=$!
for _ in $(seq 1 600); do grep -q " mps " "$W/killed.err" 2>/dev/null && break; sleep 0.2; done
sleep 3; kill -9 $pid; sleep 6
{ echo "after SIGKILL in: $(grep -o '^[a-z]* mps' "$W/killed.err" | tail -1)"
  pgrep -a nvidia-cuda-mps || echo "no MPS daemon left"
  echo "processes left: $(pgrep -fc 'gpuipc-bench|multiprocessing' )"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; ls /dev/shm | grep -c gpuipc; } \
  >"$W/killed.txt" 2>&1; cat "$W/killed.txt"
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/issue22b-$prefix.tgz" .
