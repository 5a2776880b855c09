#!/usr/bin/env bash
# On a lent GPU machine with the project installed (builds nothing): three default runs back to
# back, each under /usr/bin/time, with `report A B` between consecutive runs and each run's
# `report --format json`, then how often the three agree: per pair of runs, the decisions whose
# mechanism class and whose chosen API are the same, the open ones (undecided or within), and each
# run's wall time against its seconds.total, estimate and resampling pass (sampling.* keys).
# Usage: bash scripts/device/repeat.sh [run options]   (e.g. --budget 45)
# About 3 x 45 s of runs plus ~10 s of reports on one H100.
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
python3 - "$OUT" <<'PY'
import itertools, json, sys
out = sys.argv[1]
runs = []
for n in (1, 2, 3):
    with open(f"{out}/repeat-{n}.json") as f:
        decisions = json.load(f)["runs"][0]["decisions"]
    runs.append({(d["src"], d["dst"], d["sharing"], d["measure"], d["bytes"]): d for d in decisions})
    opened = sum(d["outcome"] in ("undecided", "within") for d in decisions)
    twice = sum(d["replicas"] > 1 for d in decisions)
    print(f"run {n}: {len(decisions)} decisions, {opened} undecided or within, {twice} on two replicas")
for (i, a), (j, b) in itertools.combinations(enumerate(runs, 1), 2):
    keys = sorted(set(a) & set(b))
    cls = sum(a[k]["class"] == b[k]["class"] for k in keys)
    api = sum(a[k]["choice"] == b[k]["choice"] for k in keys)
    print(f"runs {i}-{j}: class agrees in {cls}/{len(keys)}, API in {api}/{len(keys)} ({api / max(1, len(keys)):.0%})")
    for k in keys:
        if a[k]["choice"] != b[k]["choice"]:
            print(f"  {k[2]} {k[3]} {k[4]}: {a[k]['choice']} ({a[k]['why']}) vs {b[k]['choice']} ({b[k]['why']})")
PY
