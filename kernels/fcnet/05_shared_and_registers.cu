// Step 5: layer 2's weights move from shared memory into registers.
//
// What changed from step 4: thread j loads row j of W2 (64 floats) into its
// own registers once, before the loop; W1 and W3 stay in shared memory. The
// shared-memory footprint drops from 39 KB to 23 KB per block.
//
// Why it should be faster: layer 2 now does one shared-memory load per
// multiply-add (the activation h1s[local][k], the same address for the whole
// warp: a broadcast) instead of two. The other was the worst read of step 4:
// a warp's 32 threads are 32 consecutive units j, and W2s[j*64 + k] puts
// their rows 64 floats apart, a multiple of the 32 banks, so all 32 lanes hit
// bank k % 32 -- a 32-way conflict (W1s's rows, 72 floats apart, fall on 4
// banks: 8-way). And a smaller shared footprint lets more blocks share an SM.
// The cost: 64 more registers per thread. Registers are indexed only with
// compile-time constants (the loop over k is fully unrolled), otherwise the
// array would be placed in slow local memory.
// Prediction: layer 2 was about 45% of the arithmetic; making it a good deal
// cheaper should give 1.3-1.6x over step 4 (the report: 2x on the large case).
//
// Built on shared_layers.cuh: step 3's copy_to_shared, fill_vectors, dense_relu (layer 1) and
// dense_output, and this step's layer 2, dense_relu_registers (step 6 keeps it).

#define IN 72
#define HID 64
#define OUT 4
#define VECTORS_PER_GROUP 4   // 4 x 64 = 256 threads
#include "shared_layers.cuh"

extern "C" __global__ void __launch_bounds__(256)
shared_and_registers(int N, const float* __restrict__ X, const float* __restrict__ W1,
                     const float* __restrict__ W2, const float* __restrict__ W3, float* __restrict__ Y)
{
    __shared__ float W1s[HID * IN];
    __shared__ float W3s[OUT * HID];
    __shared__ float xs[VECTORS_PER_GROUP][IN];
    __shared__ float h1s[VECTORS_PER_GROUP][HID];
    __shared__ float h2s[VECTORS_PER_GROUP][HID];

    int tid = threadIdx.x;
    int j = tid % HID;
    int local = tid / HID;

    copy_to_shared(W1s, W1, HID * IN);
    copy_to_shared(W3s, W3, OUT * HID);
    float w2[HID];                       // row j of W2, in registers
#pragma unroll
    for (int k = 0; k < HID; ++k) w2[k] = W2[j * HID + k];

    int groups = (N + VECTORS_PER_GROUP - 1) / VECTORS_PER_GROUP;
    for (int group = blockIdx.x; group < groups; group += gridDim.x) {
        int first = group * VECTORS_PER_GROUP;
        int v = first + local;
        fill_vectors<VECTORS_PER_GROUP>(xs, X, N, first);
        __syncthreads();

        dense_relu<IN>(W1s, xs, h1s, j, local);
        __syncthreads();

        dense_relu_registers<HID>(w2, h1s, h2s, j, local);
        __syncthreads();

        dense_output(W3s, h2s, Y, N, v, j, local);
    }
}
