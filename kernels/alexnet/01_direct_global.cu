// Step 1 -- direct convolution, one thread per output, summing in global memory.
//
// What changed: nothing yet. This is the report's first GPU version ("Mcpy"): the data is
// copied to the GPU with explicit copies (or left in managed memory; the chapter times both),
// and every multiply-add reads and writes the output element in global memory.
//
// Layout (every kernel of this chapter): NCHW. x is N x C x H x W, w is M x C x R x S, y is
// N x M x E x F, all row-major. U is the stride, P the zero padding on every side.
//
// Launch: grid (M, N), one block per (filter m, image n); block (BX, BY) with BX <= 32 and
// BY <= 32, e.g. 28 x 28 for layer 1's 55 x 55 outputs, 27 x 27 for layer 2, 13 x 13 for
// layers 3-5. The block sweeps its E x F output plane in tiles of BY x BX.
//
// Why it is slow: y is written through a pointer the compiler must assume can alias x and w,
// so every one of the C*R*S multiply-adds loads *out and stores it back: two extra global
// accesses per FMA. Prediction: two to three orders of magnitude above the FP32 floor
// (about 5.4 ms for all five layers at N = 128), i.e. several hundred ms at N = 128.
//
// From direct_conv.cuh: add_window, this step's loop over one channel's R x S window (written
// there because every later direct step sums the same window into its own accumulator).
#include "direct_conv.cuh"
extern "C" __global__ void conv_direct_global(const float* x, const float* w, float* y,
                                              int N, int C, int H, int W, int M, int R, int S,
                                              int U, int P, int E, int F)
{
    const int m = blockIdx.x;   // filter
    const int n = blockIdx.y;   // image
    // Neighbouring threads (threadIdx.x) take neighbouring outputs f, so a warp's accesses to
    // x and y fall on neighbouring addresses (coalesced). Step 10 shows the other mapping.
    for (int e = threadIdx.y; e < E; e += blockDim.y) {
        for (int f = threadIdx.x; f < F; f += blockDim.x) {
            float* out = y + ((size_t)n * M + m) * E * F + (size_t)e * F + f;
            *out = 0.0f;
            for (int c = 0; c < C; ++c) {
                const float* xc = x + ((size_t)n * C + c) * H * W;
                const float* wc = w + ((size_t)m * C + c) * R * S;
                add_window(*out, xc, wc, e, f, H, W, R, S, U, P);
            }
        }
    }
}
