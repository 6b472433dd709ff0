// Step 3 -- the block's filter in shared memory, loaded by one thread.
//
// What changed from step 2: every thread of a block uses the same filter w[m] (C*R*S floats:
// 1.4 KB for layer 1, at most 13.5 KB for layers 4 and 5), so the block copies it into shared
// memory first. As in the report's "rswbdl2m", thread (0, 0) does the whole copy while the
// others wait at the barrier.
//
// Launch: as step 2, with C*R*S*4 bytes of dynamic shared memory.
//
// Why it might be faster, and why it probably is not: weight reads now come from shared
// memory instead of L1, but step 2's weight reads were already uniform across the warp (one
// broadcast each). Meanwhile one thread issues C*R*S dependent loads while up to 1023 others
// idle: 3456 serialized loads for layers 4-5. Prediction: slower than step 2, most on the
// small layers 3-5 where the copy is long and the compute per block short.
//
// From direct_conv.cuh: add_window, step 1's loop over the window, here reading w_s.
#include "direct_conv.cuh"
extern "C" __global__ void conv_shared_weights_one_thread(const float* x, const float* w, float* y,
                                                          int N, int C, int H, int W, int M,
                                                          int R, int S, int U, int P, int E, int F)
{
    extern __shared__ float w_s[];          // this block's filter: C*R*S floats
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int filter_size = C * R * S;
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        for (int i = 0; i < filter_size; ++i) w_s[i] = w[(size_t)m * filter_size + i];
    }
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
