#!/usr/bin/env bash
# On a lent machine of two or more GPUs: the paths across a GPU pair at the sizes that failed
# before (NCCL, NVSHMEM, torch, device latency), NCCL's forced transports, and nccl-tests'
# sendrecv_perf built from .ref/nccl-tests (fetched sources, never committed) for comparison.
# Usage: bash scripts/device/pairs.sh   (outputs under $OUT)
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/gpuipc-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
nvidia-smi -L; nvidia-smi topo -m | head -4
run() {  # NAME ARGS...: one run, its exit code, wall time and the last lines
  local name=$1; shift
  local start=$(date +%s)
  COLUMNS=80 timeout 300 gpuipc-bench run -o "$OUT/$name.csv" --force "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
  echo "== $name: exit $? in $(( $(date +%s) - start )) s"; tail -n 4 "$OUT/$name.err"; grep "^# note" "$OUT/$name.csv"
}
run pair-fixes -s nccl -s nvshmem -s torch -s latency --pairs 0-1 --sizes 4,4K,64M,256M
run nccl-forced -s nccl-ce -s nccl-shm -s nccl-net --devices 0,1 --sizes 4K,64M,256M
python3 - "$OUT/pair-fixes.csv" "$OUT/nccl-forced.csv" <<'PY'
import sys, pandas as pd
for f in sys.argv[1:]:
    df = pd.read_csv(f, comment="#")
    bw = df[df.metric == "bandwidth"].groupby(["scenario", "path", "variant", "measure", "bytes"]).bandwidth_gbps.median()
    print(bw[bw.index.get_level_values("bytes") >= 64 << 20].round(1).to_string())
    lat = df[df.metric == "latency"].groupby(["scenario", "variant", "bytes"]).seconds.median() * 1e6
    print(lat.round(2).to_string())
PY
# nccl-tests' sendrecv_perf, one process driving both GPUs
home=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")
mkdir -p /tmp/nccl/lib && ln -sf "$home/include" /tmp/nccl/include && ln -sf "$home"/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so
make -s -C .ref/nccl-tests/src BUILDDIR=/tmp/nt NCCL_HOME=/tmp/nccl NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
  /tmp/nt/sendrecv_perf >"$OUT/nccl-tests-build.log" 2>&1 || tail -5 "$OUT/nccl-tests-build.log"
LD_LIBRARY_PATH=$home/lib:${LD_LIBRARY_PATH:-} /tmp/nt/sendrecv_perf -b 4K -e 256M -f 4 -g 2 -w 5 -n 50 2>&1 \
  | tee "$OUT/nccl-tests-sendrecv.txt" | grep -v "^#  *Rank\|^$" | tail -12
