// Step 13 -- both convolutions on mma.sync, each fed straight from shared memory (no tiles
// built element by element), ReLU and pool in the registers of the product.
//
// What changed from step 11: step 11 put conv2 alone on the tensor cores and spent its time
// building B tiles element by element (a 2-byte load and a 2-byte store per element: about
// 73,000 warp instructions per image, the tensor pipe busy 7%); conv1 stayed step 10's FP32
// kernel, 0.75 ms of the 2.46. Now:
//   conv2 (conv2_mma_nhwc_relu_pool, one image per block):
//   1. Layout. The block copies its image into shared memory channels-last (NHWC): a pixel's
//      4 channels are 8 bytes, so the 7 taps (s) of one filter row (r) at a pixel are 28
//      contiguous halves, padded to 32 with the next pixel (its weight is zero). k is
//      ordered (r, s, c); one k-step of 16 is half a filter row. Two copies, the second
//      shifted by one pixel, so that every pixel's 32 halves start on a 16-byte boundary
//      (even columns in copy 0, odd in copy 1): ldmatrix wants 16-byte rows.
//   2. No B tiles. A row of the product's A operand (a pixel) is 16 contiguous bytes of that
//      copy, so one ldmatrix.x4 loads a 16-pixel x 16-k fragment straight into the registers
//      mma.sync reads.
//   3. Roles swapped: pixels are the product's 16 rows, the 16 filters its columns (two
//      m16n8k16 per fragment); the filters' fragments (56 registers) are packed once on the
//      host in the order the lanes read them (a network's constants, laid out once at load
//      time, as an inference engine does).
//   4. Reuse across rows. A warp computes 8 pooling windows: 16 pixels (each window's two
//      columns) on its two output rows oy = 2py and 2py + 1. The fragment of input row
//      2py + i serves filter row r = i of the top output row and r = i - 1 of the bottom
//      one: 8 input rows x 2 k-halves = 16 ldmatrix.x4 feed 56 mma.sync. Each lane then
//      holds all four pixels of its window for 4 filters: ReLU and the 2 x 2 max-pool are
//      a few max instructions in registers.
//   conv1 (conv1_mma_relu_pool, below): on the tensor cores too, with its 4 filters x 2 output
//   rows as the product's 8 columns (see its comment).
//
// Why it should be faster: per image, conv2 issues about 37 tiles x (16 ldmatrix + 56 mma +
// ~40 epilogue and addressing) ~ 4,200 warp instructions instead of ~73,000, and conv1 leaves
// the FP32 pipe (2.5e10 flops, 0.37 ms at its 67 TFLOP/s floor). What is left are the
// tensor pipe, shared memory and DRAM, each about 0.1 ms per layer at N = 10,000 on the H100:
//   conv2 tensor: 37 x 56 = 2,072 mma.m16n8k16 (4,096 flops each) per image: 8.5e10 flops
//                 (85% of it useful: k 28 -> 32, 289 -> 296 windows) at 989 TFLOP/s: 0.086 ms;
//         shared: 37 x 16 ldmatrix.x4 x 4 wavefronts = 2,368 per image, one per clock per SM
//                 (132 SMs, 1.98 GHz): 0.091 ms;
//         DRAM:   fp16 in (128 MB) + pooled fp16 out (92 MB) = 220 MB at 3.35 TB/s: 0.066 ms.
//   conv1 tensor: 200 tiles x 4 mma = 800 per image: 3.3e10 flops: 0.033 ms;
//         shared: 200 tiles x 16 four-byte loads (one wavefront each) = 3,200 per image: 0.12 ms;
//         DRAM:   fp32 images in (296 MB) + pooled fp16 out (128 MB) = 424 MB: 0.127 ms.
// Why it might not be: mma.sync reaches only part of the dense peak on sm_90 (wgmma the
// rest); one image (conv2) or a band of 8 pooled rows (conv1) per block leaves each block's
// copy-in exposed, hidden only by the other blocks on the SM; conv2's 37 tiles split 10/9/9/9
// over 4 warps; conv1 rounds the images to fp16 (11-bit significands), which may change a
// few of the 10,000 predictions.
// Prediction: each layer ~0.15-0.2 ms at N = 10,000 (conv1 ~4x step 11's, conv2 ~10x), both
// ~0.35 ms: the chapter's 1.2 ms target met with room, and faster than cuDNN's fastest fp16
// conv2 alone (~1 ms). Both layers then sit near their memory floors, so a wgmma version
// (which raises only the tensor pipe's rate) could gain a few percent at most.
//
// Launch: conv1_mma_relu_pool: grid (BANDS = 5, N), block 128; conv2_mma_nhwc_relu_pool:
// grid N, block 128; static shared memory 7,744 and 26,880 bytes.
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
// within filter row r (s = 4h + s', zero where s = 7). See lenet.launchers.pack_conv2_filters.
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

// ---------------------------------------------------------------- conv1
// conv1 has one channel and 4 filters: as a product with the filters as its columns, 4 of
// mma's 8 would be padding. Instead the 8 columns are (filter m, output row d): column
// 2m + d holds filter m shifted down by d rows, so one product gives a pixel's two output
// rows oy and oy + 1 for all 4 filters, over k = 8 input rows x 8 taps (s = 7 padding):
// 4 m16n8k16 for 16 pixels x 2 rows, 77% of the multiply-adds useful. Each lane's
// accumulators are then the 2 x 2 pixels of one pooling window for one filter: the pool is
// 3 max instructions. One input row's 8 taps at a pixel start anywhere, not on 16 bytes,
// so the A fragments come from 4-byte loads (two taps each) of two fp16 copies of the rows,
// the second shifted by one pixel: every pair starts on 4 bytes in one of them.
#define IH1 86             // input side
#define M1 4               // filters
#define PW1 40             // pooled side
#define BAND 8             // pooled rows per block: 16 output rows, 22 input rows
#define BANDS (PW1 / BAND)                  // 5 blocks per image
#define BAND_ROWS (2 * BAND + KS - 1)       // 22
#define SLOTS1 88          // halves per row of a copy: 86 pixels, the shift, the s = 7 pad
#define TILES1 (BAND * PW1 / TILE_W)        // 40 tiles of 8 windows per block, 10 per warp

// wpack1: [k-step 0..3][lane][register q] = (k 2t + 8q, +1; column g), k-step p covering
// input rows 2p (q = 0) and 2p + 1 (q = 1), taps s = 2t, 2t + 1; column g is filter g / 2 at
// row offset d = g % 2: the weight w[g / 2][2p + q - d][s] (zero outside r 0-6, s 0-6).
// See lenet.launchers.pack_conv1_filters.
extern "C" __global__ void __launch_bounds__(WARPS * 32)
conv1_mma_relu_pool(const float* __restrict__ x, const uint2* __restrict__ wpack, __half* __restrict__ p, int N)
{
    __shared__ __align__(16) __half xs[2][BAND_ROWS][SLOTS1];
    const int band = blockIdx.x, n = blockIdx.y;
    if (n >= N) return;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    // Copy in the band's 22 rows as fp16: pixel c at slot c of copy 0 and slot c + 1 of copy 1.
    const float* xn = x + (size_t)n * IH1 * IH1 + (size_t)2 * BAND * band * IH1;
    for (int i = threadIdx.x; i < BAND_ROWS * IH1 / 2; i += blockDim.x) {
        const int row = i / (IH1 / 2), col = 2 * (i % (IH1 / 2));
        const float2 v = *reinterpret_cast<const float2*>(xn + row * IH1 + col);   // 8-byte aligned: all even
        const __half lo = __float2half(v.x), hi = __float2half(v.y);
        *reinterpret_cast<__half2*>(&xs[0][row][col]) = __halves2half2(lo, hi);
        xs[1][row][col + 1] = lo;
        xs[1][row][col + 2] = hi;
    }
    // Slots no pixel fills; copy 1's slot 87 is read as the s = 7 pad of pixel 79 (weight 0).
    for (int row = threadIdx.x; row < BAND_ROWS; row += blockDim.x) {
        xs[0][row][86] = xs[0][row][87] = xs[1][row][0] = xs[1][row][87] = __float2half(0.0f);
    }
    unsigned b[4][2];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const uint2 v = wpack[k * 32 + lane];
        b[k][0] = v.x;
        b[k][1] = v.y;
    }
    __syncthreads();

    const int g = lane / 4, t = lane % 4;
    const unsigned* rows0 = reinterpret_cast<const unsigned*>(&xs[0][0][0]);
    const unsigned* rows1 = reinterpret_cast<const unsigned*>(&xs[1][0][0]);
    for (int tile = warp; tile < TILES1; tile += WARPS) {
        const int py = tile / (PW1 / TILE_W), px = (tile % (PW1 / TILE_W)) * TILE_W + g;   // band-local row
        // Row g of A: the window's left pixel 2 px (even: copy 0, slot 2 px + 2t); row g + 8:
        // its right pixel 2 px + 1 (copy 1, slot 2 px + 2t + 2). Words: halves / 2.
        const unsigned* left = rows0 + (2 * py * SLOTS1 + 2 * px + 2 * t) / 2;
        const unsigned* right = rows1 + (2 * py * SLOTS1 + 2 * px + 2 * t + 2) / 2;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < 4; ++k) {            // input rows 2k and 2k + 1 below oy
            const unsigned a[4] = {left[2 * k * SLOTS1 / 2], right[2 * k * SLOTS1 / 2],
                                   left[(2 * k + 1) * SLOTS1 / 2], right[(2 * k + 1) * SLOTS1 / 2]};
            mma_16816(acc, a, b[k]);
        }
        // acc: (left, filter t, row oy), (left, t, oy + 1), (right, t, oy), (right, t, oy + 1).
        const float v = fmaxf(fmaxf(acc[0], acc[1]), fmaxf(acc[2], acc[3]));
        p[(((size_t)n * M1 + t) * PW1 + BAND * band + py) * PW1 + px] = __float2half(fmaxf(v, 0.0f));
    }
}
