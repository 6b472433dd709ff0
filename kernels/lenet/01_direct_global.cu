// Step 1 -- direct convolution in global memory: one thread per output pixel.
//
// The report's baseline. Block (n, m, tile): image n, filter m, and one 16 x 16 tile of the
// E x F output plane; thread (ty, tx) of the tile computes y[n, m, e, f] as the sum over the
// C input channels and the K x K window of x times w, reading both from global memory, and
// writes it once. Nothing is shared: a thread reads its C*K*K inputs and C*K*K weights itself.
// ReLU and the 2 x 2 max-pool run after it, as a separate kernel (relu_pool.cu).
//
// Why it could be fast enough: the 16 threads of a half-warp read consecutive x (coalesced),
// and every thread of a block reads the same weight at the same time (one request, broadcast).
// Why it is slow: every input value is read K*K*M times (49 x 16 = 784 times for conv2) through
// the L1 cache, and each multiply-add costs two loads and the index arithmetic around them.
// Prediction (batch 10,000 on the H100): a few ms per layer, near the report's first row
// divided by the H100's ~5x more FP32 throughput than the report's GPU: conv1 ~3 ms,
// conv2 ~10 ms.

#define TILE_WIDTH 16      // 16 x 16 = 256 threads: 8 warps, and 80 / 16 = 5 tiles across conv1

extern "C" __global__ void conv_direct_global(float* y, const float* x, const float* w, int N, int M,
                                              int C, int H, int W, int K)
{
    const int E = H - K + 1, F = W - K + 1;
    const int tiles_across = (F + TILE_WIDTH - 1) / TILE_WIDTH;
    const int n = blockIdx.x, m = blockIdx.y;
    const int e = (blockIdx.z / tiles_across) * TILE_WIDTH + threadIdx.y;
    const int f = (blockIdx.z % tiles_across) * TILE_WIDTH + threadIdx.x;
    if (n >= N || e >= E || f >= F) return;
    float acc = 0.0f;
    for (int c = 0; c < C; ++c)
        for (int p = 0; p < K; ++p)
            for (int q = 0; q < K; ++q)
                acc += x[((size_t)(n * C + c) * H + e + p) * W + f + q] * w[((m * C + c) * K + p) * K + q];
    y[((size_t)(n * M + m) * E + e) * F + f] = acc;
}
