// Step 19 -- cp.async: a 4-stage pipeline from global to shared memory without registers.
//
// What changed from step 18: how a slice gets into shared memory. Step 18 loads the next
// slice into registers (uint4s) while the tensor cores work on this one, then stores them to
// shared memory: one slice in flight, and every byte passes through the registers and costs
// a load and a store instruction. Here each thread issues cp.async: a 16-byte copy from global
// to shared memory that needs no register and completes in the background. Four slices' stages
// rotate in shared memory (80 KB per block): while the warps multiply slice t, slices t+1..t+3
// are already on their way. cp.async.commit_group closes the copies of one slice and
// cp.async.wait_group<2> waits until at most two slices are still outstanding, so slice t has
// landed; a __syncthreads then makes it visible to all warps and also says that every warp has
// finished with slice t - 1, whose stage the next copies overwrite. Copies whose k or pixel is
// not real pass a source size of 0: cp.async then writes 16 zero bytes and reads nothing.
//
// Why it should be faster: three slices (48 KB per block, 96 KB per SM) in flight instead of
// one hides the latency of global memory, which step 18 could only cover with the other
// block's warps; and the 4 load + 4 store instructions per thread per slice become 4 cp.async.
// Why it might not be: the slices of this GEMM mostly come from L2 (the tiles of one column of
// blocks read the same filters, neighbouring pixels share input), whose latency the double
// buffer of step 18 may already hide.
//
// Launch: as step 18 (filter runs once per layer; the channels-last copy and the GEMM every
// call), the GEMM named conv_mma_cp_async with
// alexnet_tc.TILES["conv_mma_cp_async"].shared_bytes(2) = 81,920 bytes of dynamic shared memory.
//
// Prediction: 10-20% faster than step 18 on layers 2-5, where the GEMM's main loop is the time.
//
// Built on mma_swizzled.cuh: this step's pipelined GEMM, conv_mma, is there with PADDED set
// (rows of 40 halves, chunks in place), because steps 20-22 run it again with swizzled rows;
// through it, step 18's zero_tiles, pixel_starts and store_tiles (mma_tile.cuh).
#include "mma_swizzled.cuh"   // conv_mma (this step's, PADDED), nhwc_runs.h, mma_tile.cuh

extern "C" __global__ void to_padded_nhwc_half(const __half* x, __half* xt, int C, int H, int W, int Cp, int Hp,
                                               int Wp, int P)
{
    extern __shared__ __align__(16) __half row[];
    to_padded_nhwc<__half>(x, xt, C, H, W, Cp, Hp, Wp, P, row);
}

extern "C" __global__ void to_filter_runs_half(const __half* w, __half* wt, int M, int C, int R, int S, int Cp,
                                               int L, int Kp)
{
    to_filter_runs<__half>(w, wt, M, C, R, S, Cp, L, Kp);
}

// 128 filters x 128 pixels, 8 warps of 64 x 32, 4 stages in flight.
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_cp_async(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc,
                  int row_pitch, int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    // __half data and output, 4 stages of BK = 32 halves, sums in the accumulators, padded rows.
    conv_mma<__half, __half, 128, 128, 64, 32, 4, 32, false, true>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp,
                                                                   Hp, Wp, U, E, F);
}
