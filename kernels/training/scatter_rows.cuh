// The scatter-add of step 9's backward pass, shared by step 9's sparse_update
// (09_sparse_first_layer.cu) and the data-parallel chapter's bucket kernel
// (multigpu/01_w1_gradient_buckets.cu), so that both run the same loop.
//
// For the non-zeros n in [begin, end) of one document's CSR row (word
// indices[n], value values[n]) and every unit j (threads stride over H):
//     target[indices[n] * H + j] += scale * values[n] * dz1_row[j]
// Step 9 passes W1 and scale = -lr (an SGD update straight into W1); the
// data-parallel replicas pass a zeroed gradient buffer and scale = 1, or
// their own W1 and scale = -p * lr.
//
// The range's ids and scaled values are staged in shared memory, CHUNK at a
// time, with one coalesced load by the whole block; then each thread's loop
// over the words has only the atomics left, independent of one another,
// unrolled by 8. atomicAdd with its result unused compiles to a fire-and-forget
// reduction (RED): documents sharing a word add to the same row.
//
// Every thread of the block must call it (it holds __syncthreads); word and
// step are the block's shared arrays of SCATTER_CHUNK elements.
#pragma once

#define SCATTER_CHUNK 128

__device__ __forceinline__ void scatter_rows(int begin, int end, int H, float scale, const int* __restrict__ indices,
                                             const float* __restrict__ values, const float* __restrict__ dz1_row,
                                             float* __restrict__ target, int* word, float* step) {
    for (int c0 = begin; c0 < end; c0 += SCATTER_CHUNK) {
        int count = min(SCATTER_CHUNK, end - c0);
        __syncthreads();                               // the previous chunk is used up
        for (int t = threadIdx.x; t < count; t += blockDim.x) {
            word[t] = indices[c0 + t];
            step[t] = scale * values[c0 + t];
        }
        __syncthreads();
        for (int j = threadIdx.x; j < H; j += blockDim.x) {
            float d = dz1_row[j];
#pragma unroll 8
            for (int t = 0; t < count; ++t) atomicAdd(&target[(long)word[t] * H + j], step[t] * d);
        }
    }
}
