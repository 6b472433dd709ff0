// Step 5 -- ReLU and the 2 x 2 max-pool fused into the convolution: the pre-pool tensor is
// never written.
//
// What changed from step 4: the end. A thread's two rows of 2Q sums are exactly Q whole pooling
// windows, so instead of writing 4Q values of yconv it adds the bias to the largest of each
// window, clips at zero, and writes Q values of y. relu_maxpool.cu is gone, and with it the
// N x 256 x 224 x 224 float tensor (51.4 MB per image) written by the convolution and read back
// by the pool. (ReLU and max commute -- relu(max(a, b)) = max(relu(a), relu(b)) -- so the
// bias and the ReLU are applied once per window, not four times.)
//
// Q, the pooled outputs per thread along the row, is a compile-time constant (-DQ=...; 8 by
// default, the 16 sums per row of step 4): the chapter's launch-shape sweep compiles this file
// for Q = 1 ... 16 and runs each over a grid of blocks x threads per block.
//
// Why it should be faster: 103 MB less device-memory traffic per image (~0.04 ms at 2.9 TB/s)
// and one launch instead of two. At batch 1 that is ~1% of step 4's time: the fusion matters
// for memory, not time, until the convolution itself is fast.
//
// Launch: grid = any number of blocks (the chapter: one per strip, N * E/2 * ceil(PF / Q)),
// block = any number of threads (the chapter: 256). Needs E and F even.
//
// Prediction: step 4's time minus ~0.05 ms at batch 1.
#define RS 5            // filter height and width
#ifndef Q
#define Q 8             // pooled outputs per thread along the row
#endif
#define TF (2 * Q)      // convolution outputs per thread along each of its two rows
#define CB 8            // channels staged per pass
#define ROWS (RS + 1)   // input rows behind two output rows
#define PITCH (((TF + RS - 1) + 3) / 4 * 4)   // a staged row, rounded up to whole float4

__device__ __forceinline__ float max_nan(float a, float b) { return (a > b || a != a) ? a : b; }

extern "C" __global__ void conv_relu_pool_fused(const float* __restrict__ x, const float* __restrict__ wt,
                                                const float* __restrict__ b, float* __restrict__ y,
                                                int N, int C, int Hp, int Wp, int M, int E, int F)
{
    __shared__ __align__(16) float tile[CB][ROWS][PITCH];
    const int PE = E / 2, PF = F / 2;
    const int chunks = (PF + Q - 1) / Q;
    const int strips = N * PE * chunks;
    for (int t = blockIdx.x; t < strips; t += gridDim.x) {
        const int chunk = t % chunks, np = t / chunks;
        const int pe = np % PE, n = np / PE;
        const int f0 = chunk * TF;
        for (int m0 = 0; m0 < M; m0 += blockDim.x) {
            const int m = m0 + threadIdx.x;
            float acc[2][TF];
#pragma unroll
            for (int j = 0; j < TF; ++j) acc[0][j] = acc[1][j] = 0.0f;
            for (int c0 = 0; c0 < C; c0 += CB) {
                __syncthreads();
                for (int i = threadIdx.x; i < CB * ROWS * PITCH; i += blockDim.x) {
                    const int col = i % PITCH, rc = i / PITCH;
                    const int r = rc % ROWS, c = c0 + rc / ROWS;
                    tile[rc / ROWS][r][col] = (c < C && f0 + col < Wp)
                        ? x[((size_t)(n * C + c) * Hp + 2 * pe + r) * Wp + f0 + col] : 0.0f;
                }
                __syncthreads();
                if (m < M) {
                    const int cn = min(CB, C - c0);
                    for (int cc = 0; cc < cn; ++cc) {
                        float wr[RS * RS];
#pragma unroll
                        for (int k = 0; k < RS * RS; ++k) wr[k] = wt[((size_t)(c0 + cc) * RS * RS + k) * M + m];
#pragma unroll
                        for (int i = 0; i < ROWS; ++i) {
                            float in[PITCH];
#pragma unroll
                            for (int q = 0; q < PITCH / 4; ++q) {
                                const float4 v = *(const float4*)&tile[cc][i][4 * q];
                                in[4 * q] = v.x; in[4 * q + 1] = v.y; in[4 * q + 2] = v.z; in[4 * q + 3] = v.w;
                            }
#pragma unroll
                            for (int s = 0; s < RS; ++s)
#pragma unroll
                                for (int j = 0; j < TF; ++j) {
                                    if (i < RS) acc[0][j] += wr[i * RS + s] * in[j + s];
                                    if (i > 0) acc[1][j] += wr[(i - 1) * RS + s] * in[j + s];
                                }
                        }
                    }
                }
            }
            if (m < M) {
                float* out = y + ((size_t)(n * M + m) * PE + pe) * PF;
                const int pf0 = chunk * Q;
#pragma unroll
                for (int q = 0; q < Q; ++q) {
                    const float v = max_nan(max_nan(acc[0][2 * q], acc[0][2 * q + 1]),
                                            max_nan(acc[1][2 * q], acc[1][2 * q + 1])) + b[m];
                    if (pf0 + q < PF) out[pf0 + q] = v < 0.0f ? 0.0f : v;
                }
            }
        }
    }
}
