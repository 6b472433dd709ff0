// Step 3 -- a deeper ring with full and empty mbarriers, and one group of products in flight.
//
// What changed from step 2: how the slots of the ring are handed back and forth. Step 2
// refilled a slot after a __syncthreads() and waited for each slice's products to finish
// (wgmma_wait<0>) before it went on: the tensor cores idled at every slice while the warpgroup
// waited, met and issued the next copy. Here each slot has two mbarriers: `full` (the copy
// engine counts the slice's bytes on it, as before) and `empty` (each of the 4 warps arrives once
// its products of the slice have finished reading it). The loop issues the products of slice t,
// then waits only until those of slice t - 1 are done (wgmma_wait<1>: at most one group still
// running), releases slice t - 1's slot, and thread 0 refills that slot with slice t - 1 + STAGES
// once its empty barrier's phase completes. No __syncthreads() in the loop; the tensor cores
// always have the next group queued; and the ring is 5 slices deep (160 KiB), so the copies run
// further ahead of the products.
//
// Parities: slot s is filled and emptied once per trip round the ring, so slice t's phases on
// both barriers have parity (t / STAGES) % 2.
//
// Why faster: the products of consecutive slices overlap each other and the copies.
// Why it might not be enough: thread 0 issues the copies between its own products, and the
// epilogue still runs while the tensor cores wait.
//
// Launch: as step 2, with STAGES * 32 KiB + 1 KiB of dynamic shared memory.
//
// Prediction: 1.2-1.4x step 2.
#include <cuda_fp16.h>
#include <common/hopper.h>
#include "wgmma_store.cuh"

#define BM 128
#define BN 128
#define BK 64
#define STAGES 5
#define THREADS 128
#define SLICE_BYTES ((BM + BN) * BK * 2)
#define SWIZZLE_ATOM 1024          // 8 rows of 128 bytes: the stride between 8-row groups

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_wgmma_ring(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
           __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    __half* ring = (__half*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    __shared__ __align__(8) unsigned long long full[STAGES];    // slot s holds its slice
    __shared__ __align__(8) unsigned long long empty[STAGES];   // slot s has been read: refill it
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int KT = (K + BK - 1) / BK;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);                // the issuing thread's arrival (and the bytes)
            mbar_init(&empty[s], THREADS / 32);    // one arrival per warp
        }
        mbar_fence_init();
    }
    __syncthreads();

    auto load_slice = [&](int t, int slot) {     // by thread 0 only
        __half* As = ring + (size_t)slot * (BM + BN) * BK;
        mbar_arrive_expect_tx(&full[slot], SLICE_BYTES);
        tma_load_2d(As, &map_a, t * BK, m0, &full[slot]);
        tma_load_2d(As + BM * BK, &map_b, t * BK, n0, &full[slot]);
    };

    float acc[2][64];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;

    if (tid == 0)
        for (int s = 0; s < STAGES && s < KT; ++s) load_slice(s, s);
    for (int t = 0; t < KT; ++t) {
        mbar_wait(&full[t % STAGES], (t / STAGES) % 2);
        const __half* As = ring + (size_t)(t % STAGES) * (BM + BN) * BK;
        const __half* Bs = As + BM * BK;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const unsigned long long db = smem_desc(Bs + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B);
#pragma unroll
            for (int h = 0; h < 2; ++h)
                wgmma_m64n128k16(acc[h], smem_desc(As + 64 * h * BK + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B),
                                 db, 1);
        }
        wgmma_commit();
        wgmma_wait<1>();                  // slice t - 1's products are done (slice t's may still run)
        if (t > 0) {
            const int done = t - 1, slot = done % STAGES;
            if (tid % 32 == 0) mbar_arrive(&empty[slot]);
            if (tid == 0 && done + STAGES < KT) {
                mbar_wait(&empty[slot], (done / STAGES) % 2);   // all 4 warps have read it
                load_slice(done + STAGES, slot);
            }
            __syncwarp();
        }
    }
    wgmma_wait<0>();

#pragma unroll
    for (int h = 0; h < 2; ++h) store_accumulators<BN>(C, acc[h], m0 + 64 * h, n0, M, N);
}
