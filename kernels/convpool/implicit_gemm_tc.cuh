// The tensor-core implicit GEMM of steps 7 (tf32) and 8 (fp16), written once for both element
// types; each step's file opens with what changed and launches it for its type.
//
// Data: xt is the input channels-last (N x Hp x Wp x C, zero border included), wr the filters as
// an M x K matrix with k = (r*5 + s)*C + c (K = 25 C), both in the step's element type T and
// made once (the input arrives channels-last, as cuDNN's channels-last path gets it; the
// filters are re-laid out once when the model is loaded). Then 16 bytes of a row of wr, or of a
// pixel's window in xt, are ELEMS consecutive k of one (r, s): one 16-byte copy, no tests but
// "is this k inside K" and "is this pixel inside the image".
//
// The block tile is 128 filters x TC_BN pixels (TC_BN / 4 pooling windows, laid out as in step 6:
// tile column j is window j / 4, element j % 4), 8 warps of 64 x TC_BN / 4, each holding 4 x 2
// (or 4 x 4) wmma accumulator fragments of 16 x 16 floats. K advances BK = 64 bytes of k per slice, through a
// ring of STAGES shared-memory slices filled by cp.async: each thread issues its copies, and the
// SM's asynchronous-copy path (global memory through L2 and L1 to shared memory -- not the DMA
// copy engines that serve host transfers) moves the next STAGES - 1 slices while the tensor cores
// work on this one, and no register holds them on the way. Rows are padded by 16 bytes, so the 8 rows a fragment load reads at once fall in 8
// different groups of 4 banks.
//
// The epilogue pools in shared memory: each warp stores one 16 x 16 accumulator fragment at a
// time to a 1 KB scratch; each lane then reads whole windows as one float4, takes the max, adds
// the bias, clips at zero and writes y (N x M x PE x PF, float).
//
// On the CPU backend cp.async is a plain 16-byte copy (the data simply arrives early) and the
// waits are no-ops; the barriers, the ring indices and everything else are the same code.
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

#ifndef STAGES
#define STAGES 3          // slices in flight (the tile-size sweep tries 2-5)
#endif
#ifndef TC_BN
#define TC_BN 128         // pixels per block tile: 128 (32 pooling windows) or 256 (the sweep tries both)
#endif
#define TC_BM 128         // filters per block tile
#define TC_THREADS 256    // 8 warps: 2 along the filters x 4 along the pixels
#define TC_WM 64          // filters per warp: 4 fragments
#define TC_WN (TC_BN / 4) // pixels per warp: 2 or 4 fragments (8 or 16 windows)
#define TC_A_LOADS (TC_BM * 4 / TC_THREADS)   // 16-byte chunks of A one thread copies per slice (2)
#define TC_B_LOADS (TC_BN * 4 / TC_THREADS)   // ... and of B (2 or 4)
// Blocks per SM the registers are budgeted for: 2 (at most 128 registers) for the 128-pixel tile,
// whose 64 accumulators fit; 1 for the 256-pixel tile, whose 128 do not.
#ifndef TC_MIN_BLOCKS
#define TC_MIN_BLOCKS (TC_BN == 128 ? 2 : 1)
#endif
#define TC_CHUNKS 4       // 16-byte chunks per row of a slice: BK = 64 bytes of k
#define RS 5

__device__ __forceinline__ float tc_max_nan(float a, float b) { return (a > b || a != a) ? a : b; }

__device__ __forceinline__ void copy16_async(void* smem, const void* gmem, bool valid)
{
#ifdef GPULAB_CPU_BACKEND
    *(uint4*)smem = valid ? *(const uint4*)gmem : make_uint4(0, 0, 0, 0);
#else
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
#endif
}

__device__ __forceinline__ void copy_commit()
{
#ifndef GPULAB_CPU_BACKEND
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

template <int PENDING> __device__ __forceinline__ void copy_wait()
{
#ifndef GPULAB_CPU_BACKEND
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
#endif
}

// Fragment shapes and the tf32 rounding, by element type.
template <class T> struct tc_traits;
template <> struct tc_traits<float> {
    typedef wmma::precision::tf32 frag_t;
    enum { FK = 8 };
    template <class Frag> __device__ static void round(Frag& f) {
        for (int e = 0; e < f.num_elements; ++e) f.x[e] = wmma::__float_to_tf32(f.x[e]);
    }
};
template <> struct tc_traits<__half> {
    typedef __half frag_t;
    enum { FK = 16 };
    template <class Frag> __device__ static void round(Frag&) {}
};

// smem: the launch's dynamic shared memory, declared by the calling kernel (extern __shared__).
template <class T>
__device__ void conv_tc_pool(unsigned char* smem, const T* __restrict__ xt, const T* __restrict__ wr, const float* __restrict__ b,
                             float* __restrict__ y, int N, int C, int Hp, int Wp, int M, int E, int F)
{
    typedef tc_traits<T> tr;
    typedef typename tr::frag_t frag_t;
    constexpr int ELEMS = 16 / sizeof(T);            // elements per 16-byte chunk
    constexpr int BK = TC_CHUNKS * ELEMS;            // k per slice
    constexpr int PITCH = BK + ELEMS;                // +16 bytes per row: conflict-free fragment loads
    constexpr int FK = tr::FK;
    T* As = (T*)smem;                                // [STAGES][TC_BM][PITCH]
    T* Bs = As + STAGES * TC_BM * PITCH;             // [STAGES][TC_BN][PITCH]: Bs[pixel][k]

    const int K = RS * RS * C;
    const int PE = E / 2, PF = F / 2;
    const int pooled = N * PE * PF;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / (TC_BN / TC_WN), wn = warp % (TC_BN / TC_WN);
    const int m0 = blockIdx.y * TC_BM;
    const int q0 = blockIdx.x * (TC_BN / 4);

    // This thread copies chunk `ch` of rows `row`, `row + 64`, ... of each slice, of A and of B.
    const int ch = tid % TC_CHUNKS, row = tid / TC_CHUNKS;
    constexpr int ROW_STEP = TC_THREADS / TC_CHUNKS;    // 64
    const T* a_src[TC_A_LOADS];
    bool a_ok[TC_A_LOADS];
    size_t b_base[TC_B_LOADS];
    bool b_ok[TC_B_LOADS];
#pragma unroll
    for (int h = 0; h < TC_A_LOADS; ++h) {
        const int r = row + h * ROW_STEP;
        a_ok[h] = m0 + r < M;
        a_src[h] = wr + (size_t)(a_ok[h] ? m0 + r : 0) * K;
    }
#pragma unroll
    for (int h = 0; h < TC_B_LOADS; ++h) {
        const int jj = row + h * ROW_STEP;           // tile column: window jj / 4, element jj % 4
        const int q = q0 + jj / 4;
        b_ok[h] = q < pooled;
        const int n = b_ok[h] ? q / (PE * PF) : 0, p = b_ok[h] ? q - n * (PE * PF) : 0;
        const int e = 2 * (p / PF) + (jj % 4) / 2, f = 2 * (p % PF) + jj % 2;
        b_base[h] = (((size_t)n * Hp + e) * Wp + f) * C;
    }
    auto load_slice = [&](int t, int slot) {
        const int k = t * BK + ch * ELEMS;
        const bool k_ok = k < K;
        const int rs = k / C, c = k - rs * C;
        const size_t window = ((size_t)(rs / RS) * Wp + rs % RS) * C + c;
#pragma unroll
        for (int h = 0; h < TC_A_LOADS; ++h)
            copy16_async(As + ((size_t)slot * TC_BM + row + h * ROW_STEP) * PITCH + ch * ELEMS,
                         a_src[h] + (k_ok ? k : 0), a_ok[h] && k_ok);
#pragma unroll
        for (int h = 0; h < TC_B_LOADS; ++h)
            copy16_async(Bs + ((size_t)slot * TC_BN + row + h * ROW_STEP) * PITCH + ch * ELEMS,
                         xt + (b_ok[h] && k_ok ? b_base[h] + window : 0), b_ok[h] && k_ok);
    };

    wmma::fragment<wmma::accumulator, 16, 16, FK, float> acc[TC_WM / 16][TC_WN / 16];
#pragma unroll
    for (int i = 0; i < TC_WM / 16; ++i)
#pragma unroll
        for (int j = 0; j < TC_WN / 16; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    const int slices = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) load_slice(s, s);
        copy_commit();
    }
    for (int t = 0; t < slices; ++t) {
        copy_wait<STAGES - 2>();           // slice t has landed (this thread's copies) ...
        __syncthreads();                   // ... and everyone's; slot (t - 1) % STAGES is free
        if (t + STAGES - 1 < slices) load_slice(t + STAGES - 1, (t + STAGES - 1) % STAGES);
        copy_commit();
        const T* A = As + (size_t)(t % STAGES) * TC_BM * PITCH;
        const T* B = Bs + (size_t)(t % STAGES) * TC_BN * PITCH;
#pragma unroll
        for (int ks = 0; ks < BK; ks += FK) {
            wmma::fragment<wmma::matrix_a, 16, 16, FK, frag_t, wmma::row_major> a[TC_WM / 16];
            wmma::fragment<wmma::matrix_b, 16, 16, FK, frag_t, wmma::col_major> bf[TC_WN / 16];
#pragma unroll
            for (int i = 0; i < TC_WM / 16; ++i) {
                wmma::load_matrix_sync(a[i], A + (wm * TC_WM + i * 16) * PITCH + ks, PITCH);
                tr::round(a[i]);
            }
#pragma unroll
            for (int j = 0; j < TC_WN / 16; ++j) {     // col_major: element (k, pixel) at [pixel][k]
                wmma::load_matrix_sync(bf[j], B + (wn * TC_WN + j * 16) * PITCH + ks, PITCH);
                tr::round(bf[j]);
            }
#pragma unroll
            for (int i = 0; i < TC_WM / 16; ++i)
#pragma unroll
                for (int j = 0; j < TC_WN / 16; ++j) wmma::mma_sync(acc[i][j], a[i], bf[j], acc[i][j]);
        }
    }
    copy_wait<0>();
    __syncthreads();                       // the ring is free: its first 8 KB become the warps' scratch

    float* scratch = (float*)smem + warp * 16 * 16;
#pragma unroll
    for (int i = 0; i < TC_WM / 16; ++i) {
#pragma unroll
        for (int j = 0; j < TC_WN / 16; ++j) {
            wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int h = 0; h < 2; ++h) {          // 16 filters x 4 windows: two per lane
                const int idx = lane + 32 * h, r = idx / 4, win = idx % 4;
                const int m = m0 + wm * TC_WM + i * 16 + r;
                const int q = q0 + (wn * TC_WN + j * 16) / 4 + win;
                const float4 v = *(const float4*)(scratch + r * 16 + 4 * win);
                if (m < M && q < pooled) {
                    const int n = q / (PE * PF), p = q - n * (PE * PF);
                    const float top = tc_max_nan(tc_max_nan(v.x, v.y), tc_max_nan(v.z, v.w)) + b[m];
                    y[((size_t)n * M + m) * PE * PF + p] = top < 0.0f ? 0.0f : top;
                }
            }
            __syncwarp();
        }
    }
}
