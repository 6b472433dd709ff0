// Exercise 3 -- step 7 with ReLU and the 2 x 2 max-pool in its epilogue.
//
// Step 7 writes every conv output y[n, m, e, f] and a second kernel (relu_pool.cu) reads them
// back to keep the largest of each 2 x 2 window, after a ReLU. Fuse the two: here a thread
// owns one POOLED output p[n, m, i, j] (the launch is step 7's, with the tiles counted over the
// pooled plane: grid (N, M, ceil(P / 16)^2), block 16 x 16). It computes the four convolution
// outputs of its window -- rows 2i, 2i + 1, columns 2j, 2j + 1 -- from x and the weights in
// constant memory, and writes relu(max of the four) once. Nothing else is written.
//
// Your prediction: how many bytes does the layer write now, compared with step 7 + relu_pool?
// (Exercise 3b, in the notebook, checks it.)

#define TILE_WIDTH 16
#define KS 7
#ifndef CONV_C
#error "compile with -DCONV_C=<input channels>"
#endif

__constant__ float w_const[16 * 4 * KS * KS];

extern "C" __global__ void conv_relu_pool_direct(float* __restrict__ p, const float* __restrict__ x, int N, int M,
                                                 int H, int W)
{
    const int E = H - KS + 1, P = E / 2;
    const int tiles_across = (P + TILE_WIDTH - 1) / TILE_WIDTH;
    const int n = blockIdx.x, m = blockIdx.y;
    const int i = (blockIdx.z / tiles_across) * TILE_WIDTH + threadIdx.y;     // pooled row
    const int j = (blockIdx.z % tiles_across) * TILE_WIDTH + threadIdx.x;     // pooled column
    if (n >= N || i >= P || j >= P) return;
    const float* wm = w_const + m * CONV_C * KS * KS;
    // BEGIN SOLUTION
    float best = -3.402823466e38f;              // -FLT_MAX: any sum is larger
    for (int dy = 0; dy < 2; ++dy)
        for (int dx = 0; dx < 2; ++dx) {
            const float* corner = x + ((size_t)n * CONV_C * H + 2 * i + dy) * W + 2 * j + dx;
            float acc = 0.0f;
#pragma unroll
            for (int c = 0; c < CONV_C; ++c)
#pragma unroll
                for (int r = 0; r < KS; ++r)
#pragma unroll
                    for (int s = 0; s < KS; ++s) acc += corner[(c * H + r) * W + s] * wm[(c * KS + r) * KS + s];
            best = fmaxf(best, acc);
        }
    p[(((size_t)n * M + m) * P + i) * P + j] = fmaxf(best, 0.0f);
    // END SOLUTION
}
