#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl and .whl-nixl-slim): issue 22's speed, measured with its
# timeline (GPUIPC_BENCH_TRACE): --quick cold and warm, --quick with every scenario named, the
# parent's own profile of a --quick run, the default run with plots (the reference candidate);
# NIXL's same-GPU READ with UCX's debug log (why it took tcp on an H100); the GPU tests. One tar.
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
  && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps .whl-nixl-slim/*.whl >>"$W/pip.log" 2>&1 || echo "no nixl"
export XDG_CACHE_HOME=$W/cache
traced() {  # NAME SECONDS ARGS...: a run with its timeline, summarised
  local name=$1; GPUIPC_BENCH_TRACE=$W/trace-$name run "$@"
  python3 scripts/trace_summary.py "$W/trace-$name" >"$W/trace-$name.txt" 2>&1; rm -rf "$W/trace-$name"
  tail -n 1 "$W/trace-$name.txt"
}
traced quick-cold 60 --quick
traced quick 60 --quick
ALL="-s staging -s ipc -s vmm -s mempool -s hostpool -s mmap -s latency -s torch -s nvshmem -s sharing -s host -s barrier"
traced quick-all 90 --quick $ALL
start=$(date +%s%N)
COLUMNS=80 python3 -m cProfile -o "$W/parent.prof" "$(command -v gpuipc-bench)" run --quick -o "$W/$prefix-quick-prof.csv" \
  --force >/dev/null 2>"$W/$prefix-quick-prof.err"
echo "== parent profile of --quick: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms"
python3 -c "import pstats; pstats.Stats('$W/parent.prof').sort_stats('cumulative').print_stats(45)" >"$W/parent-prof.txt" 2>&1
traced default 150 --plot "$W/plots"
UCX_LOG_LEVEL=debug GPUIPC_BENCH_UCX_LOGS=$W/ucx-read run nixl-read-debug 60 -s nixl-read --sizes 1M --sharing time-sliced
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ >"$W/pytest.log" 2>&1; tail -3 "$W/pytest.log"
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/speed-$prefix.tgz" .
