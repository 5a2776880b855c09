# Sourced by the device scripts: NVLink multicast off, the project installed, a work folder $W,
# `run NAME SECONDS ARGS...` that times one `gpuipc-bench run` into $W/$prefix-NAME.{csv,out,err}
# and prints its seconds, `wheels` (the carried nvshmem4py and nixl wheels, where carried) and
# `traced NAME SECONDS ARGS...` (a run with its timeline, GPUIPC_BENCH_TRACE, summarised).
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
prefix=${prefix:-h100}
OUT=${OUT:-/tmp/gpuipc-out}; W=$(mktemp -d); mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$W/pip.log" 2>&1 || { cat "$W/pip.log"; exit 1; }
run() {
  local name=$1 limit=$2; shift 2; local start=$(date +%s%N)
  COLUMNS=80 timeout -s INT "$limit" gpuipc-bench run -o "$W/$prefix-$name.csv" --force "$@" \
    >"$W/$prefix-$name.out" 2>"$W/$prefix-$name.err"
  echo "== $name: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms;" \
    "$(grep -h '^# seconds\|^# worker_sets' "$W/$prefix-$name.csv" | sed 's/^# seconds.//' | tr '\n' ' ')"
  tail -n 1 "$W/$prefix-$name.err"
}
wheels() {  # the carried wheels: nvshmem4py (.whl, into /tmp/site) and nixl (.whl-nixl-slim), where carried
  ls .whl/*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
    .whl/*.whl >/dev/null 2>&1 && export PYTHONPATH=/tmp/site
  ls .whl-nixl-slim/*.whl >/dev/null 2>&1 && { python3 -m pip install -q --no-deps .whl-nixl-slim/*.whl \
    >>"$W/pip.log" 2>&1 || echo "no nixl"; }
  export XDG_CACHE_HOME=$W/cache
}
traced() {  # NAME SECONDS ARGS...: a run with its timeline, summarised into $W/trace-NAME.txt
  local name=$1; GPUIPC_BENCH_TRACE=$W/trace-$name run "$@"
  python3 scripts/trace/trace_summary.py "$W/trace-$name" >"$W/trace-$name.txt" 2>&1; rm -rf "$W/trace-$name"
  tail -n 1 "$W/trace-$name.txt"
}
timed() {  # NAME SECONDS COMMAND...: a command's wall time and its seconds.total, into $W/$prefix-NAME.*
  local name=$1 limit=$2; shift 2; local start=$(date +%s%N)
  COLUMNS=80 timeout -s INT "$limit" "$@" -o "$W/$prefix-$name.csv" --force >"$W/$prefix-$name.out" 2>"$W/$prefix-$name.err"
  echo "== $name: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms; $(grep -h '^# seconds.total' "$W/$prefix-$name.csv")"
}
old_version() {  # the command that runs the untracked old-<commit>/ copy's CLI: timed NAME SECONDS $(old_version) run
  local old; old=$(ls -d old-* | head -1)
  OLDRUN="cd $PWD/$old && env PYTHONPATH=$PWD/$old:${PYTHONPATH:-} python3 -c 'from gpuipc_bench.cli import main; main()'"
}
oldrun() {  # NAME SECONDS ARGS...: the previous version's `run`, as timed does it
  local name=$1 limit=$2; shift 2
  old_version
  timed "$name" "$limit" bash -c "$OLDRUN \"\$@\"" old run "$@"
}
