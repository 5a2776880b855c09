#!/usr/bin/env bash
# On a lent one-GPU machine: the sharing-mode checks. GPU tests of the modes, sharing, latency,
# NVSHMEM and torch paths; a run with MPS at 25% of the SMs; a --quick run (its summary must rank
# every size); torch's leftovers after a SIGKILL of the parent. Outputs under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/gpuipc-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_modes.py tests/test_nvshmem_path.py \
  tests/test_torch_path.py "tests/test_gpu.py::test_sharing_time_sliced_and_mps" \
  "tests/test_gpu.py::test_latency_on_one_gpu" >"$OUT/pytest.log" 2>&1; tail -3 "$OUT/pytest.log"
run() {  # NAME SECONDS ARGS...
  local name=$1 limit=$2; shift 2; local start=$(date +%s)
  COLUMNS=80 timeout "$limit" gpuipc-bench run -o "$OUT/$name.csv" --force "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
  echo "== $name: exit $? in $(( $(date +%s) - start )) s"; tail -n 2 "$OUT/$name.err"
}
run mps25 90 -s ipc -s latency --sharing mps,mps:25 --quick
python3 -c "
import sys; from gpuipc_bench.results import read_results
df, _ = read_results(sys.argv[1]); g = df[df.metric != 'setup'].groupby(['sharing', 'mps_thread_pct'], dropna=False)
print(g.size().to_string())" "$OUT/mps25.csv"
run quick 150 --quick
grep -c "undecided\|≈?" "$OUT/quick.out"; tail -n 4 "$OUT/quick.out"
# torch: SIGKILL of the parent mid-run leaves no /dev/shm file and no worker
gpuipc-bench run -s torch --sizes 4K,1M -o "$OUT/torch-killed.csv" --force -q >/dev/null 2>&1 & pid=$!
sleep 12; kill -9 $pid; sleep 6
echo "torch after SIGKILL: $(ls /dev/shm | grep -c '^torch_') files in /dev/shm, $(pgrep -fc 'gpuipc') processes"
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left"
