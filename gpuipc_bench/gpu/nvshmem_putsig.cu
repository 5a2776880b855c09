// Device-initiated NVSHMEM: a ping-pong of put + signal between PE 0 and PE 1, one warp each.
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
