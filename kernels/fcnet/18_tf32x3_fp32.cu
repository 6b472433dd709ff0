// Step 18 (beyond the report): single-precision accuracy from the tensor cores, three tf32
// products per product ("3xTF32").
//
// What changed from step 17: the precision. Step 14 is the fastest fp32 kernel the FMA units
// allow: 91.8 GFLOP at 77% of their issue rate, 2.1 ms. The tensor cores multiply tf32 --
// floats with 10 mantissa bits instead of 23 -- at several times that rate, but one tf32
// product is only good to about 1e-3. Split each operand into a tf32 "high" part and a tf32
// "low" part holding the rest, a = a_hi + a_lo (a_hi = tf32(a), a_lo = tf32(a - a_hi)), and
//   a * b = a_hi b_hi + a_hi b_lo + a_lo b_hi + a_lo b_lo.
// The last term is about 2^-22 of the product, under float's own rounding; the other three,
// each an exact product summed in fp32 by the tensor cores, give a float32-accurate result.
// Three mma.sync.m16n8k8 (tf32) do the work of one float32 matrix product, small terms first.
//
// Everything else is step 17's organisation: one warp per tile of 32 vectors, inputs streamed
// by cp.async into two buffers per warp, each layer's accumulators kept in registers as the
// next layer's A operand. The m16n8k8 tf32 layouts differ from m16n8k16's: an accumulator
// holds columns 2t and 2t + 1 of its 8, while A wants columns t and t + 4. So the k of every
// layer is taken in a permuted order -- position t of a k8 step is unit 2t, position t + 4 is
// unit 2t + 1 -- which makes the accumulator, value for value, the next A again; the weights
// are read in the same permuted order (each lane's two k are neighbours: one 16-byte load of
// {hi, hi, lo, lo}). The weights are split into hi and lo once per block, in shared memory.
//
// One kernel for both cases: 16-vector tiles (one m16 tile per warp step), 8 warps per SM. On
// the H100 (tools/tune_fast.py) 32-vector tiles with 6 warps -- each weight fragment serving
// twice the vectors, but 247 registers and fewer warps -- took 2.04 ms on the large case
// against 1.55 ms here: with three dependent mma.sync per product, latency, not loads, is what
// more warps hide.
//
// Prediction: 138 M tf32 instructions for the large case; at about 60% of the tensor cores'
// tf32 rate through mma.sync, ~1.0-1.2 ms, memory (0.53 ms) hidden under it. (Measured before
// the choice of tile above: 1.55 ms, 1.37x faster than step 14.) The error against float64 at
// the level of float32 (~1e-6), far under 1e-5.
//
// Built on warp_tiles.cuh: step 17's copies of the input tile by cp.async (fetch_tile) and its
// stores of layer 3's outputs (store_outputs).
#include <common/ptx.h>

#define IN 72
#define HID 64
#define OUT 4
#define W_PITCH 36          // float4 {hi, hi, lo, lo} per pair of k; 36 = 4 mod 8: quarter-warps
                            // (2 rows x 4 pairs) hit 8 different 16-byte slots

#include "warp_tiles.cuh"   // fetch_tile (72 rows of TILE + 4 floats, cp.async chunks), store_outputs (step 17)

// hi and lo tf32 parts of x.
__device__ __forceinline__ void split(float x, unsigned& hi, unsigned& lo)
{
    hi = tf32_bits(x);
    lo = tf32_bits(x - __uint_as_float(hi));
}

// acc += a * b in float32 accuracy: a_lo b_hi + a_hi b_lo + a_hi b_hi.
__device__ __forceinline__ void mma_3xtf32(float acc[4], const unsigned ahi[4], const unsigned alo[4],
                                           const float4& b)
{
    const unsigned bhi[2] = {__float_as_uint(b.x), __float_as_uint(b.y)};
    const unsigned blo[2] = {__float_as_uint(b.z), __float_as_uint(b.w)};
    mma_1688_tf32(acc, alo, bhi);
    mma_1688_tf32(acc, ahi, blo);
    mma_1688_tf32(acc, ahi, bhi);
}

// A operand (hi, lo) from one m16n8 accumulator, through ReLU: positions t, t + 4 are units
// 2t, 2t + 1 of its 8 columns.
__device__ __forceinline__ void relu_as_a(const float c[4], unsigned ahi[4], unsigned alo[4])
{
    split(fmaxf(c[0], 0.0f), ahi[0], alo[0]);     // (g, t)       = unit 2t
    split(fmaxf(c[2], 0.0f), ahi[1], alo[1]);     // (g + 8, t)
    split(fmaxf(c[1], 0.0f), ahi[2], alo[2]);     // (g, t + 4)   = unit 2t + 1
    split(fmaxf(c[3], 0.0f), ahi[3], alo[3]);     // (g + 8, t + 4)
}

// Weights W (rows x K, row-major) -> ws[row][K/2] of float4 {hi(k), hi(k+1), lo(k), lo(k+1)}.
template <int THREADS>
__device__ __forceinline__ void split_weights(const float* __restrict__ W, int rows, int K, float4* ws, int tid)
{
    for (int i = tid; i < rows * K / 2; i += THREADS) {
        const int r = i / (K / 2), k = 2 * (i % (K / 2));
        unsigned h0, l0, h1, l1;
        split(W[r * K + k], h0, l0);
        split(W[r * K + k + 1], h1, l1);
        ws[r * W_PITCH + k / 2] = make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0),
                                              __uint_as_float(l1));
    }
}

template <int TILE, int WARPS>
__device__ __forceinline__ void forward(int N, const float* __restrict__ X, const float* __restrict__ W1,
                                        const float* __restrict__ W2, const float* __restrict__ W3,
                                        float* __restrict__ Y, unsigned char* smem)
{
    constexpr int THREADS = 32 * WARPS, MT = TILE / 16, P = TILE + 4;
    float4* w1s = reinterpret_cast<float4*>(smem);                  // 64 rows x W_PITCH
    float4* w2s = w1s + HID * W_PITCH;
    float* bufs0 = reinterpret_cast<float*>(w2s + HID * W_PITCH);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    float* bufs = bufs0 + warp * 2 * IN * P;

    split_weights<THREADS>(W1, HID, IN, w1s, tid);
    split_weights<THREADS>(W2, HID, HID, w2s, tid);
    // Layer 3's B (W3 padded to 8 rows with zeros) in registers: 8 k8 steps.
    float4 b3[HID / 8];
#pragma unroll
    for (int kk = 0; kk < HID / 8; ++kk) {
        const int k = 8 * kk + 2 * t;
        unsigned h0 = 0, l0 = 0, h1 = 0, l1 = 0;
        if (g < OUT) {
            split(W3[g * HID + k], h0, l0);
            split(W3[g * HID + k + 1], h1, l1);
        }
        b3[kk] = make_float4(__uint_as_float(h0), __uint_as_float(h1), __uint_as_float(l0), __uint_as_float(l1));
    }
    __syncthreads();

    const int tiles = (N + TILE - 1) / TILE;
    const int stride = gridDim.x * WARPS;
    int tile = blockIdx.x * WARPS + warp;
    if (tile < tiles) fetch_tile<TILE>(X, N, tile * TILE, bufs, lane);
    cp_async_commit();
    for (int it = 0; tile < tiles; tile += stride, ++it) {
        float* buf = bufs + (it % 2) * IN * P;
        if (tile + stride < tiles) fetch_tile<TILE>(X, N, (tile + stride) * TILE, bufs + ((it + 1) % 2) * IN * P, lane);
        cp_async_commit();
        cp_async_wait<1>();
        __syncwarp();

        // Layer 1: k8 step kk covers features 8kk..8kk+7, position t = feature 8kk + 2t.
        float acc[MT][8][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.0f;
#pragma unroll 3
        for (int kk = 0; kk < IN / 8; ++kk) {
            unsigned ahi[MT][4], alo[MT][4];
            const int f = 8 * kk + 2 * t;
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                const int v = 16 * m + g;
                split(buf[f * P + v], ahi[m][0], alo[m][0]);
                split(buf[f * P + v + 8], ahi[m][1], alo[m][1]);
                split(buf[(f + 1) * P + v], ahi[m][2], alo[m][2]);
                split(buf[(f + 1) * P + v + 8], ahi[m][3], alo[m][3]);
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float4 b = w1s[(8 * j + g) * W_PITCH + 4 * kk + t];
#pragma unroll
                for (int m = 0; m < MT; ++m) mma_3xtf32(acc[m][j], ahi[m], alo[m], b);
            }
        }
        __syncwarp();          // every lane is done with buf before it is refilled

        // Layer 2: k8 step kk = the accumulator of layer 1's units 8kk..8kk+7.
        float acc2[MT][8][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc2[m][j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HID / 8; ++kk) {
            unsigned ahi[MT][4], alo[MT][4];
#pragma unroll
            for (int m = 0; m < MT; ++m) relu_as_a(acc[m][kk], ahi[m], alo[m]);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float4 b = w2s[(8 * j + g) * W_PITCH + 4 * kk + t];
#pragma unroll
                for (int m = 0; m < MT; ++m) mma_3xtf32(acc2[m][j], ahi[m], alo[m], b);
            }
        }

        // Layer 3: columns 2t, 2t + 1 < 4 are the outputs; rows g, g + 8 the vectors.
        const int first = tile * TILE;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int kk = 0; kk < HID / 8; ++kk) {
                unsigned ahi[4], alo[4];
                relu_as_a(acc2[m][kk], ahi, alo);
                mma_3xtf32(out, ahi, alo, b3[kk]);
            }
            store_outputs(Y, out, first, m, g, t, N);
        }
    }
    cp_async_wait<0>();
}

// Dynamic shared memory: 2 * 64 * W_PITCH * 16 bytes of split weights, then 8 warps x 2 input
// buffers of 72 x 20 floats (fcnet.tf32x3_shared_bytes(16, 8) = 165,888 bytes).
extern "C" __global__ void __launch_bounds__(256, 1)
tf32x3(int N, const float* __restrict__ X, const float* __restrict__ W1, const float* __restrict__ W2,
             const float* __restrict__ W3, float* __restrict__ Y)
{
    extern __shared__ __align__(128) unsigned char smem[];
    forward<16, 8>(N, X, W1, W2, W3, Y, smem);    // 8 warps of 16-vector tiles
}
