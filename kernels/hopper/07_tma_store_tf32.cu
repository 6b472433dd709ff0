// Step 7 in tf32: A, B and C in float; the tensor cores read A and B as tf32 and accumulate in
// float.
//
// What changed from step 7: the element type, and with it the depth of a slice. tf32 is a float
// with its mantissa cut to 10 bits (8 exponent bits, as float); wgmma reads it from 4-byte floats
// in shared memory, 8 k per instruction (m64n256k8 ... .f32.tf32.tf32) where halves give 16, at
// half the fp16 rate (the H100's and H200's datasheets: dense tf32 is half dense fp16). A slice is
// still one 128-byte swizzled row of each tile row -- now 32 floats -- so the ring's bytes, the
// descriptors' byte offsets (32 bytes per instruction) and the copies' byte counts are step 7's;
// a tile takes twice as many slices. C leaves in boxes of 64 rows x 32 floats (still 128 bytes
// wide, the swizzle's width), four rounds of two per 64 x 256 tile instead of two.
//
// Launch: as step 7, with float A, B and C (tensor maps of float32; A's and B's boxes 32 x 128
// and 32 x 256, C's 32 x 64). K a multiple of 4 (16-byte rows).
//
// Prediction: twice step 7's time at 4096^3 (the same kernel at half the tensor cores' rate),
// about half its TFLOP/s, near cuBLAS's tf32.
#include "persistent_gemm.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_tma_store_tf32(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const __grid_constant__ CUtensorMap map_c, float* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    persistent_gemm<true, true>(map_a, map_b, &map_c, C, M, N, K, smem_raw);
}
