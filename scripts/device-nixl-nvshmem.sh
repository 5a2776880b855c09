#!/usr/bin/env bash
# One call on a lent machine of two GPUs (carry .whl-nixl-slim, .whl and .ref/nvshmem-perftest):
# the nixl path and check (scripts/device-nixl.sh), then NVSHMEM's own perftests
# (scripts/device-nvshmem-perftest.sh) beside the tool's nvshmem path on the same pair. Everything
# comes back as one tar, $OUT/all.tgz.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
FINAL=${OUT:-/tmp/gpuipc-out}; mkdir -p "$FINAL"; T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
  && export PYTHONPATH=/tmp/site
OUT=/tmp/o-nixl LIMIT_S=${NIXL_S:-330} bash scripts/device-nixl.sh
echo "== nixl part done at $(( $(date +%s) - T0 )) s"
mkdir -p /tmp/o-nvshmem
COLUMNS=80 timeout 90 gpuipc-bench run -s nvshmem --devices 0,1 --sizes 4,4K,1M,64M,256M \
  -o /tmp/o-nvshmem/nvshmem-pair.csv --force >/tmp/o-nvshmem/nvshmem-pair.out 2>/tmp/o-nvshmem/nvshmem-pair.err
echo "== the tool's nvshmem across 0,1: exit $? at $(( $(date +%s) - T0 )) s"; tail -n 3 /tmp/o-nvshmem/nvshmem-pair.err
OUT=/tmp/o-perftest BUDGET_S=$(( 560 - ($(date +%s) - T0) )) TIMEOUT_S=60 bash scripts/device-nvshmem-perftest.sh
tar -C /tmp -czf "$FINAL/all.tgz" o-nixl o-nvshmem o-perftest 2>/dev/null; ls -la "$FINAL/all.tgz"
