// Writing a warpgroup's wgmma accumulators to C (M x N, half), shared by steps 2-6; step 7
// stages them in shared memory for the copy engine (stage_accumulators). C of the persistent
// steps may also be bfloat16 or float (their bf16 and tf32 builds): store_pair converts a pair
// of accumulators to C's type.
//
// Thread t of the warpgroup (warp w = t / 32 of it, lane 4 g + q) holds, of the 64 x BN block it
// computed with m64nBNk16, d[4 j + e] = D(16 w + g + 8 (e / 2), 8 j + 2 q + e % 2): two
// neighbouring columns per (j, row), written as one __half2 where both are in range and N is
// even (then the pair is 4-byte aligned).
#include <cuda_fp16.h>

// Two neighbouring accumulators into C's type at out (aligned for the pair), and one alone.
__device__ __forceinline__ void store_pair(__half* out, float a, float b) { *(__half2*)out = __floats2half2_rn(a, b); }
__device__ __forceinline__ void store_pair(float* out, float a, float b) { *(float2*)out = make_float2(a, b); }
__device__ __forceinline__ void store_one(__half* out, float a) { *out = __float2half(a); }
__device__ __forceinline__ void store_one(float* out, float a) { *out = a; }
#ifdef __CUDA_BF16_TYPES_EXIST__
__device__ __forceinline__ void store_pair(__nv_bfloat16* out, float a, float b)
{
    *(__nv_bfloat162*)out = __floats2bfloat162_rn(a, b);
}
__device__ __forceinline__ void store_one(__nv_bfloat16* out, float a) { *out = __float2bfloat16_rn(a); }
#endif

template <int BN, typename T>
__device__ __forceinline__ void store_accumulators(T* C, const float* d, int row0, int col0, int M, int N)
{
    const int t = threadIdx.x % 128, w = t / 32, g = (t % 32) / 4, q = t % 4;
    const bool pairs = N % 2 == 0;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = row0 + 16 * w + g + 8 * r, col = col0 + 8 * j + 2 * q;
            if (row >= M) continue;
            T* out = C + (size_t)row * N + col;
            if (pairs && col + 1 < N) {
                store_pair(out, d[4 * j + 2 * r], d[4 * j + 2 * r + 1]);
            } else {
                if (col < N) store_one(out, d[4 * j + 2 * r]);
                if (col + 1 < N) store_one(out + 1, d[4 * j + 2 * r + 1]);
            }
        }
}

// Step 7: columns 64 BOXES part .. 64 BOXES (part + 1) - 1 of a warpgroup's 64 x N accumulators,
// as half, into `stage`: BOXES boxes of 64 x 64 (8 KiB each, 1024-byte aligned), each laid out
// as the C map's 128-byte swizzle wants it -- 16-byte chunk k of row r at chunk k ^ (r % 8). The
// swizzle also spreads the warp's stores: its 8 rows g write the same chunk number, which the
// XOR sends to 8 different chunks, 32 different banks. A box is 64 rows of 128 bytes whatever
// C's type: 64 halves or bfloat16s, 32 floats (then a part is 32 BOXES columns).
template <int BOXES, typename T>
__device__ __forceinline__ void stage_accumulators(T* stage, const float* d, int part)
{
    constexpr int BOX_COLS = 128 / (int)sizeof(T);
    const int t = threadIdx.x % 128, w = t / 32, g = (t % 32) / 4, q = t % 4;
    char* base = (char*)stage;
#pragma unroll
    for (int jj = 0; jj < BOX_COLS / 8 * BOXES; ++jj)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int j = BOX_COLS / 8 * BOXES * part + jj;
            const int row = 16 * w + g + 8 * r, col = 8 * jj + 2 * q;     // in this part's BOXES boxes
            unsigned off = (col / BOX_COLS) * 8192 + row * 128 + (col % BOX_COLS) * (int)sizeof(T);
            off ^= ((off >> 7) & 7) << 4;
            store_pair((T*)(base + off), d[4 * j + 2 * r], d[4 * j + 2 * r + 1]);
        }
}
