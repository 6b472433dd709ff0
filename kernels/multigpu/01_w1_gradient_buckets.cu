// Step 1 of the data-parallel chapter: W1's gradient in buckets of rows, so
// its all-reduce can start before the backward pass has finished.
//
// What changed from the training chapter's step 9 (09_sparse_first_layer.cu):
// there, sparse_update scatter-adds every document's contribution straight
// into W1 (W1[w, :] -= lr * x_w dZ1[i, :]). Data-parallel training that sums
// gradients cannot update W1 before the replicas have summed them, so each
// replica first forms its gradient: step 9's sparse_update itself does that
// when its "W1" is a zeroed gradient buffer and lr = -1. (The parameter-
// averaging form can: each replica updates its own W1 with p times the
// learning rate and the all-reduce averages the copies; replicas.py.) That
// kernel writes all of the gradient at once; the all-reduce can only start
// when it ends.
//
// This kernel writes only the rows of one bucket, words [w_begin, w_end).
// Document i's words are ascending in its CSR row, so the bucket's words of
// document i are one contiguous range of the CSR, [first[i], last[i]): the
// replica finds these ranges once per batch, with the CSR itself (host side,
// like the CSR), so that no launch searches a document's words. The inner
// loop is step 9's own (kernels/training/scatter_rows.cuh, included by both):
// the range's ids and values staged in shared memory, fire-and-forget atomic
// adds (RED) unrolled by 8.
//
// The grid need not have one block per document: block b does documents b,
// b + gridDim.x, ... (a grid-stride loop). Launched with fewer blocks than
// the SMs can hold, the scatter leaves room on every SM for the blocks of
// NCCL's kernel, which the bucket's all-reduce launches on another stream
// while the next bucket's scatter runs (a grid of one block per document
// fills every SM and NCCL's blocks queue behind its waiting blocks).
//
// Why it may be faster end to end: the step becomes max(scatter, all-reduce)
// + the last bucket's all-reduce instead of scatter + all-reduce. Word ids are
// frequency ranks, so equal row ranges would put ~85% of a batch's scatter in
// the first bucket and leave nothing to hide the other buckets' all-reduces
// under: the buckets are cut at equal non-zeros and launched rarest words
// first (Layout.buckets), so the first, which holds nearly all of W1's rows
// and bytes, is all-reduced beside the frequent words' scatter. Why it might
// not be: the all-reduce shares the GPU's L2 and memory with the scatter's
// atomics, and a scatter on fewer blocks may run slower. Prediction: a gain
// of at most the all-reduce's time (~80 us for 16.8 MB on two H100s), only if
// the all-reduce runs beside the scatter at close to its speed alone; the run
// sweeps the scatter's grid, the bucket count and the streams' priorities.
// Measured: the chapter's run sweeps these choices at every batch and keeps the
// fastest; its timeline shows the all-reduce running beside the scatter, and its
// bucket pieces time each bucket's scatter alone against the whole scatter on one
// GPU's share of the batch, which bounds what the overlap can save at best. The
// chapter states from that run, its numbers glued, where the overlap wins, where
// it loses and why; they are not repeated here, where the next recording would
// leave them stale.

#include <training/scatter_rows.cuh>   // step 9's scatter loop, shared with 09_sparse_first_layer.cu

// target (V x H, row-major) += scale * x_n * dZ1[i, :] for every non-zero n of
// document i in [first[i], last[i]), for the documents b, b + nb, ... of one of
// nb blocks (a grid-stride loop; 04_first_bucket_and_small.cu runs it on some of
// its blocks). Threads stride over H (128 threads: one per unit). target: a
// zeroed gradient buffer with scale = 1, or the replica's own W1 with scale =
// -p * lr (the parameter-averaging form: see GpuStep). word and step: the
// block's shared arrays of SCATTER_CHUNK elements.
__device__ __forceinline__ void w1_rows_block(int b, int nb, int B, int H, float scale, const int* __restrict__ first,
                                              const int* __restrict__ last, const int* __restrict__ indices,
                                              const float* __restrict__ values, const float* __restrict__ dz1,
                                              float* __restrict__ target, int* word, float* step) {
    for (int i = b; i < B; i += nb)
        scatter_rows(first[i], last[i], H, scale, indices, values, dz1 + (long)i * H, target, word, step);
}

extern "C" __global__ void w1_gradient_rows(int B, int H, float scale, const int* __restrict__ first,
                                            const int* __restrict__ last, const int* __restrict__ indices,
                                            const float* __restrict__ values, const float* __restrict__ dz1,
                                            float* __restrict__ target) {
    __shared__ int word[SCATTER_CHUNK];
    __shared__ float step[SCATTER_CHUNK];
    w1_rows_block(blockIdx.x, gridDim.x, B, H, scale, first, last, indices, values, dz1, target, word, step);
}
