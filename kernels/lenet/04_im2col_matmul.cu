// Step 4 -- input unrolling (im2col) and a tiled matrix product: two kernels.
//
// What changed from step 1: the convolution becomes a matrix product. im2col copies, for a chunk
// of images, every K x K window of every channel into a column of X_unroll (C*K*K rows,
// E*F columns per image); then matmul_tiled computes Y = W X_unroll with 16 x 16 tiles of W
// (M x C*K*K) and X_unroll staged in shared memory. The host runs the pair over chunks of
// images, so that X_unroll stays bounded (the report's "mini-batches").
//
// Why it should be faster: a tiled matrix product reads each operand from shared memory 16 times
// per global load. Why it might not be: X_unroll holds K*K = 49 values per output pixel, 35-42
// times the size of the input, and goes through device memory twice (written, then read), and
// M is only 4 or 16, so most of each 16-row tile of W is empty for conv1. The report measured
// 7x (conv1) and ~1x (conv2) its baseline.
// Prediction: slower than step 1 on conv1 (its tiny M wastes 3/4 of every tile), about even on conv2.

#define TILE_WIDTH 16

extern "C" __global__ void im2col(const float* x, float* x_unroll, int n0, int C, int H, int W, int K)
{
    const int E = H - K + 1, F = W - K + 1, plane = E * F;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;     // (channel, output pixel)
    const int b = blockIdx.y;                                 // image of the chunk
    if (t >= C * plane) return;
    const int c = t / plane, s = t % plane, e = s / F, f = s % F;
    const float* src = x + ((size_t)(n0 + b) * C + c) * H * W;
    float* dst = x_unroll + (size_t)b * C * K * K * plane;
    for (int p = 0; p < K; ++p)
        for (int q = 0; q < K; ++q) dst[(size_t)((c * K + p) * K + q) * plane + s] = src[(e + p) * W + f + q];
}

// Y[b] (rows x cols) = A (rows x inner) * B[b] (inner x cols); Y[b] lands in y at image n0 + b.
extern "C" __global__ void matmul_tiled(const float* A, const float* B, float* y, int n0, int rows, int inner,
                                        int cols)
{
    __shared__ float As[TILE_WIDTH][TILE_WIDTH];
    __shared__ float Bs[TILE_WIDTH][TILE_WIDTH];
    const int tx = threadIdx.x, ty = threadIdx.y, b = blockIdx.z;
    const int row = blockIdx.y * TILE_WIDTH + ty, col = blockIdx.x * TILE_WIDTH + tx;
    const float* Bb = B + (size_t)b * inner * cols;
    float acc = 0.0f;
    for (int k0 = 0; k0 < inner; k0 += TILE_WIDTH) {
        As[ty][tx] = (row < rows && k0 + tx < inner) ? A[row * inner + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < inner && col < cols) ? Bb[(size_t)(k0 + ty) * cols + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE_WIDTH; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < rows && col < cols) y[((size_t)(n0 + b) * rows + row) * cols + col] = acc;
}
