// Writing a warpgroup's wgmma accumulators to C (M x N, half), shared by steps 2-5.
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
