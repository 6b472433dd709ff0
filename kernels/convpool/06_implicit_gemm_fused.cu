// Step 6 -- the convolution as a matrix product (implicit GEMM) with register tiles, pooled in
// registers.
//
// What changed from step 5: the loop structure. The layer is a matrix product
// Y = A B: A is the filters, M x K with K = C*25 (row m: w[m, c, r, s] in (c, r, s) order), and
// column j of B is the K input values under output pixel j -- never built in memory ("implicit"):
// element (k, j) is read from x at the pixel's window corner plus an offset that depends on k
// alone, koff[k] = (c*Hp + r)*Wp + s, from a table made once per layer shape. Since x already
// carries its zero border, no load needs a bounds test.
// A block computes a 128 (filters) x 128 (pixels) tile of Y, sliding along K 8 at a time through
// shared memory (double-buffered: the next slice's loads are in flight while this one is
// multiplied); each thread owns an 8 x 8 piece in registers: per k, 2 float4 loads of A and 2 of
// B feed 64 FMAs. This is the kernel of the AlexNet chapter's step 17, with one new idea:
//
// The pooling windows are laid out inside the tile. Tile column j is pooled output q = j / 4 of
// the block's 32 and window element j % 4 (top-left, top-right, bottom-left, bottom-right), so a
// thread's 4 consecutive columns are one whole 2 x 2 window: max, bias and ReLU happen in its
// registers, and the tile writes 128 x 32 pooled values. A is read from wt (K x Mp, the filters
// transposed and padded to whole tiles of 128, made once when the model is loaded).
//
// Why faster: step 5 spends about 1.2 instructions per FMA on loads and addressing; here 4 shared
// loads and 1 of 8 global loads serve 64 FMAs -- the FMA pipe can be the limit.
//
// Launch: grid (ceil(N * PE * PF / 32), Mp / 128), block 256. Needs K = 25 C to be a multiple of
// 8 (C a multiple of 8) and E, F even.
//
// Prediction: ~40 TFLOP/s, as the AlexNet step on its long-K layers: ~4 ms for one image, 5x
// faster than step 5; short of cuDNN's fp32 3.84 ms unless the tile is tuned further.
#define RS 5
#define BK 8          // reduction slice (k) per step
#define THREADS 256   // 8 warps: 2 along the filters x 4 along the pixels
#define BM 128        // filters per block tile: 2 warps x WM
#define BN 128        // output pixels per block tile (32 pooling windows): 4 warps x WN
#define WM 64         // filters per warp tile: 8 lanes x 2 groups of 4
#define WN 32         // pixels per warp tile: 4 lanes x 2 groups of 4 (two windows)
#define WARPS_M (BM / WM)
#define B_LOADS (BK * BN / THREADS)      // elements of each B slice one thread loads (4)

__device__ __forceinline__ float max_nan(float a, float b) { return (a > b || a != a) ? a : b; }

extern "C" __global__ void __launch_bounds__(THREADS, 2)
conv_igemm_pool(const float* __restrict__ x, const float* __restrict__ wt, const int* __restrict__ koff,
                const float* __restrict__ b, float* __restrict__ y, int N, int C, int Hp, int Wp, int M,
                int Mp, int E, int F)
{
    __shared__ __align__(16) float As[2][BK][BM];   // A slice: As[k][m], as wt stores it
    __shared__ __align__(16) float Bs[2][BK][BN];   // B slice: Bs[k][pixel]
    const int K = C * RS * RS;
    const int PE = E / 2, PF = F / 2;
    const int pooled = N * PE * PF;
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM;
    const int q0 = blockIdx.x * (BN / 4);          // the block's first pooled output

    // Loading A: float4 number a_col of slice row a_row.
    const int a_row = tid / (BM / 4);
    const int a_col = (tid % (BM / 4)) * 4;
    const float* a_src = wt + (size_t)a_row * Mp + m0 + a_col;
    // Loading B: tile column jb (window element jb % 4 of pooled output q0 + jb / 4), slice rows
    // b_row .. b_row + 3.
    const int jb = tid % BN;
    const int b_row = (tid / BN) * B_LOADS;
    const int* k_src = koff + b_row;
    const float* x_pixel = x;                       // a column past the last window reads a valid dummy
    {
        const int q = q0 + jb / 4;
        if (q < pooled) {
            const int n = q / (PE * PF), p = q - n * (PE * PF);
            const int e = 2 * (p / PF) + (jb % 4) / 2, f = 2 * (p % PF) + jb % 2;
            x_pixel = x + ((size_t)n * C * Hp + e) * Wp + f;
        }
    }

    const int warp = tid / 32, lane = tid % 32;
    const int a_read = (warp % WARPS_M) * WM + (lane / 4) * 4;
    const int b_read = (warp / WARPS_M) * WN + (lane % 4) * 4;

    float4 a_next = *(const float4*)a_src;
    float b_next[B_LOADS];
    {
        const int4 o = *(const int4*)k_src;
        b_next[0] = x_pixel[o.x]; b_next[1] = x_pixel[o.y]; b_next[2] = x_pixel[o.z]; b_next[3] = x_pixel[o.w];
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

    const int slices = K / BK;
    int cur = 0;
    for (int t = 0; t < slices; ++t) {
        const bool more = t + 1 < slices;
        if (more) {
            a_src += (size_t)BK * Mp;
            k_src += BK;
            a_next = *(const float4*)a_src;
            const int4 o = *(const int4*)k_src;
            b_next[0] = x_pixel[o.x]; b_next[1] = x_pixel[o.y]; b_next[2] = x_pixel[o.z]; b_next[3] = x_pixel[o.w];
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *(const float4*)&As[cur][kk][a_read];
            const float4 a1 = *(const float4*)&As[cur][kk][a_read + WM / 2];
            const float4 b0 = *(const float4*)&Bs[cur][kk][b_read];
            const float4 b1 = *(const float4*)&Bs[cur][kk][b_read + WN / 2];
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float bb[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * bb[j];
        }
        if (more) {
            *(float4*)&As[cur ^ 1][a_row][a_col] = a_next;
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) Bs[cur ^ 1][b_row + i][jb] = b_next[i];
        }
        __syncthreads();
        cur ^= 1;
    }

    // Columns b_read + 0..3 are one window, b_read + 16..19 another: pool each in registers.
#pragma unroll
    for (int g = 0; g < 2; ++g) {
        const int q = q0 + (b_read + g * (WN / 2)) / 4;
        if (q >= pooled) continue;
        const int n = q / (PE * PF), p = q - n * (PE * PF);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int m = m0 + a_read + (i / 4) * (WM / 2) + i % 4;
            if (m >= M) continue;
            const float v = max_nan(max_nan(acc[i][4 * g], acc[i][4 * g + 1]),
                                    max_nan(acc[i][4 * g + 2], acc[i][4 * g + 3])) + b[m];
            y[((size_t)n * M + m) * PE * PF + p] = v < 0.0f ? 0.0f : v;
        }
    }
}
