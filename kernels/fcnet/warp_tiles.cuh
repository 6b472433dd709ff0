// Step 17's per-warp tiles at the two ends of the network, which step 18 keeps unchanged: the
// copies of TILE vectors of X into a warp's buffer by cp.async, and the stores of layer 3's
// outputs from the accumulators. A file that includes this defines IN (the features) first and
// includes common/ptx.h (cp_async16) before it.
#pragma once

// Step 17: issue the copies of the tile starting at vector `first` into buf (IN rows of pitch
// P = TILE + 4 floats). 16-byte chunks when N is a multiple of 4 (every row of X 16-byte
// aligned): cp.async, or 16 zero bytes past N; a chunk that straddles N, and every chunk when
// N is not a multiple of 4, is copied with plain loads.
template <int TILE>
__device__ __forceinline__ void fetch_tile(const float* __restrict__ X, int N, int first, float* buf, int lane)
{
    constexpr int P = TILE + 4, CPR = TILE / 4;      // chunks per row
    const bool aligned = N % 4 == 0;
    for (int i = lane; i < IN * CPR; i += 32) {
        const int f = i / CPR, v = first + 4 * (i % CPR);
        float* dst = buf + f * P + 4 * (i % CPR);
        const float* src = X + (size_t)f * N + v;
        if (aligned && (v + 3 < N || v >= N)) {
            cp_async16(dst, v < N ? src : X, v < N ? 16 : 0);
        } else {
            for (int e = 0; e < 4; ++e) dst[e] = v + e < N ? src[e] : 0.0f;
        }
    }
}

// Step 17: layer 3's outputs of the tile's m16 tile m from its accumulator `out`: columns
// 2t, 2t + 1 are outputs 2t, 2t + 1 (real for t < 2: the lanes t < 2 write), rows g and g + 8
// are vectors first + 16 m + g and that + 8 (written where < N). The vector is computed here,
// not passed: passed, its test against N moves in the PTX.
__device__ __forceinline__ void store_outputs(float* __restrict__ Y, const float out[4], int first, int m, int g,
                                              int t, int N)
{
    if (t < 2) {
        const int v0 = first + 16 * m + g, v1 = v0 + 8;
        if (v0 < N) { Y[(size_t)(2 * t) * N + v0] = out[0]; Y[(size_t)(2 * t + 1) * N + v0] = out[1]; }
        if (v1 < N) { Y[(size_t)(2 * t) * N + v1] = out[2]; Y[(size_t)(2 * t + 1) * N + v1] = out[3]; }
    }
}
