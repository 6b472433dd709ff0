// Step 5 of the data-parallel chapter: the first W1 bucket's gradient (the
// rarest words' rows) in the forward kernel, so that its all-reduce can start
// as soon as the forward pass ends.
//
// What changed from step 9's sparse_forward_backward (training chapter,
// 09_sparse_first_layer.cu, whose gather and head this kernel runs
// unchanged: gather_rows.cuh and head.cuh): once a document's block has its
// row of dZ1, it scatter-adds that row into the gradient rows of the
// document's words in one bucket
// (kernels/training/scatter_rows.cuh, [first[i], last[i]) of the CSR, as in
// 01_w1_gradient_buckets.cu). Step 9 cannot do this: it adds the update
// straight into W1, which other blocks are still reading in the forward pass
// (that is why its forward and update are two launches). Into a separate
// gradient buffer nothing reads, it can: the gradient form only.
//
// Why it may be faster: in the bucketed step the first all-reduce (nearly all
// of W1's bytes) waited for the forward pass and then the first bucket's
// scatter (half of the scatter's work, cut at equal non-zeros); here it waits
// for the forward pass alone, and can run beside the whole rest of the
// backward pass (the frequent words' scatter and the small gradients). The
// scatter's atomics for a document also run while other blocks still gather,
// instead of after every block has. Why it might not be: the gradient form
// pays the update pass that the parameter-averaging form does not (the
// update of the first bucket runs beside the rest of the scatter, after its
// all-reduce), and the forward kernel's blocks grow longer. With every
// document's whole row (first = indptr[i], last = indptr[i + 1]) it is the
// plain step's whole W1 gradient in the forward kernel, which the run also
// times, so that the plain step gets the same chance. Prediction: at
// B = 4,096-8,192, where the first all-reduce (~75 µs) is longer than the
// rest of the scatter beside it, the step's end moves earlier by about the
// first bucket's scatter alone (tens of µs); the run's sweep measures it.
#include <training/gather_rows.cuh>
#include <training/head.cuh>
#include <training/scatter_rows.cuh>

#define MAX_HIDDEN 512            // the shared row of Z1 (the network has 128 hidden units)
static_assert(GATHER_CHUNK == SCATTER_CHUNK, "the scatter reuses the gather's shared arrays");

// One block per document, blockDim.x threads (128: one per hidden unit). Step 9's
// sparse_forward_backward, then target[word, :] += x * dZ1[i, :] for document i's
// words in [first[i], last[i]) (target: a zeroed gradient buffer, never W1).
extern "C" __global__ void forward_and_first_bucket(int B, int H, int C, float inv_batch,
                                                    const int* __restrict__ indptr, const int* __restrict__ indices,
                                                    const float* __restrict__ values, const int* __restrict__ labels,
                                                    const float* __restrict__ W1, const float* __restrict__ b1,
                                                    const float* __restrict__ W2, const float* __restrict__ b2,
                                                    float* __restrict__ h, float* __restrict__ dz2,
                                                    float* __restrict__ dz1, float* __restrict__ loss_terms,
                                                    const int* __restrict__ first, const int* __restrict__ last,
                                                    float* __restrict__ target) {
    __shared__ int word[GATHER_CHUNK];
    __shared__ float value[GATHER_CHUNK];
    __shared__ float z1[MAX_HIDDEN];
    int i = blockIdx.x;
    if (i >= B) return;
    gather_rows(indptr[i], indptr[i + 1], H, indices, values, W1, b1, z1, word, value);
    head_forward_backward(H, C, inv_batch, labels[i], [&](int j) { return z1[j]; }, W2, b2, h + (long)i * H,
                          dz2 + i * C, dz1 + (long)i * H, loss_terms + i);
    // Thread j reads back dZ1[i, j], which it wrote itself; scatter_rows opens each chunk with a
    // barrier before it overwrites word and value.
    scatter_rows(first[i], last[i], H, 1.0f, indices, values, dz1 + (long)i * H, target, word, value);
}
