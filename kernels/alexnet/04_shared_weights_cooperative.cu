// Step 4 -- the block's filter in shared memory, loaded by all threads together.
//
// What changed from step 3: thread t copies elements t, t + T, t + 2T, ... of the filter
// (T = threads in the block), so neighbouring threads read neighbouring words: the copy is
// coalesced and takes C*R*S / T rounds instead of C*R*S (the report's "rswmtla2m").
//
// Launch: as step 3 (C*R*S*4 bytes of dynamic shared memory).
//
// Prediction: the copy shrinks from thousands of serial loads to a handful of coalesced
// rounds, so step 3's loss disappears: back to about step 2's time, a little better where
// the shared-memory broadcast beats L1 (layers 2-5).
//
// From direct_conv.cuh: add_window, step 1's loop over the window, here reading w_s.
#include "direct_conv.cuh"
extern "C" __global__ void conv_shared_weights_cooperative(const float* x, const float* w, float* y,
                                                           int N, int C, int H, int W, int M,
                                                           int R, int S, int U, int P, int E, int F)
{
    extern __shared__ float w_s[];          // this block's filter: C*R*S floats
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int filter_size = C * R * S;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    for (int i = tid; i < filter_size; i += threads) w_s[i] = w[(size_t)m * filter_size + i];
    __syncthreads();
    for (int e = threadIdx.y; e < E; e += blockDim.y) {
        for (int f = threadIdx.x; f < F; f += blockDim.x) {
            float acc = 0.0f;
            for (int c = 0; c < C; ++c) {
                const float* xc = x + ((size_t)n * C + c) * H * W;
                const float* wc = w_s + c * R * S;
                add_window(acc, xc, wc, e, f, H, W, R, S, U, P);
            }
            y[((size_t)n * M + m) * E * F + (size_t)e * F + f] = acc;
        }
    }
}
