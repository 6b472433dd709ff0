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
//
// Built on half_tile.cuh: step 10's load_half_row, step 9's load_w3_pair and tile_layers (its
// hidden and output layers over the tile), and this step's load_tile and store_tile (written
// there because steps 12 and 13 keep them).

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

#include "half_tile.cuh"   // load_tile, store_tile, load_half_row, load_w3_pair, tile_layers

extern "C" __global__ void __launch_bounds__(THREADS)
hide_input_loads(int N, const float* __restrict__ X, const __half* __restrict__ W1t,
                 const __half* __restrict__ W2t, const __half* __restrict__ W3, float* __restrict__ Y)
{
    __shared__ __align__(16) __half xs[TILE][IN];
    __shared__ __align__(16) __half h1s[TILE][HID];
    __shared__ __align__(16) __half h2s[TILE][HID];

    int tid = threadIdx.x;
    int r = tid % THREADS_PER_GROUP;
    int j = r / 2, half = r % 2;
    int o = r / 32, lane = r % 32;

    __half2 w1[IN_HALF / 2], w2[HID_HALF / 2];
    load_half_row<IN>(W1t, j, half, w1);
    load_half_row<HID>(W2t, j, half, w2);
    float2 w3f = load_w3_pair(W3, o, lane);   // W3 stays row-major: its reads were consecutive already

    int tiles = (N + TILE - 1) / TILE;
    float next[FILL_PER_THREAD];        // this thread's inputs of the next tile
    load_tile(X, N, blockIdx.x * TILE, tid, next);
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int first = tile * TILE;
        // Every thread finished reading xs (layer 1) before the last tile's second barrier.
        store_tile(xs, tid, next);
        __syncthreads();
        load_tile(X, N, (tile + gridDim.x) * TILE, tid, next);   // in flight during layers 1-3

        tile_layers(xs, h1s, h2s, w1, w2, w3f, first, N, Y);
    }
}
