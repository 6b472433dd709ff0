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
//
// From direct_conv.cuh: add_window (step 1's loop over the window) and sum_channel_partials,
// this step's reduction (written there because steps 8, 9, 11 and 12 reuse it).
#include "direct_conv.cuh"
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
            add_window(acc, xc, wc, e, f, H, W, R, S, U, P);
            out[e * F + f] = acc;
        }
    }
}

// y[n, m, p] = sum over c of partial[n, c, m, p], p = e*F + f. Consecutive threads take
// consecutive p, so each of the C reads is coalesced.
extern "C" __global__ void reduce_channels(const float* partial, float* y, int N, int C, int M, int EF)
{
    sum_channel_partials(partial, y, N, C, M, EF);
}
