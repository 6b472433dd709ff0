// Step 3 -- shared-memory tiled convolution.
//
// What changed from step 1: the block first copies what its 16 x 16 outputs read -- an input
// tile of (16 + K - 1)^2 values and the K x K weights of its filter, one channel at a time --
// into shared memory, waits at a barrier, and then sums from there. The launch is step 1's.
//
// Why it should be faster: each input value is read from global memory once per block instead
// of up to K*K = 49 times per block (once per output that uses it).
// Why it might not be: step 1's repeated reads mostly hit the L1 cache already, and the copy adds
// two barriers per channel; the report found this step 1.1-1.3x slower than its baseline.
// Prediction: no faster than step 1 on the H100 (within +-20%), for the same reason.

#define TILE_WIDTH 16

extern "C" __global__ void conv_shared_tiled(float* y, const float* x, const float* w, int N, int M, int C,
                                             int H, int W, int K)
{
    extern __shared__ float smem[];
    const int XT = TILE_WIDTH + K - 1;      // input tile side: 22 for K = 7
    float* xs = smem;                       // XT x XT input tile
    float* ws = smem + XT * XT;             // K x K weights
    const int E = H - K + 1, F = W - K + 1;
    const int tiles_across = (F + TILE_WIDTH - 1) / TILE_WIDTH;
    const int n = blockIdx.x, m = blockIdx.y;
    const int e0 = (blockIdx.z / tiles_across) * TILE_WIDTH, f0 = (blockIdx.z % tiles_across) * TILE_WIDTH;
    const int ty = threadIdx.y, tx = threadIdx.x;
    float acc = 0.0f;
    for (int c = 0; c < C; ++c) {
        if (ty < K && tx < K) ws[ty * K + tx] = w[((m * C + c) * K + ty) * K + tx];
        for (int i = ty; i < XT; i += TILE_WIDTH)
            for (int j = tx; j < XT; j += TILE_WIDTH) {
                const int row = e0 + i, col = f0 + j;
                xs[i * XT + j] = (row < H && col < W) ? x[((size_t)(n * C + c) * H + row) * W + col] : 0.0f;
            }
        __syncthreads();
        for (int p = 0; p < K; ++p)
            for (int q = 0; q < K; ++q) acc += xs[(ty + p) * XT + tx + q] * ws[p * K + q];
        __syncthreads();                    // before the next channel overwrites the tile
    }
    const int e = e0 + ty, f = f0 + tx;
    if (e < E && f < F) y[((size_t)(n * M + m) * E + e) * F + f] = acc;
}
