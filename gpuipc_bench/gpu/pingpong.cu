// Device-initiated ping-pong between two processes through IPC-mapped memory (see kernels.py).
#define PP_OK 0
#define PP_NO_ANSWER 1
#define PP_DEADLINE 2


// Result words: [0] status, [1] round that failed, [2] t_start (after round 0), [3] t_end,
// [4] the flag value last seen by the failing wait, [5] rounds asked for, [6] the SM the block ran on.
__device__ __forceinline__ void pp_fail(u64* res, int* stop, int why, u32 round, u64 seen) {
    if (atomicCAS(stop, 0, why) == 0) {
        res[1] = round;
        res[4] = seen;
    }
}

// Spin until *flag reaches target (wrap-safe) - PP_OK -, the wait passes timeout_ns - PP_NO_ANSWER -,
// (the clock is read every 64 polls, off the path of a flag that arrives)
// the launch passes deadline_ns - PP_DEADLINE -, or another thread of the block gave up.
__device__ int pp_wait_ge(volatile u32* flag, u32 target, u64 t_begin, u64 timeout_ns,
                          u64 deadline_ns, volatile int* stop, u64* seen) {
    u32 v = *flag;
    if ((int)(v - target) >= 0) return PP_OK;
    u64 t0 = global_ns();
    for (u32 n = 1;; ++n) {
        v = *flag;
        if ((int)(v - target) >= 0) return PP_OK;
        if ((n & 63) == 0) {
            u64 t = global_ns();
            *seen = v;
            if (*stop) return -1;
            if (t - t0 > timeout_ns) return PP_NO_ANSWER;
            if (t - t_begin > deadline_ns) return PP_DEADLINE;
        }
    }
}

// Block-wide copy of n bytes (16-byte vectors: both ends are 16-byte aligned by layout), every
// little-endian 4-byte word XORed with x (the responder answers with the round's number mixed in,
// so the initiator can tell an answer from its own bytes).
// fresh: the source was written by another agent since this block last looked, so bypass L1.
__device__ __forceinline__ void pp_copy(u64 dst, u64 src, u64 n, bool fresh, u32 x) {
    uint4* d = (uint4*)dst;
    const uint4* s = (const uint4*)src;
    u64 nvec = n / 16;
    for (u64 i = threadIdx.x; i < nvec; i += blockDim.x) {
        uint4 v = fresh ? __ldcv(s + i) : s[i];
        v.x ^= x; v.y ^= x; v.z ^= x; v.w ^= x;
        d[i] = v;
    }
    volatile const unsigned char* sb = (volatile const unsigned char*)src;
    unsigned char* db = (unsigned char*)dst;
    for (u64 k = nvec * 16 + threadIdx.x; k < n; k += blockDim.x) db[k] = sb[k] ^ (unsigned char)(x >> ((k & 3) * 8));
}

// One block. The initiator copies the payload into the peer's buffer, fences (system scope),
// stores the round's number into the peer's flag, then spins on its own flag for the answer;
// the responder spins on its flag, copies the payload it received back into the initiator's
// buffer with every word XORed with the round's number, fences and stores the initiator's flag. Round 0 is a handshake (both kernels are
// running); rounds 1..rounds are timed with globaltimer by the initiator.
extern "C" __global__ void pingpong(u64 my_flag, u64 peer_flag, u64 my_payload, u64 peer_payload,
                                    u64 src, u64 nbytes, u32 first, u32 rounds, int initiator,
                                    u64 timeout_ns, u64 deadline_ns, u64 result) {
    __shared__ int stop;
    u64* res = (u64*)result;
    volatile u32* mine = (volatile u32*)my_flag;
    volatile u32* theirs = (volatile u32*)peer_flag;
    const bool lead = threadIdx.x == 0;
    const u64 t_begin = global_ns();
    u64 t_start = t_begin, seen = 0;
    if (lead) stop = 0;
    __syncthreads();
    if (nbytes == 0) {  // the flags alone: one thread, no barrier on the path
        if (!lead) return;
        int s = PP_OK;
        u32 r = 0;
        for (; r <= rounds; ++r) {
            const u32 seq = first + r;
            if (initiator) *theirs = seq;
            s = pp_wait_ge(mine, seq, t_begin, timeout_ns, deadline_ns, &stop, &seen);
            if (s) break;
            if (!initiator) *theirs = seq;
            else if (r == 0) t_start = global_ns();
        }
        if (s > 0) {
            res[1] = r;
            res[4] = seen;
        }
        res[0] = s > 0 ? s : PP_OK;
        res[2] = t_start;
        res[3] = global_ns();
        res[5] = rounds;
        res[6] = sm_id();
        return;
    }
    for (u32 r = 0; r <= rounds; ++r) {
        const u32 seq = first + r;
        if (initiator) {
            if (nbytes) {
                pp_copy(peer_payload, src, nbytes, false, 0u);
                __threadfence_system();
            }
            __syncthreads();
            if (lead) {
                *theirs = seq;
                int s = pp_wait_ge(mine, seq, t_begin, timeout_ns, deadline_ns, &stop, &seen);
                if (s > 0) pp_fail(res, &stop, s, r, seen);
                else if (r == 0) t_start = global_ns();
            }
            __syncthreads();
            if (stop) break;
        } else {
            if (lead) {
                int s = pp_wait_ge(mine, seq, t_begin, timeout_ns, deadline_ns, &stop, &seen);
                if (s > 0) pp_fail(res, &stop, s, r, seen);
                else if (nbytes) __threadfence_system();  // acquire: the payload came before the flag
            }
            __syncthreads();
            if (stop) break;
            if (nbytes) {
                pp_copy(peer_payload, my_payload, nbytes, true, seq);
                __threadfence_system();
            }
            __syncthreads();
            if (lead) *theirs = seq;
        }
    }
    if (lead) {
        res[0] = stop;
        res[2] = t_start;
        res[3] = global_ns();
        res[5] = rounds;
        res[6] = sm_id();
    }
}

// LL ("low latency", as NCCL's protocol of that name): every 8-byte word carries 4 payload bytes
// and the round's number, stored in one single-copy-atomic store, so no fence is needed: the
// receiver waits until every word of its part shows the round's number. The initiator sends
// its words and waits for all of them to come back (one barrier a round); each responder
// thread answers each word as soon as it arrives, its data XORed with the round's number.
__device__ int pp_wait_word(volatile u64* word, u32 target, u64 t_begin, u64 timeout_ns,
                            u64 deadline_ns, volatile int* stop, u64* value) {
    u64 v = *word;
    if ((u32)(v >> 32) == target) { *value = v; return PP_OK; }
    u64 t0 = global_ns();
    for (u32 n = 1;; ++n) {
        v = *word;
        if ((u32)(v >> 32) == target) { *value = v; return PP_OK; }
        if ((n & 63) == 0) {
            u64 t = global_ns();
            *value = v;
            if (*stop) return -1;
            if (t - t0 > timeout_ns) return PP_NO_ANSWER;
            if (t - t_begin > deadline_ns) return PP_DEADLINE;
        }
    }
}

extern "C" __global__ void pingpong_ll(u64 my_ll, u64 peer_ll, u64 src, u32 nwords, u32 first,
                                       u32 rounds, int initiator, u64 timeout_ns, u64 deadline_ns,
                                       u64 result) {
    __shared__ int stop;
    u64* res = (u64*)result;
    volatile u64* mine = (volatile u64*)my_ll;
    volatile u64* theirs = (volatile u64*)peer_ll;
    const u32* data = (const u32*)src;
    const bool lead = threadIdx.x == 0;
    const u64 t_begin = global_ns();
    u64 t_start = t_begin, value = 0;
    // The initiator's first word in a register: no load between an echo and the next send.
    const u32 own = (initiator && threadIdx.x < nwords) ? data[threadIdx.x] : 0;
    if (lead) stop = 0;
    __syncthreads();
    for (u32 r = 0; r <= rounds; ++r) {
        const u32 seq = first + r;
        if (initiator) {
            for (u32 i = threadIdx.x; i < nwords; i += blockDim.x)
                theirs[i] = ((u64)seq << 32) | (i == threadIdx.x ? own : data[i]);
            for (u32 i = threadIdx.x; i < nwords; i += blockDim.x) {
                int s = pp_wait_word(mine + i, seq, t_begin, timeout_ns, deadline_ns, &stop, &value);
                if (s > 0) pp_fail(res, &stop, s, r, value);
                if (s) break;
            }
            __syncthreads();
            if (stop) break;
            if (r == 0 && lead) t_start = global_ns();
        } else {
            bool quit = false;
            for (u32 i = threadIdx.x; i < nwords; i += blockDim.x) {
                int s = pp_wait_word(mine + i, seq, t_begin, timeout_ns, deadline_ns, &stop, &value);
                if (s > 0) pp_fail(res, &stop, s, r, value);
                if (s) { quit = true; break; }
                theirs[i] = value ^ (u64)seq;  // the data word XORed with the round
            }
            if (quit) break;
        }
    }
    __syncthreads();
    if (lead) {
        res[0] = stop;
        res[2] = t_start;
        res[3] = global_ns();
        res[5] = rounds;
        res[6] = sm_id();
    }
}

