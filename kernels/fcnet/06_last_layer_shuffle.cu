// Step 6: all 64 threads of a vector share the output layer, via warp shuffles.
//
// What changed from step 5: in steps 2-5 only 4 of a vector's 64 threads
// computed the outputs (64 multiply-adds each, one after the other) while the
// other 60 waited at the next barrier. Now thread j takes one sixteenth of one
// output: output o = j / 16, terms 4*(j%16) .. 4*(j%16)+3 of its dot product,
// then the 16 partial sums are added with __shfl_xor_sync in 4 steps (a tree:
// offsets 8, 4, 2, 1 within each group of 16 lanes), no shared memory needed.
//
// Why it should be faster: the output layer's critical path drops from 64
// dependent multiply-adds to 4 plus 4 shuffles. But it was only 256 of the
// 8,960 multiply-adds per vector, so prediction: a few percent at most.
//
// Built on shared_layers.cuh: step 3's copy_to_shared, fill_vectors and dense_relu (layer 1),
// step 5's dense_relu_registers (layer 2).

#define IN 72
#define HID 64
#define OUT 4
#define VECTORS_PER_GROUP 4                 // 4 x 64 = 256 threads
#define LANES_PER_OUTPUT (HID / OUT)        // 16 threads share one output
#define TERMS_PER_LANE (HID / LANES_PER_OUTPUT)   // 4 terms each
#include "shared_layers.cuh"

extern "C" __global__ void __launch_bounds__(256)
last_layer_shuffle(int N, const float* __restrict__ X, const float* __restrict__ W1,
                   const float* __restrict__ W2, const float* __restrict__ W3, float* __restrict__ Y)
{
    __shared__ float W1s[HID * IN];
    __shared__ float xs[VECTORS_PER_GROUP][IN];
    __shared__ float h1s[VECTORS_PER_GROUP][HID];
    __shared__ float h2s[VECTORS_PER_GROUP][HID];

    int tid = threadIdx.x;
    int j = tid % HID;
    int local = tid / HID;
    int o = j / LANES_PER_OUTPUT;                  // this thread's output
    int part = j % LANES_PER_OUTPUT;               // and its share of the terms

    copy_to_shared(W1s, W1, HID * IN);
    float w2[HID];
#pragma unroll
    for (int k = 0; k < HID; ++k) w2[k] = W2[j * HID + k];
    float w3[TERMS_PER_LANE];                      // W3 now fits in registers too
#pragma unroll
    for (int t = 0; t < TERMS_PER_LANE; ++t) w3[t] = W3[o * HID + part * TERMS_PER_LANE + t];

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

        float acc = 0.0f;
#pragma unroll
        for (int t = 0; t < TERMS_PER_LANE; ++t) acc += w3[t] * h2s[local][part * TERMS_PER_LANE + t];
        // Groups of 16 lanes are aligned within the warp, so xor offsets below 16
        // never mix two outputs. Every lane ends with the full sum.
#pragma unroll
        for (int offset = LANES_PER_OUTPUT / 2; offset > 0; offset /= 2)
            acc += __shfl_xor_sync(0xffffffffu, acc, offset);
        if (part == 0 && v < N) Y[(size_t)o * N + v] = acc;
    }
}
