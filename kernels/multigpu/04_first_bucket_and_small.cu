// Step 4 of the data-parallel chapter: the first W1 bucket's scatter (the
// rarest words' rows) and the small parameters' gradient in one launch.
//
// What changed from steps 1 and 3 (01_w1_gradient_buckets.cu and
// 03_small_gradients.cu, whose block bodies this kernel runs unchanged): the
// flat buffers now hold W1 first and W2, b1, b2 after W1's last row (the
// rarest word), so the small parameters travel in the same all-reduce as the
// first bucket instead of the last. Their gradient must then be ready before
// the first all-reduce: blocks 0 .. small_blocks-1 form it while the other
// blocks scatter the first bucket, as step 9's sparse_update forms the small
// parameters' updates beside W1's scatter in one launch.
//
// Why it may be faster: the lean bucketed step had formed the small gradients
// after the last scatter (a launch on the critical path) or on a stream of its
// own beside the first all-reduce (a cross-stream dependency, and one more
// kernel sharing the SMs, L2 and memory with NCCL's); and the last
// all-reduce, which no computation hides, carried them. Here they cost no
// launch and no dependency, run beside the rare bucket's scatter before any
// all-reduce has started, and the last all-reduce carries only the frequent
// words' rows. Why it might not be: where the small gradients take longer than
// the rare bucket's scatter (the smallest batches), the first all-reduce
// starts later by the difference. Prediction: a few microseconds per step at
// B = 1,024-8,192 (one launch and one dependency fewer), nothing at the
// largest batches, where the rare bucket's scatter is several times longer.
// Measured: the chapter's sweep times the lean steps with this launch; its
// glued numbers say what it gained.

#include <multigpu/01_w1_gradient_buckets.cu>   // w1_rows_block
#include <multigpu/03_small_gradients.cu>       // small_gradients_block

// Blocks [0, small_blocks): the small gradients (small_gradients' arguments);
// blocks [small_blocks, gridDim.x): W1's rows of one bucket (w1_gradient_rows').
// blockDim.x = 128 (>= H) for both parts. The launch bounds ask for 12 blocks of 128
// threads per SM: NVRTC gives the two parts together 48 registers a thread on sm_90
// unbounded (10 blocks per SM, where the scatter alone, at 32, fits 16), and 40 with
// this bound, with nothing spilled to local memory; 16 would need 32 and spills.
extern "C" __global__ void __launch_bounds__(128, 12) first_bucket_and_small(int small_blocks, int B, int H, int C, float scale,
                                                  const float* __restrict__ h, const float* __restrict__ dz2,
                                                  const float* __restrict__ dz1,
                                                  const float* __restrict__ loss_terms, float* __restrict__ gW2,
                                                  float* __restrict__ gb1, float* __restrict__ gb2,
                                                  float* __restrict__ loss, const int* __restrict__ first,
                                                  const int* __restrict__ last, const int* __restrict__ indices,
                                                  const float* __restrict__ values, float* __restrict__ target) {
    __shared__ float red[MAX_WARPS];
    __shared__ int word[SCATTER_CHUNK];
    __shared__ float step[SCATTER_CHUNK];
    if (blockIdx.x < small_blocks)          // the same for every thread of the block: no divergence at a barrier
        small_gradients_block(blockIdx.x, small_blocks, B, H, C, scale, h, dz2, dz1, loss_terms, gW2, gb1, gb2,
                              loss, red);
    else
        w1_rows_block(blockIdx.x - small_blocks, gridDim.x - small_blocks, B, H, scale, first, last, indices,
                      values, dz1, target, word, step);
}
