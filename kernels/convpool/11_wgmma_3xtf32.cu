// Step 11 -- fp32 accuracy on the tf32 tensor cores: 3xTF32.
//
// What changed from step 10: each float operand is split into two tf32 numbers, a = ab + as, ab
// = a rounded to tf32 (10 mantissa bits) and as = a - ab (exact in float: the bits ab lost, so
// |as| <= 2^-11 |a|); the tensor cores read as with its own 10 bits, so ab + as holds ~21 of a's 24
// bits. A product is then ab bb + ab bs + as bb (as bs, ~2^-22 of it, is left out): three tf32
// wgmma per k8 step where step 10 issues one. The filters are split once when the model is
// loaded; the input by split_tf32 below, a pass over x (read once, the two parts written once),
// inside the step's time.
//
// The second change is in the sums. The tensor cores add into their float accumulators by
// truncation, not rounding: summed straight into one accumulator over K = 6,400 (three wgmma per
// k8 step, 2,400 truncated adds per output), a trial run on the H100 gave 4e-5 against float64 --
// ten times tf32's accuracy, not float's. So each slice of 32 channels (12 wgmma) goes into a
// fresh accumulator, which the threads add into their own float sums with ordinary rounded adds;
// two such partial accumulators alternate, so that a slice's wgmma run while the previous one is
// added (kernels/common/hopper_conv.cuh's conv_wgmma_3xtf32). That is 3 x 64 accumulators per
// thread, so a tile is 128 pixels x 128 filters (step 10: 256), and a ring slot holds four tiles
// (xb, xs, wb, ws: 64 KiB), 3 slots.
//
// Accuracy: the operands' error is now ~2^-21, and the truncated sums run over 32 channels only:
// expected ~1e-6 against the float64 reference, as step 6 on the CUDA cores (tolerance 1e-5).
//
// Launch: split_tf32 over x (4 floats per thread, grid-stride), then step 10's launch with four
// tensor maps (xb, xs: {32, 8, 16, 1}; wb, ws: {32, 128}).
//
// Prediction: three times step 10's tensor-core work, less well fed (a 128-filter tile reads its
// A tiles twice as often) plus the split (read 1.7 GB, write 3.4 GB at batch 32: ~2 ms): at batch
// 32 ~55 ms, 2x faster than step 6 (107 ms) and ~0.8x cuDNN's fastest fp32 path (67 ms).
#include <convpool/wgmma_pool.cuh>    // steps 9-11's epilogue

// x -> (tf32_big(x), the remainder): tf32_big, the rounding to the nearest tf32, is in
// kernels/common/hopper_conv.cuh (the AlexNet chapter's step 27 splits its input with it too).
extern "C" __global__ void split_tf32(const float4* __restrict__ x, float4* __restrict__ big,
                                      float4* __restrict__ small, long long n4)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        const float4 v = x[i];
        const float4 h = make_float4(tf32_big(v.x), tf32_big(v.y), tf32_big(v.z), tf32_big(v.w));
        big[i] = h;
        small[i] = make_float4(v.x - h.x, v.y - h.y, v.z - h.z, v.w - h.w);
    }
}

extern "C" __global__ void __launch_bounds__(CONV_THREADS, 1)
conv_wgmma_3xtf32_pool(const __grid_constant__ CUtensorMap map_xb, const __grid_constant__ CUtensorMap map_xs,
                       const __grid_constant__ CUtensorMap map_wb, const __grid_constant__ CUtensorMap map_ws,
                       const float* __restrict__ b, float* __restrict__ y, int N, int C, int Cp, int M, int E, int F)
{
    extern __shared__ unsigned char smem_raw[];
    const ConvShape s{N, C, Cp, M, E, F, 5, 5, 0};
    conv_wgmma_3xtf32<8>(map_xb, map_xs, map_wb, map_ws, s, WgmmaPoolEpilogue<128>{b, y, M, E / 2, F / 2}, smem_raw);
}
