// Step 3: fused, with the weights and the activations in shared memory.
//
// What changed from step 2: the block first copies all three weight matrices
// (8,960 floats, 35 KB) and its 4 input vectors into shared memory, and keeps
// H1 and H2 there too. Device memory now sees only the inputs, the outputs and
// the weights -- the weights once per block rather than once per thread.
//
// Why it should be faster: the H1/H2 round trips through device memory are
// gone, and each weight read from L2 serves the block's 4 vectors instead of
// one. What is left is loading 35 KB of weights per 4 vectors: 9 KB per
// vector of L2 traffic, 30 times the vector's own 304 bytes.
// Prediction: 2-3x faster than step 1 (the report saw 2x on its RTX 3080 Ti).
//
// Thread j of a vector reads row j of W1s: a warp's 32 threads read 32 rows
// 72 floats apart, and 72 = 2 x 32 + 8, so rows j and j+4 fall in the same
// shared-memory bank: an 8-way bank conflict on every layer-1 weight read.
// Layer 2 is worse: W2s's rows are 64 floats apart, a multiple of 32, so all
// 32 lanes read bank k % 32 -- a 32-way conflict. We keep the textbook
// row-major layout here; the profiler will show what it costs.
//
// The copies into shared memory, the fill and the three layers (copy_to_shared, fill_vectors,
// dense_relu, dense_output) are in shared_layers.cuh: steps 4-6 keep them.

#define IN 72
#define HID 64
#define OUT 4
#define VECTORS_PER_BLOCK 4   // 4 x 64 = 256 threads
#include "shared_layers.cuh"

extern "C" __global__ void fused_shared(int N, const float* __restrict__ X, const float* __restrict__ W1,
                                        const float* __restrict__ W2, const float* __restrict__ W3,
                                        float* __restrict__ Y)
{
    __shared__ float W1s[HID * IN];
    __shared__ float W2s[HID * HID];
    __shared__ float W3s[OUT * HID];
    __shared__ float xs[VECTORS_PER_BLOCK][IN];
    __shared__ float h1s[VECTORS_PER_BLOCK][HID];
    __shared__ float h2s[VECTORS_PER_BLOCK][HID];

    int tid = threadIdx.x;
    int j = tid % HID;                  // hidden unit
    int local = tid / HID;              // which of the block's vectors
    int first = blockIdx.x * VECTORS_PER_BLOCK;
    int v = first + local;

    // Consecutive threads copy consecutive weights: coalesced reads.
    copy_to_shared(W1s, W1, HID * IN);
    copy_to_shared(W2s, W2, HID * HID);
    copy_to_shared(W3s, W3, OUT * HID);
    fill_vectors<VECTORS_PER_BLOCK>(xs, X, N, first);
    __syncthreads();

    dense_relu<IN>(W1s, xs, h1s, j, local);
    __syncthreads();

    dense_relu<HID>(W2s, h1s, h2s, j, local);
    __syncthreads();

    dense_output(W3s, h2s, Y, N, v, j, local);
}
