#!/usr/bin/env bash
# On a lent machine of two GPUs (H100s over NVLink): NVIDIA's own NVSHMEM perftests, built from
# .ref/nvshmem-perftest/perftest (fetched sources, git-ignored, carried to the machine) against
# the nvidia-nvshmem-cu13 wheel, run as two PEs (one per GPU), for comparison with the tool's
# nvshmem scenario (device-put, device-get, device-putsig).
#
# Usage: bash scripts/device/nvshmem-perftest.sh               (outputs under $OUT)
#        bash scripts/device/nvshmem-perftest.sh --shim-test   (the MPI shim's own test; gcc only)
#        bash scripts/device/nvshmem-perftest.sh --build-only  (build, run nothing)
# Knobs (environment): OUT (/tmp/gpuipc-out), PERFTEST_DIR, NVSHMEM_HOME, CUDA_HOME, LIBCUDA (a
# libcuda.so to link against), ARCH (sm_90), TIMEOUT_S (120, each run), BUDGET_S (540: no run
# starts, and none runs, past this many seconds from the start; the device call's limit is 600),
# KEEP_WORK=1 (keep the build folder, /tmp/nvshmem-perftest.*).
#
# No MPI there: the perftests' init_wrapper() (common/utils.cu, built with NVSHMEMTEST_MPI_SUPPORT
# as the perftest CMake does) dlopens "libmpi.so.40" only to broadcast NVSHMEM's unique id when
# NVSHMEMTEST_USE_UID_BOOTSTRAP=1. scripts/device/nvshmem_perftest_mpi_shim.c stands in for it (see that
# file): each rank gets SHIM_RANK/SHIM_SIZE/SHIM_DIR, rank 0's unique id travels through a file in
# SHIM_DIR, and NVSHMEM then bootstraps over its own UID sockets (loopback). The same file is the
# mpi.h that utils.h includes (Open MPI's MPI_Comm/MPI_Datatype types). NVSHMEMTEST_USE_MPI_LAUNCHER
# must stay unset: utils.cu checks it first, and with it set would bootstrap NVSHMEM through MPI
# itself (NVSHMEMX_INIT_WITH_MPI_COMM, nvshmem_bootstrap_mpi.so), which the shim cannot serve.
# Each PE picks its GPU itself after init: cudaSetDevice(mype_node % device count), so
# CUDA_VISIBLE_DEVICES is left as it is (unset: PE 0 on GPU 0, PE 1 on GPU 1).
#
# What the three tests measure (read from the sources; all are device-initiated: the bytes move by
# the SMs' loads and stores over NVLink (NVSHMEM's P2P transport), no copy engine, no host call per
# transfer; none of them checks the data):
#
# shmem_put_bw (device/pt-to-pt/shmem_put_bw.cu): PE 0 alone issues (PE 1 only joins the host
#   barriers; --bidir would make both issue and sum them, not run here). One kernel of -c blocks x
#   -t threads (utils.cu's defaults 32 x 256; NVIDIA's shmem_put_bw.args: -c 4 -t 1024 -n 200 -w 20
#   -e 32M). Per iteration each block puts its contiguous share, size/8/c doubles, from its own
#   symmetric buffer to the same offset of PE 1's: -s block (and the default, 'all') with
#   nvshmemx_double_put_nbi_block; -s warp: each warp its share with nvshmemx_double_put_nbi_warp;
#   -s thread: each thread its share with nvshmem_double_put_nbi. Between iterations a grid-wide
#   barrier of the blocks (an atomic counter; no quiet), one nvshmem_quiet after the last: the -n
#   iterations of a size are one launch (the -w warm-up iterations a launch before it), so launch
#   and completion costs are spread over -n messages. Timed with CUDA events around that launch.
#   Table 'shmem_put_bw_uni': size(B), scope (always "None"), BW (GB/sec) = size x n / time, with
#   GB = 1e9 bytes. 'size' is the size asked for: the shares are whole doubles (integer division),
#   so a block moves nothing below 8 x c bytes (warp: 8 x c x t/32, thread: 8 x c x t) and those
#   rows (4 B .. 16 B at -c 4, .. 64 B at -c 32) time empty kernels: ignore them.
# shmem_get_bw (device/pt-to-pt/shmem_get_bw.cu): the same with nvshmemx_double_get_nbi_block: PE 0
#   reads PE 1's buffer into its own (loads over NVLink); block scope only (one kernel, -s is
#   ignored); -c/-t as above; the quiet at the end is called by the last block to arrive only.
#   'len' and 'size' are int there: sizes must stay below 2 GiB. Table 'shmem_get_bw_uni', GB/s.
# shmem_put_signal_ping_pong_latency (device/pt-to-pt/...): ONE thread on each PE (a 1 x 1 kernel
#   through nvshmemx_collective_launch; -c, -t and -s are ignored: the warp and block variants in
#   the source are never launched). Per iteration PE 0 does nvshmem_int_put_signal_nbi(data, data,
#   size/4 ints, flag, i+1, NVSHMEM_SIGNAL_SET, peer) and waits (nvshmem_uint64_wait_until, EQ)
#   for PE 1's answer, PE 1 the mirror image; one launch of -n round trips, timed with events on
#   each PE's stream; nvshmem_quiet after the loop. Table 'shmem_put_ping_lat': latency (us) =
#   time / n = one FULL ROUND TRIP (the test prints so); one-way is half. The payload is copied by
#   that one thread (16-byte loads and stores), so from a few KiB on the figure is one thread's
#   copy speed, not the link's. NVIDIA's .args: -e 1M -n 500 -w 50.
#
# Against the tool (scenarios/nvshmem.py): its device-put / device-get are one launch per message
# of up to 32 blocks x 512 threads (one block per 64 KiB) with nvshmemx_putmem_block /
# getmem_block and nvshmem_quiet, so its small sizes carry a launch and a quiet each, where the
# perftest spreads them over -n; hence the second bw run here at -c 32 -t 512. Its device-putsig
# is one WARP (nvshmemx_putmem_signal_nbi_warp + nvshmem_signal_wait_until) at 4 B and 4 KiB and
# reports one-way = round trip / 2; this test's is one THREAD and a full round trip. The tool's
# sweep is 4 B .. 256 MiB in steps of x4, as here (-b 4 -e 256M -f 4).
#
# Runs (each two processes, each under timeout TIMEOUT_S; NCCL_NVLS_ENABLE=0 and
# NVSHMEM_DISABLE_NVLS=1 always: NVLink multicast stays off):
#   shmem_put_bw  -b 4 -e 256M -f 4 -n 200 -w 20 -c 4 -t 1024    (NVIDIA's .args grid, block scope)
#   shmem_put_bw  -b 4 -e 256M -f 4 -n 200 -w 20 -c 32 -t 512    (the tool's device-put grid)
#   shmem_get_bw  the same two
#   shmem_put_signal_ping_pong_latency -b 4 -e 1M -f 4 -n 500 -w 50   (NVIDIA's .args counts)
#   shmem_put_signal_ping_pong_latency -b 4M -e 16M -f 4 -n 5 -w 1, then 64M, then 256M alone
#     with -n 3 -w 1 (one thread copies these, at perhaps 0.1 GB/s, and a table is printed only
#     once a run ends: a run per large size, so a slow one loses only its own row)
# Outputs in $OUT (at most 8 files, as the device tool brings back): build.log (shim, its test,
# nvcc), env.txt, one <test>.txt per test (every run's command, both ranks' output and exit
# codes), summary.txt (what is printed at the end), nvshmem-perftest.tgz (all of it, rank logs too).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1   # always: NVLink multicast stays off

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SHIM_SRC=$HERE/nvshmem_perftest_mpi_shim.c
PT=${PERFTEST_DIR:-$ROOT/.ref/nvshmem-perftest/perftest}
OUT=${OUT:-/tmp/gpuipc-out}
ARCH=${ARCH:-sm_90}
TIMEOUT_S=${TIMEOUT_S:-120}
BUDGET_S=${BUDGET_S:-540}
TESTS=(shmem_put_bw shmem_get_bw shmem_put_signal_ping_pong_latency)
T0=$(date +%s)
MODE=${1:-run}

WORK=$(mktemp -d /tmp/nvshmem-perftest.XXXXXX) || { echo "mktemp failed"; exit 1; }
BUILD=$WORK/build      # objects and test binaries
RTLIB=$WORK/lib        # at run time: libmpi.so.40 (the shim) and nothing else
LINKLIB=$WORK/linklib  # at link time only: unversioned links to libnvshmem_host.so.N, libcuda
LOGS=$WORK/logs        # each rank's output
mkdir -p "$OUT" "$BUILD" "$RTLIB" "$LINKLIB" "$LOGS"
BUILD_LOG=$OUT/build.log
: >"$BUILD_LOG"

PIDS=()  # ranks running now (their timeout processes)
cleanup() {  # each rank runs under timeout, the leader of its own process group: end the group
  local p
  for p in "${PIDS[@]}"; do kill -KILL -- "-$p" "$p" 2>/dev/null; done
  if [[ ${KEEP_WORK:-0} == 1 ]]; then echo "(kept $WORK)"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'echo "== interrupted"; exit 130' INT TERM

say() { echo "$*" | tee -a "$BUILD_LOG"; }
elapsed() { echo $(( $(date +%s) - T0 )); }

# ---------------------------------------------------------------------------------------------
# The MPI shim: build it, and test it with a program that dlopens it as utils.cu does.
build_shim() {
  say "== shim: gcc -shared -fPIC $SHIM_SRC -> $RTLIB/libmpi.so.40"
  gcc -O2 -Wall -Wextra -shared -fPIC -DNVSHMEM_MPI_SHIM_IMPL -Wl,-soname,libmpi.so.40 \
    -o "$RTLIB/libmpi.so.40" "$SHIM_SRC" >>"$BUILD_LOG" 2>&1 || { say "shim build FAILED"; return 1; }
  mkdir -p "$BUILD/include" && cp "$SHIM_SRC" "$BUILD/include/mpi.h"   # utils.h's #include "mpi.h"
}

write_shim_test() {  # FILE: a C program loading the shim like utils.cu's nvshmemi_load_mpi()
  cat >"$1" <<'EOF'
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef void *MPI_Comm, *MPI_Datatype;
#define LOAD(T, name) T name = (T)dlsym(h, #name); if (!name) { fprintf(stderr, "no symbol %s\n", #name); return 2; }
typedef int (*Init_t)(int *, char ***);
typedef int (*Bcast_t)(void *, int, MPI_Datatype, int, MPI_Comm);
typedef int (*Rank_t)(MPI_Comm, int *);
typedef int (*Fin_t)(void);
typedef int (*Bar_t)(MPI_Comm);
static unsigned char pattern(int round, int i) { return (unsigned char)(31 * round + 7 * i + 1); }
int main(int argc, char **argv) {
  int want = argc > 1 ? atoi(argv[1]) : 1, rank = -1, size = -1, bad = 0, round, i;
  void *h = dlopen("libmpi.so.40", RTLD_NOW | RTLD_GLOBAL | RTLD_DEEPBIND);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  LOAD(Init_t, MPI_Init) LOAD(Bcast_t, MPI_Bcast) LOAD(Rank_t, MPI_Comm_rank)
  LOAD(Rank_t, MPI_Comm_size) LOAD(Fin_t, MPI_Finalize) LOAD(Bar_t, MPI_Barrier)
  MPI_Comm world = (MPI_Comm)dlsym(h, "ompi_mpi_comm_world");
  MPI_Datatype u8 = (MPI_Datatype)dlsym(h, "ompi_mpi_uint8_t");
  if (!world || !u8) { fprintf(stderr, "no ompi_mpi_comm_world / ompi_mpi_uint8_t\n"); return 2; }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  if (size != want || rank < 0 || rank >= size) { fprintf(stderr, "rank %d size %d, want size %d\n", rank, size, want); return 3; }
  /* three broadcasts of a unique id's 128 bytes from rank 0, as init_wrapper does once, then
     1000 bytes from the last rank */
  for (round = 0; round < 4; round++) {
    int n = round < 3 ? 128 : 1000, root = round < 3 ? 0 : size - 1;
    unsigned char buf[1000];
    for (i = 0; i < n; i++) buf[i] = rank == root ? pattern(round, i) : 0;
    MPI_Bcast(buf, n, u8, root, world);
    for (i = 0; i < n; i++) bad += buf[i] != pattern(round, i);
  }
  MPI_Barrier(world);
  MPI_Finalize();
  dlclose(h);
  printf("rank %d of %d: %s\n", rank, size, bad ? "WRONG BYTES" : "ok");
  return bad ? 4 : 0;
}
EOF
}

shim_world() {  # N EXE [ONLY_RANK]: start N ranks (or only one of them); 0 if all exited 0
  local n=$1 exe=$2 only=${3:-} dir r rc=0 pids=()
  dir=$(mktemp -d "$WORK/shimtest.XXXXXX")
  for ((r = 0; r < n; r++)); do
    [[ -n $only && $r != "$only" ]] && continue
    SHIM_RANK=$r SHIM_SIZE=$n SHIM_DIR=$dir SHIM_TIMEOUT_S=${SHIM_TIMEOUT_S:-20} \
      LD_LIBRARY_PATH=$RTLIB timeout -k 5 30 "$exe" "$n" >>"$BUILD_LOG" 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || rc=1; done
  rm -rf "$dir"
  return $rc
}

shim_test() {
  local exe=$WORK/shimtest/shimtest ok=0
  mkdir -p "$WORK/shimtest"
  write_shim_test "$WORK/shimtest/shimtest.c"
  gcc -O1 -Wall -o "$exe" "$WORK/shimtest/shimtest.c" -ldl >>"$BUILD_LOG" 2>&1 || { say "shim test: gcc FAILED"; return 1; }
  if LD_LIBRARY_PATH=$RTLIB timeout 30 "$exe" 1 >>"$BUILD_LOG" 2>&1; then
    say "shim test: a world of one (no SHIM_* variables): ok"
  else
    say "shim test: a world of one FAILED"; ok=1
  fi
  for n in 2 3; do
    if shim_world "$n" "$exe"; then say "shim test: $n ranks: ok"; else say "shim test: $n ranks FAILED"; ok=1; fi
  done
  if SHIM_TIMEOUT_S=1 shim_world 2 "$exe" 1; then
    say "shim test: rank 1 without its root did NOT fail"; ok=1
  else
    say "shim test: rank 1 without its root fails after SHIM_TIMEOUT_S: ok"
  fi
  return $ok
}

if [[ $MODE == --shim-test ]]; then
  build_shim && shim_test; rc=$?
  echo "--- $BUILD_LOG:"; grep -v -e '^shim test: ' -e '^== shim' "$BUILD_LOG"; exit $rc
fi

# ---------------------------------------------------------------------------------------------
# Toolchain: NVSHMEM from the wheel, CUDA from nvcc.
fail() { say "FATAL: $*"; exit 1; }
[[ -d $PT/common && -f $PT/common/utils.cu ]] || fail "no perftest sources at $PT (carry .ref/nvshmem-perftest)"
NVCC=$(command -v nvcc) || fail "no nvcc on PATH"
if [[ -z ${NVSHMEM_HOME:-} ]]; then
  NVSHMEM_HOME=$(python3 -c 'import nvidia.nvshmem as m; print(list(m.__path__)[0])' 2>>"$BUILD_LOG")
fi
[[ -n ${NVSHMEM_HOME:-} && -f $NVSHMEM_HOME/include/nvshmem.h ]] || fail "no NVSHMEM (include/nvshmem.h) at '${NVSHMEM_HOME:-}': pip install nvidia-nvshmem-cu13, or set NVSHMEM_HOME"
NVSHMEM_LIB=$NVSHMEM_HOME/lib
if [[ -z ${CUDA_HOME:-} ]]; then
  CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")
  if [[ ! -f $CUDA_HOME/include/cuda.h ]]; then  # nvcc may be a wrapper script: ask nvcc itself
    here=$("$NVCC" -dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -1)
    [[ -n $here ]] && CUDA_HOME=$(dirname "$here")
  fi
fi
HOST_LIB=""
for c in "$NVSHMEM_LIB"/libnvshmem_host.so "$NVSHMEM_LIB"/libnvshmem_host.so.[0-9]*; do
  [[ -f $c ]] && { HOST_LIB=$c; break; }
done
[[ -n $HOST_LIB ]] || fail "no libnvshmem_host.so* in $NVSHMEM_LIB"
[[ -f $NVSHMEM_LIB/libnvshmem_device.a ]] || fail "no libnvshmem_device.a in $NVSHMEM_LIB"
ln -sf "$HOST_LIB" "$LINKLIB/libnvshmem_host.so"   # the wheel has libnvshmem_host.so.3 only
if [[ -z ${LIBCUDA:-} ]]; then
  for c in "$CUDA_HOME"/lib64/stubs/libcuda.so "$CUDA_HOME"/targets/*/lib/stubs/libcuda.so \
           $(ldconfig -p 2>/dev/null | awk '/libcuda\.so/ && /x86-64/ {print $NF}') \
           /usr/local/nvidia/lib64/libcuda.so* /usr/lib/x86_64-linux-gnu/libcuda.so* /usr/lib64/libcuda.so*; do
    [[ -f $c ]] && { LIBCUDA=$c; break; }
  done
fi
if [[ -n ${LIBCUDA:-} ]]; then ln -sf "$LIBCUDA" "$LINKLIB/libcuda.so"; else say "warning: no libcuda.so found to link against; trying -lcuda as it is"; fi

{
  echo "date: $(date -u '+%F %T UTC')   host: $(hostname)"
  echo "perftest sources: $PT"
  echo "nvcc: $NVCC"; "$NVCC" --version | tail -2
  echo "CUDA_HOME: $CUDA_HOME"
  echo "NVSHMEM_HOME: $NVSHMEM_HOME"
  python3 -m pip show nvidia-nvshmem-cu13 2>/dev/null | grep -E '^(Name|Version)'
  grep -h -E 'define NVSHMEM_VENDOR_(MAJOR|MINOR|PATCH)_VERSION' -r "$NVSHMEM_HOME/include" 2>/dev/null | head -3
  echo "libnvshmem_host: $HOST_LIB"; echo "libcuda for linking: ${LIBCUDA:-(none found)}"
  echo "CUDA_VISIBLE_DEVICES: ${CUDA_VISIBLE_DEVICES-(unset)}"
  echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
  nvidia-smi -L 2>&1; nvidia-smi topo -m 2>&1 | head -6
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# ---------------------------------------------------------------------------------------------
# Build: the shim (and its test), then utils.cu once and each test, with nvcc as the perftest
# CMake does (CUDA_SEPARABLE_COMPILATION: -rdc=true; C++17; -DNVSHMEMTEST_MPI_SUPPORT; include
# dirs common/ and NVSHMEM's; links nvshmem_host, nvshmem_device, CUDA::cudart (nvcc's default,
# static) and CUDA::cuda_driver). No cmake.
build_shim || fail "the MPI shim did not build"
shim_test || fail "the MPI shim failed its own test (see $BUILD_LOG)"

INCS=(-I"$PT/common" -I"$BUILD/include" -I"$NVSHMEM_HOME/include")
cat >"$BUILD/nvmlcheck.cu" <<'EOF'
#include <nvml.h>
int main() { return (int)NVML_SUCCESS; }
EOF
if ! "$NVCC" -E "${INCS[@]}" "$BUILD/nvmlcheck.cu" -o /dev/null >>"$BUILD_LOG" 2>&1; then
  # utils.h includes <nvml.h> (for MNNVL detection with --mmap, which is not used here); the
  # toolkit here lacks it: declare the few types utils.h names (NVML_API_VERSION 11 makes utils.h
  # define the fabric-info types itself). NVML's functions are only ever dlsym'd from libnvidia-ml.
  say "nvml.h: not in nvcc's include path: using a minimal stand-in ($BUILD/include/nvml.h)"
  cat >"$BUILD/include/nvml.h" <<'EOF'
/* minimal stand-in for NVIDIA's nvml.h, written by scripts/device/nvshmem-perftest.sh */
#ifndef NVML_API_VERSION
#define NVML_API_VERSION 11
typedef enum nvmlReturn_enum { NVML_SUCCESS = 0, NVML_ERROR_UNKNOWN = 999 } nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef enum nvmlGpuP2PCapsIndex_enum { NVML_P2P_CAPS_INDEX_READ = 0 } nvmlGpuP2PCapsIndex_t;
typedef enum nvmlGpuP2PStatus_enum { NVML_P2P_STATUS_OK = 0 } nvmlGpuP2PStatus_t;
#endif
EOF
fi

NVCC_FLAGS=(-O3 -std=c++17 -rdc=true -arch="$ARCH" -Xcompiler -fPIC -DNVSHMEMTEST_MPI_SUPPORT "${INCS[@]}")
LINK_FLAGS=(-L"$LINKLIB" -L"$NVSHMEM_LIB" -lnvshmem_host -lnvshmem_device -lcuda -ldl
            -Xlinker "-rpath=$NVSHMEM_LIB" -Xlinker "-rpath=$RTLIB")

step() {  # NAME CMD...: run a build step, its output to the build log; on failure its last 20 lines
  local name=$1 t=$SECONDS rc; shift
  { echo; echo "== $name"; printf '%q ' "$@"; echo; } >>"$BUILD_LOG"
  "$@" >"$WORK/step.log" 2>&1; rc=$?
  cat "$WORK/step.log" >>"$BUILD_LOG"
  if ((rc)); then say "== build $name: FAILED (exit $rc), last 20 lines:"; tail -n 20 "$WORK/step.log"; return 1; fi
  say "== build $name: ok in $((SECONDS - t)) s"
}

BUILT=()
if step utils.o "$NVCC" "${NVCC_FLAGS[@]}" -c "$PT/common/utils.cu" -o "$BUILD/utils.o"; then
  for t in "${TESTS[@]}"; do
    step "$t" "$NVCC" "${NVCC_FLAGS[@]}" "$PT/device/pt-to-pt/$t.cu" "$BUILD/utils.o" \
      -o "$BUILD/$t" "${LINK_FLAGS[@]}" && BUILT+=("$t")
  done
fi
say "== built: ${BUILT[*]:-nothing} ($(elapsed) s)"

# ---------------------------------------------------------------------------------------------
# Runs: two ranks, one per GPU. A rank that fails ends the other; nothing outlives its timeout.
run_pair() {  # TEST TAG ARGS...: one run, appended to $OUT/TEST.txt
  local test=$1 tag=$2; shift 2
  local exe=$BUILD/$test txt=$OUT/$test.txt left limit dir r o start rcs=("" "") alive killed ended why
  if [[ ! -x $exe ]]; then echo "== $test $tag: not built" | tee -a "$txt"; return; fi
  left=$((BUDGET_S - $(elapsed))); limit=$((left < TIMEOUT_S ? left : TIMEOUT_S))
  if ((limit < 20)); then echo "== $test $tag: skipped, no time left ($(elapsed) s of $BUDGET_S)" | tee -a "$txt"; return; fi
  dir=$(mktemp -d "$WORK/shim.XXXXXX")
  { echo "===== $test [$tag] $*"; echo "(2 ranks; timeout $limit s each; UID bootstrap through the MPI shim)"; } >>"$txt"
  start=$SECONDS; PIDS=(); killed=0; ended=-1
  for r in 0 1; do
    env -u NVSHMEMTEST_USE_MPI_LAUNCHER -u NVSHMEM_TEST_CUBIN_LIBRARY \
      SHIM_RANK=$r SHIM_SIZE=2 SHIM_DIR="$dir" SHIM_TIMEOUT_S=60 \
      NVSHMEMTEST_USE_UID_BOOTSTRAP=1 \
      NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME="${NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME:-lo}" \
      NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 \
      LD_LIBRARY_PATH="$RTLIB:$NVSHMEM_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      timeout -k 10 "$limit" "$exe" "$@" >"$LOGS/$test.$tag.rank$r.log" 2>&1 &
    PIDS+=($!)
  done
  while :; do
    alive=0
    for r in 0 1; do
      [[ -n ${rcs[r]} ]] && continue
      if kill -0 "${PIDS[r]}" 2>/dev/null; then alive=1; else wait "${PIDS[r]}" 2>/dev/null; rcs[r]=$?; fi
    done
    ((alive)) || break
    for r in 0 1; do  # one rank failed: end the other (TERM, then KILL 10 s later via timeout -k)
      o=$((1 - r))
      if ((!killed)) && [[ -n ${rcs[r]} && ${rcs[r]} != 0 && -z ${rcs[o]} ]]; then
        echo "== $test [$tag]: rank $r exited ${rcs[r]}: ending rank $o"
        kill -TERM "${PIDS[o]}" 2>/dev/null; killed=1; ended=$o
      fi
    done
    sleep 0.2
  done 2>/dev/null  # (bash's own "Killed" notices of ranks ended with SIGKILL)
  PIDS=(); rm -rf "$dir"
  for r in 0 1; do
    why=""
    if ((r == ended)); then why=" (ended by this script: the other rank had failed)"
    elif [[ ${rcs[r]} == 124 || ${rcs[r]} == 137 ]]; then why=" (timed out after $limit s)"; fi
    { echo "----- rank $r: exit ${rcs[r]}$why"; cat "$LOGS/$test.$tag.rank$r.log"; } >>"$txt"
  done
  echo >>"$txt"
  echo "== $test [$tag]: exits ${rcs[0]}/${rcs[1]} in $((SECONDS - start)) s"
}

SWEEP=(-b 4 -e 256M -f 4)
if [[ $MODE != --build-only ]]; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  ((ngpu >= 2)) || echo "warning: $ngpu GPU(s) visible: both PEs will share GPU 0"
  for t in "${TESTS[@]}"; do : >"$OUT/$t.txt"; done
  run_pair shmem_put_bw c4t1024 "${SWEEP[@]}" -n 200 -w 20 -c 4 -t 1024
  run_pair shmem_put_bw c32t512 "${SWEEP[@]}" -n 200 -w 20 -c 32 -t 512
  run_pair shmem_get_bw c4t1024 "${SWEEP[@]}" -n 200 -w 20 -c 4 -t 1024
  run_pair shmem_get_bw c32t512 "${SWEEP[@]}" -n 200 -w 20 -c 32 -t 512
  run_pair shmem_put_signal_ping_pong_latency small -b 4 -e 1M -f 4 -n 500 -w 50
  run_pair shmem_put_signal_ping_pong_latency 4M-16M -b 4M -e 16M -f 4 -n 5 -w 1
  run_pair shmem_put_signal_ping_pong_latency 64M -b 64M -e 64M -n 3 -w 1
  run_pair shmem_put_signal_ping_pong_latency 256M -b 256M -e 256M -n 3 -w 1
fi

# ---------------------------------------------------------------------------------------------
# Extract: each run's table at 4 B, 4 KiB, 64 KiB, 1 MiB, 16 MiB, 64 MiB, 256 MiB (all rows: $OUT/*.txt).
extract() {  # FILE: per run, the rows of the rank-0 table at the chosen sizes
  awk '
    /^===== / { run = $0; sub(/^===== /, "", run); inrank0 = 0; intable = 0; next }
    /^----- rank 0/ { inrank0 = 1; next }
    /^----- rank / { inrank0 = 0; intable = 0; next }
    inrank0 && /^#[ ]*shmem_/ { intable = 1; name = $0; gsub(/[# ]/, "", name); next }
    inrank0 && intable && /^size\(B\)/ { next }
    inrank0 && intable && $1 ~ /^[0-9]+$/ {
      if ($1 == 4 || $1 == 4096 || $1 == 65536 || $1 == 1048576 || $1 == 16777216 || $1 == 67108864 || $1 == 268435456) {
        if (run != shown) { print "  " run "  [" name "]"; shown = run }
        if (name ~ /lat/) printf "    %10d B  %12.3f us round trip  (%.3f us one-way)\n", $1, $3, $3 / 2
        else printf "    %10d B  %10.2f GB/s\n", $1, $3
      }
    }
  ' "$1"
}
if [[ $MODE != --build-only ]]; then
  {
    echo "NVSHMEM perftests, 2 PEs ($(nvidia-smi -L 2>/dev/null | head -2 | cut -d'(' -f1 | paste -sd' ' -)), $(elapsed) s"
    for t in "${TESTS[@]}"; do
      echo "== $t"
      extract "$OUT/$t.txt"
      grep -h -E 'rank [01]: exit [^0]' "$OUT/$t.txt" | sed 's/^/  ! /'
    done
    echo "(BW in GB/s = 1e9 B/s; rows below 8 B x blocks move no data; latency is per round trip)"
  } >"$OUT/summary.txt"
  cat "$OUT/summary.txt"
fi

cp -r "$LOGS" "$OUT/rank-logs" 2>/dev/null
files=()
for f in build.log env.txt summary.txt "${TESTS[@]/%/.txt}" rank-logs; do [[ -e $OUT/$f ]] && files+=("$f"); done
tar -C "$OUT" -czf "$OUT/nvshmem-perftest.tgz" "${files[@]}"
rm -rf "$OUT/rank-logs"
echo "== done in $(elapsed) s: $OUT/nvshmem-perftest.tgz"
