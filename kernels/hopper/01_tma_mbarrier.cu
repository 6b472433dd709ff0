// Step 1 -- TMA: the copy engine loads the tiles, one thread asks, an mbarrier says when.
//
// What changed from step 0: how a slice gets to shared memory. Step 0's 256 threads each
// computed 8 addresses and issued 8 cp.async of 16 bytes per slice, and each waited for its own
// copies (cp.async.wait_group) before a __syncthreads() told it everyone's had landed. Here one
// thread issues two bulk tensor copies per slice (cp.async.bulk.tensor: a 128 x 64 box of A and
// one of B, 16 KiB each), described by tensor maps made on the host (gpulab.tensormap.encode_2d).
// The Tensor Memory Accelerator computes the addresses, fills the rows and columns outside the
// matrix with zeros, and lays the box out with the 128-byte swizzle -- the very layout step 0
// wrote by hand, so the ldmatrix/mma.sync loop is unchanged. Each slot of the ring has an
// mbarrier: the issuing thread announces the slice's bytes (arrive.expect_tx), the copies count
// them off as they land, and the phase completes when all have; every thread waits on that phase
// (parity (t / STAGES) % 2: the barrier of a slot completes once per trip round the ring).
// A __syncthreads() before each refill still guards against overwriting a slot in use.
//
// Why faster: the loads cost no instructions and no registers in 255 of the 256 threads, and the
// edge tests go away. Why it might not: step 0 was not waiting for its loads -- mma.sync's issue
// rate bounds it, and that loop is unchanged.
//
// Launch: as step 0, with tensor maps instead of A and B: (map_a, map_b, C, M, N, K), map_a =
// encode_2d(A, box=(64, 128)), map_b = encode_2d(B, box=(64, 128)), both 128-byte swizzled.
// Needs K a multiple of 8 (a tensor map's rows start 16-byte aligned); M, N and K need not be
// multiples of the tile (the copy engine fills the outside with zeros).
//
// Prediction: within 10% of step 0.
#include <cuda_fp16.h>
#include <common/ptx.h>
#include "mma_sync_tile.cuh"
#include <common/hopper.h>

#define BM 128
#define BN 128
#define BK SLICE_K            // halves of k per slice: one 128-byte row
#define STAGES 3
#define THREADS 256
#define SLICE_BYTES ((BM + BN) * BK * 2)   // what the two copies of a slice bring


extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_tma_mma_sync(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                  __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    // The 128-byte swizzle repeats every 8 rows (1 KiB): a box must start on that boundary.
    __half* ring = (__half*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;      // this warp's 64 x 32 tile of C
    const int KT = (K + BK - 1) / BK;

    __shared__ __align__(8) unsigned long long full[STAGES];   // slot s holds its slice
    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) mbar_init(&full[s], 1);  // one arrival: the issuing thread's
        mbar_fence_init();
    }
    __syncthreads();

    auto load_slice = [&](int t, int slot) {     // by thread 0 only
        __half* As = ring + (size_t)slot * (BM + BN) * BK;
        __half* Bs = As + BM * BK;
        mbar_arrive_expect_tx(&full[slot], SLICE_BYTES);
        tma_load_2d(As, &map_a, t * BK, m0, &full[slot]);       // box (k0 .. k0+63, rows m0 .. m0+127)
        tma_load_2d(Bs, &map_b, t * BK, n0, &full[slot]);
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

    if (tid == 0)
        for (int s = 0; s < STAGES - 1 && s < KT; ++s) load_slice(s, s);
    for (int t = 0; t < KT; ++t) {
        __syncthreads();                  // everyone is done with slice t - 1: its slot may be refilled
        if (tid == 0 && t + STAGES - 1 < KT) load_slice(t + STAGES - 1, (t + STAGES - 1) % STAGES);
        mbar_wait(&full[t % STAGES], (t / STAGES) % 2);   // slice t has landed
        const __half* As = ring + (size_t)(t % STAGES) * (BM + BN) * BK;
        const __half* Bs = As + BM * BK;
        mma_sync_slice(acc, As, Bs, wm, wn, lane);
    }

    store_warp_tile(C, acc, m0 + wm, n0 + wn, M, N, lane);
}
