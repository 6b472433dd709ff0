// Step 21 -- tf32: step 20 on float data, the tensor cores in their tf32 mode.
//
// What changed from step 20: the element type. x, w and y stay float (fp32 in memory, as for
// steps 1-5 and 17); the channels-last copy and the filter runs hold floats rounded to tf32
// (10 mantissa bits, cvt.rna), and the GEMM issues mma.sync.m16n8k8.tf32: 16 x 8 x 8 per
// instruction, half the k of the fp16 instruction, at half its rate. A 16-byte chunk is now
// 4 floats, a slice of 16 k is 64 bytes per row as before, so the swizzle, the cp.async
// pipeline and the tile shapes carry over; ldmatrix, made for 16-bit elements, loads 32-bit
// ones just as well for these operands: an 8 x 4 float block is an 8 x 8 block of 16-bit
// halves, and lane 4g + t receives row g, float t -- exactly a0..a3 (and b0, b1) of the tf32
// fragments (common/ptx.h). What tf32 costs: each product's operands keep 11 significant bits,
// so the result is good to about 1e-3 relative (the check's tf32 tolerance is 2e-3), where fp32
// arithmetic lands near 1e-7. cuDNN's "tf32" convolutions (PyTorch's allow_tf32) make the same
// trade.
//
// Launch: as step 20, with to_padded_nhwc_float / to_filter_runs_float and the GEMM
// conv_tf32_<tile> of alexnet_tc.LAYER_KERNELS["21"][layer];
// alexnet_tc.TILES[name].shared_bytes(4) of dynamic shared memory.
//
// Prediction: twice the fp16 step's GEMM time (half the tensor rate), plus the copies moving
// twice the bytes: about 2 ms for the five layers at N = 128, against cuDNN tf32 (channels-last)
// at about 1.45 ms; far faster than the fp32 FMA steps (step 17: 6.8 ms).
//
// Built on mma_swizzled.cuh: step 20's conv_mma, instantiated with T = float (a chunk of 4,
// mma_1688_tf32 instead of mma_16816) and float output. This file holds the float copies and
// the tile shapes.
#include "mma_swizzled.cuh"

extern "C" __global__ void to_padded_nhwc_float(const float* x, float* xt, int C, int H, int W, int Cp, int Hp,
                                                int Wp, int P)
{
    extern __shared__ __align__(16) float row_f[];
    to_padded_nhwc<float, true>(x, xt, C, H, W, Cp, Hp, Wp, P, row_f);
}

extern "C" __global__ void to_filter_runs_float(const float* w, float* wt, int M, int C, int R, int S, int Cp,
                                                int L, int Kp)
{
    to_filter_runs<float, true>(w, wt, M, C, R, S, Cp, L, Kp);
}

// Tile shapes: BM filters x BN pixels, warp tiles WM x WN, pipeline stages, BK floats.

// 128 x 128, warps of 64 x 32, 4 stages of 16 k: 8 warps
extern "C" __global__ void __launch_bounds__(256, 2)
conv_tf32_128x128(const float* xt, const float* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                  int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<float, float, 128, 128, 64, 32, 4, 16>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 96 x 128, warps of 48 x 32, 4 stages of 16 k: 8 warps: layer 1's 96 filters in one tile
extern "C" __global__ void __launch_bounds__(256, 2)
conv_tf32_96x128(const float* xt, const float* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                 int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<float, float, 96, 128, 48, 32, 4, 16>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 128, warps of 64 x 64, 4 stages of 16 k: 4 warps of 64 x 64
extern "C" __global__ void __launch_bounds__(128, 2)
conv_tf32_128x128_w4(const float* xt, const float* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                     int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<float, float, 128, 128, 64, 64, 4, 16>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 128 x 64, warps of 64 x 32, 4 stages of 16 k: 4 warps: twice the tiles
extern "C" __global__ void __launch_bounds__(128, 3)
conv_tf32_128x64(const float* xt, const float* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                 int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<float, float, 128, 64, 64, 32, 4, 16>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 64 x 128, warps of 32 x 64, 4 stages of 16 k: 4 warps
extern "C" __global__ void __launch_bounds__(128, 3)
conv_tf32_64x128(const float* xt, const float* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                 int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<float, float, 64, 128, 32, 64, 4, 16>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}
