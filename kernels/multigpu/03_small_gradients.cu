// Step 3 of the data-parallel chapter: the small parameters' gradient (W2,
// b1, b2) with coalesced reads, beside W1's scatter.
//
// What changed from step 9's sparse_update (09_sparse_first_layer.cu, whose
// blocks 0..H-1 the replicas first used for it): there block j owns hidden
// unit j and its threads stride over the documents, so every warp's load of
// h[i, j] or dZ1[i, j] touches 32 rows, 32 sectors of 32 bytes for 128 useful
// bytes, and only H = 128 blocks share the work. Here block b takes documents
// b, b + gridDim.x, ... and thread j unit j: a warp reads 32 consecutive
// floats of a row (4 sectors), and dZ2's C values of the document are one
// broadcast. Each thread sums its unit over the block's documents in
// registers, then adds the sums into the gradient buffer with atomics
// (H x C + H + C per block: ~170 K for 264 blocks, against the scatter's
// millions); block 0 also sums the loss over the whole batch (one coalesced
// pass) and writes it, as step 9 does.
//
// Why faster: 8x fewer L2 sectors for the same bytes, and twice the blocks.
// Prediction: a few tens of microseconds alone at 32,768 documents (32,768 x
// 128 x 2 floats = 34 MB of h and dZ1, mostly L2-resident, at a few TB/s).
// Measured: the chapter's run times it alone on one GPU's share of the largest
// batch, against step 9's first H blocks, and beside W1's scatter in the bucketed
// step (its pieces table and timeline; the chapter glues the numbers). In the
// recorded runs it was faster than step 9's blocks but well short of this
// prediction. A likely reason, not measured: each thread's loop waits on one
// document's loads at a time with only 8 warps per SM to hide the latency (more
// blocks, or several documents in flight per thread, would be the next step).
// In the recorded runs' timelines it was not the longest path beside W1's
// scatter. The gradient buffer must be zero on entry (the update kernel leaves
// it so).

#define MAX_CLASSES 8
#define MAX_WARPS 32

__device__ __forceinline__ float block_total(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();                                  // red is free (a previous call is done with it)
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = 0.0f;
    if (threadIdx.x == 0)
        for (int w = 0; w < (blockDim.x + 31) / 32; ++w) t += red[w];
    return t;                                         // the block's total, in thread 0
}

// gW2 (H x C) += scale * h^T dZ2, gb1 (H) += scale * sum_i dZ1[i, :], gb2 (C) +=
// scale * sum_i dZ2[i, :] over the documents b, b + nb, ... of one of nb blocks;
// *loss = mean of loss_terms (block 0). scale = 1 into zeroed gradient buffers;
// scale = -p * lr into the replica's own W2, b1, b2 (the parameter-averaging
// form: see GpuStep). blockDim.x >= H (one thread per hidden unit; the others
// only help with the loss). red: the block's shared array of MAX_WARPS floats.
__device__ __forceinline__ void small_gradients_block(int b, int nb, int B, int H, int C, float scale,
                                                      const float* __restrict__ h, const float* __restrict__ dz2,
                                                      const float* __restrict__ dz1,
                                                      const float* __restrict__ loss_terms, float* __restrict__ gW2,
                                                      float* __restrict__ gb1, float* __restrict__ gb2,
                                                      float* __restrict__ loss, float* red) {
    int j = threadIdx.x;
    float gw[MAX_CLASSES], gb[MAX_CLASSES];
#pragma unroll
    for (int c = 0; c < MAX_CLASSES; ++c) gw[c] = gb[c] = 0.0f;
    float g1 = 0.0f;
    if (j < H) {
        for (int i = b; i < B; i += nb) {
            float hij = h[(long)i * H + j];
            g1 += dz1[(long)i * H + j];
#pragma unroll
            for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) {
                float d = dz2[i * C + c];
                gw[c] += hij * d;
                gb[c] += d;
            }
        }
#pragma unroll
        for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) atomicAdd(&gW2[j * C + c], scale * gw[c]);
        atomicAdd(&gb1[j], scale * g1);
        if (j == 0) {
#pragma unroll
            for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) atomicAdd(&gb2[c], scale * gb[c]);
        }
    }
    if (b == 0) {
        float l = 0.0f;
        for (int i = threadIdx.x; i < B; i += blockDim.x) l += loss_terms[i];
        float t = block_total(l, red);
        if (threadIdx.x == 0) *loss = t / B;
    }
}

extern "C" __global__ void small_gradients(int B, int H, int C, float scale, const float* __restrict__ h,
                                           const float* __restrict__ dz2, const float* __restrict__ dz1,
                                           const float* __restrict__ loss_terms, float* __restrict__ gW2,
                                           float* __restrict__ gb1, float* __restrict__ gb2,
                                           float* __restrict__ loss) {
    __shared__ float red[MAX_WARPS];
    small_gradients_block(blockIdx.x, gridDim.x, B, H, C, scale, h, dz2, dz1, loss_terms, gW2, gb1, gb2, loss, red);
}
