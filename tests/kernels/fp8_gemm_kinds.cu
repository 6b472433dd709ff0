// Step 9's persistent FP8 GEMM with A in e5m2 (the two pairs of kinds kernels/hopper/09_fp8.cu
// does not build): tests/test_hopper_fp8.py checks every FP8 wgmma of the CPU backend with them.
#include <cuda_fp8.h>
#include <hopper/persistent_gemm.cuh>

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_fp8_e5m2_e4m3(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_c, __nv_bfloat16* __restrict__ C, int M, int N, int K,
                   float scale_a, float scale_b)
{
    extern __shared__ unsigned char smem_raw[];
    persistent_gemm_fp8<true, false, __nv_fp8_e5m2, __nv_fp8_e4m3>(map_a, map_b, &map_c, C, M, N, K, smem_raw,
                                                                   scale_a * scale_b);
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_fp8_e5m2_e5m2(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_c, __nv_bfloat16* __restrict__ C, int M, int N, int K,
                   float scale_a, float scale_b)
{
    extern __shared__ unsigned char smem_raw[];
    persistent_gemm_fp8<true, false, __nv_fp8_e5m2, __nv_fp8_e5m2>(map_a, map_b, &map_c, C, M, N, K, smem_raw,
                                                                   scale_a * scale_b);
}
