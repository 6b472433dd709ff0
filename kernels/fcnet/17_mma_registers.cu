// Step 17 (beyond the report): mma.sync with the activations kept in registers, inputs
// streamed by cp.async, one warp per tile.
//
// What changed from step 15: three things, each removing work that step 15 did between the
// memory and the tensor cores.
//   1. The layers are computed transposed, out^T[vectors x units] = in^T[vectors x K] W^T, with
//      mma.sync.m16n8k16 (common/ptx.h lists its register layout). The accumulator of a 16 x 8
//      output tile holds rows g and g + 8, columns 2t and 2t + 1 (lane 4g + t); two neighbouring
//      tiles' accumulators are, value for value, the A operand the next layer needs for 16 of
//      its k. So ReLU and the conversion to half happen in registers, and the hidden layers
//      never touch shared memory -- step 15 stored each layer's output with
//      wmma::store_matrix_sync and loaded it back as the next layer's B.
//   2. Each warp owns its tiles (TILE vectors at a time) and its own input buffers: no
//      __syncthreads in the loop, only __syncwarp. Weights are in shared memory once per block
//      and read with ldmatrix.
//   3. The input tile (72 features x TILE vectors, float, 9 KB for TILE = 32) goes from global
//      to shared memory by cp.async, two buffers per warp: while a warp computes tile i, tile
//      i + 1 is in flight without occupying a register. 8 warps per SM keep 8 x 9 KB in flight
//      per SM, about what the memory system needs to run at full speed. The A operand of layer
//      1 is read from the float tile (conflict-free: row pitch TILE + 4 floats) and converted
//      to half in registers.
// The output's 4 values per vector are the first 4 columns of an m16n8 tile of layer 3 (W3
// padded with zero rows to 8); lanes with t < 2 write them.
//
// Two kernels from one template: mma_fp16_large (TILE = 32, two m16 tiles per warp step, so
// every weight fragment loaded serves 32 vectors) and mma_fp16_small (TILE = 16: 800 tiles of
// the small case's 12,800 vectors, so more warps have work).
//
// Why it should be faster: step 15 at 0.61 ms ran at 87% of the measured copy bandwidth; its
// blocks stop at three __syncthreads per tile and have one tile in flight. Here nothing waits
// for a whole block, and two tiles per warp are in flight.
// Prediction: the large case at 90-93% of the copy bandwidth, 0.57-0.59 ms; the small case in
// a graph ~5.5 us (more, smaller pieces of work than step 15's 100 tiles).
// Tried on the H100 and dropped (large case, tools/tune_fast.py): 16 warps of 16-vector tiles,
// 0.86 ms (each weight fragment serves half the vectors, and the warps' shared memory leaves
// 2 buffers of 16 vectors); 4 warps of 64-vector tiles, 0.70 ms (255 registers, too few warps).
//
// This step's copies of the input tile (point 3, fetch_tile) and its stores of the outputs
// (store_outputs) are in warp_tiles.cuh: step 18 keeps them unchanged.
#include <cuda_fp16.h>
#include <common/ptx.h>

#define IN 72
#define K1 80                 // layer 1's k, padded to a multiple of 16 (features 72..79 are zero)
#define HID 64
#define OUT 4
#define W1_PITCH (K1 + 8)     // halves: 176-byte rows, 11 chunks apart: ldmatrix conflict-free
#define W2_PITCH (HID + 8)    // 144-byte rows, 9 chunks apart
#define W3_ROWS 8             // layer 3's 4 outputs, padded with zero rows to one n8 tile

// Shared memory in bytes: the weights, then per warp two input buffers of IN x (TILE + 4) floats.
#define W1S_BYTES (HID * W1_PITCH * 2)
#define W2S_BYTES (HID * W2_PITCH * 2)
#define W3S_BYTES (W3_ROWS * W2_PITCH * 2)
#define WEIGHT_BYTES (W1S_BYTES + W2S_BYTES + W3S_BYTES)

#include "warp_tiles.cuh"   // fetch_tile, store_outputs (this step's, kept by step 18)

// One packed pair of halves from the float tile: features f and f + 1 of vector v (zero past IN).
template <int TILE>
__device__ __forceinline__ unsigned x_pair(const float* buf, int f, int v)
{
    constexpr int P = TILE + 4;
    return pack_half2(f < IN ? buf[f * P + v] : 0.0f, f + 1 < IN ? buf[(f + 1) * P + v] : 0.0f);
}

// ReLU of two neighbouring 16 x 8 accumulators (units 16kk..16kk+7 and 16kk+8..+15), as the
// A operand of the next layer for k = 16kk..16kk+15: the layouts match value for value.
__device__ __forceinline__ void relu_as_a(const float lo[4], const float hi[4], unsigned a[4])
{
    a[0] = pack_half2(fmaxf(lo[0], 0.0f), fmaxf(lo[1], 0.0f));
    a[1] = pack_half2(fmaxf(lo[2], 0.0f), fmaxf(lo[3], 0.0f));
    a[2] = pack_half2(fmaxf(hi[0], 0.0f), fmaxf(hi[1], 0.0f));
    a[3] = pack_half2(fmaxf(hi[2], 0.0f), fmaxf(hi[3], 0.0f));
}

template <int TILE, int WARPS, int STAGES = 2>   // STAGES input buffers per warp
__device__ __forceinline__ void forward(int N, const float* __restrict__ X, const __half* __restrict__ W1p,
                                        const __half* __restrict__ W2, const __half* __restrict__ W3p,
                                        float* __restrict__ Y, unsigned char* smem)
{
    constexpr int THREADS = 32 * WARPS;
    constexpr int MT = TILE / 16;                    // m16 tiles (of vectors) per warp step
    constexpr int P = TILE + 4;
    __half* w1s = reinterpret_cast<__half*>(smem);
    __half* w2s = reinterpret_cast<__half*>(smem + W1S_BYTES);
    __half* w3s = reinterpret_cast<__half*>(smem + W1S_BYTES + W2S_BYTES);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int g = lane / 4, t = lane % 4;
    float* bufs = reinterpret_cast<float*>(smem + WEIGHT_BYTES) + warp * STAGES * IN * P;

    for (int i = tid; i < HID * K1; i += THREADS) w1s[(i / K1) * W1_PITCH + i % K1] = W1p[i];
    for (int i = tid; i < HID * HID; i += THREADS) w2s[(i / HID) * W2_PITCH + i % HID] = W2[i];
    for (int i = tid; i < W3_ROWS * HID; i += THREADS) w3s[(i / HID) * W2_PITCH + i % HID] = W3p[i];
    __syncthreads();

    // Layer 3's B fragments (W3 padded to 8 rows), kept in registers: 4 k16 steps x 2.
    unsigned b3[4][2];
#pragma unroll
    for (int kk = 0; kk < 4; kk += 2) {
        unsigned r[4];   // matrices: k 16kk + 0-7, 8-15, 16-23, 24-31 of the 8 rows
        ldmatrix_x4(r, w3s + (lane % 8) * W2_PITCH + 8 * (2 * kk + lane / 8));
        b3[kk][0] = r[0]; b3[kk][1] = r[1]; b3[kk + 1][0] = r[2]; b3[kk + 1][1] = r[3];
    }

    const int tiles = (N + TILE - 1) / TILE;
    const int stride = gridDim.x * WARPS;
    int tile = blockIdx.x * WARPS + warp;
    // STAGES buffers per warp: tiles i + 1 .. i + STAGES - 1 are in flight while tile i computes.
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (tile + s * stride < tiles) fetch_tile<TILE>(X, N, (tile + s * stride) * TILE, bufs + s * IN * P, lane);
        cp_async_commit();
    }
    for (int it = 0; tile < tiles; tile += stride, ++it) {
        float* buf = bufs + (it % STAGES) * IN * P;
        const int ahead = tile + (STAGES - 1) * stride;
        if (ahead < tiles) fetch_tile<TILE>(X, N, ahead * TILE, bufs + ((it + STAGES - 1) % STAGES) * IN * P, lane);
        cp_async_commit();
        cp_async_wait<STAGES - 1>();    // this tile's copies have landed (later tiles' may not have)
        __syncwarp();          // ... and so have the other lanes' copies and plain stores

        // Layer 1: h1^T[v][u] = relu(sum_f x[f][v] W1[u][f]), MT x 8 tiles of m16n8.
        float acc[MT][8][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < K1 / 16; ++kk) {
            unsigned a[MT][4];
#pragma unroll
            for (int m = 0; m < MT; ++m) {
                const int v = 16 * m + g, f = 16 * kk + 2 * t;
                a[m][0] = x_pair<TILE>(buf, f, v);
                a[m][1] = x_pair<TILE>(buf, f, v + 8);
                a[m][2] = x_pair<TILE>(buf, f + 8, v);
                a[m][3] = x_pair<TILE>(buf, f + 8, v + 8);
            }
#pragma unroll
            for (int j = 0; j < 8; j += 2) {
                unsigned r[4], b0[2], b1[2];
                ldmatrix_x4(r, w1s + (8 * j + lane % 8 + 8 * (lane / 16)) * W1_PITCH + 8 * (2 * kk + (lane / 8) % 2));
                b0[0] = r[0]; b0[1] = r[1]; b1[0] = r[2]; b1[1] = r[3];
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    mma_16816(acc[m][j], a[m], b0);
                    mma_16816(acc[m][j + 1], a[m], b1);
                }
            }
        }
        __syncwarp();          // every lane is done with buf before it is refilled

        // Layer 2: the accumulators of tiles 2kk and 2kk + 1, through ReLU, are A for k = 16kk..+15.
        unsigned h[MT][4][4];
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) relu_as_a(acc[m][2 * kk], acc[m][2 * kk + 1], h[m][kk]);
#pragma unroll
        for (int m = 0; m < MT; ++m)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
#pragma unroll
            for (int j = 0; j < 8; j += 2) {
                unsigned r[4], b0[2], b1[2];
                ldmatrix_x4(r, w2s + (8 * j + lane % 8 + 8 * (lane / 16)) * W2_PITCH + 8 * (2 * kk + (lane / 8) % 2));
                b0[0] = r[0]; b0[1] = r[1]; b1[0] = r[2]; b1[1] = r[3];
#pragma unroll
                for (int m = 0; m < MT; ++m) {
                    mma_16816(acc[m][j], h[m][kk], b0);
                    mma_16816(acc[m][j + 1], h[m][kk], b1);
                }
            }

        // Layer 3: y^T[v][o] for o < 8 (4 real), from ReLU(h2) in registers.
        const int first = tile * TILE;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
                unsigned a[4];
                relu_as_a(acc[m][2 * kk], acc[m][2 * kk + 1], a);
                mma_16816(out, a, b3[kk]);
            }
            store_outputs(Y, out, first, m, g, t, N);
        }
    }
    cp_async_wait<0>();
}

// Dynamic shared memory: WEIGHT_BYTES + WARPS * 2 * IN * (TILE + 4) * 4 (fcnet.mma_shared_bytes).
extern "C" __global__ void __launch_bounds__(256, 1)
mma_fp16_large(int N, const float* __restrict__ X, const __half* __restrict__ W1p, const __half* __restrict__ W2,
               const __half* __restrict__ W3p, float* __restrict__ Y)
{
    extern __shared__ __align__(128) unsigned char smem[];
    forward<32, 8>(N, X, W1p, W2, W3p, Y, smem);      // 8 warps of 32-vector tiles: 188 KB
}

extern "C" __global__ void __launch_bounds__(256, 1)
mma_fp16_small(int N, const float* __restrict__ X, const __half* __restrict__ W1p, const __half* __restrict__ W2,
               const __half* __restrict__ W3p, float* __restrict__ Y)
{
    extern __shared__ __align__(128) unsigned char smem[];
    forward<16, 8>(N, X, W1p, W2, W3p, Y, smem);      // 8 warps of 16-vector tiles: 114 KB
}
