// Step 13 -- one kernel, no partial buffer: blocks add their sums into y atomically.
//
// What changed from step 11: a block now handles CB consecutive channels (grid
// M x N x ceil(C / CB)) and sums them in a register; it then adds its sum into the output
// with atomicAdd, which must be zeroed first (one cudaMemset before the kernel). There is no
// N x C x M x E x F buffer and no reduction kernel (the report's experimental single-kernel
// version). The order of the atomic additions differs from run to run, so the last bits of y
// may too; each is still a float32 sum.
//
// Launch: grid (M, N, ceil(C / CB)), block as step 11, dynamic shared memory as step 11;
// the chapter uses CB = 16 (24 atomic additions per output on layers 4-5, 1 on layer 1).
//
// Prediction: the 18-26 GB of partial traffic per layer at N = 128 disappears, leaving the
// atomics (C / CB per output, resolved in L2): 2-4x faster than step 11 on layers 2-5 at
// N = 128, and memory no longer grows with C, so every batch size up to 2048 fits.
//
// From direct_conv.cuh: fill_weight_rows4 (step 11) and fill_patch (step 9).
#include "direct_conv.cuh"
extern "C" __global__ void conv_channel_chunks_atomic(const float* x, const float* w, float* y,
                                                      int N, int C, int H, int W, int M, int R,
                                                      int S, int U, int P, int E, int F, int CB)
{
    extern __shared__ float4 smem4[];
    const int S4 = (S + 3) & ~3;
    const int PH = (blockDim.y - 1) * U + R;
    const int PW = ((blockDim.x - 1) * U + S4 + 3) & ~3;
    float* w_s = (float*)smem4;
    float* in_s = w_s + R * S4;
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int c_begin = blockIdx.z * CB;
    const int c_end = min(C, c_begin + CB);
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    const bool aligned_input = (U % 4) == 0;
    for (int e0 = 0; e0 < E; e0 += blockDim.y) {
        for (int f0 = 0; f0 < F; f0 += blockDim.x) {
            const int e = e0 + threadIdx.y;
            const int f = f0 + threadIdx.x;
            float acc = 0.0f;
            for (int c = c_begin; c < c_end; ++c) {
                const float* wc = w + ((size_t)m * C + c) * R * S;
                const float* xc = x + ((size_t)n * C + c) * H * W;
                __syncthreads();                // the previous channel's readers are done
                fill_weight_rows4(w_s, wc, R, S, S4, tid, threads);
                fill_patch(in_s, xc, e0, f0, PH, PW, H, W, U, P, tid, threads);
                __syncthreads();
                if (e < E && f < F) {
                    const float* patch = in_s + threadIdx.y * U * PW + threadIdx.x * U;
                    for (int r = 0; r < R; ++r) {
                        const float4* w4 = (const float4*)(w_s + r * S4);
                        const float* in_row = patch + r * PW;
                        for (int q = 0; q < S4 / 4; ++q) {
                            const float4 wv = w4[q];
                            float4 iv;
                            if (aligned_input) {
                                iv = ((const float4*)in_row)[q];
                            } else {
                                iv = make_float4(in_row[4 * q], in_row[4 * q + 1], in_row[4 * q + 2],
                                                 in_row[4 * q + 3]);
                            }
                            acc += iv.x * wv.x + iv.y * wv.y + iv.z * wv.z + iv.w * wv.w;
                        }
                    }
                }
            }
            if (e < E && f < F) atomicAdd(&y[((size_t)n * M + m) * E * F + (size_t)e * F + f], acc);
        }
    }
}
