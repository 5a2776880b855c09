#!/usr/bin/env bash
# On a lent GPU machine (no network, CuPy preinstalled): run the GPU tests and a
# short verified run of every scenario. Usage: bash scripts/device-check.sh [pytest args]
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpuipc-out}; mkdir -p "$OUT"
nvidia-smi -L
python3 -c "import cupy, sys; print('python', sys.version.split()[0], 'cupy', cupy.__version__)"
python3 -m gpuipc_bench.cli info
python3 -m pytest -q -x -p no:cacheprovider "$@" 2>&1 | tee "$OUT/pytest.log" | tail -25
