// Step 1: the network as the textbook writes it -- matrix products and ReLUs.
//
// The network is three layers, y = W3 relu(W2 relu(W1 x)), applied to N input
// vectors at once. Stacking the vectors as the columns of X (72 x N) makes each
// layer one matrix product, H1 = relu(W1 X), H2 = relu(W2 H1), Y = W3 H2, so
// the whole inference is five kernel launches: matmul, relu, matmul, relu,
// matmul. Every intermediate (H1, H2: 64 x N floats each) goes out to device
// memory and comes back in.
//
// Layout, used by every step of this chapter: X is feature-major, X[k*N + v]
// holds input k of vector v, so a row of X is one feature across all vectors
// and consecutive threads (consecutive v) read consecutive addresses. Weights
// are row-major, W[j*K + k] (unit j, input k), as in y = W x.
//
// Prediction: this is our baseline. Each matmul thread reads K weights and K
// activations to do K multiply-adds. Each hidden layer's 64 floats per vector
// cross device memory four times -- written by a matmul, read and written
// again by the in-place relu, read by the next matmul -- so H1 and H2 alone
// move 2 x 4 x 64 x 4 bytes = 2 KB per vector, 6.7 times the 304 bytes of
// input and output. Expect several times the memory floor.

// 16 x 16 = 256 threads per block, one output element each: blockDim.x runs
// along the vectors (columns). A warp is two rows of 16 threads (threadIdx.y
// and threadIdx.y + 1), so it reads 16 consecutive floats of a row of B (64
// bytes, 2 sectors; both halves read the same ones) and writes two runs of 16
// consecutive floats of C, one per row.
extern "C" __global__ void matmul(int M, int N, int K, const float* __restrict__ A,
                                  const float* __restrict__ B, float* __restrict__ C)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;   // vector v
    int row = blockIdx.y * blockDim.y + threadIdx.y;   // output unit j
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[row * K + k] * B[(size_t)k * N + col];
        }
        C[(size_t)row * N + col] = acc;
    }
}

// ReLU in place over count elements: one element per thread.
extern "C" __global__ void relu(int count, float* data)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < count) {
        data[i] = fmaxf(data[i], 0.0f);
    }
}
