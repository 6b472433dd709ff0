// Step 13 -- conv2 on mma.sync fed by ldmatrix from a channels-last copy of the image, each
// loaded fragment used for two output rows.
//
// What changed from step 11 (conv2; conv1 stays step 10's kernel writing fp16, as in step 11):
//   1. Layout. The block copies its image into shared memory channels-last (NHWC): a pixel's
//      4 channels are 8 bytes, so the 7 taps (s) of one filter row (r) at a pixel are 28
//      contiguous halves, padded to 32 with the next pixel (its weight is zero). k is
//      ordered (r, s, c); one k-step of 16 is half a filter row. Two copies, the second
//      shifted by one pixel, so that every pixel's 32 halves start on a 16-byte boundary
//      (even columns in copy 0, odd in copy 1): ldmatrix wants 16-byte rows.
//   2. No B tiles. A row of the product's A operand (a pixel) is 16 contiguous bytes of that
//      copy, so one ldmatrix.x4 loads a 16-pixel x 16-k fragment straight into the registers
//      mma.sync reads; step 11 built each 208 x 16 tile element by element (a 2-byte load
//      and a 2-byte store per element) and then loaded it again with wmma.
//   3. Roles swapped: pixels are the product's 16 rows, the 16 filters its columns (two
//      m16n8k16 per fragment), and the filters' fragments (56 registers) are packed once on
//      the host in the order the lanes read them (a network's constants, laid out once at
//      load time, as an inference engine does).
//   4. Reuse across rows. A warp computes 8 pooling windows: 16 pixels (each window's two
//      columns) on its two output rows oy = 2py and 2py + 1. The fragment of input row
//      2py + i serves filter row r = i of the top output row and r = i - 1 of the bottom
//      one: 8 input rows x 2 k-halves = 16 ldmatrix.x4 feed 56 mma.sync. Each lane then
//      holds all four pixels of its window for 4 filters: ReLU and the 2 x 2 max-pool are
//      a few max instructions in registers, with no shared-memory round trip.
//
// Why it should be faster: the instructions per image fall from about 73,000 warp
// instructions (step 11's profile, N = 1,000) to about 37 tiles x (16 ldmatrix + 56 mma +
// ~40 epilogue and addressing) ~ 4,200, so the tensor pipe, shared memory and DRAM are
// left as the limits, and all three are near 0.1 ms at N = 10,000 on the H100:
//   tensor: 37 x 56 = 2,072 mma.m16n8k16 (4,096 flops each) per image, 8.5e10 flops
//           (17% of it padding: k 28 -> 32, 289 -> 296 windows) at 989 TFLOP/s: 0.086 ms;
//           mma.sync reaches roughly 60% of the dense peak on sm_90 (wgmma is needed for
//           the rest): ~0.14 ms.
//   shared: 37 x 16 ldmatrix.x4 x 4 wavefronts = 2,368 per image; 132 SMs at 1.98 GHz
//           serve one each per clock: 0.091 ms.
//   DRAM:   fp16 in (128 MB) and pooled fp16 out (92 MB): 220 MB at 3.35 TB/s: 0.066 ms.
// Why it might not be: one image per block leaves each block's copy-in exposed (several
// blocks per SM hide it only in part), the last of the 37 tiles has 1 window of 8, and
// 4 warps share 37 tiles unevenly (10 against 9).
// Prediction: conv2 ~0.15-0.2 ms at N = 10,000 (8-10x step 11's 1.71 ms); with step 10's
// conv1 (0.75 ms, FP32 FMA-bound) both layers ~0.9 ms: the chapter's 1.2 ms target met,
// conv1 then 80% of the time. A wgmma version of this kernel would shave at most the
// difference between ~0.14 and ~0.09 ms: it cannot pay more than ~5% of the total.
//
// Launch: grid N (one image per block), block WARPS x 32, static shared memory (SMEM_BYTES).
#include <cuda_fp16.h>
#include <common/ptx.h>   // mma_16816, ldmatrix_x4

#define C2 4               // input channels
#define IH2 40             // input side
#define M2 16              // filters
#define KS 7
#define PW2 17             // pooled side
#define WINDOWS (PW2 * PW2)                 // 289 pooling windows per image
#define TILE_W 8                            // pooling windows per warp tile: 16 pixel rows
#define TILES ((WINDOWS + TILE_W - 1) / TILE_W)   // 37, the last one 1 window of 8
#define SLOTS 42           // pixel slots per row of a copy: 40 pixels, the shift, the s = 7 pad
#define ROW_BYTES (SLOTS * C2 * 2)          // 336: a multiple of 16, so every row stays aligned
#define COPY_BYTES (IH2 * ROW_BYTES)        // 13,440
#define SMEM_BYTES (2 * COPY_BYTES)         // 26,880
#define WARPS 4            // 4 warps x 9-10 tiles; several blocks per SM overlap copy-in and math
#define FRAG_REGS (KS * 2 * 2)              // (r, k-half, n-tile) B fragments: 28 x 2 registers

// wpack: the filters as uint2 per (r, k-half h, n-tile j, lane): the two registers of the
// B fragment, (k 2t..2t+1, filter 8j+g) and (k 2t+8..2t+9, filter 8j+g), k = 16h + 4s' + c
// within filter row r (s = 4h + s', zero where s = 7). See lenet.steps.pack_conv2_filters.
extern "C" __global__ void __launch_bounds__(WARPS * 32)
conv2_mma_nhwc_relu_pool(const __half* __restrict__ x, const uint2* __restrict__ wpack,
                         __half* __restrict__ p, int N)
{
    __shared__ __align__(16) unsigned char xs[SMEM_BYTES];   // copy 0, then copy 1
    const int n = blockIdx.x;
    if (n >= N) return;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    // Copy in, NCHW -> NHWC: 8 pixels of a row per thread (a 16-byte load per channel).
    // Pixel column xc goes to slot xc of copy 0 and slot xc + 1 of copy 1.
    const __half* xn = x + (size_t)n * C2 * IH2 * IH2;
    for (int i = threadIdx.x; i < IH2 * IH2 / 8; i += blockDim.x) {
        const int row = i / (IH2 / 8), col0 = 8 * (i % (IH2 / 8));
        uint4 ch[C2];
#pragma unroll
        for (int c = 0; c < C2; ++c)
            ch[c] = *reinterpret_cast<const uint4*>(xn + (c * IH2 + row) * IH2 + col0);
        const __half* h[C2];
#pragma unroll
        for (int c = 0; c < C2; ++c) h[c] = reinterpret_cast<const __half*>(&ch[c]);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            __half2 lo = __halves2half2(h[0][j], h[1][j]), hi = __halves2half2(h[2][j], h[3][j]);
            uint2 px;
            px.x = *reinterpret_cast<unsigned*>(&lo);
            px.y = *reinterpret_cast<unsigned*>(&hi);
            *reinterpret_cast<uint2*>(xs + row * ROW_BYTES + (col0 + j) * 8) = px;
            *reinterpret_cast<uint2*>(xs + COPY_BYTES + row * ROW_BYTES + (col0 + j + 1) * 8) = px;
        }
    }
    // The slots no pixel fills: copy 0's 40-41, copy 1's 0 and 41. Slot 40 (41 in copy 1) is
    // read as the s = 7 pad of the last column, multiplied by a zero weight: it must be finite.
    for (int row = threadIdx.x; row < IH2; row += blockDim.x) {
        const uint2 zero = make_uint2(0, 0);
        *reinterpret_cast<uint2*>(xs + row * ROW_BYTES + 40 * 8) = zero;
        *reinterpret_cast<uint2*>(xs + row * ROW_BYTES + 41 * 8) = zero;
        *reinterpret_cast<uint2*>(xs + COPY_BYTES + row * ROW_BYTES) = zero;
        *reinterpret_cast<uint2*>(xs + COPY_BYTES + row * ROW_BYTES + 41 * 8) = zero;
    }
    // The filters' fragments, once per block: 28 coalesced 8-byte loads per lane.
    unsigned b[FRAG_REGS][2];
#pragma unroll
    for (int f = 0; f < FRAG_REGS; ++f) {
        const uint2 v = wpack[f * 32 + lane];
        b[f][0] = v.x;
        b[f][1] = v.y;
    }
    __syncthreads();

    // ldmatrix: lanes 8q..8q+7 give rows 0-7 of matrix q. Matrices 0/1 are pixel rows 0-7
    // (left columns) / 8-15 (right columns) at k 0-7; 2/3 the same at k 8-15.
    const int arow = lane % 8, right = (lane / 8) % 2, kchunk = lane / 16;
    const int g = lane / 4, t = lane % 4;
    for (int tile = warp; tile < TILES; tile += WARPS) {
        // This lane's ldmatrix row: window tile*8 + arow (the last tile's missing windows
        // repeat window 288 and are not stored), its left or right column.
        const int wa = min(tile * TILE_W + arow, WINDOWS - 1);
        const int ox = 2 * (wa % PW2) + right, oy = 2 * (wa / PW2);
        const unsigned char* base = xs + right * COPY_BYTES + oy * ROW_BYTES + (ox + right) * 8 + kchunk * 16;
        float acc[2][2][4];                      // [output row oy, oy+1][n-tile][fragment]
#pragma unroll
        for (int v = 0; v < 2; ++v)
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[v][j][e] = 0.0f;
#pragma unroll
        for (int i = 0; i < KS + 1; ++i)         // input rows oy + i
#pragma unroll
            for (int h = 0; h < 2; ++h) {        // k-halves of the filter row: s 0-3, s 4-7
                unsigned a[4];
                ldmatrix_x4(a, base + i * ROW_BYTES + h * 32);
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    if (i < KS) mma_16816(acc[0][j], a, b[(i * 2 + h) * 2 + j]);
                    if (i > 0) mma_16816(acc[1][j], a, b[((i - 1) * 2 + h) * 2 + j]);
                }
            }
        // Lane (g, t) holds window tile*8 + g: rows g (left) and g + 8 (right) of both
        // output rows, for filters 8j + 2t and 8j + 2t + 1.
        const int w = tile * TILE_W + g;
        if (w < WINDOWS) {
#pragma unroll
            for (int j = 0; j < 2; ++j)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float v = fmaxf(fmaxf(acc[0][j][e], acc[0][j][e + 2]), fmaxf(acc[1][j][e], acc[1][j][e + 2]));
                    const int m = 8 * j + 2 * t + e;
                    p[((size_t)n * M2 + m) * WINDOWS + w] = __float2half(fmaxf(v, 0.0f));
                }
        }
    }
}
