// Step 16 -- tensor cores fed from a channels-last (NHWC) copy of the input.
//
// What changed from step 15: the layout the GEMM reads. Step 15 builds each B slice one
// 2-byte element at a time: a table lookup, a bounds test and a load per element, 16 per
// thread per slice -- the profiler shows its warps waiting on those loads while the tensor
// pipe idles. Here the step first copies x into NHWC order (channels innermost, padded with
// zeros to Cp channels) and the filters into M x (R x S x Cp) rows, and orders k as
// (r, s, c). Then 8 consecutive k of one output pixel are 8 consecutive halves in memory:
// one 16-byte load, and one bounds test per 8 elements. A slice of B (32 k x 128 pixels) is
// two 16-byte loads per thread instead of sixteen 2-byte ones. cuDNN's fast fp16 kernels
// work on NHWC for the same reason. Cp is C when C is a multiple of 8 (layers 2-5), else C
// rounded up to 4 or to a multiple of 8; with Cp = 4 (layer 1: C = 3) each 8-half chunk
// spans two (r, s) and is read as two 8-byte loads. Filter rows are padded to Kp, a
// multiple of 8 halves, so that every row starts 16-byte aligned.
//
// Cost of the copies: x is read once and written once in half precision (about 0.1 ms for
// layer 1 at N = 128, less for the others); the filters are re-laid out every call too (at
// most 2.6 MB). Both are inside the timed region. The input and output stay NCHW.
//
// Launch (three kernels, in this order):
//   nchw_to_nhwc_half:   grid (ceil(H*W / 32), ceil(Cp / 32), N), block (32, 8)
//   filters_to_rsc_half: grid ceil(M*Kp / 256), block 256
//   conv_implicit_gemm_wmma_nhwc: grid (ceil(N*E*F / 128), ceil(M / 128)), block 256
//
// Prediction: the B slice costs an eighth of the instructions, so the tensor pipe is fed
// 2-3x faster on layers 2-5; layer 1 (C = 3 padded to 8: 2.7x more MACs, but cheap ones)
// about as fast as step 15. About 2-2.5 ms for the five layers at N = 128.
// (Measured before layer 1 got the Cp = 4 path: with Cp = 8, 2.7x the MACs of layer 1, it
// was 25% slower than step 15 there.)
//
// Built on wmma_store.cuh: step 15's epilogue, store_fragments, here staging in the memory of
// the A slices once the loop is done.
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

#define TILE 32            // the transpose's square tile
#define BM 128             // filters per block tile
#define BN 128             // output pixels per block tile
#define BK 32              // reduction slice: 32 consecutive (r, s, c), four 8-half chunks
#define THREADS 256        // 8 warps
#define WARPS_N 4          // warps along the pixels (2 along the filters)
#define WM 64              // filters per warp: 4 fragments
#define WN 32              // pixels per warp: 2 fragments
#define FRAG 16            // wmma tile: m16n16k16
#define PITCH (BK + 8)     // halves per smem row: +8 keeps rows 16-byte aligned, staggers banks
#define CHUNK 8            // halves per 16-byte load

#include "wmma_store.cuh"   // store_fragments (step 15)

// x (N x C x H*W) -> xt (N x H*W x Cp), channels C..Cp-1 set to zero. Each block moves a
// 32 x 32 tile through shared memory, so both the reads and the writes are coalesced.
extern "C" __global__ void nchw_to_nhwc_half(const __half* x, __half* xt, int N, int C, int HW, int Cp)
{
    __shared__ __half tile[TILE][TILE + 2];    // +2 halves: column reads spread over banks
    const int n = blockIdx.z;
    const int p0 = blockIdx.x * TILE;
    const int c0 = blockIdx.y * TILE;
    for (int i = threadIdx.y; i < TILE; i += blockDim.y) {
        const int c = c0 + i, p = p0 + threadIdx.x;
        tile[i][threadIdx.x] = (c < C && p < HW) ? x[((size_t)n * C + c) * HW + p] : __float2half(0.0f);
    }
    __syncthreads();
    for (int i = threadIdx.y; i < TILE; i += blockDim.y) {
        const int p = p0 + i, c = c0 + threadIdx.x;
        if (p < HW && c < Cp) xt[((size_t)n * HW + p) * Cp + c] = tile[threadIdx.x][i];
    }
}

// w (M x C x R x S) -> wt (M rows of Kp halves): row m of the GEMM's A matrix, k in (r, s, c)
// order, zero for c >= C and for k >= K = R*S*Cp.
extern "C" __global__ void filters_to_rsc_half(const __half* w, __half* wt, int M, int C, int R, int S, int Cp)
{
    const int K = R * S * Cp;
    const int Kp = (K + 7) & ~7;
    const int total = M * Kp;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int m = i / Kp;
        const int k = i - m * Kp;
        const int c = k % Cp;
        const int rs = k / Cp;
        wt[i] = (k < K && c < C) ? w[((size_t)m * C + c) * R * S + rs] : __float2half(0.0f);
    }
}

// The implicit GEMM of step 15 on xt and wt: K = R*S*Cp, k = (r*S + s)*Cp + c; Cp is 4 or a
// multiple of 8.
extern "C" __global__ void __launch_bounds__(THREADS, 2)
conv_implicit_gemm_wmma_nhwc(const __half* xt, const __half* wt, __half* y, int N, int Cp, int H,
                             int W, int M, int R, int S, int U, int P, int E, int F)
{
    __shared__ __align__(32) __half As[2][BM][PITCH];    // A slice: As[buf][m][k]
    __shared__ __align__(32) __half Bs[2][BN][PITCH];    // B slice, pixel-major: Bs[buf][pixel][k]
    const int K = R * S * Cp;
    const int Kp = (K + 7) & ~7;            // wt's row pitch
    const int EF = E * F;
    const int NEF = N * EF;
    const int tid = threadIdx.x;
    const int warp = tid / 32;
    const int lane = tid % 32;
    const int wm = warp / WARPS_N;
    const int wn = warp % WARPS_N;
    const int m0 = blockIdx.y * BM;
    const int j0 = blockIdx.x * BN;

    // Loading B: chunk q (k = k0 + 8q .. +7) of pixels jb and jb + 64; four neighbouring
    // threads read one pixel's 64 contiguous bytes when the slice lies in one (r, s).
    const int q = tid % (BK / CHUNK);
    int pixel_base[2], row0[2], col0[2];
    bool pixel_valid[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int J = j0 + tid / (BK / CHUNK) + h * (BN / 2);
        pixel_valid[h] = J < NEF;
        const int n = pixel_valid[h] ? J / EF : 0;
        const int p = pixel_valid[h] ? J - n * EF : 0;
        row0[h] = (p / F) * U - P;
        col0[h] = (p % F) * U - P;
        pixel_base[h] = n * H * W;                       // this image's first pixel in xt
    }
    // Loading A: filter row ma, chunks ka/8 and ka/8 + 1 of the slice.
    const int ma = tid / 2;
    const int ka = (tid % 2) * 16;
    const bool row_valid = m0 + ma < M;
    const __half* w_row = wt + (size_t)(row_valid ? m0 + ma : 0) * Kp;
    const int half_chunk = (Cp % CHUNK) ? CHUNK / 2 : CHUNK;    // halves one B load reads

    uint4 a_next[2], b_next[2];
    const int slices = (K + BK - 1) / BK;
    auto load_slice = [&](int t) {
        const int k0 = t * BK;
#pragma unroll
        for (int g = 0; g < 2; ++g) {
            const int k = k0 + ka + CHUNK * g;
            a_next[g] = (row_valid && k < Kp) ? *(const uint4*)(w_row + k) : make_uint4(0, 0, 0, 0);
        }
        if (half_chunk == CHUNK) {           // Cp % 8 == 0: the 8 halves share one (r, s)
            const int k = k0 + CHUNK * q;
            const int rs = k / Cp;
            const int c = k - rs * Cp;
            const int r = rs / S, s = rs - (rs / S) * S;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0[h] + r, col = col0[h] + s;
                const bool inside = pixel_valid[h] && k < K && row >= 0 && row < H && col >= 0 && col < W;
                b_next[h] = inside ? *(const uint4*)(xt + ((size_t)pixel_base[h] + row * W + col) * Cp + c)
                                   : make_uint4(0, 0, 0, 0);
            }
        } else {                             // Cp == 4: two (r, s), 4 channels each
            uint2 part[2][2];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int k = k0 + CHUNK * q + 4 * j;
                const int rs = k / 4;
                const int r = rs / S, s = rs - (rs / S) * S;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = row0[h] + r, col = col0[h] + s;
                    const bool inside = pixel_valid[h] && k < K && row >= 0 && row < H && col >= 0 && col < W;
                    part[h][j] = inside ? *(const uint2*)(xt + ((size_t)pixel_base[h] + row * W + col) * 4)
                                        : make_uint2(0, 0);
                }
            }
#pragma unroll
            for (int h = 0; h < 2; ++h)
                b_next[h] = make_uint4(part[h][0].x, part[h][0].y, part[h][1].x, part[h][1].y);
        }
    };
    auto store_slice = [&](int buf) {
#pragma unroll
        for (int g = 0; g < 2; ++g) *(uint4*)&As[buf][ma][ka + CHUNK * g] = a_next[g];
#pragma unroll
        for (int h = 0; h < 2; ++h)
            *(uint4*)&Bs[buf][tid / (BK / CHUNK) + h * (BN / 2)][CHUNK * q] = b_next[h];
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
        if (more) load_slice(t + 1);     // in flight while the tensor cores work on slice t
#pragma unroll
        for (int ks = 0; ks < BK; ks += FRAG) {
            wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, __half, wmma::row_major> a[WM / FRAG];
            wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, __half, wmma::col_major> b[WN / FRAG];
#pragma unroll
            for (int i = 0; i < WM / FRAG; ++i)
                wmma::load_matrix_sync(a[i], &As[cur][wm * WM + i * FRAG][ks], PITCH);
#pragma unroll
            for (int j = 0; j < WN / FRAG; ++j)   // col_major: element (k, pixel) at [pixel][k]
                wmma::load_matrix_sync(b[j], &Bs[cur][wn * WN + j * FRAG][ks], PITCH);
#pragma unroll
            for (int i = 0; i < WM / FRAG; ++i)
#pragma unroll
                for (int j = 0; j < WN / FRAG; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        if (more) store_slice(cur ^ 1);
        __syncthreads();
    }

    // The slices are done (the loop ended on a barrier): reuse As as per-warp staging for y.
    float* stage = (float*)&As[0][0][0] + warp * FRAG * FRAG;
    store_fragments(acc, stage, y, m0 + wm * WM, j0 + wn * WN, M, NEF, EF, lane);
}
