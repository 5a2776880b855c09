#!/usr/bin/env bash
# On a lent GPU machine (one GPU, or two over NVLink): the nixl path. Carry .whl-nixl-slim: the
# nixl-cu13 1.5.1 wheel for Python 3.12 (`pip download --no-deps --python-version 3.12 --platform
# manylinux_2_28_x86_64 --only-binary=:all: -d .whl-nixl "nixl-cu13==1.5.1"`, 56 MiB) repacked
# without nixl_ep_cu13 (torch extensions this tool never loads) and UCX's perftest library, with
# its RECORD to match: 27 MiB, so the working tree and the wheel fit the device's 64 MiB.
# GPU tests of the path; UCX's choice and the forced transports; a run with UCX_TLS set before
# it (the transport-fallback line must fire); on two GPUs the same across the pair. Outputs
# under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/gpuipc-out}; mkdir -p "$OUT"; T0=$(date +%s)
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
python3 -m pip install -q --no-deps .whl-nixl-slim/*.whl >>"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
gpus=$(nvidia-smi -L | wc -l)
pack() { tar -C "$OUT" -czf "$OUT/nixl-all.tgz" --exclude='*.tgz' . 2>/dev/null; }
fits() {  # SECONDS: whether a step of that length still fits the device's 600 s call
  [ $(( $(date +%s) - T0 + $1 )) -lt ${LIMIT_S:-570} ] || { echo "== skipped (no time left): $2"; return 1; }; }
run() {  # NAME SECONDS ARGS...
  local name=$1 limit=$2; shift 2; local start=$(date +%s)
  fits "$limit" "$name" || return 0
  COLUMNS=80 timeout "$limit" gpuipc-bench run -o "$OUT/$name.csv" --force "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
  echo "== $name: exit $? in $(( $(date +%s) - start )) s"; tail -n 2 "$OUT/$name.err"; pack
}
fallback() {  # NAME: the transport-fallback line of a run's summary (expected where UCX_TLS took cuda_ipc away)
  grep -A3 "transport fallback" "$OUT/$1.out" || echo "no fallback line in $1"; }
SIZES=4K,1M,256M
# UCX's own choice (the sharing modes are issue 22's: one here; NIXL's transport does not depend on it)
if [ "$gpus" -ge 2 ]; then
  GPUIPC_BENCH_UCX_LOGS=$OUT/ucx-logs run nixl-2gpu 170 -s nixl --devices 0,1 --sizes $SIZES
  fallback nixl-2gpu
fi
GPUIPC_BENCH_UCX_LOGS=$OUT/ucx-logs run nixl-1gpu 150 -s nixl --sizes $SIZES --sharing time-sliced
fallback nixl-1gpu
# cuda_ipc taken away by the user's environment: the fallback line must name it
UCX_TLS=cuda_copy,tcp run nixl-1gpu-ucx-tls 45 -s nixl --sizes 64M --sharing time-sliced
fallback nixl-1gpu-ucx-tls
if [ "$gpus" -ge 2 ]; then
  UCX_TLS=cuda_copy,tcp run nixl-2gpu-ucx-tls 45 -s nixl --devices 0,1 --sizes 64M
  fallback nixl-2gpu-ucx-tls
  run nixl-2gpu-forced 45 -s nixl-cuda-copy --devices 0,1 --sizes 1M
fi
# check (issue 25): the node as it is (NIXL's figure with its transport), then NIXL forced onto
# tcp, which must fail as a transport fallback with exit 1
fits 60 check && { COLUMNS=80 timeout 60 gpuipc-bench check -o "$OUT/check.csv" --table "$OUT/check.md" --force \
  >"$OUT/check.out" 2>"$OUT/check.err"; echo "== check: exit $?"; grep "^FAIL" "$OUT/check.err"; pack; }
fits 60 check-tcp && { UCX_TLS=tcp COLUMNS=80 timeout 60 gpuipc-bench check -o "$OUT/check-tcp.csv" --force \
  >"$OUT/check-tcp.out" 2>"$OUT/check-tcp.err"; echo "== check with UCX_TLS=tcp: exit $? (1 expected)"
  grep "^FAIL" "$OUT/check-tcp.err"; pack; }
fits 60 pytest && { timeout 60 python3 -m pytest -q -p no:cacheprovider -m "gpu or gpu2" tests/test_nixl_path.py \
  >"$OUT/pytest.log" 2>&1; tail -3 "$OUT/pytest.log"; }
pack; find "$OUT" -mindepth 1 ! -name nixl-all.tgz -delete  # one file back (the device returns 8 at most)
ls -la "$OUT/nixl-all.tgz"
