// The persistent, warp-specialized GEMM of steps 5, 6 and 7: one block per SM walks over 128 x 256
// tiles in grouped order; warpgroup 0 copies slices with TMA round a ring of STAGES slots, warpgroups
// 1 and 2 multiply them with wgmma (64 rows each) and write C. Each step's file says what it is
// and launches it.
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
#define STORE_BOX 64        // step 7: C leaves through shared memory in 64 x 64 boxes (8 KiB) ...
#define STORE_BOXES 2       // ... two at a time per consumer: 16 KiB of staging each, after the ring

// Tile number -> (tile-row, tile-column), grouped: GROUP_M tile-rows are walked column by
// column before the next group starts.
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int& tm, int& tn)
{
    const int per_group = GROUP_M * tiles_n, first = (tile / per_group) * GROUP_M;
    const int rows = min(tiles_m - first, GROUP_M);
    tm = first + (tile % per_group) % rows;
    tn = (tile % per_group) / rows;
}

// The persistent warp-specialized GEMM of steps 5, 6 and 7 (see their files). IN_FLIGHT: each
// consumer releases a slot one slice later, keeping a group of products queued (step 6).
// TMA_STORE: the epilogue stages C in shared memory and the copy engine writes it (map_c, boxes
// of STORE_BOX x STORE_BOX, 128-byte swizzle) while the consumer goes on to its next tile (step 7).
template <bool IN_FLIGHT, bool TMA_STORE = false>
__device__ __forceinline__ void persistent_gemm(const CUtensorMap& map_a, const CUtensorMap& map_b,
                                                const CUtensorMap* map_c, __half* C,
                                                int M, int N, int K, unsigned char* smem_raw)
{
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
                if (IN_FLIGHT) {
                    wgmma_wait<1>();                // slice it - 1's products are done
                    if (t > 0 && tid % 32 == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
                } else {
                    wgmma_wait<0>();
                    if (tid % 32 == 0) mbar_arrive(&empty[slot]);
                }
            }
            if (IN_FLIGHT) {                        // the tile's last slice: then its slot goes back
                wgmma_wait<0>();
                if (tid % 32 == 0) mbar_arrive(&empty[(it - 1) % STAGES]);
            }

            if (TMA_STORE) {
                __half* stage = ring + (size_t)STAGES * (BM + BN) * BK + (size_t)c * STORE_BOXES * STORE_BOX * STORE_BOX;
                const bool issuer = tid % 128 == 0;
#pragma unroll
                for (int part = 0; part < BN / (STORE_BOXES * STORE_BOX); ++part) {
                    if (issuer) bulk_wait_read<0>();        // the last store has read the staging
                    named_barrier_sync(1 + c, 128);         // ... before anyone overwrites it
                    stage_accumulators<STORE_BOXES>(stage, acc, part);
                    fence_proxy_async();                    // the staged C, visible to the copy engine
                    named_barrier_sync(1 + c, 128);
                    if (issuer) {
                        for (int b = 0; b < STORE_BOXES; ++b)
                            tma_store_2d(map_c, stage + b * STORE_BOX * STORE_BOX,
                                         tn * BN + (part * STORE_BOXES + b) * STORE_BOX, tm * BM + 64 * c);
                        bulk_commit();
                    }
                }
            } else {
                store_accumulators<BN>(C, acc, tm * BM + 64 * c, tn * BN, M, N);
            }
        }
        if (TMA_STORE && tid % 128 == 0) bulk_wait<0>();    // C written before the block's end
    }
}
