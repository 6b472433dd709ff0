// Exercise: step 3's producer -- refill the ring's slots (kernels/hopper/03_full_empty_ring.cu).
//
// Task: write `produce(t)`, which thread 0 calls for every slice t of k in order (the first
// STAGES before the loop, then slice done + STAGES once slice `done`'s products are finished):
// put slice t into slot t % STAGES. It must
//   1. wait until every warp has finished reading the slot's previous slice, t - STAGES: the
//      phase of empty[slot] that completed in round (t / STAGES) - 1. mbar_wait(bar, p) returns
//      once the phase of parity p has completed, and a fresh barrier's wait(1) returns at once
//      (the phase "before the first" counts as done), so round 0 does not wait;
//   2. announce the slice's bytes on full[slot] (mbar_arrive_expect_tx: SLICE_BYTES, A's and B's
//      boxes together), the one arrival full[slot] counts;
//   3. issue the two copies, completing on full[slot]: A's box (64 k x 128 rows) at column
//      t * BK, row m0, into the slot's first BM x BK halves, and B's box at column t * BK, row n0,
//      right after it.
// The check runs the kernel on the CPU backend's emulation (the same mbarrier phases, copies and
// swizzle as the GPU): a wrong parity or a missing arrival hangs the block, and the backend names
// the barrier its threads wait at; a wrong box or coordinate gives a wrong C. What it cannot catch
// is a slot refilled before every warp has read it: it completes each copy at once and runs a
// warp's lanes together through each wgmma, so a missing wait on empty goes unseen here and races
// on the GPU. Step 1 of the task is yours to get right.
#include <cuda_fp16.h>
#include <common/hopper.h>
#include <hopper/wgmma_store.cuh>   // from kernels/, where the grader finds it too

#define BM 128
#define BN 128
#define BK 64
#define STAGES 5
#define THREADS 128
#define SLICE_BYTES ((BM + BN) * BK * 2)
#define SWIZZLE_ATOM 1024          // 8 rows of 128 bytes: the stride between 8-row groups

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_ring_exercise(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
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

    auto produce = [&](int t) {                  // by thread 0 only: slice t into slot t % STAGES
        // BEGIN SOLUTION
        const int slot = t % STAGES;
        mbar_wait(&empty[slot], ((t / STAGES) % 2) ^ 1);   // round t / STAGES - 1 has read the slot
        __half* As = ring + (size_t)slot * (BM + BN) * BK;
        mbar_arrive_expect_tx(&full[slot], SLICE_BYTES);
        tma_load_2d(As, &map_a, t * BK, m0, &full[slot]);
        tma_load_2d(As + BM * BK, &map_b, t * BK, n0, &full[slot]);
        // END SOLUTION
    };

    float acc[2][64];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 64; ++i) acc[h][i] = 0.0f;

    if (tid == 0)
        for (int s = 0; s < STAGES && s < KT; ++s) produce(s);
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
            if (tid == 0 && done + STAGES < KT) produce(done + STAGES);
            __syncwarp();
        }
    }
    wgmma_wait<0>();

#pragma unroll
    for (int h = 0; h < 2; ++h) store_accumulators<BN>(C, acc[h], m0 + 64 * h, n0, M, N);
}
