// Steps 10-11's epilogue: step 9's PoolEpilogue (kernels/convpool/09_wgmma_tma.cu explains it),
// here in a header because a kernel file that includes another kernel file cannot be built by the
// CPU backend (it rewrites the dynamic shared-memory declaration of the file it compiles only).
// The float steps' accumulators are laid out as step 9's (wgmma's m64n256 f32 layout whatever the
// operands' type), so the same bias, ReLU and 2 x 2 max-pool in registers apply unchanged.
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
            // the window's two rows: accumulators e and e + 2 of one thread; its two columns: lanes 4 apart
            float v0 = fmaxf(acc[4 * j], acc[4 * j + 2]), v1 = fmaxf(acc[4 * j + 1], acc[4 * j + 3]);
            v0 = fmaxf(v0, __shfl_xor_sync(0xffffffffu, v0, 4));
            v1 = fmaxf(v1, __shfl_xor_sync(0xffffffffu, v1, 4));
            const int m = m0 + 8 * j + 2 * q + (g & 1);
            if (inside && m < M)
                y[(((size_t)n * M + m) * PE + pe) * PF + pf] = fmaxf((g & 1 ? v1 : v0) + b[m], 0.0f);
        }
    }
};
#endif  // GPULAB_CONVPOOL_WGMMA_POOL_CUH
