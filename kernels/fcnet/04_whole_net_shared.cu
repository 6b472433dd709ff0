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

#define IN 72
#define HID 64
#define OUT 4
#define VECTORS_PER_GROUP 4   // 4 x 64 = 256 threads

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

    for (int i = tid; i < HID * IN; i += blockDim.x) W1s[i] = W1[i];
    for (int i = tid; i < HID * HID; i += blockDim.x) W2s[i] = W2[i];
    for (int i = tid; i < OUT * HID; i += blockDim.x) W3s[i] = W3[i];

    int groups = (N + VECTORS_PER_GROUP - 1) / VECTORS_PER_GROUP;
    for (int group = blockIdx.x; group < groups; group += gridDim.x) {
        int first = group * VECTORS_PER_GROUP;
        int v = first + local;
        // No barrier is needed before overwriting xs: every thread finished
        // reading it (layer 1) before the previous group's second barrier.
        for (int i = tid; i < VECTORS_PER_GROUP * IN; i += blockDim.x) {
            int k = i / VECTORS_PER_GROUP, c = i % VECTORS_PER_GROUP;
            xs[c][k] = (first + c < N) ? X[(size_t)k * N + first + c] : 0.0f;
        }
        __syncthreads();   // also orders the weight copy before the first group

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
}
