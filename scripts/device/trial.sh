#!/usr/bin/env bash
# On a lent GPU machine (no network, CuPy preinstalled): the newcomer's trial (scripts/trial.py) with
# the checkout installed as the device scripts install it. README.md's main job, run --quick, report
# and check at COLUMNS=80; the transcript in $OUT/trial/trial.txt, the CSVs in $OUT/trial/results/.
# Usage: bash scripts/device/trial.sh [--tests "PYTEST ARGS"]   (about 2-3 minutes on one H100)
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/gpuipc-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
nvidia-smi -L
/usr/bin/time -f "trial: %e s" python3 scripts/trial.py --installed --dir "$OUT/trial" "$@"
