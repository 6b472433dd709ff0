// Step 7 -- tensor cores, tf32: the implicit GEMM of step 6 on the H100's matrix units.
//
// What changed from step 6: who multiplies. A warp now hands 16 x 16 x 8 pieces of the tile's
// product to the tensor cores (nvcuda::wmma with precision::tf32): each input is rounded to
// tf32 -- float's 8-bit exponent, 10 of its 23 mantissa bits -- and the products are summed in
// float. And how the data arrives: the input channels-last (N x Hp x Wp x C) and the filters as
// M x (5 x 5 x C), so that 16 bytes of a row are 4 consecutive channels of one tap, copied into
// a ring of shared-memory slices by cp.async (see implicit_gemm_tc.cuh for the kernel and its
// layout). The pooling happens in the epilogue, as in step 6.
//
// Why faster: an H100's tf32 tensor cores are rated at 495 TFLOP/s dense, 7x its FP32 rate.
// Why it may fall short of that: wmma fragments are loaded from shared memory by every warp
// for every 16 x 16 x 8 product (4 + 2 fragment loads per 8 products), and the H100's fastest
// instructions (wgmma, fed straight from shared memory by a whole warpgroup) are not reachable
// through wmma: this is the Ampere way of using tensor cores.
//
// Accuracy: tf32 keeps ~3 decimal digits of each input; over K = 6,400 products the relative
// error norm against the float64 reference should be ~3e-4 (the lab's tf32 tolerance is 2e-3).
//
// Launch: grid (ceil(N * PE * PF / 32), ceil(M / 128)), block 256, dynamic shared memory
// STAGES x 256 rows x 80 bytes (61,440 bytes for 3 stages). Needs C a multiple of 4, E and F even.
//
// Prediction: 4-6x step 6: ~0.8 ms for one image (~200 TFLOP/s); cuDNN's tf32 channels-last
// path, at 0.51 ms, is likely still ahead.
#include "implicit_gemm_tc.cuh"

extern "C" __global__ void __launch_bounds__(TC_THREADS, TC_MIN_BLOCKS)
conv_tc_tf32_pool(const float* __restrict__ xt, const float* __restrict__ wr, const float* __restrict__ b,
                  float* __restrict__ y, int N, int C, int Hp, int Wp, int M, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_tc_pool<float>(smem, xt, wr, b, y, N, C, Hp, Wp, M, E, F);
}
