// Step 4 -- warp specialization: a producer warpgroup copies, two consumer warpgroups multiply.
//
// What changed from step 3: the roles. Step 3's one warpgroup both issued the copies (thread 0,
// between its products) and multiplied. Here a block has three warpgroups. Warpgroup 0 is the
// producer: one of its threads runs ahead round the ring, waiting for a slot's `empty` phase and
// issuing the slice's two copies on its `full` barrier; the rest of it has nothing to do.
// Warpgroups 1 and 2 are consumers: each waits for `full`, multiplies its 64 rows of the block's
// 128 x 256 tile by the slice (4 x wgmma.m64n256k16) and arrives on `empty`; one warpgroup's
// products run while the other waits, so the tensor cores stay fed. The tile is twice step 3's
// (128 x 256, B's box 256 rows): half the copies of A per product.
//
// Registers: 384 threads at 1 block per SM may have at most 65536 / 384 = 170 registers each
// (the compiler caps at 168), but a consumer holds 128 accumulators and the producer needs
// ~30 registers in all. setmaxnreg moves them: the producer gives its warpgroup's down to 40,
// the consumers take theirs up to 232 (40 x 128 + 232 x 256 = 64512 of the SM's 65536). It takes
// effect because the kernel declares its register cap (__launch_bounds__(384, 1)) and each
// role is one branch of an if/else.
//
// Why faster: copies and products in separate warps, so neither waits for the other to issue;
// two consumers hide each other's waits; the larger tile moves fewer bytes per product.
//
// Launch: grid (ceil(N / 256), ceil(M / 128)), block 384, dynamic shared memory
// STAGES * 48 KiB + 1 KiB; (map_a, map_b, C, M, N, K), map_a's box 64 x 128, map_b's 64 x 256.
// Needs K a multiple of 8.
//
// Prediction: about 650 TFLOP/s at 4096^3, close to cuBLAS (the epilogue, which writes C straight
// from the accumulators while the tensor cores wait, is what remains).
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

extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_warp_specialized(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    __half* ring = (__half*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    __shared__ __align__(8) unsigned long long full[STAGES];
    __shared__ __align__(8) unsigned long long empty[STAGES];
    const int tid = threadIdx.x, wg = tid / 128;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
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
            for (int t = 0; t < KT; ++t) {
                const int slot = t % STAGES;
                // Round r = t / STAGES may write the slot once round r - 1's products have read it:
                // the empty phase of parity (r - 1) % 2 = (r % 2) ^ 1, which on a fresh barrier
                // counts as done (the phase before the first), so round 0 does not wait.
                mbar_wait(&empty[slot], ((t / STAGES) % 2) ^ 1);
                __half* As = ring + (size_t)slot * (BM + BN) * BK;
                mbar_arrive_expect_tx(&full[slot], SLICE_BYTES);
                tma_load_2d(As, &map_a, t * BK, m0, &full[slot]);
                tma_load_2d(As + BM * BK, &map_b, t * BK, n0, &full[slot]);
            }
        }
    } else {                                        // the consumers: rows 64 c .. 64 c + 63 of the tile
        setmaxnreg_inc<232>();
        const int c = wg - 1;
        float acc[128];
#pragma unroll
        for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
        for (int t = 0; t < KT; ++t) {
            const int slot = t % STAGES;
            mbar_wait(&full[slot], (t / STAGES) % 2);
            const __half* As = ring + (size_t)slot * (BM + BN) * BK + 64 * c * BK;
            const __half* Bs = ring + (size_t)slot * (BM + BN) * BK + BM * BK;
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk)
                wgmma_m64n256k16(acc, smem_desc(As + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B),
                                 smem_desc(Bs + 16 * kk, 1, SWIZZLE_ATOM, SMEM_SWIZZLE_128B), 1);
            wgmma_commit();
            wgmma_wait<0>();
            if (tid % 32 == 0) mbar_arrive(&empty[slot]);
        }

        store_accumulators<BN>(C, acc, m0 + 64 * c, n0, M, N);
    }
}
