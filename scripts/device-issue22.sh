#!/usr/bin/env bash
# On a lent one-GPU machine (issue 22): the default run's wall time and figures with persistent
# workers (--launcher fork) against fresh processes per scenario (--launcher fork-fresh), both
# sharing modes; --quick with a cold and a warm kernel cache. One tar under $OUT.
# Usage: bash scripts/device-issue22.sh [PREFIX]   (LIMIT_FORK, LIMIT_FRESH seconds)
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv >"$W/smi-before.txt"
export XDG_CACHE_HOME=$W/cache-cold
run quick-cold 70 --quick
run quick-warm 50 --quick
run default-fork "${LIMIT_FORK:-200}"
run default-fresh "${LIMIT_FRESH:-240}" --launcher fork-fresh
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left"
nvidia-smi --query-gpu=memory.used --format=csv,noheader >"$W/smi-after.txt"; cat "$W/smi-after.txt"
rm -rf "$W/cache-cold"
tar -C "$W" -czf "$OUT/issue22-$prefix.tgz" .
