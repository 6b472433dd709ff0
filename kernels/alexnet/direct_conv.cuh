// The direct convolution's loops that steps 1-13 take over unchanged from the step that
// wrote them (layout NCHW, as in step 1: x is N x C x H x W, w is M x C x R x S). A step's own
// file holds what it changes; what it keeps comes from here, named for what it does.
#pragma once
#include <cuda_fp16.h>

// A stored value as the float it is summed in: steps 6 and 12 keep x and w as __half in memory.
__device__ __forceinline__ float as_float(float v) { return v; }
__device__ __forceinline__ float as_float(__half v) { return __half2float(v); }

// Step 1: acc += the products of output (e, f)'s R x S window of one channel, xc that
// channel's H x W plane and wc its R x S filter slice. Taps that fall in the zero padding
// are skipped, so each needs two tests. acc is whatever the step sums in: y itself (step 1),
// a register (step 2), shared memory (step 5).
template <typename T, typename Acc>
__device__ __forceinline__ void add_window(Acc& acc, const T* xc, const T* wc, int e, int f, int H, int W, int R,
                                           int S, int U, int P)
{
    for (int r = 0; r < R; ++r) {
        const int row = e * U - P + r;
        if (row < 0 || row >= H) continue;       // zero padding contributes nothing
        for (int s = 0; s < S; ++s) {
            const int col = f * U - P + s;
            if (col < 0 || col >= W) continue;
            acc += as_float(xc[row * W + col]) * as_float(wc[r * S + s]);
        }
    }
}

// Step 7: y[n, m, p] = sum over c of partial[n, c, m, p], p = e*F + f, summed in float.
// Consecutive threads take consecutive p, so each of the C reads is coalesced.
__device__ __forceinline__ void store_float(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_float(__half* p, float v) { *p = __float2half(v); }

template <typename T>
__device__ __forceinline__ void sum_channel_partials(const T* partial, T* y, int N, int C, int M, int EF)
{
    const size_t total = (size_t)N * M * EF;
    const size_t per_image = (size_t)M * EF;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / per_image;
        const size_t rest = i - n * per_image;
        const T* p = partial + n * C * per_image + rest;
        float acc = 0.0f;
        for (int c = 0; c < C; ++c) acc += as_float(p[(size_t)c * per_image]);
        store_float(&y[i], acc);
    }
}

// Step 9: the block's input patch for the output tile at (e0, f0) -- PH x PW values of
// channel plane xc, row pitch PW -- copied into shared memory by all threads, zeros where
// it covers the padding, so the inner loop needs no bounds tests.
template <typename T>
__device__ __forceinline__ void fill_patch(float* in_s, const T* xc, int e0, int f0, int PH, int PW, int H, int W,
                                           int U, int P, int tid, int threads)
{
    for (int i = tid; i < PH * PW; i += threads) {
        const int row = e0 * U - P + i / PW;
        const int col = f0 * U - P + i % PW;
        in_s[i] = (row >= 0 && row < H && col >= 0 && col < W) ? as_float(xc[row * W + col]) : 0.0f;
    }
}

// Step 11: the R x S filter slice wc copied into shared memory as R rows of S4 floats (S
// padded to whole float4s with zero weights), so each row is S4 / 4 aligned float4 loads.
template <typename T>
__device__ __forceinline__ void fill_weight_rows4(float* w_s, const T* wc, int R, int S, int S4, int tid, int threads)
{
    for (int i = tid; i < R * S4; i += threads) {
        const int s = i % S4;
        w_s[i] = s < S ? as_float(wc[(i / S4) * S + s]) : 0.0f;     // zero weights beyond S
    }
}

// Step 11: the partial sums of channel c = blockIdx.z for filter m = blockIdx.x, image n =
// blockIdx.y, over the output in tiles of blockDim: filter rows and input patch in shared
// memory (smem4, the kernel's dynamic shared memory), read as float4s. Step 12 runs it with
// T = __half (converted to float in the copies, the partials stored as __half).
template <typename T>
__device__ __forceinline__ void channel_partials4(const T* x, const T* w, T* partial, int N, int C, int H, int W,
                                                  int M, int R, int S, int U, int P, int E, int F, float4* smem4)
{
    const int S4 = (S + 3) & ~3;                // filter row padded to whole float4s
    const int PH = (blockDim.y - 1) * U + R;
    const int PW = ((blockDim.x - 1) * U + S4 + 3) & ~3;   // row pitch: whole float4s
    float* w_s = (float*)smem4;                 // w[m, c], R rows of S4 floats
    float* in_s = w_s + R * S4;                 // R*S4 is a multiple of 4: still aligned
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int c = blockIdx.z;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    const T* wc = w + ((size_t)m * C + c) * R * S;
    fill_weight_rows4(w_s, wc, R, S, S4, tid, threads);   // zero weights beyond S
    const T* xc = x + ((size_t)n * C + c) * H * W;
    T* out = partial + (((size_t)n * C + c) * M + m) * E * F;
    const bool aligned_input = (U % 4) == 0;   // each window starts on a float4 boundary
    for (int e0 = 0; e0 < E; e0 += blockDim.y) {
        for (int f0 = 0; f0 < F; f0 += blockDim.x) {
            __syncthreads();
            fill_patch(in_s, xc, e0, f0, PH, PW, H, W, U, P, tid, threads);
            __syncthreads();
            const int e = e0 + threadIdx.y;
            const int f = f0 + threadIdx.x;
            if (e < E && f < F) {
                const float* patch = in_s + threadIdx.y * U * PW + threadIdx.x * U;
                float acc = 0.0f;
                for (int r = 0; r < R; ++r) {
                    const float4* w4 = (const float4*)(w_s + r * S4);
                    const float* in_row = patch + r * PW;
                    for (int q = 0; q < S4 / 4; ++q) {
                        const float4 wv = w4[q];
                        float4 iv;
                        if (aligned_input) {
                            iv = ((const float4*)in_row)[q];
                        } else {
                            iv = make_float4(in_row[4 * q], in_row[4 * q + 1], in_row[4 * q + 2],
                                             in_row[4 * q + 3]);
                        }
                        acc += iv.x * wv.x + iv.y * wv.y + iv.z * wv.z + iv.w * wv.w;
                    }
                }
                if constexpr (sizeof(T) == 2) out[e * F + f] = __float2half(acc);
                else out[e * F + f] = acc;
            }
        }
    }
}
