// Step 11 -- fp32 accuracy on the tf32 tensor cores: 3xTF32.
//
// What changed from step 10: each float operand is split into two tf32 numbers, a = ab + as, ab
// = a rounded to tf32 (10 mantissa bits) and as = a - ab (exact in float: the bits ab lost, so
// |as| <= 2^-11 |a|); the tensor cores read as with its own 10 bits, so ab + as holds ~21 of a's 24
// bits. A product is then ab bb + ab bs + as bb (as bs, ~2^-22 of it, is left out): three tf32
// wgmma per k8 step into the same float accumulators, where step 10 issues one. The filters are
// split once when the model is loaded; the input by split_tf32 below, a pass over x (read once,
// the two halves written once), inside the step's time. A slice holds the four tiles (xb, xs, wb,
// ws, 96 KiB), so the ring has 2 slots instead of 4 (conv_wgmma_f32 with TERMS = 3).
//
// Accuracy: the products' error is now ~2^-21 of each operand, as float's rounding (2^-24) times
// a few; the sums were already in float. Expected against the float64 reference: ~1e-6, as step 6
// on the CUDA cores (the lab's fp32 tolerance is 1e-5) -- where step 10 has ~5e-4.
//
// Launch: split_tf32 over x (4 floats per thread, grid-stride), then step 10's launch with four
// tensor maps (xb, xs: {32, 8, 16, 1}; wb, ws: {32, 256}).
//
// Prediction: at batch 32 about 3 x step 10's products plus the split (read 1.7 GB, write 3.4 GB:
// ~2 ms): ~52 ms, 2x faster than step 6 (107 ms) and ~0.8x cuDNN's fastest fp32 path (67 ms).
#include <convpool/wgmma_pool.cuh>    // step 9's epilogue

// a rounded to the nearest tf32, ties away from zero (as cvt.rna.tf32.f32): add half of the 13
// dropped bits' weight, then drop them. The filters' split on the host (gpulab.workloads.convpool.
// steps.tf32_split) is the same bit arithmetic.
__device__ __forceinline__ float tf32_big(float a)
{
    return __uint_as_float((__float_as_uint(a) + 0x1000u) & 0xFFFFE000u);
}

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
    conv_wgmma_f32<8, 3>(map_xb, map_xs, map_wb, map_ws, s, WgmmaPoolEpilogue{b, y, M, E / 2, F / 2}, smem_raw);
}
