// Step 6 -- half precision storage (x, w and y in 16-bit floats), sums in float.
//
// What changed from step 2: the arrays hold __half values, so every load moves 2 bytes
// instead of 4; each product is converted to float and summed in a float register, and the
// output is rounded to half once. (The report applied half precision to its step-1 kernel;
// we apply it to step 2, because summing thousands of products in a half would lose most
// of their digits: a half has an 11-bit significand.)
//
// Launch: as step 2.
//
// Why it should be (a little) faster: half the bytes per load, so the L1 and L2 traffic
// halves; but the kernel is bound by the number of load instructions, which does not change,
// and each value now needs a conversion. Prediction: within 20% of step 2, faster on the
// layers whose inputs miss L1 most (layer 1, stride 4).
//
// From direct_conv.cuh: add_window, step 1's loop over the window; as_float converts each
// __half value to float before the multiply-add.
#include <cuda_fp16.h>
#include "direct_conv.cuh"

extern "C" __global__ void conv_half(const __half* x, const __half* w, __half* y,
                                     int N, int C, int H, int W, int M, int R, int S,
                                     int U, int P, int E, int F)
{
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    for (int e = threadIdx.y; e < E; e += blockDim.y) {
        for (int f = threadIdx.x; f < F; f += blockDim.x) {
            float acc = 0.0f;
            for (int c = 0; c < C; ++c) {
                const __half* xc = x + ((size_t)n * C + c) * H * W;
                const __half* wc = w + ((size_t)m * C + c) * R * S;
                add_window(acc, xc, wc, e, f, H, W, R, S, U, P);
            }
            y[((size_t)n * M + m) * E * F + (size_t)e * F + f] = __float2half(acc);
        }
    }
}
