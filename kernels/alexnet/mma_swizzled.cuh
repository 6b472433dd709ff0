// Step 19's implicit GEMM on the tensor cores -- a cp.async pipeline of STAGES slices into
// shared memory, fragments loaded with ldmatrix and multiplied with mma.sync (step 18), the
// outputs staged through shared memory -- and step 20's change to it: swizzled, unpadded rows
// instead of step 19's padded ones (PADDED). Steps 21 (tf32 on float data) and 22 (fp16 with
// split operands, float output) run step 20's unchanged but for the element types and, in step
// 22, how each slice is summed. Each step's file holds its kernels: the copies into the
// channels-last layout (nhwc_runs.h) and one instantiation of conv_mma per tile shape.
#pragma once
#include <cuda_fp16.h>
#include <common/ptx.h>
#include "nhwc_runs.h"
#include "mma_tile.cuh"   // zero_tiles, pixel_starts, store_tiles (step 18)

// Physical chunk of logical chunk c in row `row` of a tile whose rows are CHUNKS 16-byte
// chunks long. BK = 32 (64-byte rows): rows 2i and 2i + 1 share a 128-byte line, so rows 0..7
// at chunk c fall on 16-byte slots c, 4+c, c^1, 4+(c^1), c^2, 4+(c^2), c^3, 4+(c^3) of the
// 128-byte bank window: all 8 different. BK = 64 (128-byte rows): slot c ^ (row % 8).
template <int CHUNKS>
__device__ __forceinline__ int swizzle(int row, int c) { return c ^ ((row * CHUNKS / 8) % CHUNKS); }

// Where logical chunk c of row `row` sits: in step 20's unpadded rows, at swizzle(row, c); in
// step 19's padded rows (PADDED), at c itself.
template <int CHUNKS, bool PADDED>
__device__ __forceinline__ int chunk_slot(int row, int c) { return PADDED ? c : swizzle<CHUNKS>(row, c); }

// y[n][m][e][f] = sum_k wt[m][k] * xt(pixel, k): an implicit GEMM of M x (N*E*F) x (R*L).
// T: the element of xt and wt, __half (steps 20 and 22) or float holding tf32 (step 21); EPC = 16 /
// sizeof(T) of them make a 16-byte chunk. Out: y's element, __half (step 20) or float. SPLIT_SUMS
// (step 22): each slice is summed from zero and added to the running sums with float adds.
// BK: elements of k per slice. PADDED (step 19): rows of BK + EPC elements in shared memory
// (80 bytes for BK = 32 halves, so the 8 rows one ldmatrix phase reads start 5 chunks apart: 8
// different banks), chunks unswizzled. Arguments: Kp wt's row pitch (a multiple of BK); Q = R * L / EPC
// chunks of k that are real; Lc = L / EPC chunks per run; row_pitch = Wp * Cp elements between
// padded rows.
template <typename T, typename Out, int BM, int BN, int WM, int WN, int STAGES, int BK, bool SPLIT_SUMS = false,
          bool PADDED = false>
__device__ __forceinline__ void conv_mma(const T* __restrict__ xt, const T* __restrict__ wt,
                                         Out* __restrict__ y, unsigned char* smem, int N, int M, int Kp,
                                         int Q, int Lc, int row_pitch, int Cp, int Hp, int Wp, int U, int E,
                                         int F)
{
    constexpr int EPC = 16 / sizeof(T);                 // elements per 16-byte chunk: 8 halves, 4 floats
    constexpr int CHUNKS = BK / EPC;                    // 16-byte chunks per row of a slice
    constexpr int ROW = PADDED ? BK + EPC : BK;         // elements per row in shared memory
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = 32 * (BM / WM) * WARPS_N;
    constexpr int MT = WM / 16, NT = WN / 8;            // m16 x n8 tiles per warp
    constexpr int B_ROWS = BN * CHUNKS / THREADS;       // pixels each thread loads per slice
    constexpr int A_LOADS = (BM * CHUNKS + THREADS - 1) / THREADS;
    static_assert(BN * CHUNKS % THREADS == 0 && THREADS % CHUNKS == 0 && THREADS % BN == 0 && NT % 2 == 0,
                  "tile shape");
    T* As = reinterpret_cast<T*>(smem);                 // [STAGES][BM][ROW], swizzled chunks
    T* Bs = As + STAGES * BM * ROW;                     // [STAGES][BN][ROW], pixel-major

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, j0 = blockIdx.x * BN;
    const int EF = E * F, NEF = N * EF;
    const int slices = Kp / BK;

    // This thread's B chunks: pixels jj = tid / CHUNKS + i * (THREADS / CHUNKS), chunk c = tid % CHUNKS.
    const int c_mine = tid % CHUNKS;
    int pixel_base[B_ROWS];
    bool pixel_ok[B_ROWS];
    pixel_starts<B_ROWS, CHUNKS, THREADS>(pixel_base, pixel_ok, j0 + tid / CHUNKS, NEF, EF, F, Hp, Wp, U, Cp);
    // The run and chunk of this thread's next B chunk (q = slice * CHUNKS + c_mine), advanced
    // slice by slice in the order the slices are loaded.
    int q = c_mine, run = c_mine / Lc, in_run = c_mine - run * Lc;

    auto load_slice = [&](int slice, int stage) {
        T* as = As + stage * BM * ROW;
        T* bs = Bs + stage * BN * ROW;
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int id = tid + i * THREADS;
            if (A_LOADS * THREADS == BM * CHUNKS || id < BM * CHUNKS) {
                const int row = id / CHUNKS, c = id % CHUNKS;
                const bool ok = m0 + row < M;
                const T* src = wt + (size_t)(ok ? m0 + row : 0) * Kp + slice * BK + EPC * c;
                cp_async16(as + row * ROW + EPC * chunk_slot<CHUNKS, PADDED>(row, c), src, ok ? 16 : 0);
            }
        }
        const int koff = run * row_pitch + EPC * in_run;
        const bool k_ok = q < Q;
#pragma unroll
        for (int i = 0; i < B_ROWS; ++i) {
            const int row = tid / CHUNKS + i * (THREADS / CHUNKS);
            const bool ok = k_ok && pixel_ok[i];
            cp_async16(bs + row * ROW + EPC * chunk_slot<CHUNKS, PADDED>(row, c_mine),
                       xt + (ok ? pixel_base[i] + koff : 0), ok ? 16 : 0);
        }
        q += CHUNKS;
        in_run += CHUNKS;
        while (in_run >= Lc) { in_run -= Lc; ++run; }
    };

    float acc[MT][NT][4];
    zero_tiles(acc);

    // Prologue: STAGES - 1 slices in flight. Every iteration commits one group (empty at the
    // end), so "wait until STAGES - 2 groups remain" always means "slice t has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) load_slice(s, s);
        cp_async_commit();
    }
    for (int t = 0; t < slices; ++t) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();       // slice t visible to all; everyone is done with slice t - 1's stage
        const int next = t + STAGES - 1;
        if (next < slices) load_slice(next, next % STAGES);
        cp_async_commit();

        const T* as = As + (t % STAGES) * BM * ROW;
        const T* bs = Bs + (t % STAGES) * BN * ROW;
        // Step 22: this slice's sums start from zero and are added to acc with ordinary float
        // adds (round to nearest): the tensor cores' own accumulation rounds toward zero, and
        // through all of K (3 x 3456 for layer 4) that bias alone reaches ~1e-5.
        float part[MT][NT][4];
        if constexpr (SPLIT_SUMS) zero_tiles(part);
        float (&sums)[MT][NT][4] = SPLIT_SUMS ? part : acc;
#pragma unroll
        for (int kk = 0; kk < BK / (2 * EPC); ++kk) {    // one mma's k: 16 halves or 8 floats
            unsigned a[MT][4], b[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {     // matrices: rows 0-7 | 8-15, chunks 2kk | 2kk + 1
                const int row = wm * WM + i * 16 + lane % 16;
                ldmatrix_x4(a[i], as + row * ROW + EPC * chunk_slot<CHUNKS, PADDED>(row, 2 * kk + lane / 16));
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {  // matrices: pixels 0-7 chunk 2kk, 2kk + 1, pixels 8-15 ...
                const int row = wn * WN + j * 8 + lane % 8 + 8 * (lane / 16);
                unsigned r[4];
                ldmatrix_x4(r, bs + row * ROW + EPC * chunk_slot<CHUNKS, PADDED>(row, 2 * kk + (lane / 8) % 2));
                b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    if constexpr (EPC == 8) mma_16816(sums[i][j], a[i], b[j]);
                    else mma_1688_tf32(sums[i][j], a[i], b[j]);
                }
        }
        if constexpr (SPLIT_SUMS) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[i][j][e] += part[i][j][e];
        }
    }
    cp_async_wait<0>();
    __syncthreads();           // every warp is done with the slices: reuse the memory for y

    store_tiles<BM, BN, WM, WN>(acc, smem, y, N, M, E, F);
}
