// Step 10 -- step 9 in tf32: float input and filters, read by the tensor cores as tf32.
//
// What changed from step 9: the element type, and with it the depth of a slice. The input is the
// float channels-last x (step 7's), the filters float too (M x 25 Cp, Cp = C rounded up to 32,
// rounded to tf32 once when the model is loaded). wgmma reads floats as tf32 -- float's sign and
// 8-bit exponent, 10 of its 23 mantissa bits; the tensor cores drop the other 13 of x -- 8 k per
// instruction (m64n256k8 ... .tf32) where halves gave 16, at half the fp16 rate (the H100's
// datasheet: 495 dense tf32 TFLOP/s against 989 fp16). A slice is still one 128-byte swizzled row
// of each tile row, now 32 channels: the input box is {32 channels, 8 columns, 16 rows, 1 image},
// the ring's 4 slots of 48 KiB, the producer, the consumers and the epilogue are step 9's
// (kernels/common/hopper_conv.cuh's conv_wgmma_tf32; the epilogue in kernels/convpool/
// wgmma_pool.cuh); a tile takes twice as many slices (25 taps x 8 chunks of 32 channels).
//
// Why faster than step 7: step 7 is step 6's implicit GEMM on wmma fragments (mma.sync, 16 x 16
// x 8 at a time, every fragment loaded and converted by the warps); this is the hopper chapter's
// GEMM, whose tf32 step 7 ran near cuBLAS's tf32.
//
// Accuracy: tf32 keeps ~3 decimal digits of each operand; x is truncated (not rounded) by the
// tensor cores, w rounded to nearest once: ~5e-4 against the float64 reference (tolerance 2e-3).
//
// Launch: step 9's (one block of 384 threads per SM, 197,632 bytes of dynamic shared memory), with
// tensor maps of float32: the input box {32, 8, 16, 1}, the filters' {32, 256}. C a multiple of 4.
//
// Prediction: at batch 32 about twice step 9's time (the same work at half the tensor rate): ~17
// ms, 4x faster than step 7 and about cuDNN's tf32 channels-last (17.2 ms in the last H100 run).
#include <convpool/wgmma_pool.cuh>    // steps 9-11's epilogue

extern "C" __global__ void __launch_bounds__(CONV_THREADS, 1)
conv_wgmma_tf32_pool(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                     const float* __restrict__ b, float* __restrict__ y, int N, int C, int Cp, int M, int E, int F)
{
    extern __shared__ unsigned char smem_raw[];
    const ConvShape s{N, C, Cp, M, E, F, 5, 5, 0};
    conv_wgmma_tf32<8>(map_x, map_w, s, WgmmaPoolEpilogue<256>{b, y, M, E / 2, F / 2}, smem_raw);
}
