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
// Built on direct_conv.cuh: step 11's kernel body, channel_partials4, with T = __half -- its
// copies (step 11's fill_weight_rows4, step 9's fill_patch) convert each __half to float
// (as_float), and it rounds each partial to __half -- and step 7's sum_channel_partials,
// summing in float.
#include <cuda_fp16.h>
#include "direct_conv.cuh"

extern "C" __global__ void conv_channel_partials_half(const __half* x, const __half* w,
                                                      __half* partial, int N, int C, int H, int W,
                                                      int M, int R, int S, int U, int P, int E, int F)
{
    extern __shared__ float4 smem4[];           // float4: keeps the start 16-byte aligned
    channel_partials4(x, w, partial, N, C, H, W, M, R, S, U, P, E, F, smem4);
}

// Step 7's reduction, reading half partials and summing them in float.
extern "C" __global__ void reduce_channels_half(const __half* partial, __half* y, int N, int C,
                                                int M, int EF)
{
    sum_channel_partials(partial, y, N, C, M, EF);
}
