// Step 18's parts of the tensor-core implicit GEMM that steps 19-22 keep unchanged: the warp's
// accumulators, where each thread's pixels start, and the epilogue that stages the block's
// outputs through shared memory.
#pragma once
#include <cuda_fp16.h>

// The m16n8 accumulator tiles of a warp (MT x NT of them, 4 floats per lane each), zeroed.
template <int MT, int NT>
__device__ __forceinline__ void zero_tiles(float (&acc)[MT][NT][4])
{
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
}

// Where this thread's B chunks start: pixel first + i * (THREADS / CHUNKS) for i < B_ROWS
// (first = j0 + tid / CHUNKS), its first element in the padded channels-last input
// (pixel_base) and whether it is real (pixel_ok). The caller adds tid / CHUNKS to j0: computed
// in here, the sum comes out with its operands swapped in the PTX.
template <int B_ROWS, int CHUNKS, int THREADS>
__device__ __forceinline__ void pixel_starts(int (&pixel_base)[B_ROWS], bool (&pixel_ok)[B_ROWS], int first,
                                             int NEF, int EF, int F, int Hp, int Wp, int U, int Cp)
{
#pragma unroll
    for (int i = 0; i < B_ROWS; ++i) {
        const int j = first + i * (THREADS / CHUNKS);
        pixel_ok[i] = j < NEF;
        const int n = pixel_ok[i] ? j / EF : 0, p = pixel_ok[i] ? j - n * EF : 0;
        const int e = p / F, f = p - e * F;
        pixel_base[i] = ((n * Hp + e * U) * Wp + f * U) * Cp;
    }
}

// Stage the block's BM x BN outputs in shared memory as Out (row pitch BN + 8: for half the 8
// rows of a store fall 4 banks apart, for float the rows g of a half-warp's 8-byte stores 8
// banks apart), then write each filter's pixels with consecutive threads. The caller has
// passed a barrier after the last slice: every warp is done with the memory at smem.
template <int BM, int BN, int WM, int WN, typename Out, int MT, int NT>
__device__ __forceinline__ void store_tiles(const float (&acc)[MT][NT][4], unsigned char* smem, Out* __restrict__ y,
                                            int N, int M, int E, int F)
{
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = 32 * (BM / WM) * WARPS_N;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, j0 = blockIdx.x * BN;
    const int EF = E * F, NEF = N * EF;
    constexpr int CP = BN + 8;
    Out* cs = reinterpret_cast<Out*>(smem);
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int row = wm * WM + i * 16 + g, col = wn * WN + j * 8 + 2 * tq;
            if constexpr (sizeof(Out) == 2) {
                *reinterpret_cast<__half2*>(cs + row * CP + col) = __floats2half2_rn(acc[i][j][0], acc[i][j][1]);
                *reinterpret_cast<__half2*>(cs + (row + 8) * CP + col) = __floats2half2_rn(acc[i][j][2], acc[i][j][3]);
            } else {
                *reinterpret_cast<float2*>(cs + row * CP + col) = make_float2(acc[i][j][0], acc[i][j][1]);
                *reinterpret_cast<float2*>(cs + (row + 8) * CP + col) = make_float2(acc[i][j][2], acc[i][j][3]);
            }
        }
    __syncthreads();
    const int jj = tid % BN, j = j0 + jj;
    if (j < NEF) {
        const int n = j / EF, p = j - n * EF;
        Out* out = y + (size_t)n * M * EF + p;
        for (int m = tid / BN; m < BM && m0 + m < M; m += THREADS / BN)
            out[(size_t)(m0 + m) * EF] = cs[m * CP + jj];
    }
}
