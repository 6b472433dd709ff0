// Step 21 -- tf32: step 20 on float data, the tensor cores in their tf32 mode.
//
// What changed from step 20: the element type. x, w and y stay float (fp32 in memory, as for
// steps 1-5 and 17); the channels-last copy and the filter runs hold floats rounded to tf32
// (10 mantissa bits, cvt.rna), and the GEMM issues mma.sync.m16n8k8.tf32: 16 x 8 x 8 per
// instruction, half the k of the fp16 instruction, at half its rate. A 16-byte chunk is now
// 4 floats, a slice of 16 k is 64 bytes per row as before, so the swizzle, the cp.async
// pipeline and the tile shapes carry over; ldmatrix, made for 16-bit elements, loads 32-bit
// ones just as well for these operands: an 8 x 4 float block is an 8 x 8 block of 16-bit
// halves, and lane 4g + t receives row g, float t -- exactly a0..a3 (and b0, b1) of the tf32
// fragments (common/ptx.h). What tf32 costs: each product's operands keep 11 significant bits,
// so the result is good to about 1e-3 relative (the check's tf32 tolerance is 2e-3), where fp32
// arithmetic lands near 1e-7. cuDNN's "tf32" convolutions (PyTorch's allow_tf32) make the same
// trade.
//
// Launch: as step 20, with to_padded_nhwc_float / to_filter_runs_float and the GEMM
// conv_tf32_<tile> of alexnet_tc.LAYER_KERNELS["21"][layer];
// alexnet_tc.TILES[name].shared_bytes(4) of dynamic shared memory.
//
// Prediction: twice the fp16 step's GEMM time (half the tensor rate), plus the copies moving
// twice the bytes: about 2 ms for the five layers at N = 128, against cuDNN tf32 (channels-last)
// at about 1.45 ms; far faster than the fp32 FMA steps (step 17: 6.8 ms).
#include <common/ptx.h>
#include "nhwc_runs.h"

// Physical chunk of logical chunk c in row `row` of a tile whose rows are CHUNKS 16-byte
// chunks long. BK = 32 (64-byte rows): rows 2i and 2i + 1 share a 128-byte line, so rows 0..7
// at chunk c fall on 16-byte slots c, 4+c, c^1, 4+(c^1), c^2, 4+(c^2), c^3, 4+(c^3) of the
// 128-byte bank window: all 8 different. BK = 64 (128-byte rows): slot c ^ (row % 8).
template <int CHUNKS>
__device__ __forceinline__ int swizzle(int row, int c) { return c ^ ((row * CHUNKS / 8) % CHUNKS); }

// The copies round every value to tf32 (to nearest), so the tensor cores, which would
// otherwise drop the low 13 mantissa bits, multiply correctly rounded operands.
extern "C" __global__ void to_padded_nhwc_float(const float* x, float* xt, int C, int H, int W, int Cp, int Hp,
                                                int Wp, int P)
{
    extern __shared__ __align__(16) float row_f[];
    to_padded_nhwc<float, true>(x, xt, C, H, W, Cp, Hp, Wp, P, row_f);
}

extern "C" __global__ void to_filter_runs_float(const float* w, float* wt, int M, int C, int R, int S, int Cp,
                                                int L, int Kp)
{
    to_filter_runs<float, true>(w, wt, M, C, R, S, Cp, L, Kp);
}

// y[n][m][e][f] = sum_k wt[m][k] * xt(pixel, k): an implicit GEMM of M x (N*E*F) x (R*L).
// BK: floats of k per slice (16 or 32). Arguments: Kp wt's row pitch (a multiple of BK);
// Q = R * L / 4 chunks of k that are real; Lc = L / 4 chunks per run; row_pitch = Wp * Cp
// floats between padded rows.
template <int BM, int BN, int WM, int WN, int STAGES, int BK>
__device__ __forceinline__ void conv_mma(const float* __restrict__ xt, const float* __restrict__ wt,
                                         float* __restrict__ y, unsigned char* smem, int N, int M, int Kp,
                                         int Q, int Lc, int row_pitch, int Cp, int Hp, int Wp, int U, int E,
                                         int F)
{
    constexpr int CHUNKS = BK / 4;                      // 16-byte chunks per row of a slice
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = 32 * (BM / WM) * WARPS_N;
    constexpr int MT = WM / 16, NT = WN / 8;            // m16 x n8 tiles per warp
    constexpr int B_ROWS = BN * CHUNKS / THREADS;       // pixels each thread loads per slice
    constexpr int A_LOADS = (BM * CHUNKS + THREADS - 1) / THREADS;
    static_assert(BN * CHUNKS % THREADS == 0 && THREADS % CHUNKS == 0 && THREADS % BN == 0 && NT % 2 == 0,
                  "tile shape");
    float* As = reinterpret_cast<float*>(smem);         // [STAGES][BM][BK], swizzled chunks
    float* Bs = As + STAGES * BM * BK;                  // [STAGES][BN][BK], pixel-major

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
        float* as = As + stage * BM * BK;
        float* bs = Bs + stage * BN * BK;
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int id = tid + i * THREADS;
            if (A_LOADS * THREADS == BM * CHUNKS || id < BM * CHUNKS) {
                const int row = id / CHUNKS, c = id % CHUNKS;
                const bool ok = m0 + row < M;
                const float* src = wt + (size_t)(ok ? m0 + row : 0) * Kp + slice * BK + 4 * c;
                cp_async16(as + row * BK + 4 * swizzle<CHUNKS>(row, c), src, ok ? 16 : 0);
            }
        }
        const int koff = run * row_pitch + 4 * in_run;
        const bool k_ok = q < Q;
#pragma unroll
        for (int i = 0; i < B_ROWS; ++i) {
            const int row = tid / CHUNKS + i * (THREADS / CHUNKS);
            const bool ok = k_ok && pixel_ok[i];
            cp_async16(bs + row * BK + 4 * swizzle<CHUNKS>(row, c_mine), xt + (ok ? pixel_base[i] + koff : 0), ok ? 16 : 0);
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

        const float* as = As + (t % STAGES) * BM * BK;
        const float* bs = Bs + (t % STAGES) * BN * BK;
#pragma unroll
        for (int kk = 0; kk < BK / 8; ++kk) {    // k8 steps: two 16-byte chunks
            unsigned a[MT][4], b[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {     // matrices: rows 0-7 | 8-15, k 0-3 | 4-7 (a0..a3)
                const int row = wm * WM + i * 16 + lane % 16;
                ldmatrix_x4(a[i], as + row * BK + 4 * swizzle<CHUNKS>(row, 2 * kk + lane / 16));
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {  // matrices: pixels 0-7 k 0-3, k 4-7, pixels 8-15 ...
                const int row = wn * WN + j * 8 + lane % 8 + 8 * (lane / 16);
                unsigned r[4];
                ldmatrix_x4(r, bs + row * BK + 4 * swizzle<CHUNKS>(row, 2 * kk + (lane / 8) % 2));
                b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) mma_1688_tf32(acc[i][j], a[i], b[j]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();           // every warp is done with the slices: reuse the memory for y

    // Stage the block's outputs in shared memory (row pitch BN + 8 floats: the rows g of a
    // half-warp's 8-byte stores fall 8 banks apart), then write each filter's pixels with
    // consecutive threads.
    constexpr int CP = BN + 8;
    float* cs = reinterpret_cast<float*>(smem);
    const int g = lane / 4, tq = lane % 4;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const int row = wm * WM + i * 16 + g, col = wn * WN + j * 8 + 2 * tq;
            *reinterpret_cast<float2*>(cs + row * CP + col) = make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(cs + (row + 8) * CP + col) = make_float2(acc[i][j][2], acc[i][j][3]);
        }
    __syncthreads();
    const int jj = tid % BN, j = j0 + jj;
    if (j < NEF) {
        const int n = j / EF, p = j - n * EF;
        float* out = y + (size_t)n * M * EF + p;
        for (int m = tid / BN; m < BM && m0 + m < M; m += THREADS / BN)
            out[(size_t)(m0 + m) * EF] = cs[m * CP + jj];
    }
}

// Tile shapes: BM filters x BN pixels, warp tiles WM x WN, pipeline stages, BK floats.

// 128 x 128, warps of 64 x 32, 4 stages of 16 k: 8 warps
extern "C" __global__ void __launch_bounds__(256, 2)
conv_tf32_128x128(const float* xt, const float* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                  int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 128, 64, 32, 4, 16>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 96 x 128, warps of 48 x 32, 4 stages of 16 k: 8 warps: layer 1's 96 filters in one tile
extern "C" __global__ void __launch_bounds__(256, 2)
conv_tf32_96x128(const float* xt, const float* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                 int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<96, 128, 48, 32, 4, 16>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 128, warps of 64 x 64, 4 stages of 16 k: 4 warps of 64 x 64
extern "C" __global__ void __launch_bounds__(128, 2)
conv_tf32_128x128_w4(const float* xt, const float* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                     int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 128, 64, 64, 4, 16>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 64, warps of 64 x 32, 4 stages of 16 k: 4 warps: twice the tiles
extern "C" __global__ void __launch_bounds__(128, 3)
conv_tf32_128x64(const float* xt, const float* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                 int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 64, 64, 32, 4, 16>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 64 x 128, warps of 32 x 64, 4 stages of 16 k: 4 warps
extern "C" __global__ void __launch_bounds__(128, 3)
conv_tf32_64x128(const float* xt, const float* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                 int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<64, 128, 32, 64, 4, 16>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}
