// Step 5 -- shared memory only: the filter and the running sums in shared memory.
//
// What changed from step 3 (not 4: this follows the report's "swso", an experiment on top of
// its one-thread copy): the running sum of each thread lives in shared memory (acc_s[tid])
// instead of a register, and thread (0, 0) still copies the filter alone.
//
// Launch: as step 3, with (C*R*S + BX*BY)*4 bytes of dynamic shared memory.
//
// Why it should be slower, not faster: a register is read in the same cycle as the FMA; a
// shared-memory read and write cost two more instructions and ~30 cycles of latency per
// multiply-add. Prediction: slower than step 3 by about 1.5x; included because the report
// measured it, and because "use shared memory" is not a synonym for "faster".
//
// From direct_conv.cuh: add_window, step 1's loop over the window, here summing into acc_s[tid].
#include "direct_conv.cuh"
extern "C" __global__ void conv_shared_only(const float* x, const float* w, float* y,
                                            int N, int C, int H, int W, int M, int R, int S,
                                            int U, int P, int E, int F)
{
    extern __shared__ float smem[];
    const int filter_size = C * R * S;
    float* w_s = smem;                      // this block's filter: C*R*S floats
    float* acc_s = smem + filter_size;      // one running sum per thread
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    if (tid == 0) {
        for (int i = 0; i < filter_size; ++i) w_s[i] = w[(size_t)m * filter_size + i];
    }
    __syncthreads();
    for (int e = threadIdx.y; e < E; e += blockDim.y) {
        for (int f = threadIdx.x; f < F; f += blockDim.x) {
            acc_s[tid] = 0.0f;
            for (int c = 0; c < C; ++c) {
                const float* xc = x + ((size_t)n * C + c) * H * W;
                const float* wc = w_s + c * R * S;
                add_window(acc_s[tid], xc, wc, e, f, H, W, R, S, U, P);
            }
            y[((size_t)n * M + m) * E * F + (size_t)e * F + f] = acc_s[tid];
        }
    }
}
