// Step 19 -- cp.async: a 4-stage pipeline from global to shared memory without registers.
//
// What changed from step 18: how a slice gets into shared memory. Step 18 loads the next
// slice into registers (uint4s) while the tensor cores work on this one, then stores them to
// shared memory: one slice in flight, and every byte passes through the registers and costs
// a load and a store instruction. Here each thread issues cp.async: a 16-byte copy from global
// to shared memory that needs no register and completes in the background. Four slices' stages
// rotate in shared memory (80 KB per block): while the warps multiply slice t, slices t+1..t+3
// are already on their way. cp.async.commit_group closes the copies of one slice and
// cp.async.wait_group<2> waits until at most two slices are still outstanding, so slice t has
// landed; a __syncthreads then makes it visible to all warps and also says that every warp has
// finished with slice t - 1, whose stage the next copies overwrite. Copies whose k or pixel is
// not real pass a source size of 0: cp.async then writes 16 zero bytes and reads nothing.
//
// Why it should be faster: three slices (48 KB per block, 96 KB per SM) in flight instead of
// one hides the latency of global memory, which step 18 could only cover with the other
// block's warps; and the 4 load + 4 store instructions per thread per slice become 4 cp.async.
// Why it might not be: the slices of this GEMM mostly come from L2 (the tiles of one column of
// blocks read the same filters, neighbouring pixels share input), whose latency the double
// buffer of step 18 may already hide.
//
// Launch: as step 18 (filter runs once per layer; the channels-last copy and the GEMM every
// call), the GEMM named conv_mma_cp_async with
// alexnet_tc.TILES["conv_mma_cp_async"].shared_bytes(2) = 81,920 bytes of dynamic shared memory.
//
// Prediction: 10-20% faster than step 18 on layers 2-5, where the GEMM's main loop is the time.
//
// Step 18's zero_tiles and store_tiles (the accumulators and the staged epilogue) come from
// mma_tile.cuh.
#include <cuda_fp16.h>
#include <common/ptx.h>
#include "nhwc_runs.h"
#include "mma_tile.cuh"

#define BK 32                  // halves of k per slice: 64 bytes per row
#define CHUNKS (BK / 8)        // 16-byte chunks per row of a slice
#define PITCH (BK + 8)         // halves per row in shared memory: 80 bytes, so the 8 rows one
                               // ldmatrix phase reads start 5 chunks apart: 8 different banks

extern "C" __global__ void to_padded_nhwc_half(const __half* x, __half* xt, int C, int H, int W, int Cp, int Hp,
                                               int Wp, int P)
{
    extern __shared__ __align__(16) __half row[];
    to_padded_nhwc<__half>(x, xt, C, H, W, Cp, Hp, Wp, P, row);
}

extern "C" __global__ void to_filter_runs_half(const __half* w, __half* wt, int M, int C, int R, int S, int Cp,
                                               int L, int Kp)
{
    to_filter_runs<__half>(w, wt, M, C, R, S, Cp, L, Kp);
}

// y[n][m][e][f] = sum_k wt[m][k] * xt(pixel, k): an implicit GEMM of M x (N*E*F) x (R*L).
// Arguments: Kp wt's row pitch (a multiple of BK); Q = R * L / 8 chunks of k that are real;
// Lc = L / 8 chunks per run; row_pitch = Wp * Cp halves between padded rows.
template <int BM, int BN, int WM, int WN, int STAGES>
__device__ __forceinline__ void conv_mma(const __half* __restrict__ xt, const __half* __restrict__ wt,
                                         __half* __restrict__ y, unsigned char* smem, int N, int M, int Kp,
                                         int Q, int Lc, int row_pitch, int Cp, int Hp, int Wp, int U, int E,
                                         int F)
{
    constexpr int WARPS_N = BN / WN;
    constexpr int THREADS = 32 * (BM / WM) * WARPS_N;
    constexpr int MT = WM / 16, NT = WN / 8;            // m16 x n8 tiles per warp
    constexpr int B_ROWS = BN * CHUNKS / THREADS;       // pixels each thread loads per slice
    constexpr int A_LOADS = (BM * CHUNKS + THREADS - 1) / THREADS;
    static_assert(BN * CHUNKS % THREADS == 0 && THREADS % CHUNKS == 0 && THREADS % BN == 0 && NT % 2 == 0,
                  "tile shape");
    __half* As = reinterpret_cast<__half*>(smem);       // [STAGES][BM][PITCH]
    __half* Bs = As + STAGES * BM * PITCH;                 // [STAGES][BN][PITCH], pixel-major

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int m0 = blockIdx.y * BM, j0 = blockIdx.x * BN;
    const int EF = E * F, NEF = N * EF;
    const int slices = Kp / BK;

    // This thread's B chunks: pixels jj = tid / CHUNKS + i * (THREADS / CHUNKS), chunk c = tid % CHUNKS.
    const int c_mine = tid % CHUNKS;
    int pixel_base[B_ROWS];
    bool pixel_ok[B_ROWS];
#pragma unroll
    for (int i = 0; i < B_ROWS; ++i) {
        const int j = j0 + tid / CHUNKS + i * (THREADS / CHUNKS);
        pixel_ok[i] = j < NEF;
        const int n = pixel_ok[i] ? j / EF : 0, p = pixel_ok[i] ? j - n * EF : 0;
        const int e = p / F, f = p - e * F;
        pixel_base[i] = ((n * Hp + e * U) * Wp + f * U) * Cp;
    }
    // The run and chunk of this thread's next B chunk (q = slice * CHUNKS + c_mine), advanced
    // slice by slice in the order the slices are loaded.
    int q = c_mine, run = c_mine / Lc, in_run = c_mine - run * Lc;

    auto load_slice = [&](int slice, int stage) {
        __half* as = As + stage * BM * PITCH;
        __half* bs = Bs + stage * BN * PITCH;
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            const int id = tid + i * THREADS;
            if (A_LOADS * THREADS == BM * CHUNKS || id < BM * CHUNKS) {
                const int row = id / CHUNKS, c = id % CHUNKS;
                const bool ok = m0 + row < M;
                const __half* src = wt + (size_t)(ok ? m0 + row : 0) * Kp + slice * BK + 8 * c;
                cp_async16(as + row * PITCH + 8 * c, src, ok ? 16 : 0);
            }
        }
        const int koff = run * row_pitch + 8 * in_run;
        const bool k_ok = q < Q;
#pragma unroll
        for (int i = 0; i < B_ROWS; ++i) {
            const int row = tid / CHUNKS + i * (THREADS / CHUNKS);
            const bool ok = k_ok && pixel_ok[i];
            cp_async16(bs + row * PITCH + 8 * c_mine, xt + (ok ? pixel_base[i] + koff : 0), ok ? 16 : 0);
        }
        q += CHUNKS;
        in_run += CHUNKS;
        while (in_run >= Lc) { in_run -= Lc; ++run; }
    };

    float acc[MT][NT][4];
    zero_tiles(acc);

    // Prologue: STAGES - 1 slices in flight. Every iteration commits one group (empty at the
    // end), so "wait until STAGES - 2 groups remain" always means "slice t has landed".
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < slices) load_slice(s, s);
        cp_async_commit();
    }
    for (int t = 0; t < slices; ++t) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();       // slice t visible to all; everyone is done with slice t - 1's stage
        const int next = t + STAGES - 1;
        if (next < slices) load_slice(next, next % STAGES);
        cp_async_commit();

        const __half* as = As + (t % STAGES) * BM * PITCH;
        const __half* bs = Bs + (t % STAGES) * BN * PITCH;
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
            unsigned a[MT][4], b[NT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i) {     // matrices: rows 0-7 | 8-15, k 0-7 | 8-15
                const int row = wm * WM + i * 16 + lane % 16;
                ldmatrix_x4(a[i], as + row * PITCH + 8 * (2 * kk + lane / 16));
            }
#pragma unroll
            for (int j = 0; j < NT; j += 2) {  // matrices: pixels 0-7 k 0-7, k 8-15, pixels 8-15 ...
                const int row = wn * WN + j * 8 + lane % 8 + 8 * (lane / 16);
                unsigned r[4];
                ldmatrix_x4(r, bs + row * PITCH + 8 * (2 * kk + (lane / 8) % 2));
                b[j][0] = r[0]; b[j][1] = r[1]; b[j + 1][0] = r[2]; b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int j = 0; j < NT; ++j) mma_16816(acc[i][j], a[i], b[j]);
        }
    }
    cp_async_wait<0>();
    __syncthreads();           // every warp is done with the slices: reuse the memory for y

    store_tiles<BM, BN, WM, WN>(acc, smem, y, N, M, E, F);
}

// 128 filters x 128 pixels, 8 warps of 64 x 32, 4 stages in flight.
extern "C" __global__ void __launch_bounds__(256, 2)
conv_mma_cp_async(const __half* xt, const __half* wt, __half* y, int N, int M, int Kp, int Q, int Lc,
                  int row_pitch, int Cp, int Hp, int Wp, int U, int E, int F)
{
    extern __shared__ __align__(128) unsigned char smem[];
    conv_mma<128, 128, 64, 32, 4>(xt, wt, y, smem, N, M, Kp, Q, Lc, row_pitch, Cp, Hp, Wp, U, E, F);
}
