// Step 8 (beyond the report): mixed precision on the tensor cores.
//
// What changed from step 7: the two large products run on the tensor cores
// (nvcuda::wmma, 16 x 16 x 16 pieces: fp16 operands, fp32 accumulators),
// which on the H100 do fp16 matrix arithmetic more than ten times faster
// than the CUDA cores do fp32.
//  * The batch X is stored in fp16, and so is a copy of W1 (W1h); the master
//    weights stay fp32 -- the update W1 -= lr dW1 is far smaller than W1's
//    fp16 rounding step, and would be lost if W1 itself were fp16. The
//    update's epilogue writes both W1 and its fp16 copy.
//  * dZ1 enters the gradient product in fp16, scaled by the batch size B
//    (to_half_scaled): dZ1 carries the 1/B of the mean loss, and values near
//    1e-5 would lose most of their bits in fp16 (its normal range ends at
//    6e-5). Multiplying by B is "loss scaling"; the epilogue divides again.
//  * The vocabulary is padded from V to Vp, a multiple of 8, so every row of
//    X and W1h starts on a 16-byte boundary and tiles load 8 halves at once;
//    the padding columns of X and rows of W1h are zero.
// A block of 8 warps computes a 128 x 128 tile through shared memory (32-deep
// k-slices, rows padded by 8 halves against bank conflicts); each warp owns a
// 32 x 64 piece, 2 x 4 accumulator fragments.
//
// Prediction: 17 GFLOP on tensor cores at a few hundred TFLOP/s takes well
// under 0.1 ms: the two products stop dominating, and the step lands near
// 0.1 ms at batch 1,024, 4-5x faster than step 7 -- against an fp32 step, at
// an accuracy cost the training curves must show to be nil.
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

#define TBM 128
#define TBN 128
#define TBK 32
#define APAD 8                  // halves of padding per shared row: rows shift by 16 bytes

// EPILOGUE 0: C (fp32, M x N) += tile with atomicAdd (split-K over gridDim.z).
// EPILOGUE 1: C -= scale * tile, and Ch (fp16 copy) = C, for rows m < m_valid.
// TRANS_A 0: A is M x K row-major (lda = K); 1: A is K x M row-major (lda = M).
template <int TRANS_A, int EPILOGUE>
__device__ void wmma_gemm_tile(int M, int N, int K, const __half* __restrict__ A, const __half* __restrict__ Bm,
                               float* __restrict__ C, __half* __restrict__ Ch, float scale, int m_valid) {
    // TRANS_A 0 stores A as [m][k]; 1 as [k][m] (X^T read straight from X's rows)
    __shared__ __align__(32) __half As[TRANS_A ? TBK * (TBM + APAD) : TBM * (TBK + APAD)];
    __shared__ __align__(32) __half Bs[TBK * (TBN + APAD)];
    __shared__ __align__(32) float stage[8][16 * 16];
    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    int wm = warp / 2, wn = warp % 2;                    // 4 x 2 warps; a warp: rows wm*32, cols wn*64
    int m0 = blockIdx.y * TBM, n0 = blockIdx.x * TBN;
    int chunk = ((K + gridDim.z - 1) / gridDim.z + TBK - 1) / TBK * TBK;
    int kbegin = blockIdx.z * chunk, kend = min(K, kbegin + chunk);

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
    // Every loop over the fragments is unrolled: a fragment array indexed at
    // run time would live in local memory (it did: a 256-byte stack frame).
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = kbegin; k0 < kend; k0 += TBK) {
        // 512 vectors of 8 halves per tile, two per thread (K, M and N are multiples of 8)
        for (int r = 0; r < 2; ++r) {
            int v = tid + r * 256;
            uint4 a = make_uint4(0, 0, 0, 0), b = make_uint4(0, 0, 0, 0);
            if (TRANS_A) {                               // row k of A: 128 consecutive m
                int kk = v / (TBM / 8), mm = (v % (TBM / 8)) * 8;
                if (k0 + kk < kend && m0 + mm < M) a = *(const uint4*)&A[(long)(k0 + kk) * M + m0 + mm];
                *(uint4*)&As[kk * (TBM + APAD) + mm] = a;
            } else {                                     // row m of A: 32 consecutive k
                int mm = v / (TBK / 8), kk = (v % (TBK / 8)) * 8;
                if (k0 + kk < kend && m0 + mm < M) a = *(const uint4*)&A[(long)(m0 + mm) * K + k0 + kk];
                *(uint4*)&As[mm * (TBK + APAD) + kk] = a;
            }
            int kb = v / (TBN / 8), nb = (v % (TBN / 8)) * 8;
            if (k0 + kb < kend && n0 + nb < N) b = *(const uint4*)&Bm[(long)(k0 + kb) * N + n0 + nb];
            *(uint4*)&Bs[kb * (TBN + APAD) + nb] = b;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TBK; kk += 16) {
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> bf[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
                wmma::load_matrix_sync(bf[j], &Bs[kk * (TBN + APAD) + wn * 64 + j * 16], TBN + APAD);
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                int mrow = wm * 32 + i * 16;
                if (TRANS_A) {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major> af;
                    wmma::load_matrix_sync(af, &As[kk * (TBM + APAD) + mrow], TBM + APAD);
#pragma unroll
                    for (int j = 0; j < 4; ++j) wmma::mma_sync(acc[i][j], af, bf[j], acc[i][j]);
                } else {
                    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> af;
                    wmma::load_matrix_sync(af, &As[mrow * (TBK + APAD) + kk], TBK + APAD);
#pragma unroll
                    for (int j = 0; j < 4; ++j) wmma::mma_sync(acc[i][j], af, bf[j], acc[i][j]);
                }
            }
        }
        __syncthreads();
    }
    // Epilogue, one 16 x 16 fragment at a time through this warp's staging tile.
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            wmma::store_matrix_sync(stage[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 256; e += 32) {
                int m = m0 + wm * 32 + i * 16 + e / 16, n = n0 + wn * 64 + j * 16 + e % 16;
                if (m < M && n < N) {
                    if (EPILOGUE == 0) {
                        atomicAdd(&C[(long)m * N + n], stage[warp][e]);
                    } else if (m < m_valid) {
                        float w = C[(long)m * N + n] - scale * stage[warp][e];
                        C[(long)m * N + n] = w;
                        Ch[(long)m * N + n] = __float2half(w);
                    }
                }
            }
            __syncwarp();
        }
}

// Z1 (B x H, holding the bias) += X16 (B x Vp) W1h (Vp x H); grid (ceil(H/128), ceil(B/128), splits)
extern "C" __global__ void __launch_bounds__(256) forward_product_tc(int B, int Vp, int H, const __half* __restrict__ X16,
                                                          const __half* __restrict__ W1h, float* __restrict__ Z1) {
    wmma_gemm_tile<0, 0>(B, H, Vp, X16, W1h, Z1, nullptr, 0.0f, 0);
}

// dz1h = half(B * dz1): the per-document gradient, large enough for fp16
extern "C" __global__ void to_half_scaled(int n, float s, const float* __restrict__ x, __half* __restrict__ out) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e < n) out[e] = __float2half(s * x[e]);
}

// W1 (V x H) -= lr / B * X16^T (Vp x B) dz1h (B x H); W1h = half(W1). grid (ceil(H/128), ceil(Vp/128))
extern "C" __global__ void __launch_bounds__(256) w1_gradient_step_tc(int B, int V, int Vp, int H, float lr_over_scale,
                                                           const __half* __restrict__ X16,
                                                           const __half* __restrict__ dz1h,
                                                           float* __restrict__ W1, __half* __restrict__ W1h) {
    wmma_gemm_tile<1, 1>(Vp, H, B, X16, dz1h, W1, W1h, lr_over_scale, V);
}
