// Step 4: the whole network stays in shared memory while a block loops.
//
// What changed from step 3: instead of one block per 4 vectors (1.28 million
// blocks for the large case, each copying the 35 KB of weights), the grid is
// a fixed number of blocks -- as many as fit on the GPU at once -- and each
// block copies the weights once, then loops over groups of 4 vectors
// (group = blockIdx.x, blockIdx.x + gridDim.x, ...).
//
// Why it should be faster: the weight traffic from L2 drops from once per
// 4 vectors to once per block. Why it might not be: the work inside the loop
// is unchanged (same bank conflicts, 8-way on W1s and 32-way on W2s, same
// three barriers per group), and the 39 KB of shared memory per block caps how
// many blocks share an SM. Prediction: clearly faster on the large case, where step 3 re-read the
// weights 1.28 million times; little change on the small case (3,200 groups,
// so step 3 already re-read them only 3,200 times).
//
// Built on shared_layers.cuh: step 3's copy_to_shared, fill_vectors, dense_relu and dense_output.

#define IN 72
#define HID 64
#define OUT 4
#define VECTORS_PER_GROUP 4   // 4 x 64 = 256 threads
#include "shared_layers.cuh"

extern "C" __global__ void whole_net_shared(int N, const float* __restrict__ X, const float* __restrict__ W1,
                                            const float* __restrict__ W2, const float* __restrict__ W3,
                                            float* __restrict__ Y)
{
    __shared__ float W1s[HID * IN];
    __shared__ float W2s[HID * HID];
    __shared__ float W3s[OUT * HID];
    __shared__ float xs[VECTORS_PER_GROUP][IN];
    __shared__ float h1s[VECTORS_PER_GROUP][HID];
    __shared__ float h2s[VECTORS_PER_GROUP][HID];

    int tid = threadIdx.x;
    int j = tid % HID;
    int local = tid / HID;

    copy_to_shared(W1s, W1, HID * IN);
    copy_to_shared(W2s, W2, HID * HID);
    copy_to_shared(W3s, W3, OUT * HID);

    int groups = (N + VECTORS_PER_GROUP - 1) / VECTORS_PER_GROUP;
    for (int group = blockIdx.x; group < groups; group += gridDim.x) {
        int first = group * VECTORS_PER_GROUP;
        int v = first + local;
        // No barrier is needed before overwriting xs: every thread finished
        // reading it (layer 1) before the previous group's second barrier.
        fill_vectors<VECTORS_PER_GROUP>(xs, X, N, first);
        __syncthreads();   // also orders the weight copy before the first group

        dense_relu<IN>(W1s, xs, h1s, j, local);
        __syncthreads();

        dense_relu<HID>(W2s, h1s, h2s, j, local);
        __syncthreads();

        dense_output(W3s, h2s, Y, N, v, j, local);
    }
}
