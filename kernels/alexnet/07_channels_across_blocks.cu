// Step 7 -- channels in parallel too: grid N x M x C, then a second kernel sums over C.
//
// What changed from step 2: steps 1-6 give each block one (image, filter) pair and loop over
// all C input channels inside the thread. Here a block handles one (image, filter, channel)
// triple, so there are C times more blocks, each doing only R*S multiply-adds per output.
// The per-channel sums go to a buffer `partial` (N x C x M x E x F floats) and a second
// kernel adds them up (the report's "Mk").
//
// Memory cost: `partial` is C times the output. At N = 128 that is 9.2 GB for layer 2 and
// 12.8 GB for layer 4; at N = 2048 it would not fit in any GPU's memory (the chapter skips
// those sizes and says so).
//
// Launch: conv_channel_partials with grid (M, N, C), block as step 2;
//         reduce_channels with a 1-D grid of 256-thread blocks over the N*M*E*F outputs.
//
// Why it should be faster (the report found it was): many more, shorter blocks keep the GPU
// busy at small N. Why it might not be: the partial buffer costs C writes and C reads per
// output through device memory: at N = 128, 18-26 GB of extra traffic on layers 2-5, about
// 8 ms of bandwidth per layer on an H100. Prediction: faster than step 2 at N = 1 (more
// parallelism), slower at N = 128 (bandwidth for the partials).
extern "C" __global__ void conv_channel_partials(const float* x, const float* w, float* partial,
                                                 int N, int C, int H, int W, int M, int R, int S,
                                                 int U, int P, int E, int F)
{
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int c = blockIdx.z;
    const float* xc = x + ((size_t)n * C + c) * H * W;
    const float* wc = w + ((size_t)m * C + c) * R * S;
    float* out = partial + (((size_t)n * C + c) * M + m) * E * F;
    for (int e = threadIdx.y; e < E; e += blockDim.y) {
        for (int f = threadIdx.x; f < F; f += blockDim.x) {
            float acc = 0.0f;
            for (int r = 0; r < R; ++r) {
                const int row = e * U - P + r;
                if (row < 0 || row >= H) continue;
                for (int s = 0; s < S; ++s) {
                    const int col = f * U - P + s;
                    if (col < 0 || col >= W) continue;
                    acc += xc[row * W + col] * wc[r * S + s];
                }
            }
            out[e * F + f] = acc;
        }
    }
}

// y[n, m, p] = sum over c of partial[n, c, m, p], p = e*F + f. Consecutive threads take
// consecutive p, so each of the C reads is coalesced.
extern "C" __global__ void reduce_channels(const float* partial, float* y, int N, int C, int M, int EF)
{
    const size_t total = (size_t)N * M * EF;
    const size_t per_image = (size_t)M * EF;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / per_image;
        const size_t rest = i - n * per_image;
        const float* p = partial + n * C * per_image + rest;
        float acc = 0.0f;
        for (int c = 0; c < C; ++c) acc += p[(size_t)c * per_image];
        y[i] = acc;
    }
}
