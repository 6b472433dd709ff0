// Step 10: the weights are read from transposed copies, so the reads coalesce.
//
// What changed from step 9: only how the weights get into registers. Thread
// (j, half) needs W1[j][half*36 + k] for k = 0..35. Row-major, the 32 lanes of
// a warp (16 units x 2 halves) read 32 addresses 144 bytes apart -- 32
// separate 32-byte sectors per load instruction, 1 useful half in each. The
// host now passes W1t = W1 transposed (72 x 64, W1t[k][j]), so for a given k
// the warp's 16 units read 16 consecutive halves: 2 sectors per instruction.
// Same for W2; W3's reads (lane l: W3[o][2l], W3[o][2l+1]) were consecutive already.
//
// Why it should be faster: this happens once per block, before the loop. At
// about 150 registers per thread one 256-thread block fits on an SM, so the
// persistent grid is 132 blocks: on the large case (160,000 tiles) a block
// runs ~1,200 tiles after the prologue, so the prediction there is no change.
// On the small case (400 tiles, 3-4 per block) the weight loads are a real
// share of each block's life: prediction 10-25% faster (the report: 1.3x on
// its small case, 1.07x on the large one).
//
// Built on half_tile.cuh: step 9's fill_tile, load_w3_pair and tile_layers (its hidden and output
// layers over the tile), and this step's transposed loads, load_half_row (written there because
// steps 11 and 13 keep them).

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

#include "half_tile.cuh"   // fill_tile, load_half_row, load_w3_pair, tile_layers

extern "C" __global__ void __launch_bounds__(THREADS)
coalesced_weights(int N, const float* __restrict__ X, const __half* __restrict__ W1t,
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
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int first = tile * TILE;
        fill_tile(xs, X, N, first, tid);
        __syncthreads();

        tile_layers(xs, h1s, h2s, w1, w2, w3f, first, N, Y);
    }
}
