// The batched matrix product of the Winograd steps (23 and 24): for each of the T transform
// points xi = blockIdx.z (T = 16 for F(2x2,3x3), 36 for F(4x4,3x3)),
//
//     Mt[xi][m][p] = sum over c of U[xi][c][m] * V[xi][c][p]
//
// with U the transformed filters (Kp x Mp per point), V the transformed input tiles (Kp x Pp
// per point) and Mt the products (Mp x Pp per point), all row-major. The host pads Kp to a
// multiple of WG_BK and Mp, Pp to multiples of the 128 x 128 block tile, and the transforms
// write zeros into the padding, so no load or store here needs a bounds test.
//
// The loop is step 17's without the im2col: a 128 x 128 tile per block, slices of 8 along c,
// 8 x 8 results per thread in registers (64 FMAs for four 16-byte shared-memory loads), each
// warp a 64 x 32 sub-tile (one wavefront per shared load), and the next slice's two float4
// global loads in flight while the current one is multiplied (double-buffered shared memory).
// Both operands are now plain rows, so a slice of either is one aligned float4 per thread.
//
// Below the GEMM, the transforms' loads that steps 23 and 24 share: an input patch
// (load_input_patch) and a 3 x 3 filter (load_filter_3x3).
#ifndef ALEXNET_WINOGRAD_GEMM_H
#define ALEXNET_WINOGRAD_GEMM_H

#define WG_BK 8          // reduction slice (channels) per step; the host pads C to Kp, a multiple
#define WG_THREADS 256   // 8 warps: 2 along the filters x 4 along the tiles
#define WG_BM 128        // filters per block tile: 2 warps x WG_WM
#define WG_BN 128        // input tiles per block tile: 4 warps x WG_WN
#define WG_WM 64         // filters per warp tile: 8 lanes x 2 groups of 4
#define WG_WN 32         // input tiles per warp tile: 4 lanes x 2 groups of 4
#define WG_WARPS_M (WG_BM / WG_WM)

// One block's 128 x 128 tile of Mt[blockIdx.z]; As and Bs are the kernel's shared buffers.
__device__ __forceinline__ void winograd_gemm_tile(const float* __restrict__ U, const float* __restrict__ V,
                                                   float* __restrict__ Mt, int Mp, int Pp, int Kp,
                                                   float (*As)[WG_BK][WG_BM], float (*Bs)[WG_BK][WG_BN])
{
    const int tid = threadIdx.x;
    const int xi = blockIdx.z;
    const int m0 = blockIdx.y * WG_BM;
    const int p0 = blockIdx.x * WG_BN;
    const int slices = Kp / WG_BK;

    // Loading: float4 number col of slice row row, for A (U) and B (V) alike.
    const int row = tid / (WG_BM / 4);
    const int col = (tid % (WG_BM / 4)) * 4;
    const float* a_src = U + ((size_t)xi * Kp + row) * Mp + m0 + col;
    const float* b_src = V + ((size_t)xi * Kp + row) * Pp + p0 + col;

    // Computing: this warp's 64 x 32 sub-tile; this thread's rows a_read + {0..3} and + 32,
    // columns b_read + {0..3} and + 16.
    const int warp = tid / 32, lane = tid % 32;
    const int a_read = (warp % WG_WARPS_M) * WG_WM + (lane / 4) * 4;
    const int b_read = (warp / WG_WARPS_M) * WG_WN + (lane % 4) * 4;

    float4 a_next = *(const float4*)a_src;
    float4 b_next = *(const float4*)b_src;
    *(float4*)&As[0][row][col] = a_next;
    *(float4*)&Bs[0][row][col] = b_next;
    __syncthreads();

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;

    int cur = 0;
    for (int t = 0; t < slices; ++t) {
        const bool more = t + 1 < slices;
        if (more) {                      // the next slice's loads are in flight while we compute
            a_src += (size_t)WG_BK * Mp;
            b_src += (size_t)WG_BK * Pp;
            a_next = *(const float4*)a_src;
            b_next = *(const float4*)b_src;
        }
#pragma unroll
        for (int kk = 0; kk < WG_BK; ++kk) {
            const float4 a0 = *(const float4*)&As[cur][kk][a_read];
            const float4 a1 = *(const float4*)&As[cur][kk][a_read + WG_WM / 2];
            const float4 b0 = *(const float4*)&Bs[cur][kk][b_read];
            const float4 b1 = *(const float4*)&Bs[cur][kk][b_read + WG_WN / 2];
            const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < 8; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
        }
        if (more) {                      // the other buffer: nobody reads it this slice
            *(float4*)&As[cur ^ 1][row][col] = a_next;
            *(float4*)&Bs[cur ^ 1][row][col] = b_next;
        }
        __syncthreads();
        cur ^= 1;
    }

    // Two float4 stores per result row: columns b_read + {0..3} and b_read + 16 + {0..3}.
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = m0 + a_read + (i / 4) * (WG_WM / 2) + i % 4;
        float* dst = Mt + ((size_t)xi * Mp + m) * Pp + p0 + b_read;
        *(float4*)dst = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
        *(float4*)(dst + WG_WN / 2) = make_float4(acc[i][4], acc[i][5], acc[i][6], acc[i][7]);
    }
}

// Step 23: the input transform's A x A patch d of thread p = blockIdx.x * BLOCK + threadIdx.x,
// channel c = blockIdx.y -- rows STEP th - P .. + A - 1 and columns STEP tw - P .. + A - 1 of
// image n's plane, with p = (n, th, tw) -- zeros outside the image and for p >= N * TH * TW or
// c >= C (the GEMM's padding). Step 24 reads 6 x 6 patches 4 apart. p and c are computed here
// again, not passed: passed, the test on p comes out with its operands swapped in the PTX.
template <int A, int STEP, int BLOCK>
__device__ __forceinline__ void load_input_patch(float (&d)[A][A], const float* __restrict__ x, int N, int C, int H,
                                                 int W, int P, int TH, int TW)
{
    const int p = blockIdx.x * BLOCK + threadIdx.x;
    const int c = blockIdx.y;
    const int tiles = TH * TW;
    if (p < N * tiles && c < C) {
        const int n = p / tiles, t = p - n * tiles, th = t / TW, tw = t - th * TW;
        const int row0 = STEP * th - P, col0 = STEP * tw - P;
        const float* plane = x + ((size_t)n * C + c) * H * W;
#pragma unroll
        for (int i = 0; i < A; ++i)
#pragma unroll
            for (int j = 0; j < A; ++j) {
                const int r = row0 + i, s = col0 + j;
                d[i][j] = (r >= 0 && r < H && s >= 0 && s < W) ? plane[r * W + s] : 0.0f;
            }
    } else {
#pragma unroll
        for (int i = 0; i < A; ++i)
#pragma unroll
            for (int j = 0; j < A; ++j) d[i][j] = 0.0f;
    }
}

// Step 23: filter m's 3 x 3 weights of channel c, in double (zeros for m >= M or c >= C).
__device__ __forceinline__ void load_filter_3x3(double (&g)[3][3], const float* __restrict__ w, int m, int c, int M,
                                                int C)
{
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int s = 0; s < 3; ++s) g[r][s] = (m < M && c < C) ? (double)w[((size_t)m * C + c) * 9 + 3 * r + s] : 0.0;
}

#endif
