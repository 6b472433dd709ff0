// Step 15 -- implicit GEMM on the tensor cores: fp16 inputs, fp32 sums (nvcuda::wmma).
//
// What changed from step 14: the 8 x 8 FMA tiles become tensor-core matrix multiplies.
// nvcuda::wmma::mma_sync multiplies a 16 x 16 half tile of A by a 16 x 16 half tile of B and
// adds into a 16 x 16 float accumulator, one warp at a time: 8192 FLOPs per call, a
// warp-collective call that compiles to two HMMA.16816 instructions on sm_80/sm_90 (4096
// FLOPs each), where a warp's FFMA instruction does 64. x and w are __half in device memory (half the bytes); the
// sums stay float32 and y is rounded to half once.
//
// The block computes a 128 x 128 tile of y with 8 warps in a 2 x 4 grid, each warp a 64 x 32
// sub-tile (4 x 2 accumulator fragments), stepping through k in slices of BK = 32. As in
// step 14, the next slice's global loads are issued before the tensor cores start on the
// current one, and land in a second shared buffer (one barrier per slice). B is read through
// a table of each k's (c, r, s) offsets (k_table), as step 14's first version did (step 14
// itself now moves counters forward instead); where K is a multiple of 8 (layers 2-5) the
// weights are read 16 bytes at a time.
//
// Launch: grid (ceil(N*E*F / 128), ceil(M / 128)), block 256, no dynamic shared memory.
//
// Prediction: the tensor cores do fp16 matrix products 15x faster than the FP32 units (on
// paper); this kernel will be limited by feeding them (the im2col loads and their bounds
// tests, 2-byte loads of B), so 3-5x over step 14: about 2 ms for all five layers at N = 128.
//
// This step's epilogue, store_fragments (the accumulators staged per warp and written to y),
// is in wmma_store.cuh: step 16 keeps it unchanged.
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

#define BM 128         // filters per block tile
#define BN 128         // output pixels per block tile
#define BK 32          // reduction slice per step: two 16-deep wmma steps
#define THREADS 256    // 8 warps
#define WARPS_N 4      // warps along the pixel dimension (2 along the filters)
#define WM 64          // filters per warp: 4 fragments
#define WN 32          // pixels per warp: 2 fragments
#define FRAG 16        // wmma tile: m16n16k16
#define A_PITCH (BK + 8)   // +8 halves (16 bytes): rows stay 32-byte aligned every 16 rows,
#define B_PITCH (BN + 8)   // and the 8 rows one phase of a fragment load reads start in 8 different banks

#include "wmma_store.cuh"   // store_fragments (step 15)

__device__ __forceinline__ __half load_b(const __half* x_img, const int* k_table, int k, int K,
                                         bool column_valid, int row0, int col0, int H, int W)
{
    if (!column_valid || k >= K) return __float2half(0.0f);
    const int offset = k_table[2 * k];          // c*H*W + r*W + s
    const int rs = k_table[2 * k + 1];          // (r << 16) | s
    const int row = row0 + (rs >> 16);
    const int col = col0 + (rs & 0xffff);
    if (row < 0 || row >= H || col < 0 || col >= W) return __float2half(0.0f);
    return x_img[offset + row0 * W + col0];
}

// At most 128 registers, so that two blocks (16 warps) share an SM. Measured on the H100:
// with one block per SM (164 registers, no cap) the kernel took 1.7x longer; the cap costs
// 16 bytes of spills (local_bytes in the run's resource table).
extern "C" __global__ void __launch_bounds__(THREADS, 2)
conv_implicit_gemm_wmma(const __half* x, const __half* w, const int* k_table, __half* y,
                        int N, int C, int H, int W, int M, int R, int S, int U, int P, int E, int F)
{
    // Two buffers for the A and B slices: the block computes on one while the next is stored
    // into the other, so one barrier per slice suffices (2 x 18.9 KB + 8 KB: under 48 KB).
    __shared__ __align__(32) __half As[2][BM][A_PITCH];  // A slice: As[buf][m][k]
    __shared__ __align__(32) __half Bs[2][BK][B_PITCH];  // B slice: Bs[buf][k][pixel]
    __shared__ __align__(32) float Cs[THREADS / 32][FRAG * FRAG];   // per-warp staging for y
    const int K = C * R * S;
    const int EF = E * F;
    const int NEF = N * EF;
    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int wm = warp / WARPS_N;
    const int wn = warp % WARPS_N;
    const int m0 = blockIdx.y * BM;
    const int j0 = blockIdx.x * BN;

    // Loading B: pixel column jb, slice rows kb, kb+2, ..., kb+30.
    const int jb = tid % BN;
    const int kb = tid / BN;
    const int J = j0 + jb;
    const bool column_valid = J < NEF;
    int image = 0, row0 = 0, col0 = 0;
    if (column_valid) {
        image = J / EF;
        const int p = J - image * EF;
        row0 = (p / F) * U - P;
        col0 = (p % F) * U - P;
    }
    const __half* x_img = x + (size_t)image * C * H * W;
    // Loading A: filter row ma, slice columns ka .. ka+15.
    const int ma = tid / 2;
    const int ka = (tid % 2) * 16;
    const bool row_valid = m0 + ma < M;
    const __half* w_row = w + (size_t)(row_valid ? m0 + ma : 0) * K;
    const bool vector_a = (K % 8) == 0;    // then 8 halves at a time are 16-byte aligned

    uint4 a_vector[2];          // the next A slice, 8 halves per uint4 (layers 2-5)
    __half a_scalar[16];        // the same, one half at a time (layer 1: K = 363)
    __half b_next[16];
    const int slices = (K + BK - 1) / BK;

    // Global memory -> registers for slice t, and registers -> shared buffer buf.
    auto load_slice = [&](int t) {
        const int k0 = t * BK;
        if (vector_a) {
#pragma unroll
            for (int g = 0; g < 2; ++g) {
                const int k = k0 + ka + 8 * g;
                a_vector[g] = (row_valid && k < K) ? *(const uint4*)(w_row + k) : make_uint4(0, 0, 0, 0);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                const int k = k0 + ka + i;
                a_scalar[i] = (row_valid && k < K) ? w_row[k] : __float2half(0.0f);
            }
        }
#pragma unroll
        for (int i = 0; i < 16; ++i)
            b_next[i] = load_b(x_img, k_table, k0 + kb + 2 * i, K, column_valid, row0, col0, H, W);
    };
    auto store_slice = [&](int buf) {
        if (vector_a) {
#pragma unroll
            for (int g = 0; g < 2; ++g) *(uint4*)&As[buf][ma][ka + 8 * g] = a_vector[g];
        } else {
#pragma unroll
            for (int i = 0; i < 16; ++i) As[buf][ma][ka + i] = a_scalar[i];
        }
#pragma unroll
        for (int i = 0; i < 16; ++i) Bs[buf][kb + 2 * i][jb] = b_next[i];
    };

    wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> acc[WM / FRAG][WN / FRAG];
#pragma unroll
    for (int i = 0; i < WM / FRAG; ++i)
#pragma unroll
        for (int j = 0; j < WN / FRAG; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    load_slice(0);
    store_slice(0);
    __syncthreads();
    for (int t = 0; t < slices; ++t) {
        const int cur = t & 1;
        const bool more = t + 1 < slices;
        if (more) load_slice(t + 1);     // these loads are in flight during the MMAs below
#pragma unroll
        for (int ks = 0; ks < BK; ks += FRAG) {
            wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, __half, wmma::row_major> a[WM / FRAG];
            wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, __half, wmma::row_major> b[WN / FRAG];
#pragma unroll
            for (int i = 0; i < WM / FRAG; ++i)
                wmma::load_matrix_sync(a[i], &As[cur][wm * WM + i * FRAG][ks], A_PITCH);
#pragma unroll
            for (int j = 0; j < WN / FRAG; ++j)
                wmma::load_matrix_sync(b[j], &Bs[cur][ks][wn * WN + j * FRAG], B_PITCH);
#pragma unroll
            for (int i = 0; i < WM / FRAG; ++i)
#pragma unroll
                for (int j = 0; j < WN / FRAG; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        if (more) store_slice(cur ^ 1);  // nobody reads the other buffer during this slice
        __syncthreads();
    }

    // Each warp stages one 16 x 16 fragment at a time in shared memory and writes it to y
    // (N x M x E x F): fragment columns are pixels, which scatter to (image, e, f).
    float* stage = Cs[warp];
    store_fragments(acc, stage, y, m0 + wm * WM, j0 + wn * WN, M, NEF, EF, lane);
}
