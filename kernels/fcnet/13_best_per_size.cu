// Step 13: a cheaper output layer, and a version of the kernel without the loop.
//
// Two kernels, each written for one size (the kernels' names say which), both
// built on step 11 (transposed weights,
// conflict-free fill, two threads per hidden unit) and both with the report's
// final change to the output layer: "8 registers" of W3 per lane. Until now
// each output was one warp's job, 2 weights per lane and a 5-shuffle tree per
// output per vector. Now ONE warp computes all 4 outputs of a vector: lane l
// takes output l / 8 and terms 8*(l%8) .. 8*(l%8)+7 (8 halves of W3, one
// 16-byte read of h2s), and 3 shuffles (xor 4, 2, 1) finish all four outputs
// at once. Each of the 8 warps takes 4 of the tile's 32 vectors.
//
// best_large: step 11 with that output layer. Prediction: the output layer was
// ~3% of the multiply-adds, but per tile a thread of step 11 did 16 + 16
// hidden-layer shuffles and 16 x 5 = 80 output-layer shuffles, so its shuffle
// trees were ~70% of the loop's shuffles (now 16 + 16 + 4 x 3); expect a few
// percent over step 11.
//
// best_small: on the small case (400 tiles of 32 vectors) step 11's 132
// persistent blocks get only 3-4 tiles each, so little is reused between
// tiles: no loop, one tile per block (400 blocks), and
// each layer's weights are loaded just before that layer (W2's loads are issued
// before the barrier that ends layer 1, so they travel while the block waits).
// Only one layer's weights are live at a time: fewer registers, as the
// report's best small kernel did. Prediction: a little faster than step 10 on
// the small case.
//
// Built on half_tile.cuh: step 11's load_tile and store_tile, step 10's load_half_row. The new
// output layer (output_layer, load_w3) is here.

#define IN 72
#define HID 64
#define OUT 4
#define TILE 32
#define GROUP_VECTORS (TILE / 2)
#define THREADS_PER_GROUP (2 * HID)
#define IN_HALF (IN / 2)
#define HID_HALF (HID / 2)
#define FILL_VECTORS 8
#define THREADS 256
#define FILL_PER_THREAD (TILE * IN / THREADS)
#define WARPS (THREADS / 32)
#define LANES_PER_OUTPUT 8                   // 8 lanes x 8 terms = one output's 64 terms

#include "half_tile.cuh"   // load_tile, store_tile, load_half_row

struct __align__(16) half8 { __half2 a, b, c, d; };

// Step 11's hidden layer (half_tile.cuh's hidden_layer_tile), given the thread's indices.
template <int K>
__device__ __forceinline__ void hidden_layer(const __half* in, int in_stride, __half (*out)[HID],
                                             const __half2 w[K / 4], int g, int j, int half)
{
#pragma unroll 2
    for (int i = 0; i < GROUP_VECTORS; ++i) {
        int c = g * GROUP_VECTORS + i;
        const half4* a4 = reinterpret_cast<const half4*>(in + c * in_stride + half * (K / 2));
        __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
        for (int q = 0; q < K / 8; ++q) {
            half4 a = a4[q];
            acc2 = __hfma2(w[2 * q], a.lo, acc2);
            acc2 = __hfma2(w[2 * q + 1], a.hi, acc2);
        }
        float acc = __low2float(acc2) + __high2float(acc2);
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        if (half == 0) out[c][j] = __float2half(fmaxf(acc, 0.0f));
    }
}

__device__ __forceinline__ void output_layer(__half (*h2s)[HID], const __half2 w3[4], int first, int N,
                                             float* __restrict__ Y, int warp, int lane)
{
    int o = lane / LANES_PER_OUTPUT, part = lane % LANES_PER_OUTPUT;
    for (int c = warp; c < TILE; c += WARPS) {
        half8 h = reinterpret_cast<const half8*>(&h2s[c][0])[part];
        __half2 acc2 = __hmul2(w3[0], h.a);
        acc2 = __hfma2(w3[1], h.b, acc2);
        acc2 = __hfma2(w3[2], h.c, acc2);
        acc2 = __hfma2(w3[3], h.d, acc2);
        float acc = __low2float(acc2) + __high2float(acc2);
        acc += __shfl_xor_sync(0xffffffffu, acc, 4);
        acc += __shfl_xor_sync(0xffffffffu, acc, 2);
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        if (part == 0 && first + c < N) Y[(size_t)o * N + first + c] = acc;
    }
}

__device__ __forceinline__ void load_w3(const __half* __restrict__ W3, int lane, __half2 w3[4])
{
    const __half* row = W3 + (lane / LANES_PER_OUTPUT) * HID + (lane % LANES_PER_OUTPUT) * 8;
#pragma unroll
    for (int t = 0; t < 4; ++t) w3[t] = __halves2half2(row[2 * t], row[2 * t + 1]);
}

extern "C" __global__ void __launch_bounds__(THREADS)
best_large(int N, const float* __restrict__ X, const __half* __restrict__ W1t,
           const __half* __restrict__ W2t, const __half* __restrict__ W3, float* __restrict__ Y)
{
    __shared__ __align__(16) __half xs[TILE][IN];
    __shared__ __align__(16) __half h1s[TILE][HID];
    __shared__ __align__(16) __half h2s[TILE][HID];

    int tid = threadIdx.x;
    int g = tid / THREADS_PER_GROUP, r = tid % THREADS_PER_GROUP;
    int j = r / 2, half = r % 2;
    __half2 w1[IN / 4], w2[HID / 4], w3[4];
    load_half_row<IN>(W1t, j, half, w1);
    load_half_row<HID>(W2t, j, half, w2);
    load_w3(W3, tid % 32, w3);

    int tiles = (N + TILE - 1) / TILE;
    float next[FILL_PER_THREAD];
    load_tile(X, N, blockIdx.x * TILE, tid, next);
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int first = tile * TILE;
        store_tile(xs, tid, next);
        __syncthreads();
        load_tile(X, N, (tile + gridDim.x) * TILE, tid, next);
        hidden_layer<IN>(&xs[0][0], IN, h1s, w1, g, j, half);
        __syncthreads();
        hidden_layer<HID>(&h1s[0][0], HID, h2s, w2, g, j, half);
        __syncthreads();
        output_layer(h2s, w3, first, N, Y, tid / 32, tid % 32);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
best_small(int N, const float* __restrict__ X, const __half* __restrict__ W1t,
           const __half* __restrict__ W2t, const __half* __restrict__ W3, float* __restrict__ Y)
{
    __shared__ __align__(16) __half xs[TILE][IN];
    __shared__ __align__(16) __half h1s[TILE][HID];
    __shared__ __align__(16) __half h2s[TILE][HID];

    int tid = threadIdx.x;
    int g = tid / THREADS_PER_GROUP, r = tid % THREADS_PER_GROUP;
    int j = r / 2, half = r % 2;
    int first = blockIdx.x * TILE;               // one tile per block: no loop

    float inputs[FILL_PER_THREAD];
    load_tile(X, N, first, tid, inputs);
    __half2 w1[IN / 4];
    load_half_row<IN>(W1t, j, half, w1);
    store_tile(xs, tid, inputs);
    __syncthreads();
    hidden_layer<IN>(&xs[0][0], IN, h1s, w1, g, j, half);

    __half2 w2[HID / 4];                         // W1's registers are free again
    load_half_row<HID>(W2t, j, half, w2);
    __syncthreads();
    hidden_layer<HID>(&h1s[0][0], HID, h2s, w2, g, j, half);

    __half2 w3[4];
    load_w3(W3, tid % 32, w3);
    __syncthreads();
    output_layer(h2s, w3, first, N, Y, tid / 32, tid % 32);
}
