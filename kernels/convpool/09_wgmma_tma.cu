// Step 9 -- Hopper's tools: wgmma fed by the copy engine (TMA), warp-specialized and persistent.
//
// What changed from step 8: the whole main loop, now the hopper chapter's best GEMM
// (kernels/common/hopper_conv.cuh; the hopper chapter's steps 1-7 teach each piece). Step 8's
// warps each copied their share of a slice with cp.async, loaded fragments with ldmatrix and
// issued one mma.sync of 16 x 8 x 16 at a time. Here, per block of 384 threads: one producer
// thread has the copy engine bring each slice -- a box of the channels-last input {64 channels,
// 8 columns, 16 rows, 1 image} at the slice's tap (r, s), and 64 k of 256 filters -- round a
// ring of 4 slots of 48 KiB, and two consumer warpgroups each multiply their 64 pixels by the 256
// filters with wgmma straight from shared memory (m64n256k16: 64 x 256 x 16 multiply-adds over the
// warpgroup's 128 threads, 2,048 per thread per instruction -- its 128 accumulators times k = 16 --
// the work of 128 mma.sync, with no fragment loads at all), one group of products kept in flight. A block stays on
// its SM and walks over tiles (one block per SM). The input is read as stored: no im2col and no
// copy of it; the k loop walks 25 taps x 4 chunks of 64 channels.
//
// The epilogue: a tile is 16 rows x 8 columns of one image, so each warp's 16 accumulator rows
// are two neighbouring image rows of 8 pixels (row 16 w + g + 8 (e / 2) of the accumulators is
// pixel (2 w + e / 2, g)): the 2 x 2 window's two rows are in the same thread, its two columns in
// lanes 4 apart (one shuffle). Bias, ReLU and the max-pool are done in registers, and y (float,
// N x M x 112 x 112) is written pooled.
//
// Why faster: in the runs this step was predicted from, the hopper chapter's GEMM ran at 682
// TFLOP/s (4096^3, H100) where step 8 ran at 260 (the chapters glue the current runs' numbers);
// this layer is that GEMM with M = 1.6 M pixels, N = 256, K = 6400, and its A slices come from L2
// (each input pixel is read by 25 taps of neighbouring tiles) as the GEMM's did.
//
// Accuracy: as step 8 (fp16 products summed in float): ~3e-4.
//
// Launch: one block of 384 threads per SM (fewer for fewer tiles), 197,632 bytes of dynamic
// shared memory, a 4-D tensor map of the input (box {64, 8, 16, 1}, 128-byte swizzle) and a
// 2-D one of the filters as M x 25 Cp halves (box {64, 256}). Needs C a multiple of 8 (16-byte
// pixel rows) and sm_90a.
//
// Prediction: at batch 32 about 600 TFLOP/s (8.8 ms; the GEMM's 682 less its tail of 95.03 tile
// waves and the epilogue), 2.3x step 8 and 10% under cuDNN's fp16 channels-last 9.8 ms.
#include <convpool/wgmma_pool.cuh>    // the epilogue above, shared with steps 10-11

extern "C" __global__ void __launch_bounds__(CONV_THREADS, 1)
conv_wgmma_pool(const __grid_constant__ CUtensorMap map_x, const __grid_constant__ CUtensorMap map_w,
                const float* __restrict__ b, float* __restrict__ y, int N, int C, int Cp, int M, int E, int F)
{
    extern __shared__ unsigned char smem_raw[];
    const ConvShape s{N, C, Cp, M, E, F, 5, 5, 0};
    conv_wgmma<8, 256>(map_x, map_w, s, WgmmaPoolEpilogue<256>{b, y, M, E / 2, F / 2}, smem_raw);
}
