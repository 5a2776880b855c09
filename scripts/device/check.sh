#!/usr/bin/env bash
# On a lent GPU machine (no network, CuPy preinstalled): install the checkout, run the GPU
# tests, then a short verified run of every scenario. Logs and CSVs go to $OUT.
# Usage: bash scripts/device/check.sh [pytest args]
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/gpuipc-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
nvidia-smi -L
python3 -m pytest -q -p no:cacheprovider -m "gpu or gpu2" tests/ "$@" 2>&1 | tee "$OUT/pytest.log" | tail -40
for s in ipc staging mmap latency sharing; do
  /usr/bin/time -f "$s: %e s" gpuipc-bench run -s "$s" --sizes 4,4K,1M,64M -o "$OUT/quick-$s.csv" --force -q \
    >"$OUT/quick-$s.log" 2>&1 || tail -5 "$OUT/quick-$s.log"
  tail -1 "$OUT/quick-$s.log"
done
