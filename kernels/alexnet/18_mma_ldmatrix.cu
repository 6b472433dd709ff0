// Step 18 -- mma.sync with ldmatrix, on a channels-last copy with its border written out.
//
// What changed from step 16: the instructions that feed the tensor cores, and the layout.
//   1. mma.sync instead of wmma. wmma::mma_sync on a 16x16x16 tile is, on sm_90, two
//      mma.sync.m16n8k16 instructions; what wmma hides is the register layout of the
//      fragments. Written out (common/ptx.h lists it), the layout lets us load fragments
//      with ldmatrix: one instruction reads four 8x8 matrices of halves from shared memory,
//      each lane giving the address of one 16-byte row, and delivers them straight into the
//      fragment registers mma.sync wants -- 4 ldmatrix.x4 for a 64 x 16 slice of A where
//      wmma::load_matrix_sync issues its own loads per fragment. Each warp computes 64
//      filters x 32 pixels as 4 x 4 tiles of m16n8, 16 mma.sync per 16 of k.
//   2. The layout (nhwc_runs.h): the channels-last copy now has its zero border written out
//      and k is ordered (r, run of (s, c)), so each 16-byte chunk of B is one load at
//      pixel_base + offset(k) with no test of the image's border and none of the channel
//      count; step 16 tested the border for each chunk. Layer 1 (3 channels, padded to 4)
//      reads whole 16-byte chunks too: a filter row's 11 x 4 halves are contiguous, padded to
//      48. Step 16 read it 8 bytes at a time.
//   3. y is staged through shared memory as half and written with consecutive threads on
//      consecutive pixels (step 16 wrote 16 x 16 float fragments one element per lane).
// Everything else is step 16's: a 128 x 128 block tile, slices of 32 k, the next slice
// loaded into registers while the tensor cores work on this one (a double buffer), rows
// padded by 16 bytes against bank conflicts.
//
// Why it should be faster: the tensor pipe was fed by 2-byte and 8-byte loads with tests in
// between; now one 16-byte load per chunk and one ldmatrix per 8x8x4 matrices.
//
// Launch (see nhwc_runs.h): once per layer, when the launch is bound (the filters are the
// network's constants, laid out once as an inference engine does at load time; step 16 did it
// in every call, about 5-20 us a layer):
//   to_filter_runs_half:  grid ceil(M * Kp / 256), block 256
// then in every call:
//   to_padded_nhwc_half:  grid (Hp, N), block 256, dynamic shared memory C * W * 2 bytes
//   conv_mma_ldmatrix:    grid (ceil(N*E*F / 128), ceil(M / 128)), block 256,
//                         dynamic shared memory alexnet_tc.TILES[...].shared_bytes(2) (40 KB)
//
// Prediction: 1.5-2x faster than step 16 on layers 2-5, about 1.2-1.4 ms for the five layers
// at N = 128; layer 1 about 2x faster (whole chunks, no padding tests).
//
// The accumulators' zeroing, where each thread's pixels start, and the staged epilogue of
// point 3 (zero_tiles, pixel_starts, store_tiles) are in mma_tile.cuh: steps 19-22 keep them
// unchanged.
#include <cuda_fp16.h>
#include <common/ptx.h>   // mma_16816, ldmatrix_x4
#include "nhwc_runs.h"
#include "mma_tile.cuh"          // zero_tiles, pixel_starts, store_tiles

#define BK 32                  // halves of k per slice: 64 bytes per row
#define CHUNKS (BK / 8)        // 16-byte chunks per row of a slice
#define PITCH (BK + 8)         // halves per row in shared memory: 80 bytes, so the 8 rows one
                               // ldmatrix phase reads start 5 chunks apart: 8 different banks

extern "C" __global__ void to_padded_nhwc_half(const __half* x, __half* xt, int C, int H, int W, int Cp, int Hp,
                                               int Wp, int P)
{
    extern __shared__ __align__(16) __half row[];
    to_padded_nhwc<__half>(x, xt, C, H, W, Cp, Hp, Wp, P, row);
}

extern "C" __global__ void to_filter_runs_half(const __half* w, __half* wt, int M, int C, int R, int S, int Cp,
                                               int L, int Kp)
{
    to_filter_runs<__half>(w, wt, M, C, R, S, Cp, L, Kp);
}

// y[n][m][e][f] = sum_k wt[m][k] * xt(pixel, k): an implicit GEMM of M x (N*E*F) x (R*L).
// Arguments: Kp wt's row pitch (a multiple of BK); Q = R * L / 8 chunks of k that are real;
// Lc = L / 8 chunks per run; row_pitch = Wp * Cp halves between padded rows.
template <int BM, int BN, int WM, int WN>
__device__ __forceinline__ void conv_mma(const __half* __restrict__ xt, const __half* __restrict__ wt,
                                         __half* __restrict__ y, unsigned char* smem, int N, int M, int Kp,
                                         int Q, int Lc, int row_pitch, int Cp, int Hp, int Wp, int U, int E,
                                         int F)
{
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = 32 * (BM / WM) * WARPS_N;
    constexpr int MT = WM / 16, NT = WN / 8;            // m16 x n8 tiles per warp
    constexpr int B_ROWS = BN * CHUNKS / THREADS;       // pixels each thread loads per slice
    constexpr int A_LOADS = (BM * CHUNKS + THREADS - 1) / THREADS;
    static_assert(BN * CHUNKS % THREADS == 0 && THREADS % CHUNKS == 0 && THREADS % BN == 0 && NT % 2 == 0,
                  "tile shape");
    __half* As = reinterpret_cast<__half*>(smem);       // [2][BM][PITCH]
    __half* Bs = As + 2 * BM * PITCH;                 // [2][BN][PITCH], pixel-major

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

    // The next slice travels through registers: A_LOADS + B_ROWS 16-byte loads per thread.
    uint4 a_next[A_LOADS], b_next[B_ROWS];
    auto load_slice = [&](int slice) {
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int id = tid + i * THREADS;
            if (A_LOADS * THREADS == BM * CHUNKS || id < BM * CHUNKS) {
                const int row = id / CHUNKS, c = id % CHUNKS;
                a_next[i] = m0 + row < M ? *reinterpret_cast<const uint4*>(wt + (size_t)(m0 + row) * Kp +
                                                                           slice * BK + 8 * c)
                                         : make_uint4(0, 0, 0, 0);
            }
        }
        const int koff = run * row_pitch + 8 * in_run;
        const bool k_ok = q < Q;
#pragma unroll
        for (int i = 0; i < B_ROWS; ++i)
            b_next[i] = k_ok && pixel_ok[i] ? *reinterpret_cast<const uint4*>(xt + pixel_base[i] + koff)
                                            : make_uint4(0, 0, 0, 0);
        q += CHUNKS;
        in_run += CHUNKS;
        while (in_run >= Lc) { in_run -= Lc; ++run; }
    };
    auto store_slice = [&](int stage) {
        __half* as = As + stage * BM * PITCH;
        __half* bs = Bs + stage * BN * PITCH;
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int id = tid + i * THREADS;
            if (A_LOADS * THREADS == BM * CHUNKS || id < BM * CHUNKS)
                *reinterpret_cast<uint4*>(as + (id / CHUNKS) * PITCH + 8 * (id % CHUNKS)) = a_next[i];
        }
#pragma unroll
        for (int i = 0; i < B_ROWS; ++i)
            *reinterpret_cast<uint4*>(bs + (tid / CHUNKS + i * (THREADS / CHUNKS)) * PITCH + 8 * c_mine) = b_next[i];
    };

    float acc[MT][NT][4];
    zero_tiles(acc);

    // Double buffer: slice t + 1 is loaded into registers before the tensor cores start on
    // slice t, and stored to the other half of shared memory after them.
    load_slice(0);
    store_slice(0);
    __syncthreads();
    for (int t = 0; t < slices; ++t) {
        const bool more = t + 1 < slices;
        if (more) load_slice(t + 1);
        const __half* as = As + (t % 2) * BM * PITCH;
        const __half* bs = Bs + (t % 2) * BN * PITCH;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned a[MT][4], b[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {     // matrices: rows 0-7 | 8-15, k 0-7 | 8-15
                const int row = wm * WM + i * 16 + lane % 16;
                ldmatrix_x4(a[i], as + row * PITCH + 8 * (2 * kk + lane / 16));
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {  // matrices: pixels 0-7 k 0-7, k 8-15, pixels 8-15 ...
                const int row = wn * WN + j * 8 + lane % 8 + 8 * (lane / 16);
                unsigned r[4];
                ldmatrix_x4(r, bs + row * PITCH + 8 * (2 * kk + (lane / 8) % 2));
                b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) mma_16816(acc[i][j], a[i], b[j]);
        }
        if (more) store_slice((t + 1) % 2);
        __syncthreads();
    }
    // The loop ended on a barrier: every warp is done with the slices; reuse the memory for y.

    store_tiles<BM, BN, WM, WN>(acc, smem, y, N, M, E, F);
}

// 128 filters x 128 pixels, 8 warps of 64 x 32 (step 16's block tile).
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_ldmatrix(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc,
                  int row_pitch, int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 128, 64, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}
