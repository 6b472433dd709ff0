// Step 9 -- FP8: A and B in e4m3 with per-tensor scales, C in bfloat16.
//
// What changed from step 7 (in bf16): the operands' type. A and B are 8-bit floats, e4m3 (4
// exponent bits, 3 mantissa bits, largest finite value 448), each the rounding of a tensor divided
// by its scale -- its largest magnitude over 448, so that the tensor's range fills e4m3's -- and
// C = scale_a scale_b (A B^T), accumulated in float, written as bfloat16. An element is one byte,
// so a slice, still one 128-byte swizzled row of each tile row, is 128 k deep instead of 64: the
// ring's bytes, the tensor maps' boxes (128 bytes x 128 or 256 rows; the maps' element type is
// uint8, the copy engine only moves the bytes), the copies' byte counts and the epilogue are step
// 7's. Each of a slice's four wgmma (m64n256k32 ... .f32.e4m3.e4m3) takes 32 k, the same 32
// bytes along the rows that fp16's 16 k were; the epilogue multiplies the accumulators by the two
// scales before the bf16 TMA store. gemm_fp8_e4m3_e5m2 is the same with B in e5m2 (5 exponent
// bits, 2 mantissa bits: the range gradients need in FP8 training).
//
// Why faster: Hopper's tensor cores multiply FP8 at twice their fp16/bf16 rate (the H100 SXM's
// datasheet: 1979 dense TFLOP/s against 989), and the slices hold twice the k for the same bytes,
// so the copies per FLOP halve too. Why not twice: the tile's fixed costs -- the epilogue, which
// writes the same bf16 C in the same time, and the ring's refills at each tile's start -- are now a
// larger share of a tile that multiplies in half the time; and at the same fraction of its peak
// the kernel needs step 7's bytes per second from L2, each slice consumed in half the time, so the
// 4-slot ring hides half as much of a copy's latency.
//
// Prediction (the datasheet's rate would be 0.069 ms at 4096^3 and 0.556 ms at 8192^3): 1.6-1.8x
// step 7 in bf16 at 4096^3, 0.10-0.115 ms (1,200-1,370 TFLOP/s); at 8192^3, where the fixed costs
// weigh less, 0.75-0.85 ms (1,300-1,470 TFLOP/s) -- about cuBLASLt's FP8 GEMM (torch._scaled_mm)
// with its fast accumulation.
//
// Accuracy: against float64 of the e4m3 values the kernel reads (the inputs' own rounding to e4m3,
// up to 2^-4 of each element, is the scales' business, not the kernel's), the error is bf16's
// rounding of C -- and the tensor cores' accumulation. Hopper adds an instruction's 32 products and
// the accumulator it is given in one adder that aligns them all to the largest exponent among
// them and keeps 13 fraction bits below it, cutting the rest (Khattak and Mikaitis's measured
// model, arXiv:2512.07004; "around 14 bits" in DeepSeek-V3's report, section 3.3.2). Where the
// products' signs cancel the accumulator stays near a product's size and little is lost; where
// they do not, the accumulator grows with k and every product is cut to the bits it has left
// below the accumulator's exponent -- one or two once the sum is 2^12 products -- always toward
// zero. The model (gpulab/fp8.py's tensor_core_gemm, on 128 x 128 outputs) predicts a relative
// error norm of 0.20% at 4096^3 for inputs uniform in [-1, 1) (bf16's rounding alone: 0.17%), but
// 7.5% for inputs uniform in [0, 1), 14% at 8192^3; step 10 repairs it. The CPU backend computes
// this model, bit for bit, not float's accumulation.
//
// Launch: as step 7, with A and B as uint8 arrays of e4m3 codes (gpulab.fp8.to_fp8), tensor maps
// of them in boxes of 128 x 128 and 128 x 256 (uint8), C as uint16 bfloat16 bits with its map in
// 64 x 64 boxes, and scale_a, scale_b (float) after K. K a multiple of 16, N of 8 (16-byte rows).
#include <cuda_fp8.h>
#include "persistent_gemm.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_fp8(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
         const __grid_constant__ CUtensorMap map_c, __nv_bfloat16* __restrict__ C, int M, int N, int K,
         float scale_a, float scale_b)
{
    extern __shared__ unsigned char smem_raw[];
    persistent_gemm_fp8<true, false, __nv_fp8_e4m3, __nv_fp8_e4m3>(map_a, map_b, &map_c, C, M, N, K, smem_raw,
                                                                scale_a * scale_b);
}

// B in e5m2 (a gradient's type in FP8 training), A in e4m3: the instruction's .e4m3.e5m2.
extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_fp8_e4m3_e5m2(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_c, __nv_bfloat16* __restrict__ C, int M, int N, int K,
                   float scale_a, float scale_b)
{
    extern __shared__ unsigned char smem_raw[];
    persistent_gemm_fp8<true, false, __nv_fp8_e4m3, __nv_fp8_e5m2>(map_a, map_b, &map_c, C, M, N, K, smem_raw,
                                                                scale_a * scale_b);
}
