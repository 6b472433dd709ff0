// Step 12 -- step 11 with half precision in device memory.
//
// What changed from step 11: x, w, the partial sums and y are __half in device memory. The
// block converts the patch and the weights to float as it copies them into shared memory,
// so the inner loop is step 11's, in float (the report's "Mk-sw-mt-si-c-half"). Each partial
// sum (at most R*S = 121 products) is rounded to half once, and the C partials are added in
// float by the reduction kernel.
//
// Launch: as step 11.
//
// Prediction: the partial buffer, the traffic that dominates steps 7-11 at large N, halves:
// towards 2x on layers 2-5 at N = 128, where that traffic is most of the time; little change
// at N = 1.
//
// From direct_conv.cuh: step 11's fill_weight_rows4 and step 9's fill_patch, converting each
// __half to float (as_float) as they copy, and step 7's sum_channel_partials, summing in float.
#include <cuda_fp16.h>
#include "direct_conv.cuh"

extern "C" __global__ void conv_channel_partials_half(const __half* x, const __half* w,
                                                      __half* partial, int N, int C, int H, int W,
                                                      int M, int R, int S, int U, int P, int E, int F)
{
    extern __shared__ float4 smem4[];
    const int S4 = (S + 3) & ~3;
    const int PH = (blockDim.y - 1) * U + R;
    const int PW = ((blockDim.x - 1) * U + S4 + 3) & ~3;
    float* w_s = (float*)smem4;
    float* in_s = w_s + R * S4;
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int c = blockIdx.z;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    const __half* wc = w + ((size_t)m * C + c) * R * S;
    fill_weight_rows4(w_s, wc, R, S, S4, tid, threads);
    const __half* xc = x + ((size_t)n * C + c) * H * W;
    __half* out = partial + (((size_t)n * C + c) * M + m) * E * F;
    const bool aligned_input = (U % 4) == 0;
    for (int e0 = 0; e0 < E; e0 += blockDim.y) {
        for (int f0 = 0; f0 < F; f0 += blockDim.x) {
            __syncthreads();
            fill_patch(in_s, xc, e0, f0, PH, PW, H, W, U, P, tid, threads);
            __syncthreads();
            const int e = e0 + threadIdx.y;
            const int f = f0 + threadIdx.x;
            if (e < E && f < F) {
                const float* patch = in_s + threadIdx.y * U * PW + threadIdx.x * U;
                float acc = 0.0f;
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
                out[e * F + f] = __float2half(acc);
            }
        }
    }
}

// Step 7's reduction, reading half partials and summing them in float.
extern "C" __global__ void reduce_channels_half(const __half* partial, __half* y, int N, int C,
                                                int M, int EF)
{
    sum_channel_partials(partial, y, N, C, M, EF);
}
