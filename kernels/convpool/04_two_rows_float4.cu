// Step 4 -- two output rows per thread, and the staged rows read as float4.
//
// What changed from step 3: a strip is now two output rows (2 x TF outputs per thread, TF = 16),
// so the block stages 6 input rows instead of 5, and each input row a thread reads feeds both
// output rows: row i is tap r = i of output row 0 and tap r = i - 1 of output row 1 -- the
// report's unrolling over output rows. A thread reads a staged row as TF / 4 + 1 float4 (the
// report's vload4) instead of TF + 4 single floats, and keeps all 25 weights of (m, c) in
// registers for the whole channel.
//
// Why it should be faster: per channel, 6 rows x 5 float4 = 30 shared loads feed 800 FMAs
// (step 3: 100 loads per 400 FMAs), and the 25 weight loads are shared by twice the FMAs.
// Why it might not be: 32 sums + 25 weights + 20 inputs is ~85 registers per thread, so fewer
// warps fit on an SM (each of an H100 SM's four warp schedulers has 16,384 registers: at 85 per
// thread, 2,816 per warp, 5 warps each -- 2 blocks of 256 threads; at 80 or fewer, 3).
//
// Launch: grid = any number of blocks (the chapter: one per strip, N * E/2 * ceil(F / 16)),
// block = any number of threads (the chapter: 256); then relu_maxpool. Needs E even.
//
// Prediction: 1.5-2x faster than step 3.
#define RS 5            // filter height and width
#define TF 16           // outputs per thread along each of its two rows
#define CB 8            // channels staged per pass
#define ROWS (RS + 1)   // input rows behind two output rows
#define PITCH (((TF + RS - 1) + 3) / 4 * 4)   // a staged row, rounded up to whole float4

extern "C" __global__ void conv_two_rows_float4(const float* __restrict__ x, const float* __restrict__ wt,
                                                const float* __restrict__ b, float* __restrict__ yconv,
                                                int N, int C, int Hp, int Wp, int M, int E, int F)
{
    __shared__ __align__(16) float tile[CB][ROWS][PITCH];
    const int chunks = (F + TF - 1) / TF;
    const int strips = N * (E / 2) * chunks;
    for (int t = blockIdx.x; t < strips; t += gridDim.x) {
        const int chunk = t % chunks, np = t / chunks;
        const int e0 = 2 * (np % (E / 2)), n = np / (E / 2);
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
                        ? x[((size_t)(n * C + c) * Hp + e0 + r) * Wp + f0 + col] : 0.0f;
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
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float* out = yconv + ((size_t)(n * M + m) * E + e0 + h) * F;
#pragma unroll
                    for (int j = 0; j < TF; ++j)
                        if (f0 + j < F) out[f0 + j] = acc[h][j] + b[m];
                }
            }
        }
    }
}
