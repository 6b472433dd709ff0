// Step 22 -- float32 accuracy from the fp16 tensor cores: every product split in three.
//
// What changed from step 20: the numbers the tensor cores see. x and w are float (as for the
// fp32 steps and cuDNN's fp32 convolution, which this step competes with). Each value is
// written as two halves, v = hi + lo with hi = half(v) and lo = half(v - hi): hi holds its 11
// leading bits, lo the next 11, so hi + lo is v to about 2^-22. The copies put three channel
// blocks in every pixel and every filter position,
//     x: [x_hi | x_lo | x_hi]      w: [w_hi | w_hi | w_lo],
// and step 20's GEMM, with a float output and one change in how it sums, runs over the
// tripled channels
//     x_hi w_hi + x_lo w_hi + x_hi w_lo  =  x w - x_lo w_lo,
// each product exact in the tensor cores (11 x 11 bits) and summed in float. The dropped term
// is about 2^-22 of x w: float32-level accuracy, checked against float64 at the fp32
// tolerance. The change in the sum: the tensor cores add each product into the accumulator
// rounding toward zero, a bias that over K = 3 x 3456 terms (layer 4) reached 1.2e-5 on the
// H100 -- over the tolerance. So each slice of 64 k is summed from zero in a second set of
// registers and added to the running sums by ordinary float adds, which round to nearest: the
// biased roundings now act on sums 54 times smaller. It costs registers (a warp tile of 64 x 32,
// not step 20's 64 x 64, and one block of 8 warps per SM). (Ootomo and Yokota, 2022, showed the idea; they scale lo by 2^11 to keep it from
// falling into half's subnormal range, which matters for inputs far smaller than these: here x
// is in [0, 1) and |w| about 0.03, so a lo below 6e-5 -- half's smallest normal -- loses only
// bits that are below float's rounding of the product anyway.)
//
// Cost: three times the tensor-core work of step 20 (K grows 3x), and a 3x larger channels-last
// copy (6 bytes per input element instead of 2). The tensor cores' fp16 rate is about 15 times
// the FP32 FMA rate, so three fp16 products still cost a fifth of one float FMA product.
//
// Launch: as step 20 (to_filter_runs_split once per layer; to_padded_nhwc_split and the GEMM
// every call), the GEMM conv_split_<tile> of alexnet_tc.LAYER_KERNELS["22"][layer]; Cp passed to
// the copies is one block's channel count, and the GEMM sees 3 Cp channels per pixel.
//
// Prediction: about 3x step 20's GEMM time plus larger copies: ~3.3-3.6 ms for the five layers
// at N = 128, about twice as fast as step 17 (6.8 ms, FMA units), near cuDNN's fp32 (Winograd
// and FFT algorithms, 3.2 ms). Error against float64 ~1e-6.
//
// Built on mma_swizzled.cuh: step 20's conv_mma with float output and SPLIT_SUMS = true, the
// per-slice sums (the part marked "Step 22" there). This file holds the splitting copies
// (nhwc_runs.h) and the tile shapes.
#include "mma_swizzled.cuh"

extern "C" __global__ void to_padded_nhwc_split(const float* x, __half* xt, int C, int H, int W, int Cp, int Hp,
                                                int Wp, int P)
{
    extern __shared__ __align__(16) float row_s[];
    to_padded_nhwc_split3(x, xt, C, H, W, Cp, Hp, Wp, P, row_s);
}

extern "C" __global__ void to_filter_runs_split(const float* w, __half* wt, int M, int C, int R, int S, int Cp,
                                                int L, int Kp)
{
    to_filter_runs_split3(w, wt, M, C, R, S, Cp, L, Kp);
}

// Tile shapes: BM filters x BN pixels, warp tiles WM x WN, pipeline stages, BK halves. Warp tiles
// of 64 x 32 at most: each thread holds its slice's sums beside the running ones.

// 128 x 128, warps of 64 x 32, 3 stages of 64 k: 8 warps of 64 x 32, slices of 64 k
extern "C" __global__ void __launch_bounds__(256, 1)
conv_split_128x128_k64(const __half* xt, const __half* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                       int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, float, 128, 128, 64, 32, 3, 64, true>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}

// 96 x 128, warps of 48 x 32, 3 stages of 64 k: 8 warps, slices of 64 k: layer 1's 96 filters
extern "C" __global__ void __launch_bounds__(256, 1)
conv_split_96x128_k64(const __half* xt, const __half* wt, float* y, int N, int M, int Kp, int Q, int Lc, int row_pitch,
                      int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<__half, float, 96, 128, 48, 32, 3, 64, true>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}
