// Step 11: the next tile's inputs are loaded while this tile computes.
//
// What changed from step 10: in step 10 a block issued its tile's input
// loads, then waited at the barrier for all of them (a trip to device memory,
// around a microsecond) before any arithmetic, and then computed without any
// load in flight. Now each thread keeps its 9 inputs of the NEXT tile in
// registers: right after the barrier that publishes this tile, it issues the
// loads of the next one, and only writes them into shared memory at the top
// of the next iteration. The loads travel while layers 1-3 compute.
// (The report had half the warps load while the other half computed the
// output layer; registers do the same job without idling any warp.)
//
// Why it should be faster: the memory latency hides behind arithmetic within
// each block, instead of relying on other blocks being at a different phase.
// Why it might not: the GPU already overlaps blocks, and 9 more registers per
// thread can cost a block per SM. Prediction: 10-20% on the large case; no
// change on the small case, where each block has only 3-4 tiles (400 tiles,
// 132 blocks), so little of its load latency has a tile to hide behind.
#include <cuda_fp16.h>

#define IN 72
#define HID 64
#define OUT 4
#define TILE 32                              // vectors per iteration
#define GROUP_VECTORS (TILE / 2)             // each half of the block takes 16
#define THREADS_PER_GROUP (2 * HID)          // 128: two threads per hidden unit
#define IN_HALF (IN / 2)
#define HID_HALF (HID / 2)
#define FILL_VECTORS 8                       // a warp fills 8 vectors x 4 features
#define THREADS 256                          // the launch's block size
#define FILL_PER_THREAD (TILE * IN / THREADS)   // 9 inputs per thread per tile

struct __align__(8) half4 { __half2 lo, hi; };

// The conflict-free fill of step 9: element e of a tile is vector fill_vector(e), feature fill_feature(e).
__device__ __forceinline__ int fill_vector(int e) { return (e / (FILL_VECTORS * IN)) * FILL_VECTORS + e % FILL_VECTORS; }
__device__ __forceinline__ int fill_feature(int e) { return (e / FILL_VECTORS) % IN; }

// Issue this thread's 9 loads of the tile starting at vector `first` (zeros past N).
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

extern "C" __global__ void __launch_bounds__(THREADS)
hide_input_loads(int N, const float* __restrict__ X, const __half* __restrict__ W1t,
                 const __half* __restrict__ W2t, const __half* __restrict__ W3, float* __restrict__ Y)
{
    __shared__ __align__(16) __half xs[TILE][IN];
    __shared__ __align__(16) __half h1s[TILE][HID];
    __shared__ __align__(16) __half h2s[TILE][HID];

    int tid = threadIdx.x;
    int g = tid / THREADS_PER_GROUP;             // vectors g*16 .. g*16+15 of the tile
    int r = tid % THREADS_PER_GROUP;
    int j = r / 2, half = r % 2;
    int o = r / 32, lane = r % 32;

    __half2 w1[IN_HALF / 2], w2[HID_HALF / 2], w3;
    // W1t[k * HID + j] is W1[j][k]: for each k, neighbouring units j read neighbouring halves.
#pragma unroll
    for (int k = 0; k < IN_HALF / 2; ++k) {
        int k0 = half * IN_HALF + 2 * k;
        w1[k] = __halves2half2(W1t[k0 * HID + j], W1t[(k0 + 1) * HID + j]);
    }
#pragma unroll
    for (int k = 0; k < HID_HALF / 2; ++k) {
        int k0 = half * HID_HALF + 2 * k;
        w2[k] = __halves2half2(W2t[k0 * HID + j], W2t[(k0 + 1) * HID + j]);
    }
    // W3 stays row-major: lane l reads W3[o][2l], W3[o][2l + 1], already consecutive.
    w3 = __halves2half2(W3[o * HID + 2 * lane], W3[o * HID + 2 * lane + 1]);
    float2 w3f = __half22float2(w3);

    int tiles = (N + TILE - 1) / TILE;
    float next[FILL_PER_THREAD];        // this thread's inputs of the next tile
    load_tile(X, N, blockIdx.x * TILE, tid, next);
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int first = tile * TILE;
        // Every thread finished reading xs (layer 1) before the last tile's second barrier.
#pragma unroll
        for (int f = 0; f < FILL_PER_THREAD; ++f) {
            int e = tid + f * THREADS;
            xs[fill_vector(e)][fill_feature(e)] = __float2half(next[f]);
        }
        __syncthreads();
        load_tile(X, N, (tile + gridDim.x) * TILE, tid, next);   // in flight during layers 1-3

#pragma unroll 2
        for (int i = 0; i < GROUP_VECTORS; ++i) {
            int c = g * GROUP_VECTORS + i;
            const half4* x4 = reinterpret_cast<const half4*>(&xs[c][half * IN_HALF]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int q = 0; q < IN_HALF / 4; ++q) {
                half4 a = x4[q];
                acc2 = __hfma2(w1[2 * q], a.lo, acc2);
                acc2 = __hfma2(w1[2 * q + 1], a.hi, acc2);
            }
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            if (half == 0) h1s[c][j] = __float2half(fmaxf(acc, 0.0f));
        }
        __syncthreads();

#pragma unroll 2
        for (int i = 0; i < GROUP_VECTORS; ++i) {
            int c = g * GROUP_VECTORS + i;
            const half4* h4 = reinterpret_cast<const half4*>(&h1s[c][half * HID_HALF]);
            __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
            for (int q = 0; q < HID_HALF / 4; ++q) {
                half4 a = h4[q];
                acc2 = __hfma2(w2[2 * q], a.lo, acc2);
                acc2 = __hfma2(w2[2 * q + 1], a.hi, acc2);
            }
            float acc = __low2float(acc2) + __high2float(acc2);
            acc += __shfl_xor_sync(0xffffffffu, acc, 1);
            if (half == 0) h2s[c][j] = __float2half(fmaxf(acc, 0.0f));
        }
        __syncthreads();

        for (int i = 0; i < GROUP_VECTORS; ++i) {
            int c = g * GROUP_VECTORS + i;
            float2 h = __half22float2(reinterpret_cast<const __half2*>(&h2s[c][0])[lane]);
            float acc = w3f.x * h.x + w3f.y * h.y;
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
            if (lane == 0 && first + c < N) Y[(size_t)o * N + first + c] = acc;
        }
    }
}
