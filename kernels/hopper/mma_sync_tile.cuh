// The mma.sync part of steps 0 and 1: one warp's 64 x 32 tile of C, fed from a slice of
// 128-byte rows of A (BM rows) and B (BN rows) in shared memory, stored 128-byte swizzled.
//
// A slice row is 64 halves (128 bytes); its 16-byte chunk c is stored at chunk c ^ (row % 8), so
// the 8 rows one ldmatrix phase reads fall in 8 different groups of 4 banks. Fragment layouts:
// kernels/common/ptx.h.
#include <cuda_fp16.h>
#include <common/ptx.h>

#define SLICE_K 64            // halves of k per slice row

// Element offset of chunk c (8 halves) of row `row` in a slice, swizzled.
__device__ __forceinline__ int swizzled_chunk(int row, int c) { return row * SLICE_K + ((c ^ (row % 8)) * 8); }

// acc[i][j] (m16n8 accumulators, i along the warp's 64 rows, j along its 32 columns) += the
// warp's rows wm.. of As times its rows wn.. of Bs, over the slice's 64 k.
__device__ __forceinline__ void mma_sync_slice(float acc[4][4][4], const __half* As, const __half* Bs, int wm, int wn,
                                               int lane)
{
#pragma unroll
    for (int kk = 0; kk < SLICE_K / 16; ++kk) {
        unsigned a[4][4], b[4][2];
#pragma unroll
        for (int i = 0; i < 4; ++i) {   // A 16 x 16: lanes 0-15 rows 0-15 at chunk 2kk, 16-31 at 2kk+1
            const int row = wm + 16 * i + lane % 16;
            ldmatrix_x4(a[i], As + swizzled_chunk(row, 2 * kk + lane / 16));
        }
#pragma unroll
        for (int j = 0; j < 4; j += 2) {  // two n8 tiles: matrices (n 0-7, k lo), (n 0-7, k hi), (n 8-15, ...)
            const int row = wn + 8 * j + (lane / 16) * 8 + lane % 8;
            unsigned r[4];
            ldmatrix_x4(r, Bs + swizzled_chunk(row, 2 * kk + (lane / 8) % 2));
            b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) mma_16816(acc[i][j], a[i], b[j]);
    }
}

// Writes the warp's 64 x 32 tile whose first element is C(row0, col0); m16n8 accumulator e of
// lane 4 g + q is (g + 8 (e / 2), 2 q + e % 2).
__device__ __forceinline__ void store_warp_tile(__half* C, const float acc[4][4][4], int row0, int col0, int M, int N,
                                                int lane)
{
    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + 16 * i + g + 8 * h, col = col0 + 8 * j + 2 * q;
                if (row >= M) continue;
                if (col < N) C[(size_t)row * N + col] = __float2half(acc[i][j][2 * h]);
                if (col + 1 < N) C[(size_t)row * N + col + 1] = __float2half(acc[i][j][2 * h + 1]);
            }
}
