#!/usr/bin/env bash
# On a lent GPU machine with the project installed (builds nothing): three default runs back to
# back, each under /usr/bin/time, with `report A B` between consecutive runs and each run's
# `report --format json`, then how often the three agree: per pair of runs, the decisions whose
# mechanism class and whose chosen API are the same, the open ones (scripts/agreement.py), and each
# run's wall time against its seconds.total, estimate and resampling pass (sampling.* keys).
# With REFERENCE=1, then a run of 20 samples per group on three process sets each (-n 20 --replicas 3:
# its ratio intervals and deltas take in the offset between sets) that scripts/agreement.py checks each
# run's runner-up ratios against (issue 33).
# Usage: [REFERENCE=1] bash scripts/device/repeat.sh [run options]   (e.g. --budget 45)
# About 3 x 33 s of runs plus ~10 s of reports on one H200; the reference about 2.5 minutes more.
set -uo pipefail
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 COLUMNS=80
OUT=${OUT:-/tmp/gpuipc-out}; mkdir -p "$OUT"
timer() {  # /usr/bin/time where the machine has it, else bash's own clock
  if [ -x /usr/bin/time ]; then /usr/bin/time -v -o "$1" "${@:2}"
  else local start=$(date +%s%N); "${@:2}"; local code=$?
    echo "Elapsed (wall clock) time (s): $(( ($(date +%s%N) - start) / 1000000 ))e-3" >"$1"; return $code; fi
}
for n in 1 2 3; do
  timer "$OUT/repeat-$n.time" gpuipc-bench run -o "$OUT/repeat-$n.csv" --force "$@" \
    >"$OUT/repeat-$n.out" 2>"$OUT/repeat-$n.err"
  echo "== run $n: exit $?; $(grep -h 'Elapsed (wall clock)' "$OUT/repeat-$n.time")"
  grep -h '^# seconds.total\|^# seconds.wall\|^# estimate.seconds\|^# sampling\.' "$OUT/repeat-$n.csv"
  grep -h 'left open' -A3 "$OUT/repeat-$n.err"
  if [ "$n" -gt 1 ]; then
    gpuipc-bench report "$OUT/repeat-$((n - 1)).csv" "$OUT/repeat-$n.csv" >"$OUT/report-$((n - 1))-$n.txt" 2>&1
    head -n 12 "$OUT/report-$((n - 1))-$n.txt"
  fi
done
gpuipc-bench report "$OUT/repeat-1.csv" "$OUT/repeat-3.csv" >"$OUT/report-1-3.txt" 2>&1
for n in 1 2 3; do
  gpuipc-bench report "$OUT/repeat-$n.csv" --format json >"$OUT/repeat-$n.json" 2>"$OUT/repeat-$n.json.err"
done
refs=()
if [ -n "${REFERENCE:-}" ]; then  # the runner-up check's reference: a run of 20 samples per group
  timer "$OUT/reference-20.time" gpuipc-bench run -n 20 --replicas 3 -o "$OUT/reference-20.csv" --force "$@" \
    >"$OUT/reference-20.out" 2>"$OUT/reference-20.err"
  echo "== reference (-n 20 --replicas 3): exit $?; $(grep -h 'Elapsed (wall clock)' "$OUT/reference-20.time")"
  gpuipc-bench report "$OUT/reference-20.csv" --format json >"$OUT/reference-20.json" 2>/dev/null
  refs=(--reference "$OUT/reference-20.json" --reference-csv "$OUT/reference-20.csv")
fi
python3 scripts/agreement.py "$OUT"/repeat-{1,2,3}.json "${refs[@]}" | tee "$OUT/agreement.txt"
