// Step 8 -- a 2x1 thread-block cluster sharing B through TMA multicast.
//
// What changed from step 7: two blocks work as a pair. A cluster of 2 (__cluster_dims__(2, 1, 1):
// blocks 2 i and 2 i + 1, on two SMs of one GPC, each able to reach the other's shared memory)
// takes a 256 x 256 pair of tiles at a time, rank r computing the 128 x 256 tile at tile-rows
// 2 p + r of tile-column n: the two tiles need the same 256 rows of B. Each block's producer
// still loads its own 128 rows of A, but only half of the shared B slice, 128 rows of it, with
// one multicast copy (tma_load_2d_multicast, mask 0b11) that the copy engine writes into BOTH
// blocks' ring slots; each block's `full` barrier expects the whole slice (16 KiB of A + 2 x 16
// KiB of B), half of it counted by the other block's copy. A slot may be refilled only when the
// consumers of both blocks are done with it, since either producer writes into both: each
// consumer warp arrives on the slot's `empty` barrier in both blocks (mbar_arrive_cluster: mapa
// then a remote mbarrier.arrive), and `empty` counts 2 x 8 warps; mapa finds the peer's barrier
// at the same shared-memory offset as ours (both blocks run the same kernel, so their layouts
// match; the barriers sit after C's staging). barrier.cluster at the start (both blocks' barriers
// initialised before either copies into the other) and at the end (no block leaves while its
// peer may still arrive on or copy into it).
//
// Why faster: L2 -> shared-memory traffic falls by a third. At 4096^3 step 7 reads 512 tiles x
// 64 slices x 48 KiB = 1.61 GB from L2 (in 0.203 ms, 7.9 TB/s, in the run this step was
// predicted from; the chapter shows the current run's numbers); here B's 32 KiB per slice is read
// once per pair, so each block reads 16 + 16 = 32 KiB per slice: 1.07 GB. Why it might not pay:
// step 7 is already near the tensor pipe's limit -- its profile then showed the SMs 89% busy and L2 at
// 47% of its throughput, so loads were not what the tensor cores waited for, and if every idle
// cycle were filled the ceiling is 1 / 0.89 = 1.12x. The pair also runs in lockstep: a slot is
// refilled only when the slower of two blocks' consumers releases it, and a remote arrival takes
// longer than a local one. What could still help: the run is held at a software power cap
// (median SM clock 1620 of 1980 MHz in that run), and a third less data moved is less power.
//
// Launch: as step 7, with the tensor map of B in boxes of 64 k x 128 rows (half a tile's B), the
// grid an even number of blocks (one per SM, 132 on an H100: 66 clusters), 64 bytes more shared
// memory for the barriers.
//
// Prediction: 0-5% faster than step 7 at 4096^3 (the tensor pipe's 11% of idle cycles bound it;
// the halved B traffic shows as L2 throughput falling from 47% to about 31%).
#include "persistent_gemm.cuh"
#include "cluster.cuh"

#define CLUSTER 2                   // blocks per cluster, along the tile-rows (M)
#define B_PART (BN / CLUSTER)       // rows of B each producer loads for the whole cluster

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(THREADS, 1)
gemm_cluster_multicast(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                       const __grid_constant__ CUtensorMap map_c, __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    __half* ring = (__half*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    // After the ring and C's staging; the peer's are at the same offset in its shared memory.
    unsigned long long* full = (unsigned long long*)((char*)ring + (size_t)STAGES * SLICE_BYTES +
                                                     2 * STORE_BOXES * STORE_BOX * 128);
    unsigned long long* empty = full + STAGES;
    const int tid = threadIdx.x, wg = tid / 128;
    const unsigned rank = cluster_ctarank();
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int pairs_m = (tiles_m + CLUSTER - 1) / CLUSTER, pairs = pairs_m * tiles_n;
    const int cluster = blockIdx.x / CLUSTER, clusters = gridDim.x / CLUSTER;
    const int KT = (K + BK - 1) / BK;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], CLUSTER * CONSUMER_WARPS);     // every consumer warp of both blocks
        }
        mbar_fence_init();
    }
    __syncwarp();
    cluster_arrive();                               // both blocks' barriers exist before any copy
    cluster_wait();

    if (wg == 0) {                                  // the producer
        setmaxnreg_dec<40>();
        if (tid == 0) {
            int it = 0;
            for (int pair = cluster; pair < pairs; pair += clusters) {
                int pm, tn;
                tile_coords(pair, pairs_m, tiles_n, pm, tn);
                const int tm = CLUSTER * pm + rank;    // may lie past M: then A arrives as zeros
                for (int t = 0; t < KT; ++t, ++it) {
                    const int slot = it % STAGES;
                    mbar_wait(&empty[slot], ((it / STAGES) % 2) ^ 1);  // both blocks' consumers are done
                    __half* As = ring + (size_t)slot * (BM + BN) * BK;
                    mbar_arrive_expect_tx(&full[slot], SLICE_BYTES);   // A, our half of B and the peer's
                    tma_load_2d(As, &map_a, t * BK, tm * BM, &full[slot]);
                    tma_load_2d_multicast(As + (BM + rank * B_PART) * BK, &map_b, t * BK, tn * BN + rank * B_PART,
                                          &full[slot], (1u << CLUSTER) - 1);
                }
            }
        }
    } else {                                        // the consumers, as step 7's
        setmaxnreg_inc<232>();
        const int c = wg - 1;
        int it = 0;
        float acc[128];
        for (int pair = cluster; pair < pairs; pair += clusters) {
            int pm, tn;
            tile_coords(pair, pairs_m, tiles_n, pm, tn);
            const int tm = CLUSTER * pm + rank;
#pragma unroll
            for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
            for (int t = 0; t < KT; ++t, ++it) {
                const int slot = it % STAGES;
                mbar_wait(&full[slot], (it / STAGES) % 2);
                const __half* As = ring + (size_t)slot * (BM + BN) * BK + 64 * c * BK;
                const __half* Bs = ring + (size_t)slot * (BM + BN) * BK + BM * BK;
                wgmma_fence();
                slice_products(acc, As, Bs);
                wgmma_commit();
                wgmma_wait<1>();                    // slice it - 1's products are done: release its slot
                if (t > 0 && tid % 32 == 0)
                    for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(&empty[(it - 1) % STAGES], r);
            }
            wgmma_wait<0>();
            if (tid % 32 == 0)
                for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(&empty[(it - 1) % STAGES], r);

            if (tm * BM + 64 * c >= M) continue;    // the pair's second tile past M's end: nothing to write
            __half* stage = (__half*)((char*)ring + (size_t)STAGES * SLICE_BYTES + (size_t)c * STORE_BOXES * STORE_BOX * 128);
            const bool issuer = tid % 128 == 0;
#pragma unroll
            for (int part = 0; part < BN / (STORE_BOXES * STORE_BOX); ++part) {
                if (issuer) bulk_wait_read<0>();
                named_barrier_sync(1 + c, 128);
                stage_accumulators<STORE_BOXES>(stage, acc, part);
                fence_proxy_async();
                named_barrier_sync(1 + c, 128);
                if (issuer) {
                    for (int b = 0; b < STORE_BOXES; ++b)
                        tma_store_2d(&map_c, (char*)stage + b * STORE_BOX * 128,
                                     tn * BN + (part * STORE_BOXES + b) * STORE_BOX, tm * BM + 64 * c);
                    bulk_commit();
                }
            }
        }
        if (tid % 128 == 0) bulk_wait<0>();
    }
    __syncwarp();
    cluster_arrive();                               // the peer may still arrive on or copy into us
    cluster_wait();
}
