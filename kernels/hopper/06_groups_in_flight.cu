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
#include <cuda_fp16.h>
#include <common/hopper.h>
#include "wgmma_store.cuh"

#define BM 128
#define BN 256
#define BK 64
#define STAGES 4
#define THREADS 384
#define CONSUMER_WARPS 8
#define SLICE_BYTES ((BM + BN) * BK * 2)
#define SWIZZLE_ATOM 1024
#define GROUP_M 8           // tile-rows per group of the tile order

// Tile number -> (tile-row, tile-column), grouped: GROUP_M tile-rows are walked column by
// column before the next group starts.
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int& tm, int& tn)
{
    const int per_group = GROUP_M * tiles_n, first = (tile / per_group) * GROUP_M;
    const int rows = min(tiles_m - first, GROUP_M);
    tm = first + (tile % per_group) % rows;
    tn = (tile % per_group) / rows;
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_persistent_in_flight(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    __half* ring = (__half*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    __shared__ __align__(8) unsigned long long full[STAGES];
    __shared__ __align__(8) unsigned long long empty[STAGES];
    const int tid = threadIdx.x, wg = tid / 128;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN, tiles = tiles_m * tiles_n;
    const int KT = (K + BK - 1) / BK;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], CONSUMER_WARPS);   // one arrival per consumer warp
        }
        mbar_fence_init();
    }
    __syncthreads();

    if (wg == 0) {                                  // the producer
        setmaxnreg_dec<40>();
        if (tid == 0) {
            int it = 0;                                 // slices issued over all this block's tiles
            for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
                int tm, tn;
                tile_coords(tile, tiles_m, tiles_n, tm, tn);
                for (int t = 0; t < KT; ++t, ++it) {
                    const int slot = it % STAGES;
                    mbar_wait(&empty[slot], ((it / STAGES) % 2) ^ 1);   // as in step 4, counted by it
                    __half* As = ring + (size_t)slot * (BM + BN) * BK;
                    mbar_arrive_expect_tx(&full[slot], SLICE_BYTES);
                    tma_load_2d(As, &map_a, t * BK, tm * BM, &full[slot]);
                    tma_load_2d(As + BM * BK, &map_b, t * BK, tn * BN, &full[slot]);
                }
            }
        }
    } else {                                        // the consumers: rows 64 c .. 64 c + 63 of each tile
        setmaxnreg_inc<232>();
        const int c = wg - 1;
        int it = 0;
        float acc[128];
        for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
            int tm, tn;
            tile_coords(tile, tiles_m, tiles_n, tm, tn);
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
            for (int t = 0; t < KT; ++t, ++it) {
                const int slot = it % STAGES;
                mbar_wait(&full[slot], (it / STAGES) % 2);
                const __half* As = ring + (size_t)slot * (BM + BN) * BK + 64 * c * BK;
                const __half* Bs = ring + (size_t)slot * (BM + BN) * BK + BM * BK;
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BK / 16; ++kk)
                    wgmma_m64n256k16(acc, smem_desc(As + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B),
                                     smem_desc(Bs + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B), 1);
                wgmma_commit();
                wgmma_wait<1>();                    // slice it - 1's products are done
                if (t > 0 && tid % 32 == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
            }
            wgmma_wait<0>();                        // the tile's last slice: then its slot goes back
            if (tid % 32 == 0) mbar_arrive(&empty[(it - 1) % STAGES]);

            store_accumulators<BN>(C, acc, tm * BM + 64 * c, tn * BN, M, N);
        }
    }
}
