// Step 9 -- the input-channel sum by atomic additions.
//
// What changed from step 8: no shared memory and no barriers. Thread (tx, ty, c) adds its
// channel's partial sum straight into y with atomicAdd; y is zeroed before the launch.
//
// Why it could be faster than step 8: no barriers, no shared-memory rounds.
// Why it should be slower than step 7: C atomic read-modify-writes per output instead of one
// store, to the same addresses at almost the same time (they serialise in L2), plus the zeroing
// pass over y. The report measured conv2 1.7x slower than its baseline.
// Prediction: conv2 1.5-2x slower than step 7; conv1 (one channel) about step 7 plus the zeroing.
// The order of the C additions varies from run to run, so the last bits of y may too.

#define TILE_WIDTH 16
#define KS 7
#ifndef CONV_C
#error "compile with -DCONV_C=<input channels>"
#endif

__constant__ float w_const[16 * 4 * KS * KS];

extern "C" __global__ void conv_channel_atomics(float* __restrict__ y, const float* __restrict__ x, int N, int M,
                                                int H, int W)
{
    const int E = H - KS + 1, F = W - KS + 1;
    const int tiles_across = (F + TILE_WIDTH - 1) / TILE_WIDTH;
    const int n = blockIdx.x, m = blockIdx.y, c = threadIdx.z;
    const int e = (blockIdx.z / tiles_across) * TILE_WIDTH + threadIdx.y;
    const int f = (blockIdx.z % tiles_across) * TILE_WIDTH + threadIdx.x;
    if (n >= N || e >= E || f >= F) return;
    const float* corner = x + (((size_t)n * CONV_C + c) * H + e) * W + f;
    const float* wmc = w_const + (m * CONV_C + c) * KS * KS;
    float acc = 0.0f;
#pragma unroll
    for (int p = 0; p < KS; ++p)
#pragma unroll
        for (int q = 0; q < KS; ++q) acc += corner[p * W + q] * wmc[p * KS + q];
    atomicAdd(&y[((size_t)(n * M + m) * E + e) * F + f], acc);
}
