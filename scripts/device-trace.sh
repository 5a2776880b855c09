#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl and .whl-nixl-slim): where the default run's and
# --quick's wall time goes (GPUIPC_BENCH_TRACE; issue 22), with the paths in their seeded order
# (issue 21); NIXL forced onto cuda_copy on one GPU and a sweep of UCX's cuda_ipc settings at
# 256 MiB (issue 24); `check` as the node is and with NIXL forced onto tcp (issue 25). One tar.
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
traced default 150
run nixl-1gpu-forced 60 -s nixl-cuda-copy --sizes 1M --sharing time-sliced
for setting in "" UCX_CUDA_IPC_MAX_STREAMS=1 UCX_CUDA_IPC_CACHE=n UCX_PROTO_ENABLE=n; do
  name=nixl-256m${setting:+-$(echo "${setting#UCX_}" | tr 'A-Z_=' 'a-z--')}
  ( [ -n "$setting" ] && export "$setting"; run "$name" 60 -s nixl --sizes 256M --sharing time-sliced )
done
start=$(date +%s%N); COLUMNS=80 timeout 90 gpuipc-bench check -o "$W/$prefix-check.csv" --table "$W/$prefix-check.md" \
  --force >"$W/$prefix-check.out" 2>"$W/$prefix-check.err"
echo "== check: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms"; grep "^FAIL" "$W/$prefix-check.err"
UCX_TLS=tcp COLUMNS=80 timeout 90 gpuipc-bench check -o "$W/$prefix-check-tcp.csv" --force \
  >"$W/$prefix-check-tcp.out" 2>"$W/$prefix-check-tcp.err"
echo "== check with UCX_TLS=tcp: exit $? (1 expected)"; grep "^FAIL" "$W/$prefix-check-tcp.err"
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/trace-$prefix.tgz" .
