// Step 20 -- swizzled shared memory instead of padded rows, and a tile shape per layer.
//
// What changed from step 19: two things that only pay together.
//   1. Swizzle. Step 19 pads every 64-byte row of a slice by 16 bytes so that the 8 rows one
//      ldmatrix phase reads start in 8 different bank groups. Here the rows are not padded;
//      instead the 16-byte chunk c of row `row` is stored at chunk c ^ ((row >> 1) & 3). Rows
//      0..7 at one logical chunk land on 8 different physical chunks of the 128-byte bank
//      window (see swizzle<CHUNKS>() in mma_swizzled.cuh), so ldmatrix and cp.async stay conflict-free, and a stage
//      takes 20% less shared memory: 64 KB for 4 stages of a 128 x 128 tile instead of 80 KB.
//   2. Tiles per layer. The freed memory allows other tile shapes at the same occupancy, and
//      the layers want different ones: layer 1 has M = 96 filters (a 128-row tile leaves a
//      quarter of every tensor-core instruction idle), layer 5 makes 338 tiles of 128 x 128,
//      1.3 waves of 264 resident blocks. The kernel is a template; the host picks one
//      instantiation per layer (alexnet.MMA_TILES, chosen by timing every candidate on the
//      H100 with tools/tune_fast.py).
//
// Why it should be faster: less shared memory per block and fuller waves. Why it might not:
// with 2 blocks of 8 warps per SM the registers (about 128 per thread) already cap the
// occupancy, so the saved memory buys nothing by itself; the gain is in the tile choice.
//
// Launch: as step 18 (to_filter_runs_half once per layer; to_padded_nhwc_half and the GEMM
// every call), the GEMM conv_mma_<tile> of alexnet_tc.LAYER_KERNELS["20"][layer] with
//   grid (ceil(N*E*F / BN), ceil(M / BM)), block 32 * warps,
//   dynamic shared memory alexnet_tc.TILES[name].shared_bytes(2).
// Tiles with BK = 64 (slices of 64 k, 128-byte rows, swizzled c ^ (row % 8)) take half the
// barriers and waits per k of those with BK = 32; whether that pays is measured.
//
// Prediction: layer 1 ~20% faster (96-row tiles), layer 5 ~25% faster (smaller tiles, fuller
// waves), the others within 5% of step 19.
// (Measured on the H100 with tools/tune_fast.py: step 19's own tile with swizzled rows instead of
// padded ones was already about 10% faster,
// and the tiles chosen per layer another 10%; the 96-row tile helped layer 1 only a little.)
//
// Built on mma_swizzled.cuh: step 19's pipelined GEMM, conv_mma, with this step's swizzle
// (PADDED left false); steps 21 and 22 run it too, with other element types. This file holds
// the kernels: the copies and one instantiation per tile shape.
#include "mma_swizzled.cuh"

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

// Tile shapes: BM filters x BN pixels, warp tiles WM x WN, pipeline stages, BK.

// 128 x 128, warps of 64 x 32, 4 stages of 32 k: 8 warps: step 19's tile
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_128x128(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                 int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, __half, 128, 128, 64, 32, 4, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 96 x 128, warps of 48 x 32, 4 stages of 32 k: 8 warps: layer 1's 96 filters in one tile
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_96x128(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, __half, 96, 128, 48, 32, 4, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 128, warps of 64 x 64, 4 stages of 32 k: 4 warps of 64 x 64: fewer ldmatrix per mma
extern "C" __global__ void __launch_bounds__(128, 2)
conv_mma_128x128_w4(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                    int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, __half, 128, 128, 64, 64, 4, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 64, warps of 64 x 32, 4 stages of 32 k: 4 warps: twice the tiles
extern "C" __global__ void __launch_bounds__(128, 3)
conv_mma_128x64(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, __half, 128, 64, 64, 32, 4, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 64 x 128, warps of 32 x 64, 4 stages of 32 k: 4 warps
extern "C" __global__ void __launch_bounds__(128, 3)
conv_mma_64x128(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, __half, 64, 128, 32, 64, 4, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 256, warps of 64 x 64, 3 stages of 32 k: 8 warps of 64 x 64: half the tiles
extern "C" __global__ void __launch_bounds__(256, 1)
conv_mma_128x256(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                 int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, __half, 128, 256, 64, 64, 3, 32>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 128, warps of 64 x 64, 3 stages of 64 k: 4 warps, slices of 64 k: half the barriers
extern "C" __global__ void __launch_bounds__(128, 2)
conv_mma_128x128_w4_k64(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                        int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, __half, 128, 128, 64, 64, 3, 64>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 128, warps of 64 x 32, 3 stages of 64 k: 8 warps, slices of 64 k
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_128x128_k64(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                     int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, __half, 128, 128, 64, 32, 3, 64>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 96 x 128, warps of 48 x 32, 3 stages of 64 k: 8 warps, slices of 64 k
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_96x128_k64(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                    int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, __half, 96, 128, 48, 32, 3, 64>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 64 x 128, warps of 32 x 64, 4 stages of 64 k: 4 warps, slices of 64 k
extern "C" __global__ void __launch_bounds__(128, 2)
conv_mma_64x128_k64(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                    int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, __half, 64, 128, 32, 64, 4, 64>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}
