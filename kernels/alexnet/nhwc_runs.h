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

// x (N x C x H x W) -> xt (N x Hp x Wp x Cp). One block per padded row (n, hp): it reads
// the row's C x W input values (C runs of W consecutive elements) into shared memory, then
// writes the row of xt -- Wp * Cp consecutive elements -- as 16-byte stores, each gathering 16
// bytes of channels of one pixel from shared memory (zeros in the border and for c >= C).
// Grid (Hp, N); dynamic shared memory C * W elements (alexnet_tc.layout_shared_bytes).
template <class T>
__device__ __forceinline__ void to_padded_nhwc(const T* __restrict__ x, T* __restrict__ xt, int C, int H,
                                               int W, int Cp, int Hp, int Wp, int P, T* row)
{
    constexpr int V = 16 / sizeof(T);                 // elements per 16-byte store
    const int n = blockIdx.y, hp = blockIdx.x, h = hp - P;
    const bool inside_rows = h >= 0 && h < H;
    if (inside_rows)
        for (int i = threadIdx.x; i < C * W; i += blockDim.x)
            row[i] = x[(((size_t)n * C + i / W) * H + h) * W + i % W];
    __syncthreads();
    uint4* out = reinterpret_cast<uint4*>(xt + ((size_t)n * Hp + hp) * Wp * Cp);
    for (int i = threadIdx.x; i < Wp * Cp / V; i += blockDim.x) {
        const int wp = i * V / Cp, c0 = i * V - wp * Cp, w = wp - P;
        __align__(16) T chunk[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {    // V divides Cp, or Cp = 4 halves and a chunk spans two pixels
            const int ww = Cp >= V ? w : (i * V + e) / Cp - P, cc = Cp >= V ? c0 + e : (i * V + e) % Cp;
            chunk[e] = (inside_rows && cc < C && ww >= 0 && ww < W) ? row[cc * W + ww] : T(0.0f);
        }
        out[i] = *reinterpret_cast<const uint4*>(chunk);
    }
}

// w (M x C x R x S) -> wt (M x Kp): wt[m][r * L + s * Cp + c]. Grid ceil(M * Kp / 256), block 256.
// The filters are constants of the network: the host runs this once when it binds a layer's
// launch (as an inference engine lays out its weights at load time), not in every call.
template <class T>
__device__ __forceinline__ void to_filter_runs(const T* __restrict__ w, T* __restrict__ wt, int M, int C, int R,
                                               int S, int Cp, int L, int Kp)
{
    const int total = M * Kp;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int m = i / Kp, k = i - m * Kp;
        const int r = k / L, rest = k - r * L;
        const int s = rest / Cp, c = rest - s * Cp;
        wt[i] = (r < R && s < S && c < C) ? w[(((size_t)m * C + c) * R + r) * S + s] : T(0.0f);
    }
}
#endif  // ALEXNET_NHWC_RUNS_H
