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

#define IN 72
#define HID 64
#define OUT 4
#define VECTORS_PER_BLOCK 4   // 4 x 64 = 256 threads

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
    for (int i = tid; i < HID * IN; i += blockDim.x) W1s[i] = W1[i];
    for (int i = tid; i < HID * HID; i += blockDim.x) W2s[i] = W2[i];
    for (int i = tid; i < OUT * HID; i += blockDim.x) W3s[i] = W3[i];
    for (int i = tid; i < VECTORS_PER_BLOCK * IN; i += blockDim.x) {
        int k = i / VECTORS_PER_BLOCK, c = i % VECTORS_PER_BLOCK;   // 4 consecutive vectors per feature
        xs[c][k] = (first + c < N) ? X[(size_t)k * N + first + c] : 0.0f;
    }
    __syncthreads();

    float acc = 0.0f;
    for (int k = 0; k < IN; ++k) acc += W1s[j * IN + k] * xs[local][k];
    h1s[local][j] = fmaxf(acc, 0.0f);
    __syncthreads();

    acc = 0.0f;
    for (int k = 0; k < HID; ++k) acc += W2s[j * HID + k] * h1s[local][k];
    h2s[local][j] = fmaxf(acc, 0.0f);
    __syncthreads();

    if (j < OUT && v < N) {
        acc = 0.0f;
        for (int k = 0; k < HID; ++k) acc += W3s[j * HID + k] * h2s[local][k];
        Y[(size_t)j * N + v] = acc;
    }
}
