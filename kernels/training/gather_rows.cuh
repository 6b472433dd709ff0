// The gather of step 9's forward pass, shared by step 9's sparse_forward_backward
// (09_sparse_first_layer.cu) and the data-parallel chapter's forward kernel
// (multigpu/05_forward_and_first_bucket.cu), so that both run the same loop.
//
// For one document's CSR row, the non-zeros n in [begin, end) (word indices[n],
// value values[n]), and every unit j (threads stride over H):
//     z1[j] = b1[j] + sum over n of values[n] * W1[indices[n] * H + j]
// a gather of the document's rows of W1 (512 bytes each at H = 128: one
// coalesced read by the block's 128 threads).
//
// The row's ids and values are staged in shared memory, GATHER_CHUNK at a time,
// with one coalesced load by the whole block; then each thread's loop over the
// words has only the W1 loads left, independent of one another, so several are
// in flight at once (unrolled by 8) instead of one dependent pair of loads (the
// word's id, then its row) per word.
//
// Every thread of the block must call it (it holds __syncthreads); word and
// value are the block's shared arrays of GATHER_CHUNK elements, z1 its shared
// row of H floats. Unit j is written by thread j alone: a thread may read its
// own z1[j] back without a barrier.
#pragma once

#define GATHER_CHUNK 128

__device__ __forceinline__ void gather_rows(int begin, int end, int H, const int* __restrict__ indices,
                                            const float* __restrict__ values, const float* __restrict__ W1,
                                            const float* __restrict__ b1, float* z1, int* word, float* value) {
    for (int j = threadIdx.x; j < H; j += blockDim.x) z1[j] = b1[j];
    for (int c0 = begin; c0 < end; c0 += GATHER_CHUNK) {
        int count = min(GATHER_CHUNK, end - c0);
        __syncthreads();                               // the previous chunk is used up
        for (int t = threadIdx.x; t < count; t += blockDim.x) {
            word[t] = indices[c0 + t];
            value[t] = values[c0 + t];
        }
        __syncthreads();
        for (int j = threadIdx.x; j < H; j += blockDim.x) {
            float z = 0.0f;
#pragma unroll 8
            for (int t = 0; t < count; ++t) z += value[t] * W1[(long)word[t] * H + j];
            z1[j] += z;                                // unit j is this thread's alone: no barrier
        }
    }
}
