#!/usr/bin/env bash
# On a lent one-GPU machine (issue 22): where a run's time goes. Import and start-up costs; the
# persistent-set GPU tests; ipc, staging, mmap and torch under GPUIPC_BENCH_PROFILE (the workers); the default run at 5 ms and at 2 ms samples. One tar under $OUT.
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
{
  for m in cupy torch pandas "cupy; cupy.cuda.runtime.getDeviceCount(); cupy.zeros(1)"; do
    python3 -c "import time; t=time.perf_counter(); import $m; print(f'import $m: {time.perf_counter()-t:.2f} s')"
  done
  start=$(date +%s%N); nvidia-smi compute-policy -l >/dev/null 2>&1; echo "compute-policy: $(( ($(date +%s%N)-start)/1000000 )) ms"
} >"$W/startup.txt" 2>&1; cat "$W/startup.txt"
[ -n "${PROFILE_ONLY:-}" ] || timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_pool.py tests/test_modes.py \
  tests/test_neighbour.py >"$W/pytest.log" 2>&1; tail -3 "$W/pytest.log"
export XDG_CACHE_HOME=$W/cache
start=$(date +%s%N)
# (the parent is not profiled: a forked worker cannot start a profiler while its parent's is active)
COLUMNS=80 GPUIPC_BENCH_PROFILE=$W/prof timeout -s INT 150 \
  gpuipc-bench run ${PROFILED:--s ipc -s staging -s mmap -s torch} -o "$W/$prefix-profiled.csv" --force \
  >"$W/$prefix-profiled.out" 2>"$W/$prefix-profiled.err"
echo "== profiled: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms; $(grep -h '^# seconds' "$W/$prefix-profiled.csv" | tr '\n' ' ')"
python3 scripts/profile_summary.py "$W/prof" 25 >"$W/profile.txt" 2>&1
rm -rf "$W/prof"
[ -n "${PROFILE_ONLY:-}" ] || { run default-5ms 120; GPUIPC_BENCH_SAMPLE_S=0.002 run default-2ms 120; }
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/profile-$prefix.tgz" .
