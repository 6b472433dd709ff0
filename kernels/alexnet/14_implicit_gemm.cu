// Step 14 -- implicit GEMM with shared-memory tiles and 8 x 8 register tiles (fp32).
//
// What changed: the loop structure. A convolution is a matrix product in disguise:
//     y[m, (n,e,f)] = sum over k = (c,r,s) of  w[m, k] * x[n, c, e*U - P + r, f*U - P + s]
// A = w is M x K (K = C*R*S; NCHW weights are already this matrix, row-major), and B is the
// K x (N*E*F) "im2col" matrix of input windows, which we never build: each element of B is
// read straight from x when a tile of B is loaded ("implicit" GEMM). Each thread always
// loads the same four rows of the slice, so it keeps their (c, r, s) in registers and moves
// them forward by BK per slice with additions (advance_k): the address of the next load
// never waits for a division or a table lookup. (A first version read (c, r, s) from a
// table in global memory, as step 15 still does; the profiler showed that waiting for
// global loads was then the largest cause of stalls. The counters cut that stall by 40%
// but left the time where it was, within a few percent: see the chapter's profile.)
//
// The block computes a 128 x 128 tile of y (BM filters x BN output pixels) in steps of
// BK = 8 along k: 256 threads copy an 8 x 128 slice of A and of B into shared memory, then
// each thread multiplies an 8 x 8 sub-tile held in 64 registers. Per k, a thread does 64
// FMAs for 4 float4 shared-memory loads; steps 2-13 did one or two loads per FMA. While the
// block computes on one slice, the next slice's global loads are already in flight
// (two shared buffers, one barrier per slice).
//
// Launch: grid (ceil(N*E*F / 128), ceil(M / 128)), block 256, no dynamic shared memory.
//
// Prediction: the inner loop is 94% FMAs; with index arithmetic and the partly empty tiles
// of layer 1 (M = 96 of 128) we expect 50-75% of the FP32 peak on layers 2-5, i.e. about
// 7-10 ms for all five layers at N = 128 -- 30-60x faster than step 2.
#define BM 128        // filters per block tile
#define BN 128        // output pixels per block tile
#define BK 8          // reduction slice (c, r, s) per step
#define TM 8          // filters per thread
#define TN 8          // pixels per thread, as two groups of 4 that lie 64 apart
#define THREADS 256   // (BM / TM) * (BN / TN)
#define A_PITCH (BM + 4)   // +4 floats: the two k-halves of a warp's stores land in different banks
#define A_LOADS (BM * BK / THREADS)   // elements of each A slice one thread loads (4)
#define B_LOADS (BN * BK / THREADS)   // and of each B slice (4)

// One element of the implicit B matrix: x at (image, c, row0 + r, col0 + s), or 0 outside
// the image (zero padding) or past the last channel (k >= K).
__device__ __forceinline__ float load_b(const float* x_img, int c, int r, int s, bool column_valid,
                                        int row0, int col0, int C, int H, int W)
{
    const int row = row0 + r, col = col0 + s;
    if (!column_valid || c >= C || row < 0 || row >= H || col < 0 || col >= W) return 0.0f;
    return x_img[(c * H + row) * W + col];
}

// Move (c, r, s) forward by BK positions of k = (c*R + r)*S + s: additions and compares
// only (at most BK / S + 1 turns of the loop), no division and no memory access.
__device__ __forceinline__ void advance_k(int& c, int& r, int& s, int R, int S)
{
    s += BK;
    while (s >= S) {
        s -= S;
        if (++r == R) { r = 0; ++c; }
    }
}

// At most 128 registers per thread, so that two blocks (16 warps) fit on an SM: while one
// block waits at its barrier the other computes. (Without the bound the compiler took 143,
// one block fitted per SM, and the kernel ran 1.35x longer on the H100.)
extern "C" __global__ void __launch_bounds__(THREADS, 2)
conv_implicit_gemm(const float* x, const float* w, float* y,
                   int N, int C, int H, int W, int M, int R, int S, int U, int P, int E, int F)
{
    __shared__ __align__(16) float As[2][BK][A_PITCH];   // A slice, transposed: As[k][m]
    __shared__ __align__(16) float Bs[2][BK][BN];        // B slice: Bs[k][pixel]
    const int K = C * R * S;
    const int EF = E * F;
    const int NEF = N * EF;
    const int tid = threadIdx.x;
    const int tx = tid % (BN / TN);     // which 4 + 4 pixel columns
    const int ty = tid / (BN / TN);     // which 8 filter rows
    const int m0 = blockIdx.y * BM;
    const int j0 = blockIdx.x * BN;

    // Loading B: this thread always loads pixel column jb, at slice rows kb, kb+2, kb+4, kb+6.
    const int b_row_step = THREADS / BN;
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
    const float* x_img = x + (size_t)image * C * H * W;
    // Loading A: this thread always loads filter row ma, slice columns ka .. ka+3.
    const int ma = tid / (BK / A_LOADS);
    const int ka = (tid % (BK / A_LOADS)) * A_LOADS;
    const bool row_valid = m0 + ma < M;
    const float* w_row = w + (size_t)(row_valid ? m0 + ma : 0) * K;

    // (c, r, s) of this thread's B rows kb + b_row_step * i: one division each, here only.
    int bc[B_LOADS], br[B_LOADS], bs[B_LOADS];
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
        const int k = kb + b_row_step * i;
        bc[i] = k / (R * S);
        br[i] = (k / S) % R;
        bs[i] = k % S;
    }

    float a_next[A_LOADS], b_next[B_LOADS];
    const int slices = (K + BK - 1) / BK;
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
        const int k = ka + i;
        a_next[i] = (row_valid && k < K) ? w_row[k] : 0.0f;
        As[0][ka + i][ma] = a_next[i];
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
        b_next[i] = load_b(x_img, bc[i], br[i], bs[i], column_valid, row0, col0, C, H, W);
        Bs[0][kb + b_row_step * i][jb] = b_next[i];
    }
    __syncthreads();

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int t = 0; t < slices; ++t) {
        const int cur = t & 1;
        const bool more = t + 1 < slices;
        if (more) {                      // issue the next slice's loads before computing
            const int k0 = (t + 1) * BK;
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) {
                const int k = k0 + ka + i;
                a_next[i] = (row_valid && k < K) ? w_row[k] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) {
                advance_k(bc[i], br[i], bs[i], R, S);
                b_next[i] = load_b(x_img, bc[i], br[i], bs[i], column_valid, row0, col0, C, H, W);
            }
        }
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            const float4 a0 = *(const float4*)&As[cur][kk][ty * TM];
            const float4 a1 = *(const float4*)&As[cur][kk][ty * TM + 4];
            const float4 b0 = *(const float4*)&Bs[cur][kk][tx * 4];
            const float4 b1 = *(const float4*)&Bs[cur][kk][BN / 2 + tx * 4];
            const float a[TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b[TN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        if (more) {                      // the other buffer: nobody reads it this slice
#pragma unroll
            for (int i = 0; i < A_LOADS; ++i) As[cur ^ 1][ka + i][ma] = a_next[i];
#pragma unroll
            for (int i = 0; i < B_LOADS; ++i) Bs[cur ^ 1][kb + b_row_step * i][jb] = b_next[i];
        }
        __syncthreads();
    }

    // Write the 8 x 8 results: pixel j of the tile is (image, e, f); y is N x M x E x F.
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + ty * TM + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int pixel = j0 + (j / 4) * (BN / 2) + tx * 4 + (j % 4);
            if (pixel >= NEF) continue;
            const int n = pixel / EF;
            y[((size_t)n * M + m) * EF + (pixel - n * EF)] = acc[i][j];
        }
    }
}
