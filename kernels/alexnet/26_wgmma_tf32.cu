// Step 26 -- step 25 in tf32: float input and filters on wgmma, read by the tensor cores as tf32.
//
// What changed from step 25: the element type, as the convpool chapter's step 10 changed its
// step 9. x and w are floats (step 21's data); the filters are laid out once per layer as M x
// (R S Cp) floats, Cp = C rounded up to 32, each rounded to the nearest tf32 (10 mantissa bits);
// each call copies x to channels-last floats (to_nhwc_float), and the tensor cores drop the low
// 13 mantissa bits of each x they read. wgmma takes 8 k per tf32 instruction (m64nBNk8) where
// halves gave 16, so a slice -- still one 128-byte swizzled row per tile row, the same box
// shape, the same ring of 4 slots, producer and consumers -- is 32 channels, and a layer has
// twice as many slices. The GEMM is kernels/common/hopper_conv.cuh's conv_wgmma_tf32 (convpool's
// step 10), here with 128 or 256 filters per tile; the epilogue and the copy of x are in
// kernels/alexnet/wgmma_store.cuh. Layer 1 (stride 4, 3 channels) keeps step 21's kernel, the
// ladder's fastest tf32 one for it (0.42 ms at N = 128 in the last H100 run, against cuDNN's
// fastest tf32 path's 0.66 ms on that layer).
//
// Why faster than step 21: the same reasons step 25 beat step 20 (the copy engine feeds the
// tiles, one thread issues the copies, 128 x BN tiles per two warpgroups, no ldmatrix).
//
// Prediction (with its arithmetic): a slice of 32 floats is as many bytes as step 25's slice of
// 64 halves, for half the multiply-adds, and the H100's dense tf32 rate is half its fp16 rate
// (495 against 989 TFLOP/s on the datasheet): whether step 25's time on layers 2-5 is set by the
// tensor cores or by the bytes each slice brings from L2, both halve, so layers 2-5 take about
// twice step 25's 0.72 ms: ~1.4 ms; with layer 1 (0.42 ms) the five layers take ~1.85 ms at N =
// 128, 1.2x faster than step 21 (2.2 ms), but ~1.35x cuDNN's fastest tf32 path (1.34 ms: its
// channels-last kernels under a CUDA graph run layers 2-5 in 0.68 ms): the target (at most
// cuDNN) is predicted to be missed on layers 2-5, by about the factor of 2 the tile's bytes per
// multiply-add lost.
//
// Accuracy: tf32 keeps ~3 decimal digits of each operand: ~3e-4 against the float64 reference,
// as step 21 and cuDNN's tf32 paths (tolerance 2e-3).
//
// Flat tiles and pairs (issue 26, after the first recorded run missed the target by 19%): that
// run's tiles of 128 pixels of one image filled only 169 of 256 rows on the 13 x 13 layers 3-5
// and 729 of 896 on layer 2. Two more kinds of tile (kernels/common/hopper_conv.cuh):
//   flat_BN  128 consecutive slots of a "flat" copy (to_flat_float) that lays the images one after
//            another, each row followed by P zero columns and each image by P zero rows: a tap's
//            A slice is then one box {32, 128} of a 2-D map for ANY 128 slots, so tiles run
//            across rows and images; 169 of 14 x 14 = 196 slots are outputs (86%), 729 of 841.
//   pair_BN  flat tiles taken two at a time by the two blocks of a 2 x 1 cluster, with the same
//            filters: each block loads its own A and half of B, multicast into both (the hopper
//            chapter's step 8), so a block reads 16 + 16 KiB of L2 a slice instead of 16 + 32.
// and BN = 192 (wgmma m64n192k8) for them: 384 filters in two tiles instead of three of 128.
// Prediction (tile counts; one block per SM, 132 SMs, a block's time ~ its tiles' products):
// layer 3 (384 filters) took 6 rounds of 128 x 128 tiles (768 tiles); flat 128 x 192 tiles are
// 196 x 2 = 392, 3 rounds of 1.5 times the work = 4.5: 0.75 of its time, layer 4 the same; layer
// 5's 256 filters: 256 rectangles of 128 x 256 in 2 rounds against 392 flat 128 x 128 tiles in 3
// rounds of half the work: 0.75; layer 2: 841 flat tiles of 128 x 256 still take 7 rounds, as
// the 896 rectangles did: no gain from the rows alone, so the pairs' third less L2 traffic is
// what could move it (the pipe was busy 74% of the time there: at most ~1.3x). Together, with
// layer 1 unchanged: 0.417 + 0.443 + 0.75 x (0.225 + 0.309 + 0.193) = 1.40 ms at N = 128 from
// the recorded 1.587, 1.05x cuDNN's fastest tf32 path (1.334): the target is met only if the
// pairs take about 0.07 ms off layer 2 (0.443 -> 0.37).
//
// Launch (per layer): to_nhwc_float, grid (ceil(H W / 32), ceil(Cin / 32), N), block (32, 8)
// (Cin = C rounded up to 4: a pixel is whole 16-byte chunks); then conv_wgmma_tf32_<TW>x<BN>,
// one block of 384 threads per SM (fewer for fewer tiles), 4 x (128 + BN) x 128 + 1024 bytes of
// dynamic shared memory, a 4-D tensor map of the copy (box {32, TW, 128 / TW, 1}, 128-byte
// swizzle) and a 2-D one of the filters (box {32, BN}), made once per layer. TW and BN per layer
// from timing every instantiation (gpulab.workloads.alexnet.wgmma32.DEFAULT_TILES). Flat tiles
// and pairs: to_flat_float into a zeroed N (H + P) (W + P) x Cin copy (its zeros made once), a 2-D
// map of it (box {32, 128}); pairs: an even grid, __cluster_dims__(2, 1, 1), the filters' map in
// boxes {32, BN / 2}, 64 bytes more shared memory (the barriers). Needs sm_90a.
#include <alexnet/wgmma_store.cuh>

extern "C" __global__ void to_nhwc_float(const float* __restrict__ x, float* __restrict__ xt, int C, int HW, int Cp)
{
    to_nhwc_tiles(x, C, HW, Cp, [&](size_t i, float v) { xt[i] = v; });
}

// The flat copy (flat tiles, kernels/common/hopper_conv.cuh): pixel p of image n at slot (n Hp +
// p / W) Wp + p % W of N x Hp x Wp, Cp channels a slot; the zero rows and columns are the
// buffer's zeros, written once when it is made.
extern "C" __global__ void to_flat_float(const float* __restrict__ x, float* __restrict__ xt, int C, int HW, int Cp,
                                         int W, int Hp, int Wp)
{
    to_channels_last_tiles(x, C, HW, Cp, [&](int n, int p, int c, float v) {
        xt[(((size_t)n * Hp + p / W) * Wp + p % W) * Cp + c] = v;
    });
}

template <int TW, int BN>
__device__ __forceinline__ void conv_tf32_store(const CUtensorMap& map_x, const CUtensorMap& map_w, float* y, int N,
                                                int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    extern __shared__ unsigned char smem_raw[];
    const ConvShape s{N, C, Cp, M, E, F, R, S, P};
    conv_wgmma_tf32<TW, StoreEpilogue<TW, BN, float>, BN>(map_x, map_w, s, StoreEpilogue<TW, BN, float>{y, M, E, F},
                                                           smem_raw);
}

// Flat tiles (TW = 0): map_x is a 2-D map of the flat copy, box {32, 128}. CLUSTER = 2: pairs of
// blocks sharing B by multicast (map_w's box {32, BN / 2}: each block's half).
template <int BN, int CLUSTER>
__device__ __forceinline__ void conv_tf32_store_flat(const CUtensorMap& map_x, const CUtensorMap& map_w, float* y,
                                                     int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    extern __shared__ unsigned char smem_raw[];
    const ConvShape s{N, C, Cp, M, E, F, R, S, P};
    const FlatStoreEpilogue<BN, float> epilogue{y, N, M, E, F, E + R - 1 - P, F + S - 1 - P};
    conv_wgmma_tf32<0, FlatStoreEpilogue<BN, float>, BN, CLUSTER>(map_x, map_w, s, epilogue, smem_raw);
}

// The kernels are written out one per tile shape (the lab reads each kernel's parameters from
// its source, so no macro makes them).
extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_tf32_8x128(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                      float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store<8, 128>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_tf32_8x256(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                      float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store<8, 256>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_tf32_16x128(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                       float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store<16, 128>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_tf32_16x256(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                       float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store<16, 256>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_tf32_32x128(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                       float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store<32, 128>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_tf32_32x256(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                       float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store<32, 256>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_tf32_flat_128(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                         float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store_flat<128, 1>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_tf32_flat_192(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                         float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store_flat<192, 1>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __launch_bounds__(384, 1)
conv_wgmma_tf32_flat_256(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                         float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store_flat<256, 1>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
conv_wgmma_tf32_pair_128(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                         float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store_flat<128, 2>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
conv_wgmma_tf32_pair_192(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                         float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store_flat<192, 2>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1)
conv_wgmma_tf32_pair_256(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                         float* __restrict__ y, int N, int C, int Cp, int M, int E, int F, int R, int S, int P)
{
    conv_tf32_store_flat<256, 2>(map_x, map_w, y, N, C, Cp, M, E, F, R, S, P);
}
