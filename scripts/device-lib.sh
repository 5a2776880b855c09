# Sourced by the device scripts (scripts/device-issue22*.sh, device-profile.sh): NVLink multicast
# off, the project installed, a work folder $W, and `run NAME SECONDS ARGS...` that times one
# `gpuipc-bench run` into $W/$prefix-NAME.{csv,out,err} and prints its seconds.
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
