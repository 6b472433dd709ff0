// Step 8 -- the input-channel sum by a tree reduction in shared memory.
//
// What changed from step 7: the block gets a third dimension, one slice of threads per input
// channel (16 x 16 x C threads: 1024 for conv2). Thread (tx, ty, c) sums only channel c's
// K x K products, writes its partial sum to shared memory, and the C partials of each output
// are added in log2(C) rounds (4 -> 2 -> 1), a barrier between rounds.
//
// Why it could be faster: C times more threads in flight, each with a C times shorter sum, so
// more memory requests are in flight to hide latency.
// Why it should be slower: the batch already gives 10,000 x M blocks -- far more threads than
// the GPU holds -- so the extra parallelism hides nothing new; the partial sums add shared-
// memory traffic and barriers. (For conv1, C = 1: no reduction, step 7 with a third axis of 1.)
// Prediction: conv2 10-30% slower than step 7; conv1 unchanged.

#define TILE_WIDTH 16
#define KS 7
#ifndef CONV_C
#error "compile with -DCONV_C=<input channels, a power of two>"
#endif

__constant__ float w_const[16 * 4 * KS * KS];

extern "C" __global__ void conv_channel_tree(float* __restrict__ y, const float* __restrict__ x, int N, int M,
                                             int H, int W)
{
    __shared__ float partial[CONV_C][TILE_WIDTH][TILE_WIDTH];
    const int E = H - KS + 1, F = W - KS + 1;
    const int tiles_across = (F + TILE_WIDTH - 1) / TILE_WIDTH;
    const int n = blockIdx.x, m = blockIdx.y, c = threadIdx.z;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int e = (blockIdx.z / tiles_across) * TILE_WIDTH + ty;
    const int f = (blockIdx.z % tiles_across) * TILE_WIDTH + tx;
    const bool inside = n < N && e < E && f < F;
    float acc = 0.0f;
    if (inside) {
        const float* corner = x + (((size_t)n * CONV_C + c) * H + e) * W + f;
        const float* wmc = w_const + (m * CONV_C + c) * KS * KS;
#pragma unroll
        for (int p = 0; p < KS; ++p)
#pragma unroll
            for (int q = 0; q < KS; ++q) acc += corner[p * W + q] * wmc[p * KS + q];
    }
    partial[c][ty][tx] = acc;
    __syncthreads();
#pragma unroll
    for (int stride = CONV_C / 2; stride > 0; stride /= 2) {     // every thread reaches every barrier
        if (c < stride) partial[c][ty][tx] += partial[c + stride][ty][tx];
        __syncthreads();
    }
    if (c == 0 && inside) y[((size_t)(n * M + m) * E + e) * F + f] = partial[0][ty][tx];
}
