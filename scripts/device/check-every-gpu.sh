#!/usr/bin/env bash
# On a lent GPU machine: `check --preset health` measures and judges every GPU's host link and
# memory (h2d, d2h, d2d, ipc-ce on each GPU) and reads each PCIe link under staging's host copies.
# Runs: the health check as it is (timed: the contract is 45 s), then with GPU 1's h2d planted
# at half (a test-only plant; two GPUs or more) to show the failure names GPU 1, then the full
# check's JSON events of kind link (each GPU's PCIe link as NVML read it under load). Outputs
# under $OUT.
# Usage: bash scripts/device/check-every-gpu.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/gpuipc-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
nvidia-smi -L
nvidia-smi --query-gpu=index,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max \
  --format=csv | tee "$OUT/pcie-idle.csv"
start=$(date +%s%N)
gpuipc-bench check --preset health -o "$OUT/health.csv" --force >"$OUT/health.out" 2>"$OUT/health.err"
echo "== health: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms"; cat "$OUT/health.out"
grep -h "^# node\..*check.remeasured" "$OUT/health.csv"
python3 - "$OUT/health.csv" <<'PY'
import sys
from gpuipc_bench.check.figures import figures_of
from gpuipc_bench.results import read_results
frame, _ = read_results(sys.argv[1])
for f in figures_of(frame):
    if f.name in ("h2d", "d2h", "d2d", "ipc-ce"):
        print(f"{f.name}@{f.gpus}: {f.text()}")
PY
start=$(date +%s%N)
GPUIPC_BENCH_CHECK_PLANT='slow:*:h2d@1:0.5' gpuipc-bench check --preset health -o "$OUT/slow-gpu1.csv" --force \
  >"$OUT/slow-gpu1.out" 2>"$OUT/slow-gpu1.err"
echo "== GPU 1's h2d planted at half: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms"
cat "$OUT/slow-gpu1.out"; grep "^FAIL" "$OUT/slow-gpu1.err"
gpuipc-bench check --format json -o "$OUT/full.csv" --force --output "$OUT/full.jsonl" 2>"$OUT/full.err"
echo "== full check: exit $?"; grep -h '"kind": "link"' "$OUT/full.jsonl" || echo "no PCIe link below its maximum"
grep -h '"status": "fail"' "$OUT/full.jsonl" | head -20
