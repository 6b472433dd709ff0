// The two fully-connected layers of every step's forward pass (the chapter times the
// convolutions; these finish the network so that each step's predictions can be checked).
//
// fc1: s[n, j] = sum_k a[n, k] w1[j, k] for 4624 inputs k and 64 hidden units j, a tiled
// matrix product: a block computes 64 images x 64 units, each thread 4 x 4 of them, stepping
// through k in slices of 16 staged in shared memory. The 289 slices are split over gridDim.y
// blocks (split K), each adding its partial sums into s with atomicAdd (s is zeroed first):
// with only N / 64 tiles of images, a small batch would otherwise run on a few SMs for the
// whole 4624-long sum. fc1 reads fp32 activations, fc1_half fp16 ones (the reduced-precision
// pipeline); both sum in fp32.
// fc2_argmax: h = relu(s + b1), then the 10 logits of one image per thread and their argmax
// (the prediction).
#include <cuda_fp16.h>

#define FLAT 4624          // 16 x 17 x 17 pooled conv2 outputs per image
#define HIDDEN 64
#define CLASSES 10
#define BK 16              // 4624 = 289 x 16: no partial slice
#define BI 64              // images per block
#define PAD 1              // As[k][i] rows of 65: the 16 k's a warp stores land in 16 banks

__device__ __forceinline__ float load_act(const float* a, size_t i) { return a[i]; }
__device__ __forceinline__ float load_act(const __half* a, size_t i) { return __half2float(a[i]); }

template <typename T>
__device__ __forceinline__ void fc1_body(const T* __restrict__ a, const float* __restrict__ w,
                                         float* __restrict__ s, int N, int slices_per_split)
{
    __shared__ float As[BK][BI + PAD];
    __shared__ float Ws[BK][HIDDEN + PAD];
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;     // units 4tx.., images 4ty..
    const int n0 = blockIdx.x * BI;
    float acc[4][4] = {};
    const int k_begin = blockIdx.y * slices_per_split * BK;
    const int k_end = min(FLAT, k_begin + slices_per_split * BK);
    for (int k0 = k_begin; k0 < k_end; k0 += BK) {
        for (int t = threadIdx.x; t < BK * BI; t += 256) {      // 16 consecutive k per image
            const int kk = t % BK, i = t / BK;
            As[kk][i] = n0 + i < N ? load_act(a, (size_t)(n0 + i) * FLAT + k0 + kk) : 0.0f;
            Ws[kk][i] = w[(size_t)i * FLAT + k0 + kk];          // BI == HIDDEN: row i of w1
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float av[4], wv[4];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                av[u] = As[kk][4 * ty + u];
                wv[u] = Ws[kk][4 * tx + u];
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int v = 0; v < 4; ++v) acc[u][v] += av[u] * wv[v];
        }
        __syncthreads();
    }
    for (int u = 0; u < 4; ++u) {
        const int n = n0 + 4 * ty + u;
        if (n >= N) continue;
        for (int v = 0; v < 4; ++v) atomicAdd(&s[(size_t)n * HIDDEN + 4 * tx + v], acc[u][v]);
    }
}

extern "C" __global__ void __launch_bounds__(256) fc1(const float* __restrict__ a, const float* __restrict__ w,
                                                      float* __restrict__ s, int N, int slices_per_split)
{
    fc1_body(a, w, s, N, slices_per_split);
}

extern "C" __global__ void __launch_bounds__(256) fc1_half(const __half* __restrict__ a,
                                                           const float* __restrict__ w, float* __restrict__ s,
                                                           int N, int slices_per_split)
{
    fc1_body(a, w, s, N, slices_per_split);
}

extern "C" __global__ void fc2_argmax(const float* __restrict__ s, const float* __restrict__ b1,
                                      const float* __restrict__ w, const float* __restrict__ b,
                                      float* __restrict__ logits, int* __restrict__ predictions, int N)
{
    __shared__ float ws[CLASSES * HIDDEN + CLASSES];
    __shared__ float b1s[HIDDEN];
    for (int i = threadIdx.x; i < CLASSES * HIDDEN + CLASSES; i += blockDim.x)
        ws[i] = i < CLASSES * HIDDEN ? w[i] : b[i - CLASSES * HIDDEN];
    for (int i = threadIdx.x; i < HIDDEN; i += blockDim.x) b1s[i] = b1[i];
    __syncthreads();
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float hv[HIDDEN];
    for (int k = 0; k < HIDDEN; ++k) hv[k] = fmaxf(s[(size_t)n * HIDDEN + k] + b1s[k], 0.0f);   // fc1's bias, ReLU
    int best = 0;
    float best_value = 0.0f;
    for (int j = 0; j < CLASSES; ++j) {
        float z = ws[CLASSES * HIDDEN + j];
        for (int k = 0; k < HIDDEN; ++k) z += ws[j * HIDDEN + k] * hv[k];
        logits[(size_t)n * CLASSES + j] = z;
        if (j == 0 || z > best_value) { best = j; best_value = z; }   // ties: the first, as NumPy
    }
    predictions[n] = best;
}
