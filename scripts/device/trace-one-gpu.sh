#!/bin/bash
# one GPU: a traced default run and a traced --quick run (GPUIPC_BENCH_TRACE; scripts/trace/trace_summary.py), each timed; packed: scripts/device/packed.sh trace-one-gpu.sh
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 COLUMNS=80
R=$OUT; mkdir -p $R
python3 -m pip install -q --no-deps --no-build-isolation -e . > $R/pip.log 2>&1 || { cat $R/pip.log; exit 1; }
ls .whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 && export PYTHONPATH=/tmp/site
export XDG_CACHE_HOME=/tmp/xdg
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
gpuipc-bench run --quick -o /tmp/w.csv --force -q > /dev/null 2>&1
for k in default quick; do
  a=""; [ $k = quick ] && a=--quick
  GPUIPC_BENCH_TRACE=$R/trace-$k /usr/bin/time -f "%e" -o $R/$k.time gpuipc-bench run $a -o $R/$k.csv --force > $R/$k.out 2>&1; echo "$k traced: $? $(cat $R/$k.time) s"
  python3 scripts/trace/trace_summary.py $R/trace-$k > $R/$k-summary.txt 2>&1
done
head -60 $R/quick-summary.txt
