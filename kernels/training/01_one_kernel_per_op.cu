// Step 1: one kernel per operation -- the report's starting point.
//
// One SGD step of the 32,754-128-4 network is a chain of small, general
// kernels, each reading its operands from device memory and writing its
// result back: matrix products (one thread per output element, the loop over
// k reading a row of A and a column of B), transposes, a bias add, the
// sigmoid, exp, the softmax normalisation, log, element-wise products, column
// sums and the two-kernel SGD update (scale, then subtract). 2-D launches,
// 16 x 16 threads, like the report's `Vector2D` kernels.
//
// Why it is slow, and the prediction: two products dominate the work, X W1
// (forward) and X^T dZ1 (W1's gradient), 8.6 GFLOP each at batch 1,024. A
// thread per output with no reuse reads 2 floats per multiply-add; the
// matmul's column reads of B are coalesced across a warp (threads along n)
// but every thread re-reads its row of A from L1/L2. Expect the products at a
// few TFLOP/s, so several ms per step, and the explicit transpose of X (134 MB
// read and written, uncoalesced writes) to cost as much as a product.
//
// Layouts: every matrix row-major; the batch X is B x V (row i: document i).

// C[M x N] = A[M x K] B[K x N]
extern "C" __global__ void matmul(int M, int N, int K, const float* A, const float* B, float* C) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float sum = 0.0f;
        for (int k = 0; k < K; ++k) sum += A[(long)row * K + k] * B[(long)k * N + col];
        C[(long)row * N + col] = sum;
    }
}

// out[N x M] = in[M x N]^T
extern "C" __global__ void transpose(int M, int N, const float* in, float* out) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) out[(long)col * M + row] = in[(long)row * N + col];
}

// z[i, j] += b[j] for a rows x cols matrix
extern "C" __global__ void add_bias(int rows, int cols, float* z, const float* b) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) z[row * cols + col] += b[col];
}

extern "C" __global__ void sigmoid(int rows, int cols, const float* z, float* h) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) h[row * cols + col] = 1.0f / (1.0f + expf(-z[row * cols + col]));
}

extern "C" __global__ void exponential(int rows, int cols, const float* z, float* e) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) e[row * cols + col] = expf(z[row * cols + col]);
}

// p[i, :] = e[i, :] / sum(e[i, :]); one thread per row (the report's Softmax)
extern "C" __global__ void softmax_normalize(int rows, int cols, const float* e, float* p) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (threadIdx.x == 0 && row < rows) {
        float total = 0.0f;
        for (int c = 0; c < cols; ++c) total += e[row * cols + c];
        for (int c = 0; c < cols; ++c) p[row * cols + c] = e[row * cols + c] / total;
    }
}

extern "C" __global__ void logarithm(int rows, int cols, const float* p, float* out) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) out[row * cols + col] = logf(p[row * cols + col]);
}

// out = a * b, element-wise
extern "C" __global__ void multiply(int rows, int cols, const float* a, const float* b, float* out) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) out[row * cols + col] = a[row * cols + col] * b[row * cols + col];
}

// out = a - b, element-wise
extern "C" __global__ void subtract(int rows, int cols, const float* a, const float* b, float* out) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) out[row * cols + col] = a[row * cols + col] - b[row * cols + col];
}

// out = s * a, element-wise
extern "C" __global__ void scale(int rows, int cols, float s, const float* a, float* out) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) out[row * cols + col] = s * a[row * cols + col];
}

// out = 1 - a, element-wise
extern "C" __global__ void one_minus(int rows, int cols, const float* a, float* out) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) out[row * cols + col] = 1.0f - a[row * cols + col];
}

// out[j] = s * sum_i a[i, j]: one thread per column (bias gradients, the loss)
extern "C" __global__ void column_sum(int rows, int cols, float s, const float* a, float* out) {
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (threadIdx.y == 0 && blockIdx.y == 0 && col < cols) {
        float total = 0.0f;
        for (int i = 0; i < rows; ++i) total += a[(long)i * cols + col];
        out[col] = s * total;
    }
}
