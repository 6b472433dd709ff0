// Step 7 (beyond the report): register-tiled products, no transposes, fused epilogues.
//
// What changed from step 6: the two large products are rewritten the way
// fast matrix-multiply kernels are, and everything around them is fused.
//  * A block of 256 threads computes a 128 x 128 tile of the output; each
//    thread owns an 8 x 8 piece of it in registers. For each k it reads 8
//    values of A and 8 of B from shared memory (as float4, conflict-free)
//    and does 64 multiply-adds with them: 4 FMAs per value loaded, where
//    step 6 loaded two values per FMA, so the arithmetic, not shared memory,
//    sets the pace. The
//    next k-slice's tiles are loaded into registers while this one computes
//    (two shared buffers, one barrier per slice).
//  * X^T dZ1 reads X "by columns" straight from its row-major layout: a tile
//    of X^T is a tile of X read row by row (coalesced) and stored as it is.
//    The transpose of X (134 MB read and written each step) disappears.
//  * The forward product Z1 = X W1 has only 1,024 x 128 outputs: 8 tiles, too
//    few for 132 SMs. Its long k (32,754) is split over gridDim.z blocks
//    (split-K) that add their partial tiles into Z1 with atomicAdd; Z1 starts
//    as the bias (fill_bias), so the bias add is free.
//  * W1's gradient is never stored: the product's epilogue applies the SGD
//    update, W1 -= lr * tile (16.8 MB not written and read back).
//  * The head (sigmoid, output layer, softmax, loss and the backward pass to
//    dZ1) is one kernel with a block per document (head.cuh), and the small
//    parameters' updates one more (small_updates). Five launches per step.
//
// Prediction: 17 GFLOP at 60-70% of the FP32 rate (about 51 TFLOP/s measured
// for cuBLAS SGEMM on the H100 in chapter 2) is ~0.5 ms; the rest adds tens of microseconds.
// Tens of times faster than step 6.
#include "head.cuh"

#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8

// C[M x N] (+)= op(A) B for row-major B (K x N), where op(A) is A (M x K,
// row-major, TRANS_A = 0) or the transpose of a row-major K x M matrix
// (TRANS_A = 1). EPILOGUE 0: atomicAdd the tile into C (split-K over
// gridDim.z). EPILOGUE 1: C -= lr * tile (the SGD update).
template <int TRANS_A, int EPILOGUE>
__device__ void gemm_tile(int M, int N, int K, float lr, const float* __restrict__ A,
                          const float* __restrict__ Bm, float* __restrict__ C) {
    // Two buffers per operand: while the block computes on one, the next tile's
    // values travel from device memory into registers, and are stored into the
    // other buffer afterwards -- one barrier per tile, and the loads' latency
    // hidden behind 512 multiply-adds per thread.
    __shared__ __align__(16) float As[2][BK][BM];   // A's tile stored k-major: As[.][k][m]
    __shared__ __align__(16) float Bs[2][BK][BN];
    int tid = threadIdx.x;
    int tx = tid % 16, ty = tid / 16;               // 16 x 16 threads, each an 8 x 8 piece
    int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    int chunk = ((K + gridDim.z - 1) / gridDim.z + BK - 1) / BK * BK;
    int kbegin = blockIdx.z * chunk, kend = min(K, kbegin + chunk);
    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    // Element r (0..3) of this thread's share of a tile: 1,024 elements of each, 4 per thread.
    // A is K x M (TRANS_A: row k, 128 consecutive m) or M x K (row m, 8 consecutive k).
    auto a_index = [&](int r, int& kk, int& mm) {
        int e = tid + r * 256;
        if (TRANS_A) { kk = e / BM; mm = e % BM; } else { mm = e / BK; kk = e % BK; }
    };
    float ra[4], rb[4];                             // the next tile, on its way
    auto load = [&](int k0) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            int kk, mm;
            a_index(r, kk, mm);
            bool in = k0 + kk < kend && m0 + mm < M;
            ra[r] = !in ? 0.0f : TRANS_A ? A[(long)(k0 + kk) * M + m0 + mm] : A[(long)(m0 + mm) * K + k0 + kk];
            int e = tid + r * 256, kb = e / BN, nb = e % BN;
            rb[r] = (k0 + kb < kend && n0 + nb < N) ? Bm[(long)(k0 + kb) * N + n0 + nb] : 0.0f;
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            int kk, mm;
            a_index(r, kk, mm);
            As[buf][kk][mm] = ra[r];
            int e = tid + r * 256;
            Bs[buf][e / BN][e % BN] = rb[r];
        }
    };
    load(kbegin);
    store(0);
    __syncthreads();
    int buf = 0;
    for (int k0 = kbegin; k0 < kend; k0 += BK) {
        bool more = k0 + BK < kend;
        if (more) load(k0 + BK);
#pragma unroll
        for (int k = 0; k < BK; ++k) {
            // rows ty*4..+3 and 64+ty*4..+3, columns tx*4..+3 and 64+tx*4..+3: float4 reads
            // by 16 consecutive threads are contiguous, so conflict-free
            float4 a0 = *(const float4*)&As[buf][k][ty * 4], a1 = *(const float4*)&As[buf][k][64 + ty * 4];
            float4 b0 = *(const float4*)&Bs[buf][k][tx * 4], b1 = *(const float4*)&Bs[buf][k][64 + tx * 4];
            float a[TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            float b[TN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        if (more) store(buf ^ 1);                   // buf ^ 1 was last read before the previous barrier
        __syncthreads();
        buf ^= 1;
    }
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        int m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            int n = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
            if (m < M && n < N) {
                if (EPILOGUE == 0) atomicAdd(&C[(long)m * N + n], acc[i][j]);
                else C[(long)m * N + n] -= lr * acc[i][j];
            }
        }
    }
}

// Z1 (B x H, holding the bias) += X (B x V) W1 (V x H); grid (ceil(H/128), ceil(B/128), splits)
extern "C" __global__ void __launch_bounds__(256, 2) forward_product(int B, int V, int H, const float* __restrict__ X,
                                                       const float* __restrict__ W1, float* __restrict__ Z1) {
    gemm_tile<0, 0>(B, H, V, 0.0f, X, W1, Z1);
}

// W1 (V x H) -= lr * X^T (V x B) dZ1 (B x H); grid (ceil(H/128), ceil(V/128), 1)
extern "C" __global__ void __launch_bounds__(256, 2) w1_gradient_step(int B, int V, int H, float lr,
                                                        const float* __restrict__ X,
                                                        const float* __restrict__ dZ1, float* __restrict__ W1) {
    gemm_tile<1, 1>(V, H, B, lr, X, dZ1, W1);
}

// Z1[i, :] = b1 (the split-K partial products are added onto it)
extern "C" __global__ void fill_bias(int B, int H, const float* __restrict__ b1, float* __restrict__ Z1) {
    long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < (long)B * H) Z1[e] = b1[e % H];
}

// One block per document: the head of head.cuh on a dense row of Z1.
extern "C" __global__ void dense_head(int B, int H, int C, float inv_batch, const int* __restrict__ labels,
                           const float* __restrict__ Z1, const float* __restrict__ W2,
                           const float* __restrict__ b2, float* __restrict__ h, float* __restrict__ dz2,
                           float* __restrict__ dz1, float* __restrict__ loss_terms) {
    int i = blockIdx.x;
    if (i >= B) return;
    const float* z = Z1 + (long)i * H;
    head_forward_backward(H, C, inv_batch, labels[i], [&](int j) { return z[j]; }, W2, b2,
                          h + (long)i * H, dz2 + i * C, dz1 + (long)i * H, loss_terms + i);
}

// H blocks: W2, b1, b2 and the loss (head.cuh's small_updates).
extern "C" __global__ void dense_small_updates(int B, int H, int C, float lr, const float* __restrict__ h,
                                    const float* __restrict__ dz2, const float* __restrict__ dz1,
                                    const float* __restrict__ loss_terms, float* __restrict__ W2,
                                    float* __restrict__ b1, float* __restrict__ b2, float* __restrict__ loss) {
    small_updates(blockIdx.x, B, H, C, lr, h, dz2, dz1, loss_terms, W2, b1, b2, loss);
}
