// Step 5 -- persistent: one block per SM walks over the tiles, its ring kept from tile to tile.
//
// What changed from step 4: the grid and the epilogue. Step 4 launched one block per 128 x 256
// tile (512 at 4096^3: 3.9 waves over 132 SMs); each block filled its ring from empty, computed,
// wrote its tile and exited, and the next block on that SM started from empty again. Here the
// grid is one block per SM and each block loops over tiles tile = blockIdx.x, + gridDim.x, ...
// The ring and its barriers outlive a tile: producer and consumers count slices over all the
// block's tiles (`it`), so the producer starts copying the next tile's slices while the
// consumers are still writing the last one's C -- the prologue of every tile but the first
// disappears. The tiles are numbered in groups of GROUP_M tile-rows (as Triton's matmul
// tutorial orders them). At 4096^3 that order changes nothing: a tile-row is only 16 tiles, so
// the 132 tiles in flight cover about 8 tile-rows of A and all 16 tile-columns of B in either
// order (a group of 8 x 16 = 128 tiles is nearly a wave). Grouping starts to matter for L2 only
// once a tile-row holds more tiles than the SMs run at once (N past about 34,000 here).
//
// Why faster: persistence -- no empty ring at every tile, and the epilogue overlaps the next
// tile's copies. Why it might not be enough: both consumers still write C at the same time, and
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
