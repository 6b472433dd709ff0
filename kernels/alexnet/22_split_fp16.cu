// Step 22 -- float32 accuracy from the fp16 tensor cores: every product split in three.
//
// What changed from step 20: the numbers the tensor cores see. x and w are float (as for the
// fp32 steps and cuDNN's fp32 convolution, which this step competes with). Each value is
// written as two halves, v = hi + lo with hi = half(v) and lo = half(v - hi): hi holds its 11
// leading bits, lo the next 11, so hi + lo is v to about 2^-22. The copies put three channel
// blocks in every pixel and every filter position,
//     x: [x_hi | x_lo | x_hi]      w: [w_hi | w_hi | w_lo],
// and step 20's GEMM, with a float output and one change in how it sums, runs over the
// tripled channels
//     x_hi w_hi + x_lo w_hi + x_hi w_lo  =  x w - x_lo w_lo,
// each product exact in the tensor cores (11 x 11 bits) and summed in float. The dropped term
// is about 2^-22 of x w: float32-level accuracy, checked against float64 at the fp32
// tolerance. The change in the sum: the tensor cores add each product into the accumulator
// rounding toward zero, a bias that over K = 3 x 3456 terms (layer 4) reached 1.2e-5 on the
// H100 -- over the tolerance. So each slice of 64 k is summed from zero in a second set of
// registers and added to the running sums by ordinary float adds, which round to nearest: the
// biased roundings now act on sums 54 times smaller. It costs registers (a warp tile of 64 x 32,
// not step 20's 64 x 64, and one block of 8 warps per SM). (Ootomo and Yokota, 2022, showed the idea; they scale lo by 2^11 to keep it from
// falling into half's subnormal range, which matters for inputs far smaller than these: here x
// is in [0, 1) and |w| about 0.03, so a lo below 6e-5 -- half's smallest normal -- loses only
// bits that are below float's rounding of the product anyway.)
//
// Cost: three times the tensor-core work of step 20 (K grows 3x), and a 3x larger channels-last
// copy (6 bytes per input element instead of 2). The tensor cores' fp16 rate is about 15 times
// the FP32 FMA rate, so three fp16 products still cost a fifth of one float FMA product.
//
// Launch: as step 20 (to_filter_runs_split once per layer; to_padded_nhwc_split and the GEMM
// every call), the GEMM conv_split_<tile> of alexnet_tc.LAYER_KERNELS["22"][layer]; Cp passed to
// the copies is one block's channel count, and the GEMM sees 3 Cp channels per pixel.
//
// Prediction: about 3x step 20's GEMM time plus larger copies: ~3.3-3.6 ms for the five layers
// at N = 128, about twice as fast as step 17 (6.8 ms, FMA units), near cuDNN's fp32 (Winograd
// and FFT algorithms, 3.2 ms). Error against float64 ~1e-6.
#include <cuda_fp16.h>
#include <common/ptx.h>
#include "nhwc_runs.h"

// Physical chunk of logical chunk c in row `row` of a tile whose rows are CHUNKS 16-byte
// chunks long. BK = 32 (64-byte rows): rows 2i and 2i + 1 share a 128-byte line, so rows 0..7
// at chunk c fall on 16-byte slots c, 4+c, c^1, 4+(c^1), c^2, 4+(c^2), c^3, 4+(c^3) of the
// 128-byte bank window: all 8 different. BK = 64 (128-byte rows): slot c ^ (row % 8).
template <int CHUNKS>
__device__ __forceinline__ int swizzle(int row, int c) { return c ^ ((row * CHUNKS / 8) % CHUNKS); }

// Cp here is the channel count of one block; the copies hold 3 Cp channels per pixel.
extern "C" __global__ void to_padded_nhwc_split(const float* x, __half* xt, int C, int H, int W, int Cp, int Hp,
                                                int Wp, int P)
{
    extern __shared__ __align__(16) float row_s[];
    to_padded_nhwc_split3(x, xt, C, H, W, Cp, Hp, Wp, P, row_s);
}

extern "C" __global__ void to_filter_runs_split(const float* w, __half* wt, int M, int C, int R, int S, int Cp,
                                                int L, int Kp)
{
    to_filter_runs_split3(w, wt, M, C, R, S, Cp, L, Kp);
}

// y[n][m][e][f] = sum_k wt[m][k] * xt(pixel, k): an implicit GEMM of M x (N*E*F) x (R*L).
// BK: halves of k per slice (32 or 64). Arguments: Kp wt's row pitch (a multiple of BK); Q = R * L / 8 chunks of k that are real;
// Lc = L / 8 chunks per run; row_pitch = Wp * Cp halves between padded rows.
template <int BM, int BN, int WM, int WN, int STAGES, int BK>
__device__ __forceinline__ void conv_mma(const __half* __restrict__ xt, const __half* __restrict__ wt,
                                         float* __restrict__ y, unsigned char* smem, int N, int M, int Kp,
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
        // This slice's sums start from zero and are added to acc with ordinary float adds
        // (round to nearest): the tensor cores' own accumulation rounds toward zero, and
        // through all of K (3 x 3456 for layer 4) that bias alone reaches ~1e-5.
        float part[MT][NT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) part[i][j][e] = 0.0f;
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
                for (int j = 0; j < NT; ++j) mma_16816(part[i][j], a[i], b[j]);
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] += part[i][j][e];
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

// Tile shapes: BM filters x BN pixels, warp tiles WM x WN, pipeline stages, BK halves. Warp tiles
// of 64 x 32 at most: each thread holds its slice's sums beside the running ones.

// 128 x 128, warps of 64 x 32, 3 stages of 64 k: 8 warps of 64 x 32, slices of 64 k
extern "C" __global__ void __launch_bounds__(256, 1)
conv_split_128x128_k64(const __half* xt, const __half* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                       int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 128, 64, 32, 3, 64>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 96 x 128, warps of 48 x 32, 3 stages of 64 k: 8 warps, slices of 64 k: layer 1's 96 filters
extern "C" __global__ void __launch_bounds__(256, 1)
conv_split_96x128_k64(const __half* xt, const __half* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                      int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<96, 128, 48, 32, 3, 64>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}
