// Step 10 -- ReLU and max-pool in the convolution's epilogue; all filters per thread.
//
// What changed from step 7: the kernel computes the whole layer -- convolution, ReLU and the
// 2 x 2 max-pool -- and writes only the pooled output: the pre-pool tensor (4x larger) is never
// written or read back. And the work is re-cut for reuse: a block holds its image rows of all
// C channels in shared memory; a thread computes the 2 x 2 conv outputs under PX pooled
// outputs (PX = 2 for conv1, 1 for conv2) for ALL M filters, in registers (32 and 64 sums).
// It loads each input row once per filter row into registers (float2 loads) and reuses it for
// every filter and both output rows; the weights sit in shared memory as [c][r][s][m], so one
// 16-byte broadcast load gives 4 filters' weights, each used for 4 (or 8) outputs.
// Load instructions per multiply-add fall from 2 (step 7's conv1: a global load of x and a
// uniform constant load of w per FFMA) and 1.5 (its conv2: one uniform load serves two weights)
// to about 1/13 (conv1) and 1/12 (conv2).
//
// Shapes are compile-time macros: CH (input channels), MF (filters), IH (input side),
// BY (pooled rows per block), PX (pooled columns per thread); K = 7; optionally MIN_BLOCKS,
// the second argument of __launch_bounds__ (1 by default). Launch: grid
// (ceil(P / BY), N), block (P / PX, BY), where P = (IH - 6) / 2 is the pooled side.
// conv_relu_pool writes the pooled output as float, conv_relu_pool_half as __half (the
// reduced-precision pipeline's conv1); the arithmetic is fp32 in both.
//
// Why it should be faster: the FMA units now do most of the issued instructions, and the
// layer's compulsory bytes drop from 1.3 GB / 1.0 GB (conv1 / conv2 at N = 10,000, pre-pool
// output written) to 0.55 / 0.44 GB.
// Prediction: within 1.5x of the FP32 arithmetic floor: conv1 ~0.6 ms, conv2 ~1.8 ms at N = 10,000.
#include <cuda_fp16.h>

#define KS 7
#if !defined(CH) || !defined(MF) || !defined(IH) || !defined(BY) || !defined(PX)
#error "compile with -DCH= -DMF= -DIH= -DBY= -DPX="
#endif
#define CE (IH - KS + 1)           // conv output side: 80, 34
#define PW (CE / 2)                // pooled side: 40, 17
#define TX (PW / PX)               // threads across: 20, 17
#define ROWS (2 * BY + KS - 1)     // input rows a block reads
#define COLS (2 * PX + KS - 1)     // input columns a thread reads per row: 10, 8
#define MQ (MF / 4)                // float4 groups of filters
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 1               // blocks per SM the compiler must leave registers for (Exercise 2)
#endif
template <typename OutT>
__device__ __forceinline__ void conv_relu_pool_body(const float* __restrict__ x, const float* __restrict__ w,
                                                    OutT* __restrict__ p, int N, float (*xs)[ROWS][IH],
                                                    float4* ws)      // ws: [c][r][s][m/4]
{
    const int n = blockIdx.y;
    const int py0 = blockIdx.x * BY;
    const int tid = threadIdx.y * TX + threadIdx.x;
    float* wsf = reinterpret_cast<float*>(ws);
    for (int i = tid; i < MF * CH * KS * KS; i += TX * BY) {
        const int m = i / (CH * KS * KS), crs = i % (CH * KS * KS);
        wsf[crs * MF + m] = w[i];
    }
    const float* xn = x + (size_t)n * CH * IH * IH;
    for (int i = tid; i < CH * ROWS * IH; i += TX * BY) {
        const int c = i / (ROWS * IH), row = (i / IH) % ROWS, col = i % IH;
        xs[c][row][col] = 2 * py0 + row < IH ? xn[((size_t)c * IH + 2 * py0 + row) * IH + col] : 0.0f;
    }
    __syncthreads();
    const int py = py0 + threadIdx.y;
    if (n >= N || py >= PW) return;                      // after the only barrier
    const int col0 = 2 * PX * threadIdx.x, row0 = 2 * threadIdx.y;
    float acc[2][2 * PX][MF];                            // [output row][output column][filter]
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
        for (int j = 0; j < 2 * PX; ++j)
#pragma unroll
            for (int m = 0; m < MF; ++m) acc[a][j][m] = 0.0f;
#pragma unroll 1
    for (int c = 0; c < CH; ++c) {
#pragma unroll 1
        for (int r = 0; r < KS; ++r) {
            float in0[COLS], in1[COLS];                  // input rows row0 + r and row0 + r + 1
            // Thread tx reads float2 at words col0 + 2j = 4 tx + 2j (conv1, PX = 2): a 16-byte stride
            // for 8-byte loads, so threads tx and tx + 8 of a row hit the same banks (2-way), and a
            // warp's second row adds conflicts where its pitch lands on the first row's banks.
            // Padding the pitch removes only the second kind; the first needs each thread's
            // columns interleaved (e.g. pooled columns tx and tx + P / 2), not adjacent.
            const float2* top = reinterpret_cast<const float2*>(&xs[c][row0 + r][col0]);
            const float2* bottom = reinterpret_cast<const float2*>(&xs[c][row0 + r + 1][col0]);
#pragma unroll
            for (int j = 0; j < COLS / 2; ++j) {
                const float2 u = top[j], v = bottom[j];
                in0[2 * j] = u.x; in0[2 * j + 1] = u.y;
                in1[2 * j] = v.x; in1[2 * j + 1] = v.y;
            }
            const float4* wr = &ws[(c * KS + r) * KS * MQ];
#pragma unroll
            for (int s = 0; s < KS; ++s)
#pragma unroll
                for (int q = 0; q < MQ; ++q) {
                    const float4 wv = wr[s * MQ + q];
#pragma unroll
                    for (int j = 0; j < 2 * PX; ++j) {
                        acc[0][j][4 * q + 0] += in0[j + s] * wv.x;
                        acc[0][j][4 * q + 1] += in0[j + s] * wv.y;
                        acc[0][j][4 * q + 2] += in0[j + s] * wv.z;
                        acc[0][j][4 * q + 3] += in0[j + s] * wv.w;
                        acc[1][j][4 * q + 0] += in1[j + s] * wv.x;
                        acc[1][j][4 * q + 1] += in1[j + s] * wv.y;
                        acc[1][j][4 * q + 2] += in1[j + s] * wv.z;
                        acc[1][j][4 * q + 3] += in1[j + s] * wv.w;
                    }
                }
        }
    }
#pragma unroll
    for (int m = 0; m < MF; ++m)
#pragma unroll
        for (int u = 0; u < PX; ++u) {
            const float v = fmaxf(fmaxf(acc[0][2 * u][m], acc[0][2 * u + 1][m]),
                                  fmaxf(acc[1][2 * u][m], acc[1][2 * u + 1][m]));
            p[(((size_t)n * MF + m) * PW + py) * PW + threadIdx.x * PX + u] = (OutT)fmaxf(v, 0.0f);
        }
}

extern "C" __global__ void __launch_bounds__(TX * BY, MIN_BLOCKS)
conv_relu_pool(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ p, int N)
{
    __shared__ __align__(16) float xs[CH][ROWS][IH];
    __shared__ __align__(16) float4 ws[CH * KS * KS * MQ];
    conv_relu_pool_body(x, w, p, N, xs, ws);
}

extern "C" __global__ void __launch_bounds__(TX * BY, MIN_BLOCKS)
conv_relu_pool_half(const float* __restrict__ x, const float* __restrict__ w, __half* __restrict__ p, int N)
{
    __shared__ __align__(16) float xs[CH][ROWS][IH];
    __shared__ __align__(16) float4 ws[CH * KS * KS * MQ];
    conv_relu_pool_body(x, w, p, N, xs, ws);
}
