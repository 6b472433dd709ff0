// Writing a warpgroup's wgmma accumulators to C (M x N, half), shared by steps 2-6; step 7
// stages them in shared memory for the copy engine (stage_accumulators).
//
// Thread t of the warpgroup (warp w = t / 32 of it, lane 4 g + q) holds, of the 64 x BN block it
// computed with m64nBNk16, d[4 j + e] = D(16 w + g + 8 (e / 2), 8 j + 2 q + e % 2): two
// neighbouring columns per (j, row), written as one __half2 where both are in range and N is
// even (then the pair is 4-byte aligned).
#include <cuda_fp16.h>

template <int BN>
__device__ __forceinline__ void store_accumulators(__half* C, const float* d, int row0, int col0, int M, int N)
{
    const int t = threadIdx.x % 128, w = t / 32, g = (t % 32) / 4, q = t % 4;
    const bool pairs = N % 2 == 0;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = row0 + 16 * w + g + 8 * r, col = col0 + 8 * j + 2 * q;
            if (row >= M) continue;
            __half* out = C + (size_t)row * N + col;
            if (pairs && col + 1 < N) {
                *(__half2*)out = __floats2half2_rn(d[4 * j + 2 * r], d[4 * j + 2 * r + 1]);
            } else {
                if (col < N) out[0] = __float2half(d[4 * j + 2 * r]);
                if (col + 1 < N) out[1] = __float2half(d[4 * j + 2 * r + 1]);
            }
        }
}

// Step 7: columns 64 BOXES part .. 64 BOXES (part + 1) - 1 of a warpgroup's 64 x N accumulators,
// as half, into `stage`: BOXES boxes of 64 x 64 (8 KiB each, 1024-byte aligned), each laid out
// as the C map's 128-byte swizzle wants it -- 16-byte chunk k of row r at chunk k ^ (r % 8). The
// swizzle also spreads the warp's stores: its 8 rows g write the same chunk number, which the
// XOR sends to 8 different chunks, 32 different banks.
template <int BOXES>
__device__ __forceinline__ void stage_accumulators(__half* stage, const float* d, int part)
{
    const int t = threadIdx.x % 128, w = t / 32, g = (t % 32) / 4, q = t % 4;
    char* base = (char*)stage;
#pragma unroll
    for (int jj = 0; jj < 8 * BOXES; ++jj)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int j = 8 * BOXES * part + jj;
            const int row = 16 * w + g + 8 * r, col = 8 * jj + 2 * q;     // in this part's 64 x 64 BOXES
            unsigned off = (col / 64) * 8192 + row * 128 + (col % 64) * 2;
            off ^= ((off >> 7) & 7) << 4;
            *(__half2*)(base + off) = __floats2half2_rn(d[4 * j + 2 * r], d[4 * j + 2 * r + 1]);
        }
}
