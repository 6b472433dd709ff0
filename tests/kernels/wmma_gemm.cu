#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

// C = A B with tensor cores, one warp per TM x TN tile of C.  A is row-major
// (lda), B column-major (element (k, n) at B[n * ldb + k]), C row-major (ldc).
// The caller pads M, N and K to multiples of the tile; warps past the last
// tile (in the last block) return at once, whole warps.
template <int TM, int TN, int TK, typename Acc>
__device__ void gemm_tile(int m_tiles, int n_tiles, int K, const __half* A, const __half* B, Acc* C,
                          int lda, int ldb, int ldc)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / warpSize;
    const int tile_m = warp / n_tiles, tile_n = warp % n_tiles;
    if (tile_m >= m_tiles) return;
    wmma::fragment<wmma::matrix_a, TM, TN, TK, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, TM, TN, TK, __half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, TM, TN, TK, Acc> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += TK) {
        wmma::load_matrix_sync(a, A + tile_m * TM * lda + k, lda);
        wmma::load_matrix_sync(b, B + tile_n * TN * ldb + k, ldb);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + tile_m * TM * ldc + tile_n * TN, acc, ldc, wmma::mem_row_major);
}

extern "C" __global__ void wmma_gemm_m16n16k16(int m_tiles, int n_tiles, int K, const __half* A,
                                               const __half* B, float* C, int lda, int ldb, int ldc)
{
    gemm_tile<16, 16, 16, float>(m_tiles, n_tiles, K, A, B, C, lda, ldb, ldc);
}

extern "C" __global__ void wmma_gemm_m32n8k16(int m_tiles, int n_tiles, int K, const __half* A,
                                              const __half* B, float* C, int lda, int ldb, int ldc)
{
    gemm_tile<32, 8, 16, float>(m_tiles, n_tiles, K, A, B, C, lda, ldb, ldc);
}

extern "C" __global__ void wmma_gemm_m8n32k16(int m_tiles, int n_tiles, int K, const __half* A,
                                              const __half* B, float* C, int lda, int ldb, int ldc)
{
    gemm_tile<8, 32, 16, float>(m_tiles, n_tiles, K, A, B, C, lda, ldb, ldc);
}

// The same with a half-precision accumulator and output.
extern "C" __global__ void wmma_gemm_m16n16k16_half(int m_tiles, int n_tiles, int K, const __half* A,
                                                    const __half* B, __half* C, int lda, int ldb, int ldc)
{
    gemm_tile<16, 16, 16, __half>(m_tiles, n_tiles, K, A, B, C, lda, ldb, ldc);
}

// D = relu(A B + E): A column-major (element (m, k) at A[k * lda + m]), B
// row-major, E loaded column-major into the accumulator, the ReLU applied
// elementwise through x[], D stored row-major.
extern "C" __global__ void wmma_bias_relu(int m_tiles, int n_tiles, int K, const __half* A, const __half* B,
                                          const float* E, float* D, int lda, int ldb, int lde, int ldd)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / warpSize;
    const int tile_m = warp / n_tiles, tile_n = warp % n_tiles;
    if (tile_m >= m_tiles) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, E + tile_n * 16 * lde + tile_m * 16, lde, wmma::mem_col_major);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + k * lda + tile_m * 16, lda);
        wmma::load_matrix_sync(b, B + k * ldb + tile_n * 16, ldb);
        wmma::mma_sync(acc, a, b, acc);
    }
    for (int i = 0; i < acc.num_elements; i++) acc.x[i] = fmaxf(acc.x[i], 0.f);
    wmma::store_matrix_sync(D + tile_m * 16 * ldd + tile_n * 16, acc, ldd, wmma::mem_row_major);
}

// C = A B in tf32 (m16n16k8): A row-major, B column-major, both float; with
// convert, rounded to tf32 with __float_to_tf32 after loading, as CUDA's guide
// does (without, the tensor cores use their top 19 bits); C stored
// column-major (element (m, n) at C[n * ldc + m]).
extern "C" __global__ void wmma_gemm_tf32(int m_tiles, int n_tiles, int K, const float* A, const float* B,
                                          float* C, int lda, int ldb, int ldc, int convert)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / warpSize;
    const int tile_m = warp / n_tiles, tile_n = warp % n_tiles;
    if (tile_m >= m_tiles) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 8) {
        wmma::load_matrix_sync(a, A + tile_m * 16 * lda + k, lda);
        wmma::load_matrix_sync(b, B + tile_n * 16 * ldb + k, ldb);
        if (convert) {
            for (int i = 0; i < a.num_elements; i++) a.x[i] = wmma::__float_to_tf32(a.x[i]);
            for (int i = 0; i < b.num_elements; i++) b.x[i] = wmma::__float_to_tf32(b.x[i]);
        }
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + tile_n * 16 * ldc + tile_m * 16, acc, ldc, wmma::mem_col_major);
}

extern "C" __global__ void tf32_round(int n, const float* x, float* y)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = wmma::__float_to_tf32(x[i]);
}

// C = A B (A and B row-major) by blocks of 4 warps, each block a 16 x 64
// strip of C: the block stages A's 16 x 16 tile and B's 16 x 64 tile in shared
// memory, each warp loads its fragments from there after __syncthreads(),
// then stores its result to shared memory and copies it out lane by lane.
extern "C" __global__ void wmma_gemm_shared(int K, const __half* A, const __half* B, float* C,
                                            int lda, int ldb, int ldc)
{
    __shared__ __align__(32) __half a_tile[16 * 16];
    __shared__ __align__(32) __half b_tile[16 * 64];
    __shared__ __align__(32) float c_tile[4][16 * 16];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row0 = blockIdx.y * 16, col0 = blockIdx.x * 64;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int i = threadIdx.x; i < 16 * 16; i += blockDim.x)
            a_tile[i] = A[(row0 + i / 16) * lda + k0 + i % 16];
        for (int i = threadIdx.x; i < 16 * 64; i += blockDim.x)
            b_tile[i] = B[(k0 + i / 64) * ldb + col0 + i % 64];
        __syncthreads();
        wmma::load_matrix_sync(a, a_tile, 16);
        wmma::load_matrix_sync(b, b_tile + warp * 16, 64);
        wmma::mma_sync(acc, a, b, acc);
        __syncthreads();
    }
    wmma::store_matrix_sync(c_tile[warp], acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int i = lane; i < 16 * 16; i += 32)
        C[(row0 + i / 16) * ldc + col0 + warp * 16 + i % 16] = c_tile[warp][i];
}

// One warp: C = 8 (A B) by eight mma_sync calls, timed with clock64() and clock().
extern "C" __global__ void wmma_mma_cycles(const __half* A, const __half* B, float* C, long long* cycles)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(a, A, 16);
    wmma::load_matrix_sync(b, B, 16);
    const long long t0 = clock64();
    const clock_t c0 = clock();
    for (int i = 0; i < 8; i++) wmma::mma_sync(acc, a, b, acc);
    const long long t1 = clock64();
    const clock_t c1 = clock();
    wmma::store_matrix_sync(C, acc, 16, wmma::mem_row_major);
    if (threadIdx.x == 0) {
        cycles[0] = t1 - t0;
        cycles[1] = (long long)(c1 - c0);
    }
}

// A bug for the CPU backend to catch: the two halves of the warp load from
// different calls (undefined behaviour on a GPU).
extern "C" __global__ void wmma_divergent(const __half* A, float* C)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    wmma::load_matrix_sync(b, A, 16);
    if (threadIdx.x < 16) {
        wmma::load_matrix_sync(a, A, 16);
    } else {
        wmma::load_matrix_sync(a, A + 256, 16);
    }
    wmma::mma_sync(acc, a, b, acc);
    wmma::store_matrix_sync(C, acc, 16, wmma::mem_row_major);
}
