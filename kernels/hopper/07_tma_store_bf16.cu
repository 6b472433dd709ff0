// Step 7 in bfloat16: A, B and C in bfloat16, products accumulated in float.
//
// What changed from step 7: the element type only. bfloat16 is a float's upper 16 bits: its 8
// exponent bits (float's range, where half overflows past 65504) and 7 mantissa bits (half has
// 10): 8 significant bits against half's 11, a coarser step. An element is 2 bytes as a half's,
// so everything step 7 lays out is unchanged -- the slices (64 k = one 128-byte swizzled row), the
// tensor maps' boxes, the ring, the descriptors and the staging of C; only the instruction reads
// its operands as bfloat16 (wgmma ... .f32.bf16.bf16, the same m64n256k16 shape and rate) and the
// epilogue rounds to bfloat16 (round to nearest, ties to even).
//
// Launch: as step 7, with the tensor maps of A, B and C made for bfloat16 (gpulab.tensormap's
// element="bf16"); the arrays hold bfloat16 bit patterns as uint16 (NumPy and CuPy have no
// bfloat16 type).
//
// Prediction: step 7's time within noise (the tensor cores' bf16 rate is their fp16 rate, and
// the bytes moved are the same).
#include <cuda_bf16.h>
#include "persistent_gemm.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_tma_store_bf16(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const __grid_constant__ CUtensorMap map_c, __nv_bfloat16* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    persistent_gemm<true, true>(map_a, map_b, &map_c, C, M, N, K, smem_raw);
}
