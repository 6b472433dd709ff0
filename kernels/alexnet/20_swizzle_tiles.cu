// Step 20 -- swizzled shared memory instead of padded rows, and a tile shape per layer.
//
// What changed from step 19: two things that only pay together.
//   1. Swizzle. Step 19 pads every 64-byte row of a slice by 16 bytes so that the 8 rows one
//      ldmatrix phase reads start in 8 different bank groups. Here the rows are not padded;
//      instead the 16-byte chunk c of row `row` is stored at chunk c ^ ((row >> 1) & 3). Rows
//      0..7 at one logical chunk land on 8 different physical chunks of the 128-byte bank
//      window (see swizzle<CHUNKS>() below), so ldmatrix and cp.async stay conflict-free, and a stage
//      takes 20% less shared memory: 64 KB for 4 stages of a 128 x 128 tile instead of 80 KB.
//   2. Tiles per layer. The freed memory allows other tile shapes at the same occupancy, and
//      the layers want different ones: layer 1 has M = 96 filters (a 128-row tile leaves a
//      quarter of every tensor-core instruction idle), layer 5 makes 338 tiles of 128 x 128,
//      1.3 waves of 264 resident blocks. The kernel is a template; the host picks one
//      instantiation per layer (alexnet.MMA_TILES, chosen by timing every candidate on the
//      H100 with tools/tune_fast.py).
//
// Why it should be faster: less shared memory per block and fuller waves. Why it might not:
// with 2 blocks of 8 warps per SM the registers (about 128 per thread) already cap the
// occupancy, so the saved memory buys nothing by itself; the gain is in the tile choice.
//
// Launch: as step 18 (to_filter_runs_half once per layer; to_padded_nhwc_half and the GEMM
// every call), the GEMM conv_mma_<tile> of alexnet_tc.LAYER_KERNELS["20"][layer] with
//   grid (ceil(N*E*F / BN), ceil(M / BM)), block 32 * warps,
//   dynamic shared memory alexnet_tc.TILES[name].shared_bytes(2).
// Tiles with BK = 64 (slices of 64 k, 128-byte rows, swizzled c ^ (row % 8)) take half the
// barriers and waits per k of those with BK = 32; whether that pays is measured.
//
// Prediction: layer 1 ~20% faster (96-row tiles), layer 5 ~25% faster (smaller tiles, fuller
// waves), the others within 5% of step 19.
// (Measured on the H100 with tools/tune_fast.py: step 19's own tile with swizzled rows instead of
// padded ones was already about 10% faster,
// and the tiles chosen per layer another 10%; the 96-row tile helped layer 1 only a little.)
#include <cuda_fp16.h>
#include <common/ptx.h>
#include "nhwc_runs.h"

// Physical chunk of logical chunk c in row `row` of a tile whose rows are CHUNKS 16-byte
// chunks long. BK = 32 (64-byte rows): rows 2i and 2i + 1 share a 128-byte line, so rows 0..7
// at chunk c fall on 16-byte slots c, 4+c, c^1, 4+(c^1), c^2, 4+(c^2), c^3, 4+(c^3) of the
// 128-byte bank window: all 8 different. BK = 64 (128-byte rows): slot c ^ (row % 8).
template <int CHUNKS>
__device__ __forceinline__ int swizzle(int row, int c) { return c ^ ((row * CHUNKS / 8) % CHUNKS); }

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
// BK: halves of k per slice (32 or 64). Arguments: Kp wt's row pitch (a multiple of BK); Q = R * L / 8 chunks of k that are real;
// Lc = L / 8 chunks per run; row_pitch = Wp * Cp halves between padded rows.
template <int BM, int BN, int WM, int WN, int STAGES, int BK>
__device__ __forceinline__ void conv_mma(const __half* __restrict__ xt, const __half* __restrict__ wt,
                                         __half* __restrict__ y, unsigned char* smem, int N, int M, int Kp,
                                         int Q, int Lc, int row_pitch, int Cp, int Hp, int Wp, int U, int E,
                                         int F)
{
    constexpr int CHUNKS = BK / 8;                      // 16-byte chunks per row of a slice
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = 32 * (BM / WM) * WARPS_N;
    constexpr int MT = WM / 16, NT = WN / 8;            // m16 x n8 tiles per warp
    constexpr int B_ROWS = BN * CHUNKS / THREADS;       // pixels each thread loads per slice
    constexpr int A_LOADS = (BM * CHUNKS + THREADS - 1) / THREADS;
    static_assert(BN * CHUNKS % THREADS == 0 && THREADS % CHUNKS == 0 && THREADS % BN == 0 && NT % 2 == 0,
                  "tile shape");
    __half* As = reinterpret_cast<__half*>(smem);       // [STAGES][BM][BK], swizzled chunks
    __half* Bs = As + STAGES * BM * BK;                 // [STAGES][BN][BK], pixel-major

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, j0 = blockIdx.x * BN;
    const int EF = E * F, NEF = N * EF;
    const int slices = Kp / BK;

    // This thread's B chunks: pixels jj = tid / CHUNKS + i * (THREADS / CHUNKS), chunk c = tid % CHUNKS.
    const int c_mine = tid % CHUNKS;
    int pixel_base[B_ROWS];
    bool pixel_ok[B_ROWS];
#pragma unroll
    for (int i = 0; i < B_ROWS; ++i) {
        const int j = j0 + tid / CHUNKS + i * (THREADS / CHUNKS);
        pixel_ok[i] = j < NEF;
        const int n = pixel_ok[i] ? j / EF : 0, p = pixel_ok[i] ? j - n * EF : 0;
        const int e = p / F, f = p - e * F;
        pixel_base[i] = ((n * Hp + e * U) * Wp + f * U) * Cp;
    }
    // The run and chunk of this thread's next B chunk (q = slice * CHUNKS + c_mine), advanced
    // slice by slice in the order the slices are loaded.
    int q = c_mine, run = c_mine / Lc, in_run = c_mine - run * Lc;

    auto load_slice = [&](int slice, int stage) {
        __half* as = As + stage * BM * BK;
        __half* bs = Bs + stage * BN * BK;
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int id = tid + i * THREADS;
            if (A_LOADS * THREADS == BM * CHUNKS || id < BM * CHUNKS) {
                const int row = id / CHUNKS, c = id % CHUNKS;
                const bool ok = m0 + row < M;
                const __half* src = wt + (size_t)(ok ? m0 + row : 0) * Kp + slice * BK + 8 * c;
                cp_async16(as + row * BK + 8 * swizzle<CHUNKS>(row, c), src, ok ? 16 : 0);
            }
        }
        const int koff = run * row_pitch + 8 * in_run;
        const bool k_ok = q < Q;
#pragma unroll
        for (int i = 0; i < B_ROWS; ++i) {
            const int row = tid / CHUNKS + i * (THREADS / CHUNKS);
            const bool ok = k_ok && pixel_ok[i];
            cp_async16(bs + row * BK + 8 * swizzle<CHUNKS>(row, c_mine), xt + (ok ? pixel_base[i] + koff : 0), ok ? 16 : 0);
        }
        q += CHUNKS;
        in_run += CHUNKS;
        while (in_run >= Lc) { in_run -= Lc; ++run; }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

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

        const __half* as = As + (t % STAGES) * BM * BK;
        const __half* bs = Bs + (t % STAGES) * BN * BK;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned a[MT][4], b[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {     // matrices: rows 0-7 | 8-15, k 0-7 | 8-15
                const int row = wm * WM + i * 16 + lane % 16;
                ldmatrix_x4(a[i], as + row * BK + 8 * swizzle<CHUNKS>(row, 2 * kk + lane / 16));
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {  // matrices: pixels 0-7 k 0-7, k 8-15, pixels 8-15 ...
                const int row = wn * WN + j * 8 + lane % 8 + 8 * (lane / 16);
                unsigned r[4];
                ldmatrix_x4(r, bs + row * BK + 8 * swizzle<CHUNKS>(row, 2 * kk + (lane / 8) % 2));
                b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) mma_16816(acc[i][j], a[i], b[j]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();           // every warp is done with the slices: reuse the memory for y

    // Stage the block's outputs as half in shared memory (row pitch BN + 8: the 8 rows of a
    // store fall 4 banks apart), then write each filter's pixels with consecutive threads.
    constexpr int CP = BN + 8;
    __half* cs = reinterpret_cast<__half*>(smem);
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int row = wm * WM + i * 16 + g, col = wn * WN + j * 8 + 2 * tq;
            *reinterpret_cast<__half2*>(cs + row * CP + col) = __floats2half2_rn(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<__half2*>(cs + (row + 8) * CP + col) = __floats2half2_rn(acc[i][j][2], acc[i][j][3]);
        }
    __syncthreads();
    const int jj = tid % BN, j = j0 + jj;
    if (j < NEF) {
        const int n = j / EF, p = j - n * EF;
        __half* out = y + (size_t)n * M * EF + p;
        for (int m = tid / BN; m < BM && m0 + m < M; m += THREADS / BN)
            out[(size_t)(m0 + m) * EF] = cs[m * CP + jj];
    }
}

// Tile shapes: BM filters x BN pixels, warp tiles WM x WN, pipeline stages, BK.

// 128 x 128, warps of 64 x 32, 4 stages of 32 k: 8 warps: step 19's tile
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_128x128(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                 int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 128, 64, 32, 4, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 96 x 128, warps of 48 x 32, 4 stages of 32 k: 8 warps: layer 1's 96 filters in one tile
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_96x128(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<96, 128, 48, 32, 4, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 128, warps of 64 x 64, 4 stages of 32 k: 4 warps of 64 x 64: fewer ldmatrix per mma
extern "C" __global__ void __launch_bounds__(128, 2)
conv_mma_128x128_w4(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                    int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 128, 64, 64, 4, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 64, warps of 64 x 32, 4 stages of 32 k: 4 warps: twice the tiles
extern "C" __global__ void __launch_bounds__(128, 3)
conv_mma_128x64(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 64, 64, 32, 4, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 64 x 128, warps of 32 x 64, 4 stages of 32 k: 4 warps
extern "C" __global__ void __launch_bounds__(128, 3)
conv_mma_64x128(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<64, 128, 32, 64, 4, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 256, warps of 64 x 64, 3 stages of 32 k: 8 warps of 64 x 64: half the tiles
extern "C" __global__ void __launch_bounds__(256, 1)
conv_mma_128x256(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                 int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 256, 64, 64, 3, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 128, warps of 64 x 64, 3 stages of 64 k: 4 warps, slices of 64 k: half the barriers
extern "C" __global__ void __launch_bounds__(128, 2)
conv_mma_128x128_w4_k64(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                        int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 128, 64, 64, 3, 64>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 128, warps of 64 x 32, 3 stages of 64 k: 8 warps, slices of 64 k
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_128x128_k64(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                     int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 128, 64, 32, 3, 64>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 96 x 128, warps of 48 x 32, 3 stages of 64 k: 8 warps, slices of 64 k
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_96x128_k64(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                    int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<96, 128, 48, 32, 3, 64>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 64 x 128, warps of 32 x 64, 4 stages of 64 k: 4 warps, slices of 64 k
extern "C" __global__ void __launch_bounds__(128, 2)
conv_mma_64x128_k64(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                    int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<64, 128, 32, 64, 4, 64>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}
