// Shared by copy.cu and pingpong.cu (kernels.py puts it in front of each).
typedef unsigned long long u64;
typedef unsigned int u32;

// Byte k of a buffer filled with seed s is byte (k % 4), little-endian, of pattern_word(k / 4, s):
// a hash, so every word differs and a stale or misplaced byte shows. patterns.py is its numpy twin.
__device__ __forceinline__ u32 pattern_word(u64 w, u32 seed) {
    u32 x = ((u32)w * 0x9E3779B1u) ^ ((u32)(w >> 32) * 0x85EBCA77u) ^ (seed * 0xC2B2AE3Du) ^ 0x6A09E667u;
    x ^= x >> 16; x *= 0x7FEB352Du;
    x ^= x >> 15; x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

__device__ __forceinline__ unsigned char pattern_byte(u64 k, u32 seed) {
    return (unsigned char)(pattern_word(k >> 2, seed) >> ((k & 3) * 8));
}

// The SM this thread runs on (%smid): where a one-block kernel landed, for the trace (not under MPS: there a
// client reads 0 wherever its block runs, results/h200-pingpong-smem.txt).
__device__ __forceinline__ u32 sm_id() {
    u32 id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

// The GPU's nanosecond clock: one clock for every context of a GPU.
__device__ __forceinline__ u64 global_ns() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
