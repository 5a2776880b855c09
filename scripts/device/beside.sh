#!/usr/bin/env bash
# Does a process starting (or idling) on the GPU beside a timed scenario move its figures? Three rounds of:
# the scenarios alone, then with each load of beside.py running beside them (time-sliced, -n 12).
# results/h200-beside-a-* (the load 'starts') and h200-beside-b-* ('contexts', 'idle') came from this;
# docs/methods/measuring.md compares them (scripts/readme/readme_methods.py, beside). Usage (packed: scripts/device/packed.sh beside.sh starts contexts idle)
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 COLUMNS=80
loads=${*:-contexts idle}
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
export XDG_CACHE_HOME=/tmp/xdg
RUN="gpuipc-bench run -s ipc -s latency -s mempool -s staging --sharing time-sliced -n 12 -q --force"
$RUN -o /tmp/warm.csv > /dev/null 2>&1  # the kernel cache warm
for i in 1 2 3; do
  $RUN -o "$OUT/base-$i.csv" > /dev/null 2>&1; echo "alone $i: exit $?"
  for load in $loads; do
    python3 scripts/device/beside.py "$load" > "$OUT/$load-$i.log" 2>&1 & pid=$!; sleep 3
    $RUN -o "$OUT/$load-$i.csv" > /dev/null 2>&1; echo "beside $load $i: exit $?, $(tail -1 "$OUT/$load-$i.log")"
    kill $pid; pkill -f scripts/device/beside.py; wait $pid 2>/dev/null; sleep 1
  done
done
nvidia-smi --query-compute-apps=pid --format=csv,noheader
