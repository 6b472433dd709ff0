// Steps 9-11's epilogue: bias, ReLU and the 2 x 2 max-pool of a consumer's 64 pixels x BN filters
// in registers, written pooled (kernels/convpool/09_wgmma_tma.cu explains the layout it relies on).
// A header because a kernel file that includes another kernel file cannot be built by the CPU
// backend (it rewrites the dynamic shared-memory declaration of the file it compiles only).
// The float steps' accumulators are laid out as step 9's (wgmma's m64n256 f32 layout whatever the
// operands' type), so the same code applies unchanged.
#ifndef GPULAB_CONVPOOL_WGMMA_POOL_CUH
#define GPULAB_CONVPOOL_WGMMA_POOL_CUH
#include <common/hopper_conv.cuh>

// BN: the filters of a consumer's tile (256 for step 10, 128 for step 11): BN / 8 groups of 4
// accumulators per thread.
template <int BN>
struct WgmmaPoolEpilogue {
    const float* b;
    float* y;
    int M, PE, PF;

    __device__ __forceinline__ void store(const float* acc, int c, int n, int e0, int f0, int m0) const
    {
        const int t = threadIdx.x % 128, w = t / 32, g = (t % 32) / 4, q = t % 4;
        const int pe = (e0 + 8 * c + 2 * w) / 2, pf = (f0 + g) / 2;   // this window's pooled pixel
        const bool inside = pe < PE && pf < PF;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            // rows 2 w and 2 w + 1 of the window: accumulators e and e + 2 of the same thread
            float v0 = fmaxf(acc[4 * j], acc[4 * j + 2]), v1 = fmaxf(acc[4 * j + 1], acc[4 * j + 3]);
            // columns g and g ^ 1: lanes 4 apart (every lane takes part: no divergence before)
            v0 = fmaxf(v0, __shfl_xor_sync(0xffffffffu, v0, 4));
            v1 = fmaxf(v1, __shfl_xor_sync(0xffffffffu, v1, 4));
            // both lanes of the pair now hold both filters' maxima: each writes one
            const int m = m0 + 8 * j + 2 * q + (g & 1);
            if (inside && m < M)
                y[(((size_t)n * M + m) * PE + pe) * PF + pf] = fmaxf((g & 1 ? v1 : v0) + b[m], 0.0f);
        }
    }
};
#endif  // GPULAB_CONVPOOL_WGMMA_POOL_CUH
