// Step 10 -- the other thread mapping for layer 1: each thread takes adjacent outputs.
//
// What changed from step 2: only which outputs a thread computes. When the output plane is
// larger than the block (layer 1: 55 x 55 outputs on a 28 x 28 block), steps 1-9 let thread
// tx take columns tx, tx + 28 (neighbouring threads, neighbouring outputs). Here thread tx
// takes columns 2*tx and 2*tx + 1 (the report's Fig 10), and likewise for rows. For layers
// 2-5 the block covers the plane and the two mappings are the same kernel.
//
// Launch: as step 2.
//
// Why it should be slower on layer 1: a warp's 32 threads now read x at addresses 2*U = 8
// floats apart instead of U = 4, so each warp-wide load touches twice as many 32-byte
// sectors, and writes y with a stride of 2. Prediction: layer 1 about 1.3-1.7x slower than
// step 2 (the report measured 1.7x on a V100); layers 2-5 unchanged.
//
// From direct_conv.cuh: add_window, step 1's loop over the window.
#include "direct_conv.cuh"
extern "C" __global__ void conv_registers_noncoalesced(const float* x, const float* w, float* y,
                                                       int N, int C, int H, int W, int M, int R,
                                                       int S, int U, int P, int E, int F)
{
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int per_x = (F + blockDim.x - 1) / blockDim.x;    // outputs per thread along f
    const int per_y = (E + blockDim.y - 1) / blockDim.y;    // and along e
    for (int i = 0; i < per_y; ++i) {
        const int e = threadIdx.y * per_y + i;
        if (e >= E) break;
        for (int j = 0; j < per_x; ++j) {
            const int f = threadIdx.x * per_x + j;
            if (f >= F) break;
            float acc = 0.0f;
            for (int c = 0; c < C; ++c) {
                const float* xc = x + ((size_t)n * C + c) * H * W;
                const float* wc = w + ((size_t)m * C + c) * R * S;
                add_window(acc, xc, wc, e, f, H, W, R, S, U, P);
            }
            y[((size_t)n * M + m) * E * F + (size_t)e * F + f] = acc;
        }
    }
}
