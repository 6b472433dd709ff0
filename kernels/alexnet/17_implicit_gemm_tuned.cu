// Step 17 -- the fp32 implicit GEMM, tuned: no index arithmetic or padding tests in the main
// loop, warp tiles, and the reduction split across blocks where the tiles are too few.
//
// What changed from step 14: where the im2col work is done. Step 14 spent about 280
// instructions per slice of 8 k on 512 FMAs (the profile: 1.55 warp instructions per FMA
// instruction): each of its 8 loads per slice moved (c, r, s) forward in a loop, tested the
// zero padding on four sides, and multiplied out an address. Here:
//   1. one copy of x with its zero border written out (pad_input, N x C x Hp x Wp with
//      Hp = H + 2P): no load ever falls outside the image, so no load needs a test;
//   2. the filters copied once into a Kp x Mp matrix (filters_to_kxm: transposed, zero rows
//      for k >= K, zero columns for m >= M): a slice of A is one aligned float4 per thread,
//      stored to shared memory as it came, with no tests either;
//   3. a table of Kp offsets, koff[k] = (c*Hp + r)*Wp + s (0 for k >= K, where A is zero),
//      made once per layer on the host: element (k, pixel) of B is x_pixel[koff[k]], where
//      x_pixel points at the pixel's window corner. A thread loads four consecutive k of one
//      pixel per slice: one 16-byte table load (the same address for the whole warp) and four
//      loads of x -- 9 instructions for what cost step 14 about 100.
// The block tile stays 128 x 128 with 8 x 8 per thread, but each warp now owns a 64 x 32
// sub-tile (8 x 4 threads), so its shared-memory loads touch 8 distinct float4 of A and 4 of B:
// one wavefront per load, where step 14's 16-wide warps needed two for B.
//   4. Split K: gridDim.z blocks share one output tile, each summing a contiguous range of
//      slices and adding its partial sums into y (zeroed first) with atomicAdd. The launch
//      (alexnet.gemm_splits) splits only where the tiles leave the last wave of blocks
//      mostly empty -- layer 5: 338 tiles for 264 resident blocks, so its second wave ran
//      28% full; split in 3, it is 1014 shorter tiles in about 4 full waves.
// Every product is still one fp32 FMA, summed in k order within a split; with a split the
// partial sums meet in an order that changes from run to run (differences of about one ulp).
//
// Why faster: 512 FMAs per slice now come with about 55 other instructions instead of 280, so
// at the same issue rate the FMA pipe gets ~90% of the issued instructions instead of 64%,
// and layer 5 loses its near-empty second wave.
//
// Launch (in this order; pad_input only when P > 0, the memset only with splits > 1):
//   pad_input:        grid ceil(N*C*Hp*Wp / 1024), block 256
//   filters_to_kxm:   grid (ceil(Kp / 32), Mp / 32), block (32, 8)
//   memset y to 0
//   conv_igemm_tuned: grid (ceil(N*E*F / 128), Mp / 128, splits), block 256
//
// Prediction: layers 2-4 at ~42 TFLOP/s instead of ~26.5 (FMA pipe ~75% busy instead of 46%),
// layer 5 like layer 3 (its FLOPs are the same), layer 1 still 25% empty (M = 96 of 128 rows);
// the two copies cost ~0.1 ms in all. About 7 ms for the five layers at N = 128, against 11.3.
// (Tried on the H100 and dropped: BK = 16, 1.17x slower in all; a 96 x 128 tile with 6 x 8
// per thread for layer 1, 5% slower than leaving a quarter of a 128-row tile empty; split K on
// layers 1-4, no gain or a loss -- the atomic adds over their large outputs cost more than the
// emptier last wave. The first pad_input, one element per thread, moved 1.4 TB/s; four loads in
// flight per thread cut its time by a quarter to a third. In all, the pads and the filter
// transposes take about 0.2 ms of the five layers' time.)
#define BK 8          // reduction slice (k) per step; the host pads K to Kp, a multiple of BK
#define THREADS 256   // 8 warps: 2 along the filters x 4 along the pixels
#define BM 128        // filters per block tile: 2 warps x WM
#define BN 128        // output pixels per block tile: 4 warps x WN
#define WARPS_M (BM / WM)
#define WM 64         // filters per warp tile: 8 lanes x 2 groups of 4
#define WN 32         // pixels per warp tile: 4 lanes x 2 groups of 4
#define B_LOADS (BK * BN / THREADS)      // elements of each B slice one thread loads (4)
#define TILE 32                          // the filter transpose's square tile
#define PAD_BLOCK 256
#define PAD_ITEMS 4   // elements per thread, all loaded before any is stored: 4 loads in flight

// x (N*C planes of H x W) -> xp (N*C planes of Hp x Wp), with a border of P zeros. Element i
// of xp is handled by thread i % PAD_BLOCK of block i / (PAD_BLOCK * PAD_ITEMS); the launch
// keeps N*C*Hp*Wp under 2^31.
extern "C" __global__ void pad_input(const float* x, float* xp, int planes, int H, int W, int P)
{
    const int Hp = H + 2 * P, Wp = W + 2 * P, plane_size = Hp * Wp;
    const int total = planes * plane_size;
    const int first = blockIdx.x * (PAD_BLOCK * PAD_ITEMS) + threadIdx.x;
    float v[PAD_ITEMS];
#pragma unroll
    for (int u = 0; u < PAD_ITEMS; ++u) {
        const int i = first + u * PAD_BLOCK;
        const int plane = i / plane_size, q = i - plane * plane_size;
        const int row = q / Wp - P, col = q % Wp - P;
        v[u] = (i < total && row >= 0 && row < H && col >= 0 && col < W)
               ? x[((size_t)plane * H + row) * W + col] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < PAD_ITEMS; ++u)
        if (first + u * PAD_BLOCK < total) xp[first + u * PAD_BLOCK] = v[u];
}

// w (M x K) -> wt (Kp x Mp), zero outside M x K. Each block moves a 32 x 32 tile through
// shared memory, so that both the reads (along k) and the writes (along m) are coalesced.
extern "C" __global__ void filters_to_kxm(const float* w, float* wt, int M, int K, int Mp, int Kp)
{
    __shared__ float tile[TILE][TILE + 1];    // +1: the column reads hit 32 different banks
    const int k0 = blockIdx.x * TILE, m0 = blockIdx.y * TILE;
    for (int i = threadIdx.y; i < TILE; i += blockDim.y) {
        const int m = m0 + i, k = k0 + threadIdx.x;
        tile[i][threadIdx.x] = (m < M && k < K) ? w[(size_t)m * K + k] : 0.0f;
    }
    __syncthreads();
    for (int i = threadIdx.y; i < TILE; i += blockDim.y) {
        const int k = k0 + i, m = m0 + threadIdx.x;
        if (k < Kp) wt[(size_t)k * Mp + m] = tile[threadIdx.x][i];
    }
}

// The implicit GEMM: y[n, m, e, f] (+)= sum over this block's k of wt[k, m] * xp_pixel[koff[k]].
// Slices [split * slices_per_split, ...) of the Kp / BK; accumulate != 0: add into y atomically.
// At most 128 registers per thread, so that two blocks (16 warps) fit on an SM, as in step 14.
extern "C" __global__ void __launch_bounds__(THREADS, 2)
conv_igemm_tuned(const float* __restrict__ xp, const float* __restrict__ wt, const int* __restrict__ koff,
                 float* y, int N, int C, int Hp, int Wp, int M, int Mp, int Kp, int U, int E, int F,
                 int slices_per_split, int accumulate)
{
    __shared__ __align__(16) float As[2][BK][BM];   // A slice: As[k][m], as wt stores it
    __shared__ __align__(16) float Bs[2][BK][BN];   // B slice: Bs[k][pixel]
    const int EF = E * F;
    const int NEF = N * EF;
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM;
    const int j0 = blockIdx.x * BN;
    const int t_begin = blockIdx.z * slices_per_split;
    const int t_end = min(Kp / BK, t_begin + slices_per_split);

    // Loading A: float4 number a_col of slice row a_row.
    const int a_row = tid / (BM / 4);
    const int a_col = (tid % (BM / 4)) * 4;
    const float* a_src = wt + (size_t)(t_begin * BK + a_row) * Mp + m0 + a_col;
    // Loading B: pixel column jb, slice rows b_row .. b_row + 3 (warp-uniform).
    const int jb = tid % BN;
    const int b_row = (tid / BN) * B_LOADS;
    const int* k_src = koff + t_begin * BK + b_row;
    const int J = j0 + jb;
    const float* x_pixel = xp;                      // a column past N*E*F reads a valid dummy
    if (J < NEF) {
        const int n = J / EF, p = J - n * EF;
        x_pixel = xp + ((size_t)n * C * Hp + (p / F) * U) * Wp + (p % F) * U;
    }

    // Computing: this warp's 64 x 32 sub-tile; this thread's rows a_read + {0..3} and + 32,
    // columns b_read + {0..3} and + 16.
    const int warp = tid / 32, lane = tid % 32;
    const int a_read = (warp % WARPS_M) * WM + (lane / 4) * 4;
    const int b_read = (warp / WARPS_M) * WN + (lane % 4) * 4;

    float4 a_next = *(const float4*)a_src;
    float b_next[B_LOADS];
    {
        const int4 o = *(const int4*)k_src;
        b_next[0] = x_pixel[o.x];
        b_next[1] = x_pixel[o.y];
        b_next[2] = x_pixel[o.z];
        b_next[3] = x_pixel[o.w];
    }
    *(float4*)&As[0][a_row][a_col] = a_next;
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) Bs[0][b_row + i][jb] = b_next[i];
    __syncthreads();

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    int cur = 0;
    for (int t = t_begin; t < t_end; ++t) {
        const bool more = t + 1 < t_end;
        if (more) {                      // the next slice's loads are in flight while we compute
            a_src += (size_t)BK * Mp;
            k_src += BK;
            a_next = *(const float4*)a_src;
            const int4 o = *(const int4*)k_src;
            b_next[0] = x_pixel[o.x];
            b_next[1] = x_pixel[o.y];
            b_next[2] = x_pixel[o.z];
            b_next[3] = x_pixel[o.w];
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *(const float4*)&As[cur][kk][a_read];
            const float4 a1 = *(const float4*)&As[cur][kk][a_read + WM / 2];
            const float4 b0 = *(const float4*)&Bs[cur][kk][b_read];
            const float4 b1 = *(const float4*)&Bs[cur][kk][b_read + WN / 2];
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
        }
        if (more) {                      // the other buffer: nobody reads it this slice
            *(float4*)&As[cur ^ 1][a_row][a_col] = a_next;
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) Bs[cur ^ 1][b_row + i][jb] = b_next[i];
        }
        __syncthreads();
        cur ^= 1;
    }

    // Write (or add) the 8 x 8 results; pixel j of the tile is (n, e, f) of y (N x M x E x F).
    long long out[8];                    // offset of each of this thread's pixels in y, or -1
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int pixel = j0 + b_read + (j / 4) * (WN / 2) + j % 4;
        const int n = pixel / EF;
        out[j] = pixel < NEF ? (long long)n * M * EF + (pixel - n * EF) : -1;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = m0 + a_read + (i / 4) * (WM / 2) + i % 4;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (out[j] < 0) continue;
            float* dst = y + out[j] + (long long)m * EF;
            if (accumulate) atomicAdd(dst, acc[i][j]);
            else *dst = acc[i][j];
        }
    }
}
