// Step 24 -- Winograd F(4x4, 3x3): larger tiles, fewer multiplies still, less accuracy.
//
// What changed from step 23: the tile. A 4 x 4 block of outputs from a 6 x 6 input tile takes
// 36 elementwise products where direct convolution takes 144: 4x fewer multiplies (step 23's
// F(2x2, 3x3): 2.25x). The same three kernels, with 36 transform points instead of 16, and
// the same batched GEMM (winograd_gemm.h) over them. The transforms (Lavin and Gray, 2016,
// interpolation points 0, 1, -1, 2, -2 and infinity):
//
//   B^T = | 4  0 -5  0  1  0 |    G = | 1/4     0     0 |    A^T = | 1  1  1  1  1  0 |
//         | 0 -4 -4  1  1  0 |        | -1/6 -1/6 -1/6 |          | 0  1 -1  2 -2  0 |
//         | 0  4 -4 -1  1  0 |        | -1/6  1/6 -1/6 |          | 0  1  1  4  4  0 |
//         | 0 -2 -1  2  1  0 |        | 1/24 1/12  1/6 |          | 0  1 -1  8 -8  1 |
//         | 0  2 -1 -2  1  0 |        | 1/24 -1/12 1/6 |
//         | 0  4  0 -5  0  1 |        | 0     0     1   |
//
// Their constants are larger (up to 5 in B, 8 in A; 1/24 in G), so the transformed values
// grow and cancel: each output is a signed sum whose terms are larger than the result, and
// fp32 rounds the terms. The error grows with the tile: this is the accuracy cost of the
// multiplies saved. (F(6x6, 3x3), 5.06x fewer, adds the points +-1/2 and constants from 1/90
// to 32: usually too inaccurate for fp32, so the ladder stops here.) As in step 23, the filter
// transform runs once when the launch is bound, in double, rounded once (1/6 and 1/24 have no
// exact float); layers 1 and 2 run the chapter's fastest fp32 kernel for them.
//
// Why faster: on 13 x 13 outputs, 4 x 4 tiles cover 16 x 16, so per image, filter and channel
// 36 x 16 = 576 multiplies against step 23's 784 and direct convolution's 1521: 1.36x fewer
// than step 23 (2.64x fewer than direct), and V and Mt are 36 x 16 = 576 floats per image and
// channel instead of 16 x 49 = 784: less memory traffic too.
// Why it might not be: each transform now does several times more additions per value
// (36-point tiles, 6-term sums with constants), the GEMMs have fewer columns (2,048 tiles at
// N = 128 instead of 6,272: 16 x 3 blocks per point for layer 4, still several waves once the
// 36 points are counted), and the relative error grows by roughly an order of magnitude.
//
// Launch (the filter transform once, at bind; then in this order per call):
//   winograd_filter_4x4: grid (Mp / 128, Kp), block 128
//   winograd_input_4x4:  grid (Pp / 128, Kp), block 128
//   conv_winograd_gemm:  grid (Pp / 128, Mp / 128, 36), block 256
//   winograd_output_4x4: grid (ceil(P / 128), M), block 128
// with P = N x ceil(E/4) x ceil(F/4) tiles, Pp and Mp rounded up to 128, Kp = C rounded up to 8.
//
// Prediction: layers 3-5's GEMMs are 51 GFLOP (step 23: 69); at ~42 TFLOP/s 1.2 ms, plus ~0.3
// ms of transforms: about 1.5 ms for layers 3-5, ~1.3x faster than step 23, and about 3.9 ms for
// the five layers with step 22 on layers 1 and 2. Relative error a few 1e-6.
//
// Built on winograd_gemm.h: step 23's batched GEMM (winograd_gemm_tile) and its loads of an
// input patch, here 6 x 6 (load_input_patch), and of a filter (load_filter_3x3).
#include "winograd_gemm.h"

#define TRANSFORM_BLOCK 128   // threads of the transform kernels; Pp and Mp are multiples of it
#define POINTS 36             // transform points: a 6 x 6 tile

// B^T applied to one column (or row) d0..d5.
__device__ __forceinline__ void input_1d(const float* d, float* t)
{
    t[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
    t[1] = -4.0f * (d[1] + d[2]) + d[3] + d[4];
    t[2] = 4.0f * (d[1] - d[2]) - d[3] + d[4];
    t[3] = 2.0f * (d[3] - d[1]) - d[2] + d[4];
    t[4] = 2.0f * (d[1] - d[3]) - d[2] + d[4];
    t[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

// V[xi][c][p] = (B^T d B)[xi] for tile p of channel c; zeros for c >= C or p >= P. Tile
// p = (n, th, tw) reads rows 4 th - P .. + 5 and columns 4 tw - P .. + 5 of x.
extern "C" __global__ void winograd_input_4x4(const float* __restrict__ x, float* __restrict__ V, int N, int C,
                                              int H, int W, int P, int TH, int TW, int Kp, int Pp)
{
    const int p = blockIdx.x * TRANSFORM_BLOCK + threadIdx.x;
    const int c = blockIdx.y;
    float d[6][6];
    load_input_patch<6, 4, TRANSFORM_BLOCK>(d, x, N, C, H, W, P, TH, TW);
    float t[6][6], column[6], v[6];
#pragma unroll
    for (int j = 0; j < 6; ++j) {               // columns: t = B^T d
#pragma unroll
        for (int i = 0; i < 6; ++i) column[i] = d[i][j];
        input_1d(column, v);
#pragma unroll
        for (int i = 0; i < 6; ++i) t[i][j] = v[i];
    }
#pragma unroll
    for (int i = 0; i < 6; ++i) {               // rows: (B^T d) B
        input_1d(t[i], v);
#pragma unroll
        for (int j = 0; j < 6; ++j) V[((size_t)(6 * i + j) * Kp + c) * Pp + p] = v[j];
    }
}

// G applied to one column (or row) g0..g2, in double (multiplying by the constants 1/6, 1/12,
// 1/24 rounded to double: a division would call a slow software routine on the GPU).
__device__ __forceinline__ void filter_1d(const double* g, double* u)
{
    const double sixth = 1.0 / 6.0, twelfth = 1.0 / 12.0, twenty_fourth = 1.0 / 24.0;
    u[0] = 0.25 * g[0];
    u[1] = -sixth * (g[0] + g[1] + g[2]);
    u[2] = -sixth * (g[0] - g[1] + g[2]);
    u[3] = twenty_fourth * g[0] + twelfth * g[1] + sixth * g[2];
    u[4] = twenty_fourth * g[0] - twelfth * g[1] + sixth * g[2];
    u[5] = g[2];
}

// U[xi][c][m] = (G g G^T)[xi] for filter m, channel c (zeros for m >= M or c >= C). Run once
// per layer, when its launch is bound.
extern "C" __global__ void winograd_filter_4x4(const float* __restrict__ w, float* __restrict__ U, int M, int C,
                                               int Mp, int Kp)
{
    const int m = blockIdx.x * TRANSFORM_BLOCK + threadIdx.x;
    const int c = blockIdx.y;
    double g[3][3];
    load_filter_3x3(g, w, m, c, M, C);
    double t[6][3], column[3], u[6];
#pragma unroll
    for (int s = 0; s < 3; ++s) {               // columns: G g
#pragma unroll
        for (int r = 0; r < 3; ++r) column[r] = g[r][s];
        filter_1d(column, u);
#pragma unroll
        for (int i = 0; i < 6; ++i) t[i][s] = u[i];
    }
#pragma unroll
    for (int i = 0; i < 6; ++i) {               // rows: (G g) G^T
        filter_1d(t[i], u);
#pragma unroll
        for (int j = 0; j < 6; ++j) U[((size_t)(6 * i + j) * Kp + c) * Mp + m] = (float)u[j];
    }
}

// The 36 products of each filter and tile: Mt[xi] = U[xi]^T V[xi].
extern "C" __global__ void __launch_bounds__(WG_THREADS, 2)
conv_winograd_gemm(const float* __restrict__ U, const float* __restrict__ V, float* __restrict__ Mt, int Mp,
                   int Pp, int Kp)
{
    __shared__ __align__(16) float As[2][WG_BK][WG_BM];   // U slice: As[c][m]
    __shared__ __align__(16) float Bs[2][WG_BK][WG_BN];   // V slice: Bs[c][tile]
    winograd_gemm_tile(U, V, Mt, Mp, Pp, Kp, As, Bs);
}

// A^T applied to one column (or row) q0..q5.
__device__ __forceinline__ void output_1d(const float* q, float* y)
{
    y[0] = q[0] + q[1] + q[2] + q[3] + q[4];
    y[1] = q[1] - q[2] + 2.0f * (q[3] - q[4]);
    y[2] = q[1] + q[2] + 4.0f * (q[3] + q[4]);
    y[3] = q[1] - q[2] + 8.0f * (q[3] - q[4]) + q[5];
}

// y = A^T m A for filter m and tile p: 4 x 4 outputs, those past E or F left out.
extern "C" __global__ void winograd_output_4x4(const float* __restrict__ Mt, float* __restrict__ y, int N, int M,
                                               int E, int F, int TH, int TW, int Mp, int Pp)
{
    const int p = blockIdx.x * TRANSFORM_BLOCK + threadIdx.x;
    const int m = blockIdx.y;
    const int tiles = TH * TW;
    if (p >= N * tiles) return;
    float q[6][6];
#pragma unroll
    for (int xi = 0; xi < POINTS; ++xi) q[xi / 6][xi % 6] = Mt[((size_t)xi * Mp + m) * Pp + p];
    float t[4][6], column[6], v[4];
#pragma unroll
    for (int j = 0; j < 6; ++j) {               // columns: A^T m
#pragma unroll
        for (int i = 0; i < 6; ++i) column[i] = q[i][j];
        output_1d(column, v);
#pragma unroll
        for (int i = 0; i < 4; ++i) t[i][j] = v[i];
    }
    const int n = p / tiles, tt = p - n * tiles, th = tt / TW, tw = tt - th * TW;
    float* out = y + ((size_t)n * M + m) * E * F;
#pragma unroll
    for (int i = 0; i < 4; ++i) {               // rows: (A^T m) A
        const int e = 4 * th + i;
        if (e >= E) continue;
        output_1d(t[i], v);
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (4 * tw + j < F) out[e * F + 4 * tw + j] = v[j];
    }
}
