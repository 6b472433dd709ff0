// Step 0 -- the baseline: the lab's mma.sync GEMM (tensor cores as the book's earlier chapters
// use them), as a plain GEMM.
//
// C (M x N, half) = A (M x K, half) * B^T, B stored N x K: both operands K-major (each row holds
// consecutive k), accumulated in float. This is the layout every later step keeps: the one in
// which Hopper's wgmma reads both operands from shared memory without a transpose.
//
// What it does: the recipe of the alexnet and convpool chapters' last tensor-core steps, with the
// building blocks of kernels/common/ptx.h. A block of 8 warps computes a 128 x 128 tile of C; K
// advances 64 halves (128 bytes) at a time through a ring of STAGES slices that cp.async fills,
// 16 bytes per thread per copy, while the tensor cores work on an older slice. In shared memory a
// slice row is 128 bytes, and its 16-byte chunk c is stored at chunk c ^ (row % 8): the 8 rows
// one ldmatrix phase reads then fall in 8 different groups of 4 banks. (This is exactly the
// 128-byte swizzle that the copy engine of step 1 applies by itself.) Each warp holds a 64 x 32
// tile of C as 4 x 4 m16n8 accumulators (64 floats per thread) and feeds them with ldmatrix and
// mma.sync.m16n8k16 (mma_sync_tile.cuh, which step 1 shares).
//
// Launch: grid (ceil(N / 128), ceil(M / 128)), block 256, dynamic shared memory
// STAGES * 32 KiB + 1 KiB (the ring, aligned to 1 KiB inside it). Needs K a multiple of 8 (a
// 16-byte copy never straddles a row's end); M and N are free (out-of-range rows read as zeros,
// out-of-range outputs are not written).
//
// Prediction: about 300 TFLOP/s at 4096^3 on an H100, a third of the 989 TFLOP/s dense fp16 peak
// and below half of cuBLAS. Not because of mma.sync itself: well-fed mma.sync kernels reach about
// two thirds of the dense peak on Hopper (FlashAttention-3, Shah et al. 2024, sec. 2). What holds
// this one back is its feed: every operand passes through ldmatrix into registers, each warp's
// 64 x 32 piece re-reads its rows of A and B from shared memory, and the warps that copy are the
// warps that multiply. wgmma (step 2) and the copy engine (step 1) take those away.
#include <cuda_fp16.h>
#include <common/ptx.h>
#include "mma_sync_tile.cuh"

#define BM 128
#define BN 128
#define BK SLICE_K            // halves of k per slice: one 128-byte row
#define STAGES 3
#define THREADS 256
#define SLICE_BYTES ((BM + BN) * BK * 2)


extern "C" __global__ void __launch_bounds__(THREADS, 1)
gemm_mma_sync(const __half* __restrict__ A, const __half* __restrict__ B, __half* __restrict__ C, int M, int N, int K)
{
    extern __shared__ unsigned char smem_raw[];
    // 1 KiB alignment: not needed by cp.async, kept so that every step lays out its ring alike.
    __half* ring = (__half*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;      // this warp's 64 x 32 tile of C
    const int KT = (K + BK - 1) / BK;

    auto load_slice = [&](int t, int slot) {
        __half* As = ring + (size_t)slot * (BM + BN) * BK;
        __half* Bs = As + BM * BK;
        const int k0 = t * BK;
#pragma unroll
        for (int i = 0; i < BM * BK / 8 / THREADS; ++i) {       // 4 chunks of A, 4 of B per thread
            const int id = tid + i * THREADS, row = id / 8, c = id % 8;
            const bool k_ok = k0 + c * 8 < K;
            const bool a_ok = k_ok && m0 + row < M, b_ok = k_ok && n0 + row < N;
            cp_async16(As + swizzled_chunk(row, c), A + (a_ok ? (size_t)(m0 + row) * K + k0 + c * 8 : 0), a_ok ? 16 : 0);
            cp_async16(Bs + swizzled_chunk(row, c), B + (b_ok ? (size_t)(n0 + row) * K + k0 + c * 8 : 0), b_ok ? 16 : 0);
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_slice(s, s);
        cp_async_commit();
    }
    for (int t = 0; t < KT; ++t) {
        cp_async_wait<STAGES - 2>();      // slice t has landed (this thread's copies) ...
        __syncthreads();                  // ... everyone's, and everyone is done with slice t - 1
        if (t + STAGES - 1 < KT) load_slice(t + STAGES - 1, (t + STAGES - 1) % STAGES);
        cp_async_commit();
        const __half* As = ring + (size_t)(t % STAGES) * (BM + BN) * BK;
        const __half* Bs = As + BM * BK;
        mma_sync_slice(acc, As, Bs, wm, wn, lane);
    }

    store_warp_tile(C, acc, m0 + wm, n0 + wn, M, N, lane);
}
