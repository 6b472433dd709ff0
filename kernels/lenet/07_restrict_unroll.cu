// Step 7 -- __restrict__ pointers and unrolled loops.
//
// What changed from step 6: the channel count C and the filter size K are compile-time
// constants (the chapter compiles the file per layer with -DCONV_C=1 or 4), the K x K loops are
// fully unrolled, and the pointers are __restrict__ (x is never written through y).
//
// Why it should be faster: with the loops unrolled, every weight sits at a constant offset from
// the filter's first weight (m = blockIdx.y is the same for the whole block), so the compiler
// fetches the weights with uniform constant loads -- one ULDC instruction for the whole warp,
// for one weight (conv1) or a pair of weights (conv2, ULDC.64) -- instead of per-thread loads
// with their index arithmetic; every input's address is the window's corner plus a constant, so
// the index arithmetic leaves the loop; __restrict__ lets the compiler keep loads in flight
// across stores. What remains per multiply-add is one global load of x (LDG) and half or one
// uniform load: 1.5 load instructions per FFMA for conv2, 2 for conv1 (sm_90 SASS).
// Why it might not be: each input value is still loaded from memory once per output and filter.
// Prediction: about 2x faster than step 6 (half of step 6's instructions were index arithmetic
// and loop control).

#define TILE_WIDTH 16
#define KS 7
#ifndef CONV_C
#error "compile with -DCONV_C=<input channels>"
#endif

__constant__ float w_const[16 * 4 * KS * KS];

extern "C" __global__ void conv_restrict_unroll(float* __restrict__ y, const float* __restrict__ x, int N, int M,
                                                int H, int W)
{
    const int E = H - KS + 1, F = W - KS + 1;
    const int tiles_across = (F + TILE_WIDTH - 1) / TILE_WIDTH;
    const int n = blockIdx.x, m = blockIdx.y;
    const int e = (blockIdx.z / tiles_across) * TILE_WIDTH + threadIdx.y;
    const int f = (blockIdx.z % tiles_across) * TILE_WIDTH + threadIdx.x;
    if (n >= N || e >= E || f >= F) return;
    const float* corner = x + ((size_t)n * CONV_C * H + e) * W + f;
    const float* wm = w_const + m * CONV_C * KS * KS;
    float acc = 0.0f;
#pragma unroll
    for (int c = 0; c < CONV_C; ++c)
#pragma unroll
        for (int p = 0; p < KS; ++p)
#pragma unroll
            for (int q = 0; q < KS; ++q) acc += corner[(c * H + p) * W + q] * wm[(c * KS + p) * KS + q];
    y[((size_t)(n * M + m) * E + e) * F + f] = acc;
}
