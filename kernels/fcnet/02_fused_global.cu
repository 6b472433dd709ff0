// Step 2: one fused kernel; the hidden layers still go through device memory.
//
// What changed from step 1: the five launches become one. A block of 256
// threads takes 4 vectors, 64 threads per vector, thread j of a vector
// computing hidden unit j: layer 1, write H1 to device memory, __syncthreads(),
// layer 2 reading H1 back, __syncthreads(), then the 4 outputs, computed by the
// first 4 threads of each vector. __syncthreads() is enough to order the
// hidden layers because all 64 units of a vector live in the same block.
//
// Why it should be faster: four fewer launches, and H1/H2 are read back by
// the block that wrote them, likely from L2 rather than DRAM.
// Why it might not be: look at what a warp touches. Its 32 threads are 32
// hidden units of ONE vector, so every load of X is the same address (one
// useful float per request), every load of W1 is 32 different rows 288 bytes
// apart, and every store of H1 (H1[j*N + v]) is 32 floats N*4 bytes apart --
// 32 memory transactions for 128 useful bytes. Step 1's matmul had a warp
// along the vectors: coalesced reads and writes.
// Prediction: slower than step 1, perhaps 1.5-2x, on both sizes.

#define IN 72                 // inputs per vector
#define HID 64                // units per hidden layer
#define OUT 4                 // outputs per vector
#define VECTORS_PER_BLOCK 4   // 4 x 64 = 256 threads

extern "C" __global__ void fused_global(int N, const float* __restrict__ X, const float* __restrict__ W1,
                                        const float* __restrict__ W2, const float* __restrict__ W3,
                                        float* H1, float* H2, float* __restrict__ Y)
{
    int j = threadIdx.x % HID;                                   // hidden unit
    int v = blockIdx.x * VECTORS_PER_BLOCK + threadIdx.x / HID;  // vector
    bool active = v < N;   // every thread must still reach the barriers

    if (active) {
        float acc = 0.0f;
        for (int k = 0; k < IN; ++k) acc += W1[j * IN + k] * X[(size_t)k * N + v];
        H1[(size_t)j * N + v] = fmaxf(acc, 0.0f);
    }
    __syncthreads();
    if (active) {
        float acc = 0.0f;
        for (int k = 0; k < HID; ++k) acc += W2[j * HID + k] * H1[(size_t)k * N + v];
        H2[(size_t)j * N + v] = fmaxf(acc, 0.0f);
    }
    __syncthreads();
    if (active && j < OUT) {
        float acc = 0.0f;
        for (int k = 0; k < HID; ++k) acc += W3[j * HID + k] * H2[(size_t)k * N + v];
        Y[(size_t)j * N + v] = acc;
    }
}
