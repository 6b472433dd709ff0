// Step 27 -- fp32 accuracy on wgmma: step 26 in 3xTF32 (the convpool chapter's step 11).
//
// What changed from step 26: each float operand is split into two tf32 numbers, a = ab + as, ab
// = a rounded to the nearest tf32 and as = a - ab (exact in float), and each k8 step issues
// three tf32 wgmma, xb ws + xs wb + xb wb (xs ws, ~2^-22 of the product, is left out): ~21 of a
// float's 24 mantissa bits reach the products. The tensor cores add into their accumulators by
// truncation, so each slice of 32 channels goes into a fresh partial accumulator that the
// threads add into their float sums with rounded adds (two partials alternate, so one slice's
// wgmma run while the previous one is added): 3 x 64 floats per thread, so 128 filters per tile,
// and a ring slot holds four tiles (xb, xs, wb, ws: 64 KiB), 3 slots. All of that is
// kernels/common/hopper_conv.cuh's conv_wgmma_3xtf32 (convpool's step 11), unchanged. The
// filters are split once per layer (on the host); x is split by the channels-last copy itself
// (to_nhwc_split writes xb and xs in the same pass), inside each call's time. Layer 1 (stride 4, 3
// channels) keeps step 22's kernel (split fp16 on mma.sync), the ladder's fastest fp32-accurate
// one for it (0.84 ms at N = 128 in the last H100 run, against cuDNN's fastest fp32 path's 1.04).
//
// Prediction (with its arithmetic): three times step 26's tensor-core work; per slice four tiles
// of 16 KiB for 128 x 128 x 32 multiply-adds, 2.7x the bytes per multiply-add of step 26's
// 128 x 256 tiles (48 KiB for 128 x 256 x 32). The convpool chapter's step 11 took 3.25x its
// step 10; the same factor on step 26's predicted ~1.4 ms for layers 2-5 gives ~4.5 ms, and with
// layer 1 (0.84 ms) ~5.4 ms at N = 128: slower than step 24 (Winograd on the FMA units, 4.0 ms)
// and ~1.7x cuDNN's fastest fp32 path (3.1 ms). The target (at most cuDNN) is predicted to be
// missed: on convpool 3xTF32 beat cuDNN because cuDNN's fp32 there multiplies directly on the
// FMA units; on AlexNet cuDNN's fp32 algorithms (FFT, Winograd) do far fewer multiplies, while
// 3xTF32 pays six times the fp16 tensor-core work (three products at half the rate).
//
// Accuracy: the operands' error is ~2^-21 and the truncated sums run over 32 channels only:
// ~1e-6 against the float64 reference, as cuDNN's fp32 paths (tolerance 1e-5).
//
// Flat tiles and pairs (as step 26's, whose file says what they are; kernels/common/hopper_conv.cuh):
// flat_128 (to_flat_split's copies, 2-D maps) and pair_128 (a 2 x 1 cluster, each block loading
// half of wb and ws for both: 32 + 16 KiB of L2 a slice instead of 32 + 32). Prediction from
// the tile counts (132 blocks, one round = one tile a block): layer 2's 1,792 tiles of 32 x 4
// pixels took 14 rounds, its 1,682 flat tiles take 13 (0.93); layers 3-4's 768 took 6, 588 flat
// take 5 (0.83); layer 5's 512 took 4, 392 take 3 (0.75). With layer 1 unchanged, from the first
// recorded run: 0.831 + 0.93 x 1.214 + 0.83 x (0.515 + 0.754) + 0.75 x 0.523 = 3.41 ms, 1.11x
// cuDNN's fastest fp32 path (3.08): still missed, unless the pairs' quarter less L2 traffic
// takes about 0.3 ms more off layers 2-5 (the pipe was busy 75% of the time: at most ~1.3x).
//
// Launch (per layer): to_nhwc_split, grid (ceil(H W / 32), ceil(Cin / 32), N), block (32, 8)
// (Cin = C rounded up to 4); then conv_wgmma_3xtf32_<TW>x128, one block of 384 threads per SM
// (fewer for fewer tiles), 3 x 64 KiB + 1024 bytes of dynamic shared memory, four tensor maps
// (xb, xs: box {32, TW, 128 / TW, 1}; wb, ws: box {32, 128}; 128-byte swizzle), made once per
// layer. TW per layer from timing every instantiation (gpulab.workloads.alexnet.wgmma32). Flat
// tiles and pairs launch as step 26's. Needs sm_90a.
#include <alexnet/wgmma_store.cuh>

extern "C" __global__ void to_nhwc_split(const float* __restrict__ x, float* __restrict__ xb, float* __restrict__ xs,
                                         int C, int HW, int Cp)
{
    to_nhwc_tiles(x, C, HW, Cp, [&](size_t i, float v) {
        const float big = tf32_big(v);
        xb[i] = big;
        xs[i] = v - big;
    });
}

// The flat copy (flat tiles, as step 26's to_flat_float), split on the way.
extern "C" __global__ void to_flat_split(const float* __restrict__ x, float* __restrict__ xb, float* __restrict__ xs,
                                         int C, int HW, int Cp, int W, int Hp, int Wp)
{
    to_channels_last_tiles(x, C, HW, Cp, [&](int n, int p, int c, float v) {
        const size_t i = (((size_t)n * Hp + p / W) * Wp + p % W) * Cp + c;
        const float big = tf32_big(v);
        xb[i] = big;
        xs[i] = v - big;
    });
}

template <int TW>
__device__ __forceinline__ void conv_3xtf32_store(const CUtensorMap& map_xb, const CUtensorMap& map_xs,
                                                  const CUtensorMap& map_wb, const CUtensorMap& map_ws, float* y,
                                                  int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    extern __shared__ unsigned char smem_raw[];
    const ConvShape s{N, C, Cp, M, E, F, R, S, P};
    conv_wgmma_3xtf32<TW>(map_xb, map_xs, map_wb, map_ws, s, StoreEpilogue<TW, 128, float>{y, M, E, F}, smem_raw);
}

// Flat tiles (TW = 0): the maps of xb and xs are 2-D maps of the flat copies, box {32, 128}.
// CLUSTER = 2: pairs of blocks sharing B by multicast (wb's and ws's boxes {32, 64}).
template <int CLUSTER>
__device__ __forceinline__ void conv_3xtf32_store_flat(const CUtensorMap& map_xb, const CUtensorMap& map_xs,
                                                       const CUtensorMap& map_wb, const CUtensorMap& map_ws, float* y,
                                                       int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    extern __shared__ unsigned char smem_raw[];
    const ConvShape s{N, C, Cp, M, E, F, R, S, P};
    const FlatStoreEpilogue<128, float> epilogue{y, N, M, E, F, E + R - 1 - P, F + S - 1 - P};
    conv_wgmma_3xtf32<0, FlatStoreEpilogue<128, float>, CLUSTER>(map_xb, map_xs, map_wb, map_ws, s, epilogue, smem_raw);
}

// The kernels are written out one per tile shape (the lab reads each kernel's parameters from
// its source, so no macro makes them).
extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_3xtf32_8x128(const __grid_constant__ CUtensorMap map_xb, const __grid_constant__ CUtensorMap map_xs,
                        const __grid_constant__ CUtensorMap map_wb, const __grid_constant__ CUtensorMap map_ws,
                        float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_3xtf32_store<8>(map_xb, map_xs, map_wb, map_ws, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_3xtf32_16x128(const __grid_constant__ CUtensorMap map_xb, const __grid_constant__ CUtensorMap map_xs,
                         const __grid_constant__ CUtensorMap map_wb, const __grid_constant__ CUtensorMap map_ws,
                         float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_3xtf32_store<16>(map_xb, map_xs, map_wb, map_ws, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_3xtf32_32x128(const __grid_constant__ CUtensorMap map_xb, const __grid_constant__ CUtensorMap map_xs,
                         const __grid_constant__ CUtensorMap map_wb, const __grid_constant__ CUtensorMap map_ws,
                         float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_3xtf32_store<32>(map_xb, map_xs, map_wb, map_ws, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_3xtf32_flat_128(const __grid_constant__ CUtensorMap map_xb, const __grid_constant__ CUtensorMap map_xs,
                           const __grid_constant__ CUtensorMap map_wb, const __grid_constant__ CUtensorMap map_ws,
                           float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_3xtf32_store_flat<1>(map_xb, map_xs, map_wb, map_ws, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
conv_wgmma_3xtf32_pair_128(const __grid_constant__ CUtensorMap map_xb, const __grid_constant__ CUtensorMap map_xs,
                           const __grid_constant__ CUtensorMap map_wb, const __grid_constant__ CUtensorMap map_ws,
                           float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_3xtf32_store_flat<2>(map_xb, map_xs, map_wb, map_ws, y, N, C, Cp, M, E, F, R, S, P);
}
