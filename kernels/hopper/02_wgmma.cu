// Step 2 -- wgmma: a warpgroup multiplies straight from shared memory.
//
// What changed from step 1: the multiply. Step 1's 8 warps each loaded their A and B fragments
// into registers with ldmatrix and issued 16 mma.sync of 16 x 8 x 16 per k16 step. Here one
// warpgroup (4 warps, 128 threads) issues wgmma.mma_async.m64n128k16: a 64 x 128 x 16 product
// whose operands the tensor cores read from shared memory themselves, through two 64-bit matrix
// descriptors (smem_desc: the tile's address, its 128-byte swizzle, 1024 bytes between groups of
// 8 rows). The copy engine wrote the slices with that same swizzle, so no thread touches them:
// no ldmatrix, no fragment registers. The k16 slices of a 128-byte row are 32 bytes apart, so
// the descriptor of slice kk starts 2 kk 16-byte chunks (32 kk bytes) in (the swizzle is applied to the
// final address, by the hardware, as the copy engine applied it). A block computes a 128 x 128
// tile as two m64 halves: 2 x 64 accumulators per thread. wgmma is asynchronous: wgmma_fence()
// orders the accumulators' registers before the first product, wgmma_commit() closes the group
// of 8 products of a slice, and wgmma_wait<0>() waits for it before the slot may be refilled.
//
// Why faster: one instruction now does what 64 mma.sync did (64 x 128 x 16 = 64 x 16 x 8 x 16), the operands never pass through
// registers, and the tensor cores can run at Hopper's full rate (wgmma is the only way to it).
// Why it might not be much faster yet: the block waits for every slice's products before it
// refills a slot, and a block's one warpgroup leaves its share of the tensor cores idle while it
// waits for copies and for its own epilogue. Two blocks fit on an SM (2 x 97 KiB of ring, 160
// registers x 128 threads each), and the other block's products fill some of those gaps: the
// chapter's resource table shows it, and step 3's verdict rests on it.
//
// Launch: grid (ceil(N / 128), ceil(M / 128)), block 128, dynamic shared memory STAGES * 32 KiB
// + 1 KiB; (map_a, map_b, C, M, N, K) with boxes of 64 x 128. Needs K a multiple of 8.
//
// Prediction: 1.5-2x step 1 (about 500 TFLOP/s at 4096^3), still short of cuBLAS.
#include <cuda_fp16.h>
#include <common/hopper.h>
#include "wgmma_store.cuh"

#define BM 128
#define BN 128
#define BK 64
#define STAGES 3
#define THREADS 128
#define SLICE_BYTES ((BM + BN) * BK * 2)
#define SWIZZLE_ATOM 1024          // 8 rows of 128 bytes: the stride between 8-row groups

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_wgmma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
           __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    __half* ring = (__half*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    __shared__ __align__(8) unsigned long long full[STAGES];
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int KT = (K + BK - 1) / BK;
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) mbar_init(&full[s], 1);
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
        for (int s = 0; s < STAGES - 1 && s < KT; ++s) load_slice(s, s);
    for (int t = 0; t < KT; ++t) {
        __syncthreads();                  // everyone's products of slice t - 1 are done: refill its slot
        if (tid == 0 && t + STAGES - 1 < KT) load_slice(t + STAGES - 1, (t + STAGES - 1) % STAGES);
        mbar_wait(&full[t % STAGES], (t / STAGES) % 2);
        const __half* As = ring + (size_t)(t % STAGES) * (BM + BN) * BK;
        const __half* Bs = As + BM * BK;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            const unsigned long long db = smem_desc(Bs + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B);
#pragma unroll
            for (int h = 0; h < 2; ++h)   // rows 64 h .. 64 h + 63 of the tile
                wgmma_m64n128k16(acc[h], smem_desc(As + 64 * h * BK + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B),
                                 db, 1);
        }
        wgmma_commit();
        wgmma_wait<0>();
    }

#pragma unroll
    for (int h = 0; h < 2; ++h) store_accumulators<BN>(C, acc[h], m0 + 64 * h, n0, M, N);
}
