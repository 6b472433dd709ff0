// Step 28 -- layer 1's copy to channels-last in one pass of 16-byte stores.
//
// What changed from step 25: only the copy of x (NCHW, as every step is given it) into the
// padded channels-last layout that layer 1's GEMM reads, made at the start of each call. The
// GEMMs are unchanged: step 20's on layer 1 (kernels/alexnet/20_swizzle_tiles.cu), step 25's on
// layers 2-5 (kernels/alexnet/25_wgmma_tma.cu), whose copies stay step 25's as well.
//
// Why: at N = 128 the recorded step 25 spends about 0.10 ms of layer 1's 0.31 ms outside the
// GEMM (its time given NCHW x less its time given channels-last x), a tenth of the five layers'
// 1.03 ms. That copy (nhwc_runs.h's to_padded_nhwc, one block of 256 threads per padded row)
// moves 40 MB in and 53 MB out (3 channels padded to 4), 93 MB, at about 1 TB/s, where a
// plain device copy runs at about 2.9 TB/s on the H100 (the chapter's copy_methods experiment).
// Its blocks are tiny: 3 x 227 two-byte loads, a barrier, then 114 sixteen-byte stores with 142
// of the 256 threads idle; eight such blocks per SM keep too few bytes in flight to cover the
// memory's latency.
//
// Here every thread writes one 16-byte chunk of xt, gathered straight from x with no shared
// memory and no barrier: 4 channels of 2 pixels (Cp = 4: layer 1's 3 channels and a zero).
// Consecutive threads take consecutive pixel pairs, so each of a thread's 2-byte loads is one of
// 32 in a row of its warp (128 bytes of one channel plane), and the loads of a thread are
// independent of each other: all 6 in flight before the store.
//
// Prediction: the copy near a plain copy's 2.9 TB/s, 93 MB in about 0.035 ms instead of 0.10:
// layer 1 about 0.065 ms faster (about 1.25x), the five layers in about 1.028 - 0.065 = 0.96 ms
// at N = 128 on the H100, about 0.91x cuDNN's fastest fp16 path (1.06 ms), under issue 26's
// 0.95x. Layers 2-5 unchanged.
//
// The same kernel writes the unpadded 8-channel chunks of layers 2-5 (Cp a multiple of 8: 8
// channels of one pixel per thread). Measured on the H100 in a development run, it was slower
// there than step 25's transpose through shared memory (about 0.03 ms per layer against 0.023):
// its 16-byte stores at a stride of Cp x 2 bytes (192 bytes on layer 2) write each 32-byte
// sector in halves, from different warps. So layers 2-5 keep step 25's copy.
//
// Launch: to_nhwc_chunks_half, grid ceil(N * Hp * Wp * Cp / 8 / 256), block 256, then step 20's
// GEMM as step 20 launches it (alexnet.tc).
#include <cuda_fp16.h>

#define CHUNK 8                     // halves per 16-byte store

// One thread's chunk: PIX pixels (1 or 2) of CHUNK / PIX channels each, from channel c0 on,
// pixels pix .. pix + PIX - 1 of the padded image n (Hp x Wp, border P).
template <int PIX>
__device__ __forceinline__ void copy_chunk(const __half* __restrict__ x, __half* __restrict__ xt, int n, int c0,
                                           int pix, int C, int H, int W, int Cp, int Hp, int Wp, int P)
{
    constexpr int CH = CHUNK / PIX;
    __align__(16) __half chunk[CHUNK];
#pragma unroll
    for (int u = 0; u < PIX; ++u) {
        const int h = (pix + u) / Wp - P, w = (pix + u) % Wp - P;
        const bool inside = h >= 0 && h < H && w >= 0 && w < W;
        const size_t at = inside ? (((size_t)n * C + c0) * H + h) * W + w : 0;   // no address outside x
#pragma unroll
        for (int e = 0; e < CH; ++e)
            chunk[u * CH + e] = inside && c0 + e < C ? x[at + (size_t)e * H * W] : __float2half(0.0f);
    }
    *reinterpret_cast<uint4*>(xt + ((size_t)n * Hp * Wp + pix) * Cp + c0) = *reinterpret_cast<const uint4*>(chunk);
}

// x (N x C x H x W) -> xt (N x Hp x Wp x Cp): xt[n][hp][wp][c] = x[n][c][hp - P][wp - P] inside
// the image, 0 in the border and for C <= c < Cp. Cp is a multiple of 8, or 4 with Hp * Wp even
// (so that a chunk's two pixels are whole and 16-byte aligned). Thread i writes chunk q =
// i % run of channel group g = i / run % groups of image n = i / (run * groups), run = the
// chunks of one group in one image. Grid ceil(N * groups * run / 256), block 256.
extern "C" __global__ void to_nhwc_chunks_half(const __half* __restrict__ x, __half* __restrict__ xt, int N, int C,
                                               int H, int W, int Cp, int Hp, int Wp, int P)
{
    const int pix_per_chunk = Cp >= CHUNK ? 1 : 2, groups = Cp >= CHUNK ? Cp / CHUNK : 1;
    const int run = Hp * Wp / pix_per_chunk;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * groups * run) return;
    const int q = i % run, g = i / run % groups, n = i / run / groups;
    if (Cp >= CHUNK) copy_chunk<1>(x, xt, n, g * CHUNK, q, C, H, W, Cp, Hp, Wp, P);
    else copy_chunk<2>(x, xt, n, 0, 2 * q, C, H, W, Cp, Hp, Wp, P);
}
