// Step 9: 32 vectors per iteration, filled into shared memory without bank conflicts.
//
// What changed from step 8: a block now takes a tile of 32 vectors per
// iteration instead of 2. Threads keep their roles (thread (j, half) owns half
// of hidden unit j); each half of the block (128 threads) loops over 16 of the
// tile's vectors. Three barriers now serve 32 vectors instead of 2, and the
// input loads of a tile are 32 consecutive floats per feature (128 bytes)
// instead of 2.
//
// Bank conflicts. Shared memory has 32 banks of 4 bytes. In the compute loops
// every lane of a warp reads the same vector (the two half-rows: 2 distinct
// addresses, a broadcast), so those reads were never conflicted -- whatever
// the report guessed without a profiler. The place a 32-vector tile CAN
// conflict is the fill. The obvious fill gives lane c vector c of one feature
// k and stores xs[c][k]: a row is 72 halves = 36 words, so lane c's word lands
// in bank (36c + k/2) % 32 = (4c + k/2) % 32 -- only 8 distinct banks for 32
// lanes, a 4-way conflict on every store. Here a warp instead covers 8 vectors
// x 4 features: global reads are still whole 32-byte sectors (8 consecutive
// floats), and the stores hit words 36c + k/2 for c = 0..7 and two values of
// k/2: 16 distinct banks, each word shared by two lanes writing its two
// halves, which is no conflict. (Padding each row to an odd number of words
// would also do it, but would break the 8-byte alignment of the half4 reads.)
//
// Why it should be faster: 16x fewer barriers and iterations per vector and
// full-sector input loads. Prediction: 1.5-2x over step 8 on the large case
// (the report: 1.2x). Less on the small case: its 400 tiles give each of the
// 132 resident blocks (one per SM at this kernel's registers) only 3-4, so
// the weight loads before the loop weigh more.
//
// This step's fill, hidden layers and output layer over the tile (fill_tile, hidden_layer_tile,
// output_layer_tile, and tile_layers, the three layers with their barriers) and its load of W3
// (load_w3_pair) are in half_tile.cuh: steps 10, 11 and 13 keep them. The row-major loads of
// W1 and W2 stay here: step 10 replaces them.

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

#include "half_tile.cuh"   // half4 (step 8), fill_tile, load_w3_pair, tile_layers

extern "C" __global__ void __launch_bounds__(THREADS)
conflict_free_tile(int N, const float* __restrict__ X, const __half* __restrict__ W1,
                   const __half* __restrict__ W2, const __half* __restrict__ W3, float* __restrict__ Y)
{
    __shared__ __align__(16) __half xs[TILE][IN];
    __shared__ __align__(16) __half h1s[TILE][HID];
    __shared__ __align__(16) __half h2s[TILE][HID];

    int tid = threadIdx.x;
    int r = tid % THREADS_PER_GROUP;
    int j = r / 2, half = r % 2;
    int o = r / 32, lane = r % 32;

    __half2 w1[IN_HALF / 2], w2[HID_HALF / 2];
#pragma unroll
    for (int k = 0; k < IN_HALF / 2; ++k) {
        const __half* row = W1 + j * IN + half * IN_HALF;
        w1[k] = __halves2half2(row[2 * k], row[2 * k + 1]);
    }
#pragma unroll
    for (int k = 0; k < HID_HALF / 2; ++k) {
        const __half* row = W2 + j * HID + half * HID_HALF;
        w2[k] = __halves2half2(row[2 * k], row[2 * k + 1]);
    }
    float2 w3f = load_w3_pair(W3, o, lane);

    int tiles = (N + TILE - 1) / TILE;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int first = tile * TILE;
        fill_tile(xs, X, N, first, tid);
        __syncthreads();

        tile_layers(xs, h1s, h2s, w1, w2, w3f, first, N, Y);
    }
}
