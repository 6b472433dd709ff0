// The layout that steps 18-21 read, made by two small kernels at the start of every call
// (inside the timed region, as step 16's copies are).
//
// Input: a channels-last copy with its zero border written out,
//   xt[n][hp][wp][c], n < N, hp < Hp = H + 2P, wp < Wp, c < Cp,
// equal to x[n][c][hp - P][wp - P] inside the image and 0 in the border and for c >= C.
// Cp is C rounded up to a multiple of 8 (4 when C <= 4: layer 1's 3 channels).
//
// Filters: k is ordered (r, s, c), and for each filter row r the S * Cp values (s, c) are one
// "run" padded with zeros to L, a multiple of 8 halves: wt[m][r * L + s * Cp + c], zero for
// s >= S, c >= C and k >= R * L (up to the row pitch Kp).
//
// Why runs: for an output pixel whose window starts at (row0, col0) of the padded input, the
// S * Cp values of filter row r lie one after another in xt, from ((n*Hp + row0 + r)*Wp + col0)*Cp.
// So k-chunk q (8 consecutive k, 16 bytes) of a pixel is one 16-byte load at
//   pixel_base + (q / Lc) * Wp * Cp + 8 * (q % Lc),    Lc = L / 8,
// with no test for the image's border (it is written out) and none for the channel count.
// The host makes Wp wide enough that a run padded to L stays inside its row of xt, and even
// when Cp = 4 so that every chunk is 16-byte aligned.
#ifndef ALEXNET_NHWC_RUNS_H
#define ALEXNET_NHWC_RUNS_H
#include <cuda_fp16.h>
#include <common/ptx.h>

// x (N x C x H x W) -> xt (N x Hp x Wp x Cp). One block per padded row (n, hp): it reads
// the row's C x W input values (C runs of W consecutive elements) into shared memory, then
// writes the row of xt -- Wp * Cp consecutive elements -- as 16-byte stores, each gathering 16
// bytes of channels of one pixel from shared memory (zeros in the border and for c >= C).
// Grid (Hp, N); dynamic shared memory C * W elements (alexnet_tc.layout_shared_bytes).
// TF32: round each value to tf32 (for the tf32 step's operands).
template <class T, bool TF32 = false>
__device__ __forceinline__ T stored(T v)
{
    if constexpr (TF32) return __uint_as_float(tf32_bits(v));
    else return v;
}

template <class T, bool TF32 = false>
__device__ __forceinline__ void to_padded_nhwc(const T* __restrict__ x, T* __restrict__ xt, int C, int H,
                                               int W, int Cp, int Hp, int Wp, int P, T* row)
{
    constexpr int V = 16 / sizeof(T);                 // elements per 16-byte store
    const int n = blockIdx.y, hp = blockIdx.x, h = hp - P;
    const bool inside_rows = h >= 0 && h < H;
    if (inside_rows) {
        // 8 loads in flight per thread before the first store: the row is C runs of W elements
        // scattered over the planes, and one load at a time would wait out each one's latency.
        constexpr int BATCH = 8;
        const T* plane = x + ((size_t)n * C * H + h) * W;
        for (int i0 = threadIdx.x; i0 < C * W; i0 += BATCH * blockDim.x) {
            T v[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = i0 + u * blockDim.x;
                v[u] = i < C * W ? plane[(size_t)(i / W) * H * W + i % W] : T(0.0f);
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = i0 + u * blockDim.x;
                if (i < C * W) row[i] = v[u];
            }
        }
    }
    __syncthreads();
    uint4* out = reinterpret_cast<uint4*>(xt + ((size_t)n * Hp + hp) * Wp * Cp);
    for (int i = threadIdx.x; i < Wp * Cp / V; i += blockDim.x) {
        const int wp = i * V / Cp, c0 = i * V - wp * Cp, w = wp - P;
        __align__(16) T chunk[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {    // V divides Cp, or Cp = 4 halves and a chunk spans two pixels
            const int ww = Cp >= V ? w : (i * V + e) / Cp - P, cc = Cp >= V ? c0 + e : (i * V + e) % Cp;
            chunk[e] = (inside_rows && cc < C && ww >= 0 && ww < W) ? stored<T, TF32>(row[cc * W + ww]) : T(0.0f);
        }
        out[i] = *reinterpret_cast<const uint4*>(chunk);
    }
}

// w (M x C x R x S) -> wt (M x Kp): wt[m][r * L + s * Cp + c]. Grid ceil(M * Kp / 256), block 256.
// The filters are constants of the network: the host runs this once when it binds a layer's
// launch (as an inference engine lays out its weights at load time), not in every call.
template <class T, bool TF32 = false>
__device__ __forceinline__ void to_filter_runs(const T* __restrict__ w, T* __restrict__ wt, int M, int C, int R,
                                               int S, int Cp, int L, int Kp)
{
    const int total = M * Kp;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int m = i / Kp, k = i - m * Kp;
        const int r = k / L, rest = k - r * L;
        const int s = rest / Cp, c = rest - s * Cp;
        wt[i] = (r < R && s < S && c < C) ? stored<T, TF32>(w[(((size_t)m * C + c) * R + r) * S + s]) : T(0.0f);
    }
}

// Step 22's split copies: a float value v as the half pair hi = half(v), lo = half(v - hi);
// three channel blocks of Cp each. Input pixels hold [x_hi | x_lo | x_hi], filters
// [w_hi | w_hi | w_lo], so a dot product over the 3 Cp channels is
//   x_hi w_hi + x_lo w_hi + x_hi w_lo,
// x w to about 2^-22 (the x_lo w_lo term left out); see 22_split_fp16.cu.
__device__ __forceinline__ __half split_part(float v, int part)     // part 0: hi, 1: lo
{
    const __half hi = __float2half_rn(v);
    return part == 0 ? hi : __float2half_rn(v - __half2float(hi));
}

// x (float, N x C x H x W) -> xt (half, N x Hp x Wp x 3Cp). As to_padded_nhwc; block-channel b
// of pixel (channels b*Cp .. b*Cp + Cp - 1) holds x_hi, x_lo, x_hi for b = 0, 1, 2.
__device__ __forceinline__ void to_padded_nhwc_split3(const float* __restrict__ x, __half* __restrict__ xt, int C,
                                                      int H, int W, int Cp, int Hp, int Wp, int P, float* row)
{
    constexpr int V = 8;                      // halves per 16-byte store
    const int C3 = 3 * Cp;
    const int n = blockIdx.y, hp = blockIdx.x, h = hp - P;
    const bool inside_rows = h >= 0 && h < H;
    if (inside_rows) {
        constexpr int BATCH = 8;
        const float* plane = x + ((size_t)n * C * H + h) * W;
        for (int i0 = threadIdx.x; i0 < C * W; i0 += BATCH * blockDim.x) {
            float v[BATCH];
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = i0 + u * blockDim.x;
                v[u] = i < C * W ? plane[(size_t)(i / W) * H * W + i % W] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < BATCH; ++u) {
                const int i = i0 + u * blockDim.x;
                if (i < C * W) row[i] = v[u];
            }
        }
    }
    __syncthreads();
    uint4* out = reinterpret_cast<uint4*>(xt + ((size_t)n * Hp + hp) * Wp * C3);
    for (int i = threadIdx.x; i < Wp * C3 / V; i += blockDim.x) {
        __align__(16) __half chunk[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const int k = i * V + e, ww = k / C3 - P, c3 = k % C3, part = c3 / Cp, c = c3 % Cp;
            const bool real = inside_rows && c < C && ww >= 0 && ww < W;
            chunk[e] = real ? split_part(row[c * W + ww], part == 1) : __float2half_rn(0.0f);
        }
        out[i] = *reinterpret_cast<const uint4*>(chunk);
    }
}

// w (float, M x C x R x S) -> wt (half, M x Kp): runs of S x 3Cp, blocks [w_hi | w_hi | w_lo].
__device__ __forceinline__ void to_filter_runs_split3(const float* __restrict__ w, __half* __restrict__ wt, int M,
                                                      int C, int R, int S, int Cp, int L, int Kp)
{
    const int C3 = 3 * Cp, total = M * Kp;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int m = i / Kp, k = i - m * Kp;
        const int r = k / L, rest = k - r * L;
        const int s = rest / C3, c3 = rest - s * C3, part = c3 / Cp, c = c3 % Cp;
        wt[i] = (r < R && s < S && c < C) ? split_part(w[(((size_t)m * C + c) * R + r) * S + s], part == 2)
                                          : __float2half_rn(0.0f);
    }
}
#endif  // ALEXNET_NHWC_RUNS_H
