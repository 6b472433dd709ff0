// What steps 26 and 27 (kernels/alexnet/26_*, 27_*) share around the GEMM of
// kernels/common/hopper_conv.cuh: the channels-last copy of x made at the start of each call,
// and the epilogue that writes y. In a header because a kernel file that includes another
// kernel file cannot be built by the CPU backend.
#ifndef GPULAB_ALEXNET_WGMMA_STORE_CUH
#define GPULAB_ALEXNET_WGMMA_STORE_CUH
#include <common/hopper_conv.cuh>

// x (N x C x H x W) -> channels-last: put(n, p, c, v) for every image n, pixel p < HW and channel
// c < Cp (v = 0 for C <= c < Cp); to_nhwc_tiles below puts element (n HW + p) Cp + c of a dense
// copy, the flat copies of steps 26-27 element ((n Hp + p / W) Wp + p % W) Cp + c (flat tiles:
// kernels/common/hopper_conv.cuh). Each image's C x HW matrix is transposed through shared
// memory in tiles of 32 channels x 32 pixels, so that both the loads (along pixels) and the
// stores (along channels) are coalesced. Grid (ceil(HW / 32), ceil(Cp /
// 32), N), block (32, 8).
template <class T, class Put>
__device__ __forceinline__ void to_channels_last_tiles(const T* __restrict__ x, int C, int HW, int Cp, const Put& put)
{
    __shared__ T tile[32][33];                       // one column of padding: no bank conflicts on the way out
    const int n = blockIdx.z, p0 = blockIdx.x * 32, c0 = blockIdx.y * 32;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int c = c0 + threadIdx.y + 8 * i, p = p0 + threadIdx.x;
        tile[threadIdx.y + 8 * i][threadIdx.x] = c < C && p < HW ? x[((size_t)n * C + c) * HW + p] : T(0.0f);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int p = p0 + threadIdx.y + 8 * i, c = c0 + threadIdx.x;
        if (p < HW && c < Cp) put(n, p, c, tile[threadIdx.x][threadIdx.y + 8 * i]);
    }
}

// The dense copy: put(i, v) for element i = (n HW + p) Cp + c.
template <class T, class Put>
__device__ __forceinline__ void to_nhwc_tiles(const T* __restrict__ x, int C, int HW, int Cp, const Put& put)
{
    to_channels_last_tiles(x, C, HW, Cp, [&](int n, int p, int c, T v) { put(((size_t)n * HW + p) * Cp + c, v); });
}

// One output pixel's BN filters from a consumer thread's accumulators: filter m = m0 + 8 j + 2 q + odd
// (< M) of pixel 'out' (y at that image and pixel) is acc[4 j + 2 half_rows + odd], the wgmma
// accumulator layout; the filters are E F elements apart in y.
template <int BN, class T>
__device__ __forceinline__ void store_pixel_filters(T* out, const float* acc, int half_rows, int q, int m0, int M, int E,
                                                    int F)
{
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
            const int m = m0 + 8 * j + 2 * q + odd;
            if (m < M) out[(size_t)m * E * F] = T(acc[4 * j + 2 * half_rows + odd]);
        }
}

// y[n][m][e][f] (type T) for a consumer's 64 pixels x BN filters: accumulator row 16 w + g + 8
// (i / 2) is pixel p = 64 c + that row of the tile, at (e0 + p / TW, f0 + p % TW); guarded at
// the image's and the filters' edges.
template <int TW, int BN, class T>
struct StoreEpilogue {
    T* y;
    int M, E, F;

    __device__ __forceinline__ void store(const float* acc, int c, int n, int e0, int f0, int m0) const
    {
        const int t = threadIdx.x % 128, w = t / 32, g = (t % 32) / 4, q = t % 4;
#pragma unroll
        for (int half_rows = 0; half_rows < 2; ++half_rows) {
            const int p = 64 * c + 16 * w + g + 8 * half_rows, e = e0 + p / TW, f = f0 + p % TW;
            if (e >= E || f >= F) continue;
            store_pixel_filters<BN>(y + (size_t)n * M * E * F + (size_t)e * F + f, acc, half_rows, q, m0, M, E, F);
        }
    }
};

// The same for flat tiles (hopper_conv.cuh): accumulator row p of the tile is slot q = q0 + p of
// the flat copy, image q / (Hp Wp), row and column of that image's Hp x Wp slots; the slots on the
// zero rows and columns (e >= E or f >= F) and past the last image are not outputs.
template <int BN, class T>
struct FlatStoreEpilogue {
    T* y;
    int N, M, E, F, Hp, Wp;

    __device__ __forceinline__ void store_flat(const float* acc, int c, int q0, int m0) const
    {
        const int t = threadIdx.x % 128, w = t / 32, g = (t % 32) / 4, q = t % 4;
#pragma unroll
        for (int half_rows = 0; half_rows < 2; ++half_rows) {
            const int slot = q0 + 64 * c + 16 * w + g + 8 * half_rows, n = slot / (Hp * Wp),
                      e = slot % (Hp * Wp) / Wp, f = slot % Wp;
            if (n >= N || e >= E || f >= F) continue;
            store_pixel_filters<BN>(y + (size_t)n * M * E * F + (size_t)e * F + f, acc, half_rows, q, m0, M, E, F);
        }
    }
};
#endif  // GPULAB_ALEXNET_WGMMA_STORE_CUH
