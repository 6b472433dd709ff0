// Step 5 -- the unrolling fused into the matrix product (implicit GEMM).
//
// What changed from step 4: no X_unroll in device memory. The matrix product's B tile is read
// straight from x: element (k, s) of image b's unrolled matrix is x[b, c, e + p, f + q] with
// k = (c, p, q) and s = (e, f), computed from the indices when the tile is loaded. One kernel,
// one launch for the whole batch (grid z = images).
//
// Why it should be faster than step 4: the 49x-larger unrolled matrix is neither written nor
// read back, and there is one launch instead of two per chunk.
// Why it might still lose to step 1: the index arithmetic (divisions and remainders by K, K * K
// and F for every loaded element) and, for conv1 (M = 4), the three-quarters-empty 16-row W
// tiles stay. The report found it 1.4x faster than
// its step 4 but 5x (conv1) and 0.6x (conv2) its baseline.
// Prediction: 2-4x faster than step 4, still slower than step 1 on conv1.

#define TILE_WIDTH 16

extern "C" __global__ void conv_implicit_gemm(const float* x, const float* w, float* y, int N, int M, int C,
                                              int H, int W, int K)
{
    __shared__ float As[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Bs[TILE_WIDTH][TILE_WIDTH];
    const int E = H - K + 1, F = W - K + 1, cols = E * F, inner = C * K * K;
    const int tx = threadIdx.x, ty = threadIdx.y, n = blockIdx.z;
    const int row = blockIdx.y * TILE_WIDTH + ty, col = blockIdx.x * TILE_WIDTH + tx;
    const float* xn = x + (size_t)n * C * H * W;
    float acc = 0.0f;
    for (int k0 = 0; k0 < inner; k0 += TILE_WIDTH) {
        As[ty][tx] = (row < M && k0 + tx < inner) ? w[row * inner + k0 + tx] : 0.0f;
        const int k = k0 + ty;
        if (k < inner && col < cols) {
            const int c = k / (K * K), p = (k / K) % K, q = k % K;      // the unrolled row
            const int e = col / F, f = col % F;                        // the unrolled column
            Bs[ty][tx] = xn[(c * H + e + p) * W + f + q];
        } else {
            Bs[ty][tx] = 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < TILE_WIDTH; ++kk) acc += As[ty][kk] * Bs[kk][tx];
        __syncthreads();
    }
    if (row < M && col < cols) y[((size_t)n * M + row) * cols + col] = acc;
}
