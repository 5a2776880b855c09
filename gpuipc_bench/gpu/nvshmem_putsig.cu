// Device-initiated NVSHMEM. putsig_pingpong: a ping-pong of put + signal between PE 0 and PE 1, one warp each.
// Round k: PE 0 puts its payload into PE 1's `dest` with PE 1's `sig` set to k
// (nvshmemx_putmem_signal_nbi_warp), then waits until its own `sig` reaches k; PE 1 waits
// for k, then answers the same way. Rounds are numbered on from `first` across launches, so
// a signal left by an earlier launch never satisfies a later wait.
// Built with nvcc -rdc and linked with NVSHMEM's device library (scenarios/nvshmem.py).
#include <nvshmem.h>
#include <nvshmemx.h>

extern "C" __global__ void putsig_pingpong(char *dest, const char *payload, size_t nbytes, uint64_t *sig,
                                           int rounds, unsigned long long first, int me) {
    const int peer = 1 - me;
    for (unsigned long long k = first; k < first + rounds; ++k) {
        if (me == 1) {
            nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, k);
            __syncwarp();
        }
        nvshmemx_putmem_signal_nbi_warp(dest, payload, nbytes, sig, k, NVSHMEM_SIGNAL_SET, peer);
        if (me == 0) {
            nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, k);
            __syncwarp();
        }
    }
    nvshmem_quiet();
}

// Device-initiated bulk transfers, as GPU-initiated code (DeepEP-style) moves data: one launch
// per message; each block moves its share with nvshmemx_putmem_block (stores into the peer PE's
// symmetric memory) or nvshmemx_getmem_block (loads from it), then nvshmem_quiet so that the
// kernel ends only once its transfers are complete.
__device__ void block_share(size_t nbytes, size_t *start, size_t *count) {
    size_t per = (nbytes + gridDim.x - 1) / gridDim.x;
    per = (per + 15) & ~(size_t)15;  // 16-byte aligned shares
    *start = per * blockIdx.x;
    *count = *start < nbytes ? min(per, nbytes - *start) : 0;
}

// get = 0: put (dest on the peer PE, src here); get = 1: get (dest here, src on the peer PE).
extern "C" __global__ void bulk_block(char *dest, const char *src, size_t nbytes, int peer, int get) {
    size_t start, count;
    block_share(nbytes, &start, &count);
    if (count && get) nvshmemx_getmem_block(dest + start, src + start, count, peer);
    else if (count) nvshmemx_putmem_block(dest + start, src + start, count, peer);
    __syncthreads();
    if (threadIdx.x == 0) nvshmem_quiet();
}
