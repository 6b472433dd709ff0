// The parts of fcnet's half-precision tile kernels (steps 8-13) that later steps take over
// unchanged, each under the step that wrote it. A file that includes this defines the sizes
// first: IN, HID, TILE, FILL_VECTORS, THREADS and FILL_PER_THREAD, as its own #defines say, and
// for the layers over the tile (steps 9-11's thread roles) GROUP_VECTORS (the vectors of a tile
// each half of the block takes) and THREADS_PER_GROUP (2 * HID). Step 12, whose threads take
// quarter rows, leaves those two undefined and gets only the fill.
#pragma once
#include <cuda_fp16.h>

// Step 8: 4 activations in one 8-byte load.
struct __align__(8) half4 { __half2 lo, hi; };

// Step 9: the conflict-free fill. A warp covers 8 vectors x 4 features of the tile: element e
// is vector fill_vector(e), feature fill_feature(e).
__device__ __forceinline__ int fill_vector(int e) { return (e / (FILL_VECTORS * IN)) * FILL_VECTORS + e % FILL_VECTORS; }
__device__ __forceinline__ int fill_feature(int e) { return (e / FILL_VECTORS) % IN; }

// Step 9: fill the tile starting at vector `first` (zeros past N), the FILL_PER_THREAD loads
// of a thread unrolled so that they are all in flight at once.
__device__ __forceinline__ void fill_tile(__half (*xs)[IN], const float* __restrict__ X, int N, int first, int tid)
{
#pragma unroll
    for (int f = 0; f < FILL_PER_THREAD; ++f) {
        int e = tid + f * THREADS;
        int c = fill_vector(e), k = fill_feature(e);
        xs[c][k] = __float2half((first + c < N) ? X[(size_t)k * N + first + c] : 0.0f);
    }
}

// Step 11: issue this thread's FILL_PER_THREAD loads of the tile starting at vector `first`
// (zeros past N) into registers, so that they travel while the block computes.
__device__ __forceinline__ void load_tile(const float* __restrict__ X, int N, int first, int tid,
                                          float next[FILL_PER_THREAD])
{
#pragma unroll
    for (int f = 0; f < FILL_PER_THREAD; ++f) {
        int e = tid + f * THREADS;
        int c = fill_vector(e);
        next[f] = (first + c < N) ? X[(size_t)fill_feature(e) * N + first + c] : 0.0f;
    }
}

// Step 11: store those loads, as halves, where the conflict-free fill puts them.
__device__ __forceinline__ void store_tile(__half (*xs)[IN], int tid, const float next[FILL_PER_THREAD])
{
#pragma unroll
    for (int f = 0; f < FILL_PER_THREAD; ++f) {
        int e = tid + f * THREADS;
        xs[fill_vector(e)][fill_feature(e)] = __float2half(next[f]);
    }
}

// Step 10: half `half` of row j of a K-input layer's weights, from the transposed copy Wt
// (Wt[k * HID + j] is W[j][k]: for each k, neighbouring units j read neighbouring halves).
template <int K>
__device__ __forceinline__ void load_half_row(const __half* __restrict__ Wt, int j, int half, __half2 w[K / 4])
{
#pragma unroll
    for (int k = 0; k < K / 4; ++k) {
        int k0 = half * (K / 2) + 2 * k;
        w[k] = __halves2half2(Wt[k0 * HID + j], Wt[(k0 + 1) * HID + j]);
    }
}

#ifdef THREADS_PER_GROUP
// Step 9: a hidden layer over the tile: in[c] (K halves) -> out[c] (HID halves) for the
// GROUP_VECTORS vectors c of this thread's half of the block. Thread (j, half) multiplies half
// of row j (w, in registers) with half of each input row, four at a time with half2 FMAs;
// the two halves' sums meet in one shuffle, and half 0 writes ReLU of the sum.
template <int K>
__device__ __forceinline__ void hidden_layer_tile(const __half (*in)[K], __half (*out)[HID], const __half2 w[K / 4])
{
    int tid = threadIdx.x;
    int g = tid / THREADS_PER_GROUP;
    int r = tid % THREADS_PER_GROUP;
    int j = r / 2, half = r % 2;
#pragma unroll 2
    for (int i = 0; i < GROUP_VECTORS; ++i) {
        int c = g * GROUP_VECTORS + i;
        const half4* a4 = reinterpret_cast<const half4*>(&in[c][half * (K / 2)]);
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

// Step 9: the output layer over the tile. Warp o of each half of the block computes output o of
// that half's GROUP_VECTORS vectors, 2 weights of W3 per lane (w3f) and a 5-shuffle tree.
__device__ __forceinline__ void output_layer_tile(const __half (*h2s)[HID], float2 w3f, int first, int N,
                                                  float* __restrict__ Y)
{
    int tid = threadIdx.x;
    int g = tid / THREADS_PER_GROUP;
    int r = tid % THREADS_PER_GROUP;
    int o = r / 32, lane = r % 32;
    for (int i = 0; i < GROUP_VECTORS; ++i) {
        int c = g * GROUP_VECTORS + i;
        float2 h = __half22float2(reinterpret_cast<const __half2*>(&h2s[c][0])[lane]);
        float acc = w3f.x * h.x + w3f.y * h.y;
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
        if (lane == 0 && first + c < N) Y[(size_t)o * N + first + c] = acc;
    }
}

// Step 9: W3's two weights of lane `lane` in output warp o, as floats (lane l reads W3[o][2l]
// and W3[o][2l + 1], consecutive).
__device__ __forceinline__ float2 load_w3_pair(const __half* __restrict__ W3, int o, int lane)
{
    __half2 w3 = __halves2half2(W3[o * HID + 2 * lane], W3[o * HID + 2 * lane + 1]);
    return __half22float2(w3);
}

// Step 9: the three layers over a filled tile (the vectors from `first` on), a barrier between
// each layer and the next.
__device__ __forceinline__ void tile_layers(const __half (*xs)[IN], __half (*h1s)[HID], __half (*h2s)[HID],
                                            const __half2 w1[IN / 4], const __half2 w2[HID / 4], float2 w3f,
                                            int first, int N, float* __restrict__ Y)
{
    hidden_layer_tile<IN>(xs, h1s, w1);
    __syncthreads();

    hidden_layer_tile<HID>(h1s, h2s, w2);
    __syncthreads();

    output_layer_tile(h2s, w3f, first, N, Y);
}
#endif  // THREADS_PER_GROUP
