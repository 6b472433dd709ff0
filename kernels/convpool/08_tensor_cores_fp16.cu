// Step 8 -- tensor cores, fp16: step 7 with half-precision inputs.
//
// What changed from step 7: the element type. Input and filters are stored as 16-bit halves
// (the input channels-last, as cuDNN's fp16 channels-last path gets it); the tensor cores
// multiply 16 x 16 x 16 pieces and sum in float; the output stays float. A 64-byte slice of a
// row is now 32 k instead of 16, so each cp.async brings twice the k and each fragment
// load feeds twice the multiply-adds.
//
// Why faster: an H100's fp16 tensor-core rate is twice its tf32 rate (989 vs 495 TFLOP/s
// dense) and every byte copied carries twice the k.
//
// Accuracy: a half has an 11-bit significand, one more than tf32, and the inputs here are of
// order 1 (no overflow): ~3e-4 relative error norm, like tf32.
//
// Launch: as step 7 (dynamic shared memory: 61,440 bytes for 3 stages). Needs C a multiple of 8.
//
// Prediction: 1.5-2x step 7: ~0.45 ms for one image. cuDNN's fp16 channels-last path takes
// 0.30 ms; the fused pool saves writing and re-reading 2 x 25.7 MB of halves (~0.02 ms), so
// to beat it the GEMM itself must come within ~10% of cuDNN's.
#include "implicit_gemm_tc.cuh"

extern "C" __global__ void __launch_bounds__(TC_THREADS, TC_MIN_BLOCKS)
conv_tc_fp16_pool(const __half* __restrict__ xt, const __half* __restrict__ wr, const float* __restrict__ b,
                  float* __restrict__ y, int N, int C, int Hp, int Wp, int M, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_tc_pool<__half>(smem, xt, wr, b, y, N, C, Hp, Wp, M, E, F);
}
