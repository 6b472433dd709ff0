// Step 1 of the data-parallel chapter: W1's gradient in buckets of rows, so
// its all-reduce can start before the backward pass has finished.
//
// What changed from the training chapter's step 9 (09_sparse_first_layer.cu):
// there, sparse_update scatter-adds every document's contribution straight
// into W1 (W1[w, :] -= lr * x_w dZ1[i, :]). Data-parallel training cannot
// update W1 before the replicas have summed their gradients, so each replica
// first forms its gradient: step 9's sparse_update itself does that when its
// "W1" is a zeroed gradient buffer and lr = -1. That kernel writes all of the
// gradient at once; the all-reduce can only start when it ends.
//
// This kernel writes only the rows of one bucket, words [w_begin, w_end):
// block i walks document i's words (ascending in the CSR rows), skips to the
// first word >= w_begin with a binary search and scatter-adds the document's
// contribution into the rows up to w_end. Launched once per bucket, in order,
// on the compute stream, each bucket's all-reduce can run on a second stream
// while the next bucket is computed.
//
// Why it may be faster end to end: the step becomes max(scatter, all-reduce)
// + the last bucket's all-reduce instead of scatter + all-reduce. Word ids are
// frequency ranks, so equal row ranges would put ~85% of a batch's scatter in
// the first bucket (rows 0..V/4) and leave nothing to hide the other buckets'
// all-reduces under. The buckets are therefore cut at equal non-zeros and
// launched rarest words first (Layout.buckets): the first holds nearly all of
// W1's rows and bytes and half the work, so its all-reduce can run beside the
// frequent-word half. Why it might not be: every launch re-reads each
// document's index range (a binary search, ~7 reads per document per bucket),
// and the all-reduce shares the GPU's L2, memory and SMs with the scatter.
// Prediction: a gain of at most the all-reduce's time (~80 us for 16.8 MB on
// two H100s), only if the all-reduce runs beside the scatter at close to its
// speed alone. (Measured on two H100s it does not: beside the scatter it runs
// ~7x slower, and the bucketed step loses; see the chapter.)

// gW1 (V x H, row-major) += x_w * dZ1[i, :] for every (document i, word w) with
// w_begin <= w < w_end. One block per document; threads stride over H.
extern "C" __global__ void w1_gradient_rows(int B, int H, int w_begin, int w_end, const int* __restrict__ indptr,
                                            const int* __restrict__ indices, const float* __restrict__ values,
                                            const float* __restrict__ dz1, float* __restrict__ gW1) {
    int i = blockIdx.x;
    if (i >= B) return;
    int lo = indptr[i], hi = indptr[i + 1];
    while (lo < hi) {                       // first n with indices[n] >= w_begin
        int mid = (lo + hi) / 2;
        if (indices[mid] < w_begin) lo = mid + 1; else hi = mid;
    }
    for (int n = lo; n < indptr[i + 1] && indices[n] < w_end; ++n) {
        float x = values[n];
        float* row = gW1 + (long)indices[n] * H;
        for (int j = threadIdx.x; j < H; j += blockDim.x) atomicAdd(&row[j], x * dz1[(long)i * H + j]);
    }
}
