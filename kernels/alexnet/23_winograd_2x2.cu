// Step 23 -- Winograd F(2x2, 3x3) for the 3x3 layers (3, 4, 5): fewer multiplies, in fp32 on
// the FMA units.
//
// What changed from step 17: the algorithm, not the loop. Direct convolution spends 9
// multiplies per output per channel. Winograd's minimal filtering (Lavin and Gray, 2016)
// computes a 2 x 2 block of outputs from a 4 x 4 input tile d and the 3 x 3 filter g as
//
//     Y = A^T [ (G g G^T) (.) (B^T d B) ] A          ((.): elementwise, 16 products)
//
// 16 multiplies for 4 outputs instead of 36: 2.25x fewer. Summed over the channels, the 16
// elementwise products become 16 independent matrix products, one per transform point xi:
// Mt[xi] (M x tiles) = U[xi]^T (M x C) V[xi] (C x tiles). So the step is three kernels:
//   1. winograd_input_2x2: V[xi][c][tile] = B^T d B, for every input tile (4 x 4, overlapping
//      by 2; the zero padding read as zeros) -- additions and subtractions only;
//   2. conv_winograd_gemm (winograd_gemm.h): the 16 matrix products, tiled as step 17's GEMM,
//      all multiplies here, each an fp32 FMA;
//   3. winograd_output_2x2: y = A^T m A per tile, additions only, the last row or column of
//      tiles cut where E or F is odd (13 x 13 outputs: 7 x 7 tiles cover 14 x 14).
// The filter transform U = G g G^T (winograd_filter_2x2) is done once, when a layer's launch
// is bound: like step 18's filter runs (and cuDNN's), it is a constant of the model; the record
// times it on its own. It is computed in double and rounded once, as a stored constant can be.
// The chapter's steps do not fuse a bias or ReLU (they time the convolutions alone), nor
// does this one. Layers 1 and 2 (11 x 11 stride 4, 5 x 5) are not 3 x 3 stride 1: they run
// the chapter's fastest fp32 kernel for them (alexnet_winograd.FALLBACK says which).
//
// Why faster: on 13 x 13 outputs the 7 x 7 tiles do 16 x 49 = 784 multiplies per image,
// filter and channel where direct convolution does 9 x 169 = 1521: 1.94x fewer (not 2.25x,
// the 14th row and column of tiles is wasted). The GEMM is step 17's loop without the im2col,
// so it should run at least at step 17's rate.
// Why it might not be: V and Mt go through device memory (each 16 x the tile count x C or M
// floats: 154 MB apiece for layer 4 at N = 128, about 1.3 GB written and read for layers 3-5),
// and the GEMMs' K = C (256 or 384) is short next to step 17's 2304-3456, so each tile's first
// load and write-back weigh more. And the accuracy: B^T d B and A^T m A add and subtract up to
// 4 and 9 terms per value, a few more roundings per output than a dot product's.
//
// Launch (the filter transform once, at bind; then in this order per call):
//   winograd_filter_2x2: grid (Mp / 128, Kp), block 128
//   winograd_input_2x2:  grid (Pp / 128, Kp), block 128
//   conv_winograd_gemm:  grid (Pp / 128, Mp / 128, 16), block 256
//   winograd_output_2x2: grid (ceil(P / 128), M), block 128
// with P = N x ceil(E/2) x ceil(F/2) tiles, Pp and Mp rounded up to 128, Kp = C rounded up to 8.
//
// Prediction: layers 3-5's GEMMs are 69 GFLOP (134 for direct convolution); at step 17's
// ~42 TFLOP/s that is 1.6 ms, plus ~0.45 ms moving V and Mt at ~3 TB/s: about 2 ms for layers 3-5,
// 1.6x faster than step 17 on the same FMA units, but no faster than step 22 (1.9 ms), whose
// multiplies run on the tensor cores. With step 22 on layers 1 and 2, about 4.4 ms for the five
// layers at N = 128. Relative error a few 1e-7, like step 17's.
//
// Built on winograd_gemm.h: the batched GEMM (winograd_gemm_tile, step 17's loop without the
// im2col) and this step's loads of an input patch and a filter (load_input_patch,
// load_filter_3x3), there because step 24 keeps them.
#include "winograd_gemm.h"

#define TRANSFORM_BLOCK 128   // threads of the transform kernels; Pp and Mp are multiples of it
#define POINTS 16             // transform points: a 4 x 4 tile

// B^T d B, one dimension: the rows (or columns) t0..t3 of B^T applied to d0..d3.
__device__ __forceinline__ void input_1d(float d0, float d1, float d2, float d3, float* t)
{
    t[0] = d0 - d2;
    t[1] = d1 + d2;
    t[2] = d2 - d1;
    t[3] = d1 - d3;
}

// V[xi][c][p] = (B^T d B)[xi] for tile p of channel c; zeros for c >= C or p >= P (the GEMM's
// padding). Tile p = (n, th, tw) reads rows 2 th - P .. + 3 and columns 2 tw - P .. + 3 of x.
extern "C" __global__ void winograd_input_2x2(const float* __restrict__ x, float* __restrict__ V, int N, int C,
                                              int H, int W, int P, int TH, int TW, int Kp, int Pp)
{
    const int p = blockIdx.x * TRANSFORM_BLOCK + threadIdx.x;
    const int c = blockIdx.y;
    float d[4][4];
    load_input_patch<4, 2, TRANSFORM_BLOCK>(d, x, N, C, H, W, P, TH, TW);
    float t[4][4], v[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {               // columns: t = B^T d
        input_1d(d[0][j], d[1][j], d[2][j], d[3][j], v);
#pragma unroll
        for (int i = 0; i < 4; ++i) t[i][j] = v[i];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {               // rows: (B^T d) B
        input_1d(t[i][0], t[i][1], t[i][2], t[i][3], v);
#pragma unroll
        for (int j = 0; j < 4; ++j) V[((size_t)(4 * i + j) * Kp + c) * Pp + p] = v[j];
    }
}

// G g G^T, one dimension, in double: u0 = g0, u1 = (g0 + g1 + g2) / 2, u2 = (g0 - g1 + g2) / 2,
// u3 = g2.
__device__ __forceinline__ void filter_1d(double g0, double g1, double g2, double* u)
{
    u[0] = g0;
    u[1] = 0.5 * (g0 + g1 + g2);
    u[2] = 0.5 * (g0 - g1 + g2);
    u[3] = g2;
}

// U[xi][c][m] = (G g G^T)[xi] for filter m, channel c (zeros for m >= M or c >= C). Run once
// per layer, when its launch is bound.
extern "C" __global__ void winograd_filter_2x2(const float* __restrict__ w, float* __restrict__ U, int M, int C,
                                               int Mp, int Kp)
{
    const int m = blockIdx.x * TRANSFORM_BLOCK + threadIdx.x;
    const int c = blockIdx.y;
    double g[3][3];
    load_filter_3x3(g, w, m, c, M, C);
    double t[4][3], u[4];
#pragma unroll
    for (int s = 0; s < 3; ++s) {               // columns: G g
        filter_1d(g[0][s], g[1][s], g[2][s], u);
#pragma unroll
        for (int i = 0; i < 4; ++i) t[i][s] = u[i];
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {               // rows: (G g) G^T
        filter_1d(t[i][0], t[i][1], t[i][2], u);
#pragma unroll
        for (int j = 0; j < 4; ++j) U[((size_t)(4 * i + j) * Kp + c) * Mp + m] = (float)u[j];
    }
}

// The 16 products of each filter and tile: Mt[xi] = U[xi]^T V[xi].
extern "C" __global__ void __launch_bounds__(WG_THREADS, 2)
conv_winograd_gemm(const float* __restrict__ U, const float* __restrict__ V, float* __restrict__ Mt, int Mp,
                   int Pp, int Kp)
{
    __shared__ __align__(16) float As[2][WG_BK][WG_BM];   // U slice: As[c][m]
    __shared__ __align__(16) float Bs[2][WG_BK][WG_BN];   // V slice: Bs[c][tile]
    winograd_gemm_tile(U, V, Mt, Mp, Pp, Kp, As, Bs);
}

// y = A^T m A for filter m and tile p: 2 x 2 outputs, those past E or F left out.
extern "C" __global__ void winograd_output_2x2(const float* __restrict__ Mt, float* __restrict__ y, int N, int M,
                                               int E, int F, int TH, int TW, int Mp, int Pp)
{
    const int p = blockIdx.x * TRANSFORM_BLOCK + threadIdx.x;
    const int m = blockIdx.y;
    const int tiles = TH * TW;
    if (p >= N * tiles) return;
    float q[4][4];
#pragma unroll
    for (int xi = 0; xi < POINTS; ++xi) q[xi / 4][xi % 4] = Mt[((size_t)xi * Mp + m) * Pp + p];
    float t[2][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {               // columns: A^T m
        t[0][j] = q[0][j] + q[1][j] + q[2][j];
        t[1][j] = q[1][j] - q[2][j] - q[3][j];
    }
    const int n = p / tiles, tt = p - n * tiles, th = tt / TW, tw = tt - th * TW;
    float* out = y + ((size_t)n * M + m) * E * F;
#pragma unroll
    for (int i = 0; i < 2; ++i) {               // rows: (A^T m) A
        const int e = 2 * th + i;
        if (e >= E) continue;
        const float y0 = t[i][0] + t[i][1] + t[i][2];
        const float y1 = t[i][1] - t[i][2] - t[i][3];
        const int f = 2 * tw;
        out[e * F + f] = y0;
        if (f + 1 < F) out[e * F + f + 1] = y1;
    }
}
