// Step 25 -- Hopper's tools on the stride-1 layers: wgmma fed by 4-D TMA boxes, warp-specialized
// and persistent (kernels/common/hopper_conv.cuh, the convpool chapter's step 9 without its pool).
//
// What changed from step 20: on layers 2-5 the whole GEMM. Step 20's warps copy their slices
// with cp.async from a padded channels-last copy of x, load fragments with ldmatrix and issue
// mma.sync of 16 x 8 x 16. Here one producer thread per block has the copy engine bring each
// slice -- for one tap (r, s) and 64 channels, a box {64 channels, TW columns, 128 / TW rows,
// 1 image} of the channels-last input at (c0, f0 + s - P, e0 + r - P, n), whose coordinates
// outside the image read as zeros (so the copy needs no border written out), and 64 k of BN
// filters -- round a ring of 4 slots, and two consumer warpgroups multiply their 64 pixels by BN
// filters with wgmma from shared memory. One block per SM walks over the tiles. Each call still
// starts by copying x to channels-last (no border), as step 20's does.
//
// A tile is TH x TW = 128 output pixels of one image times BN filters; the layers' images are
// small (27 x 27, 13 x 13), so the tile shape decides how many of its 128 rows are real pixels:
// 13 x 13 in 8 x 16 tiles fills 169 of 256 rows. TW and BN (128 or 256: layers 3 and 4 have 384
// filters, 3 x 128) are chosen per layer by timing every instantiation
// (gpulab.workloads.alexnet.wgmma.DEFAULT_TILES). Layer 2's 96 channels would fill 64-channel
// slices only 3/4 (each tap's second slice half zeros): its kernels can take slices of 32
// channels instead, 64-byte rows in the 64-byte swizzle, 3 per tap, in a ring of 8 slots of half
// the size. Layer 1 (stride 4, 3 channels: a 64-channel slice would be 95% zeros) keeps step 20's
// kernel, the fastest the ladder has for it.
//
// Epilogue: y (N x M x E x F, half) straight from the accumulators, guarded at the edges.
//
// Launch (per layer): to_nhwc_half, grid (ceil(H W / 32), ceil(Cp / 32), N), block (32, 8); then conv_wgmma_<TW>x<BN>, one block of 384 threads per SM (fewer for fewer tiles),
// CONV_SHARED_BYTES(BN) of dynamic shared memory, a 4-D tensor map of the copy (box {64, TW,
// 128 / TW, 1}, 128-byte swizzle) and a 2-D one of the filters as M x R S Cp halves (box
// {64, BN}), made once per layer. Needs sm_90a.
//
// Prediction: layers 2-5 at about 450 TFLOP/s each (the convpool step's rate less the rows a
// tile wastes on these small images), about 0.6 ms together against step 20's 0.96; with layer 1
// at step 20's 0.31 ms the five layers take about 0.9 ms at N = 128, under 0.95x cuDNN's 1.07.
#include <alexnet/wgmma_store.cuh>    // the copy to channels-last and the epilogue (steps 26-27's too)

// x (N x C x H x W) -> xt (N x H x W x Cp), no border (the tensor map reads zeros outside), zeros
// for C <= c < Cp. Grid (ceil(HW / 32), ceil(Cp / 32), N), block (32, 8).
extern "C" __global__ void to_nhwc_half(const __half* __restrict__ x, __half* __restrict__ xt, int C, int HW, int Cp)
{
    to_nhwc_tiles(x, C, HW, Cp, [&](size_t i, __half v) { xt[i] = v; });
}

// The kernels are written out one per tile shape (the lab reads each kernel's parameters from
// its source, so no macro makes them).
template <int TW, int BN, int BK = CONV_BK>
__device__ __forceinline__ void conv_store(const CUtensorMap& map_x, const CUtensorMap& map_w, __half* y, int N,
                                           int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    extern __shared__ unsigned char smem_raw[];
    const ConvShape s{N, C, Cp, M, E, F, R, S, P};
    conv_wgmma<TW, BN, StoreEpilogue<TW, BN, __half>, BK>(map_x, map_w, s, StoreEpilogue<TW, BN, __half>{y, M, E, F},
                                                       smem_raw);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_8x128(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                  __half* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_store<8, 128>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_8x256(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                  __half* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_store<8, 256>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_16x128(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                  __half* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_store<16, 128>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_16x256(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                  __half* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_store<16, 256>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_32x128(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                  __half* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_store<32, 128>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_32x256(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                  __half* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_store<32, 256>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

// Slices of 32 channels (64-byte swizzle): layer 2's 96 channels in 3 slices per tap, not 2 of 64.
extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_16x256_k32(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                      __half* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_store<16, 256, 32>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

// Slices of 32 channels (64-byte swizzle): layer 2's 96 channels in 3 slices per tap, not 2 of 64.
extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_32x256_k32(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                      __half* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_store<32, 256, 32>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}
