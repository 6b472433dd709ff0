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
#include <common/hopper.h>

#define BM 128
#define BN 128
#define BK 64                 // halves of k per slice: one 128-byte row
#define STAGES 3
#define THREADS 256
#define SLICE_BYTES ((BM + BN) * BK * 2)   // what the two copies of a slice bring

// Element offset of chunk c (8 halves) of row `row` in a slice of 128-byte rows, swizzled.
__device__ __forceinline__ int swizzled_chunk(int row, int c) { return row * BK + ((c ^ (row % 8)) * 8); }

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
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned a[4][4], b[4][2];
#pragma unroll
            for (int i = 0; i < 4; ++i) {   // A 16 x 16: lanes 0-15 rows 0-15 at chunk 2kk, 16-31 at 2kk+1
                const int row = wm + 16 * i + lane % 16;
                ldmatrix_x4(a[i], As + swizzled_chunk(row, 2 * kk + lane / 16));
            }
#pragma unroll
            for (int j = 0; j < 4; j += 2) {  // two n8 tiles: matrices (n 0-7, k lo), (n 0-7, k hi), (n 8-15, ...)
                const int row = wn + 8 * j + (lane / 16) * 8 + lane % 8;
                unsigned r[4];
                ldmatrix_x4(r, Bs + swizzled_chunk(row, 2 * kk + (lane / 8) % 2));
                b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) mma_16816(acc[i][j], a[i], b[j]);
        }
    }

    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = m0 + wm + 16 * i + g + 8 * h, col = n0 + wn + 8 * j + 2 * q;
                if (row >= M) continue;
                if (col < N) C[(size_t)row * N + col] = __float2half(acc[i][j][2 * h]);
                if (col + 1 < N) C[(size_t)row * N + col + 1] = __float2half(acc[i][j][2 * h + 1]);
            }
}
