// Step 6 -- each consumer keeps a group of products in flight across slices.
//
// What changed from step 5: when a consumer hands a slot back. Step 5's consumers issued a
// slice's 4 wgmma, waited for them to finish (wgmma_wait<0>), arrived on the slot's `empty`
// barrier, and only then waited for the next slice and issued its products: between two groups
// a consumer's share of the tensor cores idled for the wait, the arrival and the next issue,
// covered only while the other consumer happened to have products queued. Here a consumer issues
// slice t's products, then waits only for slice t - 1's (wgmma_wait<1>) and releases slice
// t - 1's slot: its next group is always queued behind the running one (step 3's idea, now in
// each consumer of the warp-specialized kernel). The last slice of a tile is released after
// wgmma_wait<0>, before the epilogue reads the accumulators.
//
// Why faster: no gap between a consumer's groups. Why it might not be: a slot stays full one
// slice longer, so the producer runs one slice less far ahead (4 stages hold 3 slices in
// waiting instead of 4).
//
// Launch: as step 5.
//
// Prediction: a few percent over step 5 (the gaps it removes are short next to a group's
// 64 x 256 x 64 products).
#include "persistent_gemm.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_persistent_in_flight(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                          __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    persistent_gemm<true>(map_a, map_b, nullptr, C, M, N, K, smem_raw);
}
