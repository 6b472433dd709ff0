// Step 10 -- FP8 with the partial sums promoted to float registers every slice.
//
// What changed from step 9: how the products accumulate. Step 9 hands the same accumulators to
// every wgmma of a tile, so the tensor cores' adder, which keeps only 13 fraction bits below the
// largest of an instruction's 32 products and the accumulator and cuts the rest, cuts the running
// sum itself 128 times at K = 4096, always toward zero. Here each slice's products (128 k, four
// k32 instructions) start from zero in a second set of registers, and once they are done the
// consumer adds them into its float accumulators with ordinary float adds (23 fraction bits,
// rounded): the adder's cuts are then relative to one slice's partial sum, never to the whole
// dot product. DeepGEMM promotes this way every 128 k (DeepSeek-V3's report, section 3.3.2), as
// does CUTLASS's FP8 mainloop without fast accumulation (mma_promotion_interval = 4 instructions).
//
// There are not registers for two sets of 128 accumulators (232 per thread), so each slice runs
// as two halves of 128 columns (m64n128k32, 64 partial sums), each promoted before the next
// starts; the consumer waits for each half's products before it adds them, where step 9 kept a
// group in flight. The tile, the ring, the copies and the epilogue are step 9's.
//
// Why slower: per slice each consumer waits twice for its products and spends 128 float adds on
// the promotion, and A's rows are read from shared memory twice (once per half); the other
// consumer's products overlap one consumer's wait and adds, so the tensor cores stay mostly busy.
// Prediction: 5-15% slower than step 9 (a slice's 8 instructions take about 0.3 us on the tensor
// cores, its two waits and 128 adds a few tens of ns each, mostly hidden by the other consumer),
// 0.11-0.13 ms at 4096^3 and 0.8-0.95 ms at 8192^3; about cuBLASLt's FP8 GEMM without fast
// accumulation (torch._scaled_mm(..., use_fast_accum=False)), which promotes too.
//
// Accuracy: the adder now aligns a product to at most one slice's partial sum (128 products),
// not to the whole dot product, and the float adds round once per slice at 2^-24: for inputs
// uniform in [0, 1) the model (gpulab/fp8.py's tensor_core_gemm with promote_every=4) predicts a
// relative error norm of 0.19% at 4096^3 and 8192^3 alike, against step 9's 7.5% and 14% -- about
// bf16's rounding of C (0.18%) -- and for inputs in [-1, 1) 0.17% against step 9's 0.20%.
//
// Launch: as step 9 (gemm_fp8_promotion: A and B in e4m3).
#include <cuda_fp8.h>
#include "persistent_gemm.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_fp8_promotion(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_c, __nv_bfloat16* __restrict__ C, int M, int N, int K,
                   float scale_a, float scale_b)
{
    extern __shared__ unsigned char smem_raw[];
    persistent_gemm_fp8<false, true, __nv_fp8_e4m3, __nv_fp8_e4m3>(map_a, map_b, &map_c, C, M, N, K, smem_raw,
                                                                scale_a * scale_b);
}
