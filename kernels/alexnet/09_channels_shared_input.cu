// Step 9 -- step 8 plus the input tile in shared memory.
//
// What changed from step 8: before computing a BY x BX tile of outputs, the block copies the
// input patch those outputs read -- (BY-1)*U + R rows by (BX-1)*U + S columns, zero-filled
// where the patch overhangs the padded image -- into shared memory, all threads together
// (the report's "Mk-sw-mt-si-c"). For layers 2-5 one tile is the whole output plane and the
// patch is the whole padded input plane (31 x 31 floats for layer 2, 15 x 15 for layers
// 3-5). Layer 1's 28 x 28 tile needs a 119 x 119 patch, 55 KB: more than the 48 KB a block
// gets by default, so the chapter opts in to more (cudaFuncAttributeMaxDynamicSharedMemorySize:
// an H100 allows up to 227 KB per block; the report's V100, compute capability 7.0, would have
// allowed 96 KB, but the report did not opt in and left layer 1's input in global memory).
//
// The bounds tests of the zero padding also leave the inner loop: they were done once, when
// the patch was filled.
//
// Launch: as step 8, with (R*S + PH*PW)*4 bytes of dynamic shared memory, PH = (BY-1)*U + R,
// PW = (BX-1)*U + S.
//
// Prediction: each input value is read from global memory once per block instead of up to
// R*S times, and the inner loop has no branches: 1.5-2x over step 8 on every layer.
//
// From direct_conv.cuh: fill_patch, this step's copy of the input patch (written there because
// steps 11-13 reuse it), and sum_channel_partials (step 7's reduction).
#include "direct_conv.cuh"
extern "C" __global__ void conv_channel_partials_si(const float* x, const float* w, float* partial,
                                                    int N, int C, int H, int W, int M, int R, int S,
                                                    int U, int P, int E, int F)
{
    extern __shared__ float smem[];
    const int PH = (blockDim.y - 1) * U + R;    // patch rows for one tile of outputs
    const int PW = (blockDim.x - 1) * U + S;    // patch columns
    float* w_s = smem;                          // w[m, c]: R*S floats
    float* in_s = smem + R * S;                 // the input patch: PH*PW floats
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int c = blockIdx.z;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    const float* wc = w + ((size_t)m * C + c) * R * S;
    for (int i = tid; i < R * S; i += threads) w_s[i] = wc[i];
    const float* xc = x + ((size_t)n * C + c) * H * W;
    float* out = partial + (((size_t)n * C + c) * M + m) * E * F;
    for (int e0 = 0; e0 < E; e0 += blockDim.y) {
        for (int f0 = 0; f0 < F; f0 += blockDim.x) {
            __syncthreads();                    // everyone is done with the previous patch
            fill_patch(in_s, xc, e0, f0, PH, PW, H, W, U, P, tid, threads);
            __syncthreads();
            const int e = e0 + threadIdx.y;
            const int f = f0 + threadIdx.x;
            if (e < E && f < F) {
                const float* patch = in_s + threadIdx.y * U * PW + threadIdx.x * U;
                float acc = 0.0f;
                for (int r = 0; r < R; ++r)
                    for (int s = 0; s < S; ++s) acc += patch[r * PW + s] * w_s[r * S + s];
                out[e * F + f] = acc;
            }
        }
    }
}

// As in step 7.
extern "C" __global__ void reduce_channels(const float* partial, float* y, int N, int C, int M, int EF)
{
    sum_channel_partials(partial, y, N, C, M, EF);
}
