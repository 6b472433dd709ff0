// Step 12: four threads per hidden unit, for fewer registers and more warps.
//
// What changed from step 11: each hidden unit is now split between 4
// neighbouring threads instead of 2. Thread (j, quarter) holds a quarter of
// row j of W1 (18 halves: 9 half2 registers) and of W2 (16 halves: 8 half2),
// and two shuffles (xor 1, then xor 2) join the four partial sums. The 256
// threads of a block are 64 units x 4 quarters, so the whole block works on
// each vector of the tile in turn (32 vectors) rather than two halves of the
// block taking 16 each. The output layer is unchanged (warp w: output w % 4
// for 16 of the tile's vectors).
//
// Why it should be faster: the weights take 18 registers per thread instead
// of 35, so the register file no longer caps the number of resident warps;
// more warps hide more latency. The cost: twice as many shuffles per
// multiply-add, and a quarter-row of W1 starts at 36 bytes, so its
// activations come 2 at a time (4-byte half2 loads) instead of 4.
// Prediction: the report saw a small loss on its RTX 3080 Ti; we predict no
// better than step 11, unless occupancy was what held step 11 back.
//
// Built on half_tile.cuh: step 8's half4, step 9's conflict-free fill order (fill_vector,
// fill_feature) and step 11's load_tile and store_tile, unchanged; this step's layers over
// the tile, with quarter rows, stay here.
#include <cuda_fp16.h>

#define IN 72
#define HID 64
#define OUT 4
#define TILE 32
#define IN_QUARTER (IN / 4)                  // 18 weights of W1 per thread: 9 half2
#define HID_QUARTER (HID / 4)                // 16 weights of W2 per thread: 8 half2
#define FILL_VECTORS 8
#define THREADS 256
#define FILL_PER_THREAD (TILE * IN / THREADS)

#include "half_tile.cuh"   // half4 (step 8), fill_vector, fill_feature (step 9), load_tile, store_tile (step 11)

extern "C" __global__ void __launch_bounds__(THREADS)
fewer_registers(int N, const float* __restrict__ X, const __half* __restrict__ W1t,
                const __half* __restrict__ W2t, const __half* __restrict__ W3, float* __restrict__ Y)
{
    __shared__ __align__(16) __half xs[TILE][IN];
    __shared__ __align__(16) __half h1s[TILE][HID];
    __shared__ __align__(16) __half h2s[TILE][HID];

    int tid = threadIdx.x;
    int j = tid / 4, quarter = tid % 4;          // hidden unit, and which quarter of its row
    int warp = tid / 32, lane = tid % 32;
    int o = warp % OUT;                          // output layer: warp w -> output w % 4,
    int vectors_from = (warp / OUT) * (TILE / 2);   // for 16 of the tile's vectors

    __half2 w1[IN_QUARTER / 2], w2[HID_QUARTER / 2], w3;
#pragma unroll
    for (int k = 0; k < IN_QUARTER / 2; ++k) {
        int k0 = quarter * IN_QUARTER + 2 * k;
        w1[k] = __halves2half2(W1t[k0 * HID + j], W1t[(k0 + 1) * HID + j]);
    }
#pragma unroll
    for (int k = 0; k < HID_QUARTER / 2; ++k) {
        int k0 = quarter * HID_QUARTER + 2 * k;
        w2[k] = __halves2half2(W2t[k0 * HID + j], W2t[(k0 + 1) * HID + j]);
    }
    w3 = __halves2half2(W3[o * HID + 2 * lane], W3[o * HID + 2 * lane + 1]);
    float2 w3f = __half22float2(w3);

    int tiles = (N + TILE - 1) / TILE;
    float next[FILL_PER_THREAD];
    load_tile(X, N, blockIdx.x * TILE, tid, next);
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int first = tile * TILE;
        store_tile(xs, tid, next);
        __syncthreads();
        load_tile(X, N, (tile + gridDim.x) * TILE, tid, next);

#pragma unroll 2
        for (int c = 0; c < TILE; ++c) {
            // A quarter-row starts at 18 halves = 36 bytes: 4-byte aligned, so half2 loads.
            const __half2* x2 = reinterpret_cast<const __half2*>(&xs[c][quarter * IN_QUARTER]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int q = 0; q < IN_QUARTER / 2; ++q) acc2 = __hfma2(w1[q], x2[q], acc2);
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            if (quarter == 0) h1s[c][j] = __float2half(fmaxf(acc, 0.0f));
        }
        __syncthreads();

#pragma unroll 2
        for (int c = 0; c < TILE; ++c) {
            const half4* h4 = reinterpret_cast<const half4*>(&h1s[c][quarter * HID_QUARTER]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int q = 0; q < HID_QUARTER / 4; ++q) {
                half4 a = h4[q];
                acc2 = __hfma2(w2[2 * q], a.lo, acc2);
                acc2 = __hfma2(w2[2 * q + 1], a.hi, acc2);
            }
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            acc += __shfl_xor_sync(0xffffffffu, acc, 2);
            if (quarter == 0) h2s[c][j] = __float2half(fmaxf(acc, 0.0f));
        }
        __syncthreads();

        for (int i = 0; i < TILE / 2; ++i) {
            int c = vectors_from + i;
            float2 h = __half22float2(reinterpret_cast<const __half2*>(&h2s[c][0])[lane]);
            float acc = w3f.x * h.x + w3f.y * h.y;
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
            if (lane == 0 && first + c < N) Y[(size_t)o * N + first + c] = acc;
        }
    }
}
