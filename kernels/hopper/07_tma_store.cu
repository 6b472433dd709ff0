// Step 7 -- the epilogue through shared memory and a TMA store.
//
// What changed from step 6: how C leaves. Step 6's consumers wrote their 64 x 256 accumulators
// straight to global memory, 4 bytes (a __half2) per thread and store: a warp's store touches 8
// rows, 16 bytes of each, so the 64 KiB of a tile go out as 2048 stores per warpgroup of
// half-used 32-byte sectors, and the consumer issues every one of them before it can start its
// next tile's products -- the tensor cores idle meanwhile. Here each consumer converts its
// accumulators to half into 16 KiB of shared memory (two 64 x 64 boxes, in the 128-byte swizzle,
// so the stores hit 32 different banks), and one thread hands the boxes to the copy engine
// (tma_store_2d on a tensor map of C): it writes whole rows, clips the edges of C itself, and
// runs on while the consumer goes back to wgmma. A 64 x 256 tile takes two rounds of the 16 KiB
// (what fits beside the 4-stage ring in the 227 KiB a block may have); before a round
// overwrites the staging the issuing thread waits until the previous store has read it
// (bulk_wait_read) and a named barrier of the consumer's 128 threads (not __syncthreads: the
// producer and the other consumer go on) passes that on.
//
// Why faster: the consumer's part of the epilogue shrinks to 64 shared-memory stores per thread
// and two barriers; the global writes overlap the next tile. Why it might not be: the second
// round waits for the first's read of 16 KiB, and the epilogue was a small part of a tile (64
// slices of products at 4096^3).
//
// Launch: as step 6, plus a tensor map of C (boxes 64 x 64, 128-byte swizzle) before C, and
// 32 KiB more dynamic shared memory. Needs N a multiple of 8 too (the map's rows, 16-byte aligned).
// C is still passed: the CPU backend writes the stores into the launch's copy of that argument.
//
// Prediction: 2-4% faster than step 6 at 4096^3 (the epilogue is about 1 of 36 us per tile
// and mostly hidden by the other consumer): about 645-655 TFLOP/s, at cuBLAS.
#include "persistent_gemm.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_tma_store(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
               const __grid_constant__ CUtensorMap map_c, __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    persistent_gemm<true, true>(map_a, map_b, &map_c, C, M, N, K, smem_raw);
}
