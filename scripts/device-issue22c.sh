#!/usr/bin/env bash
# On a lent one-GPU machine (issue 22; carry .whl for nvshmem4py): the default run with every
# path (nvshmem included), persistent (--launcher fork) then fresh processes (fork-fresh), a busy
# neighbour and MPS at 25% of the SMs. One tar under $OUT.  Usage: bash ... [PREFIX]
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
  && export PYTHONPATH=/tmp/site
export XDG_CACHE_HOME=$W/cache
run quick-cold 60 --quick
run quick 60 --quick
run default 150 --plot "$W/plots"
run default-fresh 170 --launcher fork-fresh
run neighbour 120 -s ipc -s staging --sizes 4K,64M \
  --sharing time-sliced,mps,time-sliced+compute,mps+compute,time-sliced+copy,mps+copy
run mps25 90 -s ipc -s mmap -s latency --quick --sharing mps,mps:25
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/issue22c-$prefix.tgz" .
