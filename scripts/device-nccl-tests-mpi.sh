#!/usr/bin/env bash
# On a lent two-GPU machine (carry .ref/nccl-tests): nccl-tests' sendrecv_perf built with MPI,
# run as one process driving both GPUs (-g 2, as before) and as two MPI processes of one GPU
# each (as the tool's nccl path runs), beside the tool's own two-way sendrecv, one call. Issue
# 23's question: is the 2-4% gap between the tool and nccl-tests one process against two? One tar.
set -uo pipefail
prefix=${1:-x2}
. scripts/device-lib.sh
home=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])")
mkdir -p /tmp/nccl/lib && ln -sf "$home/include" /tmp/nccl/include && ln -sf "$home"/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so
mpi=/usr/lib/x86_64-linux-gnu/openmpi
make -s -C .ref/nccl-tests/src BUILDDIR=/tmp/nt MPI=1 MPI_HOME=$mpi NCCL_HOME=/tmp/nccl \
  NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" /tmp/nt/sendrecv_perf >"$W/build.log" 2>&1 || tail -5 "$W/build.log"
export LD_LIBRARY_PATH=$home/lib:${LD_LIBRARY_PATH:-}
args="-b 64M -e 256M -f 4 -w 5 -n 50"
for i in 1 2; do
  /tmp/nt/sendrecv_perf $args -g 2 >"$W/nccl-tests-1proc-$i.txt" 2>&1
  mpirun --allow-run-as-root --oversubscribe -np 2 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE \
    /tmp/nt/sendrecv_perf $args -g 1 >"$W/nccl-tests-2proc-$i.txt" 2>&1
  grep -h "^ *[0-9]" "$W/nccl-tests-1proc-$i.txt" "$W/nccl-tests-2proc-$i.txt"
done
run nccl 120 -s nccl --devices 0,1 --sizes 64M,256M
nvidia-smi -L >"$W/gpus.txt"
tar -C "$W" -czf "$OUT/nccl-mpi-$prefix.tgz" .
