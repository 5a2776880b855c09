#!/usr/bin/env bash
# On a lent one-GPU machine (carry .whl and .whl-nixl-slim): this build's --quick (cold, warm)
# and the GPU tests; what MPI the image has (for nccl-tests with two processes). One tar.
set -uo pipefail
prefix=${1:-h100}
. scripts/device-lib.sh
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1 \
  && export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps .whl-nixl-slim/*.whl >>"$W/pip.log" 2>&1 || echo "no nixl"
export XDG_CACHE_HOME=$W/cache
run quick-cold 60 --quick
run quick 60 --quick
run quick-2 60 --quick
{ command -v mpirun mpiexec; python3 -c "import mpi4py, os; print(mpi4py.__version__, mpi4py.get_config()); print(os.listdir(os.path.dirname(mpi4py.__file__)))"
  python3 -c "from mpi4py import MPI; print(MPI.Get_library_version())"; ls /usr/lib/x86_64-linux-gnu | grep -i -m5 mpi; } >"$W/mpi.txt" 2>&1
head -c 1500 "$W/mpi.txt"; echo
timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/ >"$W/pytest.log" 2>&1; tail -3 "$W/pytest.log"
pgrep -a nvidia-cuda-mps || echo "no MPS daemon left at the end"
rm -rf "$W/cache"
tar -C "$W" -czf "$OUT/final-$prefix.tgz" .
