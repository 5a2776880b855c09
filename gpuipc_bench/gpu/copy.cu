// Fill, verify, copy and gate kernels of every bandwidth sample (see kernels.py).

// Fill `count` ring slots: slot i (at ptr + i * stride, n bytes) with the pattern of seed + i.
// poison_tag: the first min(n, 16) bytes of each slot are inverted, for a producer's mark()
// to set right inside the timed batch (a copy that ran before the mark then fails to verify).
extern "C" __global__ void fill_ring(u64 ptr, u64 n, u64 stride, u32 seed, int poison_tag) {
    const u32 slot = blockIdx.y;
    const u32 s = seed + slot;
    unsigned char* p = (unsigned char*)(ptr + slot * stride);
    u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 step = (u64)gridDim.x * blockDim.x;
    u64 nvec = ((u64)p & 15) == 0 ? n / 16 : 0;
    uint4* v = (uint4*)p;
    for (u64 i = tid; i < nvec; i += step) {
        u64 w = i * 4;
        uint4 x = make_uint4(pattern_word(w, s), pattern_word(w + 1, s), pattern_word(w + 2, s), pattern_word(w + 3, s));
        if (poison_tag && i == 0) { x.x = ~x.x; x.y = ~x.y; x.z = ~x.z; x.w = ~x.w; }
        v[i] = x;
    }
    for (u64 k = nvec * 16 + tid; k < n; k += step) {
        unsigned char b = pattern_byte(k, s);
        p[k] = (poison_tag && k < 16) ? (unsigned char)~b : b;
    }
}

// The producer's mark: write the true first min(n, 16) bytes of one slot (seed s).
extern "C" __global__ void mark(u64 ptr, u64 n, u32 s) {
    unsigned char* p = (unsigned char*)ptr;
    for (u64 k = threadIdx.x; k < n && k < 16; k += blockDim.x) p[k] = pattern_byte(k, s);
}

__device__ __forceinline__ void note_word(u32 got, u32 want, u64 where, u64* out) {
    u32 diff = got ^ want;
    if (diff) atomicMin(out, where + (u64)((__ffs(diff) - 1) >> 3));
}

// First byte of `count` ring slots that differs from its slot's pattern: *out = slot << 40 | offset
// (the minimum over the ring), untouched when all match. xor_mask: the bytes are expected
// XORed with this little-endian word (a ping-pong responder's transformation).
extern "C" __global__ void ring_mismatch(u64 ptr, u64 n, u64 stride, u32 seed, u32 xor_mask, u64* out) {
    const u32 slot = blockIdx.y;
    const u32 s = seed + slot;
    const unsigned char* p = (const unsigned char*)(ptr + slot * stride);
    const u64 base = (u64)slot << 40;
    u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 step = (u64)gridDim.x * blockDim.x;
    u64 nvec = ((u64)p & 15) == 0 ? n / 16 : 0;
    const uint4* v = (const uint4*)p;
    for (u64 i = tid; i < nvec; i += step) {
        uint4 g = __ldcv(v + i);
        u64 w = i * 4;
        note_word(g.x, pattern_word(w, s) ^ xor_mask, base + i * 16, out);
        note_word(g.y, pattern_word(w + 1, s) ^ xor_mask, base + i * 16 + 4, out);
        note_word(g.z, pattern_word(w + 2, s) ^ xor_mask, base + i * 16 + 8, out);
        note_word(g.w, pattern_word(w + 3, s) ^ xor_mask, base + i * 16 + 12, out);
    }
    for (u64 k = nvec * 16 + tid; k < n; k += step) {
        unsigned char want = pattern_byte(k, s) ^ (unsigned char)(xor_mask >> ((k & 3) * 8));
        if (((volatile const unsigned char*)p)[k] != want) atomicMin(out, base + k);
    }
}

// Kernel copy (the SM variants and their ceiling): grid-stride, 16-byte vectors when both ends
// are aligned, loads and stores cached in L2 only (__ldcg/__stcg), as nvbandwidth's SM copy.
extern "C" __global__ void sm_copy(u64 dst, u64 src, u64 n) {
    u64 tid = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 step = (u64)gridDim.x * blockDim.x;
    u64 nvec = ((dst | src) & 15) == 0 ? n / 16 : 0;
    const uint4* s = (const uint4*)src;
    uint4* d = (uint4*)dst;
    u64 i = tid;
    for (; i + 3 * step < nvec; i += 4 * step) {
        uint4 a = __ldcg(s + i), b = __ldcg(s + i + step), c = __ldcg(s + i + 2 * step), e = __ldcg(s + i + 3 * step);
        __stcg(d + i, a); __stcg(d + i + step, b); __stcg(d + i + 2 * step, c); __stcg(d + i + 3 * step, e);
    }
    for (; i < nvec; i += step) __stcg(d + i, __ldcg(s + i));
    const unsigned char* sb = (const unsigned char*)src;
    unsigned char* db = (unsigned char*)dst;
    for (u64 k = nvec * 16 + tid; k < n; k += step) db[k] = sb[k];
}

// Blocks its stream until *flag reaches target (wrap-safe), or timeout_ns passes:
// then it writes target into *err and exits, so a lost release can never hang the GPU.
extern "C" __global__ void gate(u64 flag_ptr, u32 target, u64 err_ptr, u64 timeout_ns) {
    volatile u32* flag = (volatile u32*)flag_ptr;
    u64 t0 = global_ns();
    while ((int)(*flag - target) < 0) {
        if (global_ns() - t0 > timeout_ns) {
            *(volatile u32*)err_ptr = target;
            __threadfence_system();
            break;
        }
    }
}

// globaltimer (ns) into *out, in stream order: one clock for every context of this GPU.
extern "C" __global__ void stamp(u64 out) {
    *(volatile u64*)out = global_ns();
}
