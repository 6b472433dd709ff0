// Step 5 -- persistent: one block per SM walks over the tiles, in groups that share L2.
//
// What changed from step 4: the grid and the epilogue. Step 4 launched one block per 128 x 256
// tile (512 at 4096^3: 3.9 waves over 132 SMs); each block filled its ring from empty, computed,
// wrote its tile and exited, and the next block on that SM started from empty again. Here the
// grid is one block per SM and each block loops over tiles tile = blockIdx.x, + gridDim.x, ...
// The ring and its barriers outlive a tile: producer and consumers count slices over all the
// block's tiles (`it`), so the producer starts copying the next tile's slices while the
// consumers are still writing the last one's C -- the prologue of every tile but the first
// disappears. The tiles are numbered in groups of GROUP_M tile-rows (as Triton's matmul
// tutorial orders them): the 132 tiles in flight at once then cover about 8 tile-rows of A and
// 16 tile-columns of B instead of 1 row and all of B, so more of each slice comes from L2.
//
// Why faster: no empty ring at every tile, the epilogue overlaps the next tile's copies, fewer
// bytes from HBM. Why it might not be enough: both consumers still write C at the same time, and
// the tensor cores idle then.
//
// Launch: grid (number of SMs), block 384, dynamic shared memory STAGES * 48 KiB + 1 KiB;
// (map_a, map_b, C, M, N, K) as step 4. Needs K a multiple of 8.
//
// Prediction: 5-10% faster than step 4 at 4096^3 (about 570-590 TFLOP/s: at cuBLAS).
#include "persistent_gemm.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_persistent(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    persistent_gemm<false>(map_a, map_b, nullptr, C, M, N, K, smem_raw);
}
