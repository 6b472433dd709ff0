// Step 11 -- conv2 on the tensor cores (fp16 inputs, fp32 sums), ReLU and pool fused.
//
// What changed from step 10 (for conv2; conv1 stays step 10's kernel, writing its pooled output
// as fp16): conv2 becomes a matrix product per image, Y (16 filters x 1156 pixels) =
// W (16 x 196, zero-padded to 208 = 13 x 16) times the image's unrolled input (208 x 1156),
// done by nvcuda::wmma 16 x 16 x 16 tiles: one mma_sync (two HMMA.16816 instructions on sm_90)
// is 4096 multiply-adds for the warp, where a warp's FFMA is 32. A block takes one image: its
// 4 x 40 x 40 input (fp16, 12.8 KB) and the weights go to shared memory, and each warp loads the
// weights into its own 13 A fragments, kept in its registers for the whole block. Each warp then builds 16-pixel B tiles (208 x 16: every (c, r, s) for 16 pixels, an
// im2col in shared memory through a table of offsets) and multiplies. The pixels are numbered
// so that each 2 x 2 pooling window is 4 consecutive columns of Y: the epilogue reads the
// 16 x 16 result back from shared memory and writes 16 filters x 4 pooled values.
//
// Why it should be faster: the multiply-adds cost almost nothing now; what remains is building
// the B tiles (208 x 16 halves per 16 pixels: a load and a store per element) and the bytes.
// Why it might not be: that im2col is about 35x the input's size in shared-memory traffic, and 12 of
// the 208 rows of every tile are padding.
// Prediction: conv2 ~0.4 ms at N = 10,000 (4x step 10); with step 10's conv1 in fp16 output,
// about 1 ms for both convolutions. fp16 rounding of the inputs (11-bit significands) may
// change a few predictions out of 10,000.
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

#define C2 4
#define IH2 40
#define M2 16
#define KS 7
#define CE2 34                     // conv output side
#define PW2 17                     // pooled side
#define TAPS 196                   // C2 * KS * KS
#define KP 208                     // TAPS padded to 13 k-steps of 16
#define KSTEPS (KP / 16)
#define PIXELS (CE2 * CE2)         // 1156
#define TILES ((PIXELS + 15) / 16) // 73, the last one a quarter full
// Warps per block: 8 by default (81,728 bytes of shared memory); the launch compiles 4 or 2 where a
// GPU allows less per block (a T4: 65,536), giving each warp more of the 73 tiles to do.
#ifndef WARPS
#define WARPS 8
#endif

//: Dynamic shared memory of one block, in bytes (the launch passes it).
#define SMEM_BYTES (2 * M2 * KP + 2 * WARPS * 16 * KP + 4 * WARPS * 256 + 4 * KP + 2 * C2 * IH2 * IH2)

// The pooled output as __half (conv2_wmma_relu_pool_half, what the fp16 pipeline's fc1 reads)
// or as float (conv2_wmma_relu_pool).
template <typename OutT>
__device__ __forceinline__ void conv2_wmma_body(const __half* __restrict__ x, const __half* __restrict__ w,
                                                OutT* __restrict__ p, int N, unsigned char* smem)
{
    __half* As = reinterpret_cast<__half*>(smem);               // 16 x KP weights, row-major
    __half* Bs = As + M2 * KP;                                  // per warp: 16 pixels x KP, column-major
    float* Cs = reinterpret_cast<float*>(Bs + WARPS * 16 * KP); // per warp: 16 x 16 results
    int* koff = reinterpret_cast<int*>(Cs + WARPS * 256);       // k -> c*1600 + r*40 + s
    __half* xs = reinterpret_cast<__half*>(koff + KP);          // the image, 4 x 40 x 40
    const int n = blockIdx.x;
    if (n >= N) return;
    for (int i = threadIdx.x; i < M2 * KP; i += blockDim.x) {
        const int m = i / KP, k = i % KP;
        As[i] = k < TAPS ? w[m * TAPS + k] : __float2half(0.0f);
    }
    for (int k = threadIdx.x; k < KP; k += blockDim.x) {
        // Padded k's read any input (their weights are zero, and the input is finite).
        koff[k] = k < TAPS ? (k / (KS * KS)) * IH2 * IH2 + ((k / KS) % KS) * IH2 + k % KS : 0;
    }
    const uint4* src = reinterpret_cast<const uint4*>(x + (size_t)n * C2 * IH2 * IH2);   // 8 halves each
    for (int i = threadIdx.x; i < C2 * IH2 * IH2 / 8; i += blockDim.x) reinterpret_cast<uint4*>(xs)[i] = src[i];
    __syncthreads();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[KSTEPS];
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) wmma::load_matrix_sync(a[kk], As + kk * 16, KP);
    int my_off[7];                                               // this lane's k's: lane + 32 i
#pragma unroll
    for (int i = 0; i < 7; ++i) my_off[i] = lane + 32 * i < KP ? koff[lane + 32 * i] : 0;
    __half* Bw = Bs + warp * 16 * KP;
    float* Cw = Cs + warp * 256;
    for (int tile = warp; tile < TILES; tile += WARPS) {
        for (int j = 0; j < 16; ++j) {
            const int pix = tile * 16 + j;                       // pooled window pix/4, corner pix%4
            int base = 0;
            if (pix < PIXELS) {
                const int pooled = pix >> 2, corner = pix & 3;
                base = (2 * (pooled / PW2) + (corner >> 1)) * IH2 + 2 * (pooled % PW2) + (corner & 1);
            }
#pragma unroll
            for (int i = 0; i < 7; ++i)
                if (lane + 32 * i < KP) Bw[j * KP + lane + 32 * i] = xs[base + my_off[i]];
        }
        __syncwarp();
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
            wmma::load_matrix_sync(b, Bw + kk * 16, KP);
            wmma::mma_sync(acc, a[kk], b, acc);
        }
        wmma::store_matrix_sync(Cw, acc, 16, wmma::mem_row_major);   // Cw[m * 16 + pixel]
        __syncwarp();
        for (int e = lane; e < 64; e += 32) {                       // 16 filters x 4 pooled values
            const int m = e >> 2, q = e & 3, pooled = tile * 4 + q;
            if (pooled < PW2 * PW2) {
                const float* v = Cw + m * 16 + 4 * q;
                const float best = fmaxf(fmaxf(v[0], v[1]), fmaxf(v[2], v[3]));
                p[((size_t)n * M2 + m) * PW2 * PW2 + pooled] = (OutT)fmaxf(best, 0.0f);
            }
        }
        __syncwarp();
    }
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
conv2_wmma_relu_pool(const __half* __restrict__ x, const __half* __restrict__ w, float* __restrict__ p, int N)
{
    extern __shared__ __align__(32) unsigned char smem[];
    conv2_wmma_body(x, w, p, N, smem);
}

extern "C" __global__ void __launch_bounds__(WARPS * 32)
conv2_wmma_relu_pool_half(const __half* __restrict__ x, const __half* __restrict__ w, __half* __restrict__ p,
                          int N)
{
    extern __shared__ __align__(32) unsigned char smem[];
    conv2_wmma_body(x, w, p, N, smem);
}
