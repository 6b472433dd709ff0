// Step 8 -- step 7 plus the block's weights in shared memory, loaded by all threads.
//
// What changed from step 7: the block's R x S slice of the filter (w[m, c]: 121 floats for
// layer 1, 25 for layer 2, 9 for layers 3-5) is copied into shared memory by the threads
// together before the sums start (the report's "Mk-sw-mt").
//
// Launch: as step 7, with R*S*4 bytes of dynamic shared memory for conv_channel_partials_sw.
//
// Prediction: small gain over step 7 (each weight read was already one broadcast from L1);
// the partial buffer's traffic, unchanged, still dominates at large N.
//
// From direct_conv.cuh: add_window (step 1's loop over the window) and sum_channel_partials
// (step 7's reduction).
#include "direct_conv.cuh"
extern "C" __global__ void conv_channel_partials_sw(const float* x, const float* w, float* partial,
                                                    int N, int C, int H, int W, int M, int R, int S,
                                                    int U, int P, int E, int F)
{
    extern __shared__ float w_s[];          // w[m, c]: R*S floats
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int c = blockIdx.z;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    const float* wc = w + ((size_t)m * C + c) * R * S;
    for (int i = tid; i < R * S; i += threads) w_s[i] = wc[i];
    __syncthreads();
    const float* xc = x + ((size_t)n * C + c) * H * W;
    float* out = partial + (((size_t)n * C + c) * M + m) * E * F;
    for (int e = threadIdx.y; e < E; e += blockDim.y) {
        for (int f = threadIdx.x; f < F; f += blockDim.x) {
            float acc = 0.0f;
            add_window(acc, xc, w_s, e, f, H, W, R, S, U, P);
            out[e * F + f] = acc;
        }
    }
}

// As in step 7.
extern "C" __global__ void reduce_channels(const float* partial, float* y, int N, int C, int M, int EF)
{
    sum_channel_partials(partial, y, N, C, M, EF);
}
