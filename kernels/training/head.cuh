// The network's head for one document, computed by one block: from the hidden
// layer's pre-activations to the error at the hidden layer. Shared by the
// steps that give each document a block (7, 8 and 9), so that they differ
// only in how they compute the first layer's product and W1's update.
//
// Thread j (looping j += blockDim.x) owns hidden unit j. In:
//   z1[j]  pre-activation of unit j (bias included)
// Out (this document's row of each):
//   h[j] = sigmoid(z1[j]);  z2 = h W2 + b2;  p = softmax(z2);
//   loss_term = -log p[label];  dz2 = (p - onehot(label)) * inv_batch;
//   dz1[j] = (dz2 W2^T)[j] * h[j] * (1 - h[j])      (W2 before this step's update)
#pragma once
#define MAX_CLASSES 8          // the network has 4; the shared arrays allow up to 8
#define MAX_WARPS 32
// Loops over the classes run to MAX_CLASSES, fully unrolled, with a test c < C
// inside: an array indexed by a run-time loop would be placed in local memory.

// Sum of v over the block, returned to every thread. red: MAX_WARPS floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = (blockDim.x + 31) / 32;
    __syncthreads();                 // red may still be read from the previous call
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += red[w];
    return total;
}

// h_row, dz1_row, dz2_row: this document's rows; z1_of(j) gives unit j's pre-activation.
template <class Z1>
__device__ void head_forward_backward(int H, int C, float inv_batch, int label, Z1 z1_of,
                                      const float* __restrict__ W2, const float* __restrict__ b2,
                                      float* __restrict__ h_row, float* __restrict__ dz2_row,
                                      float* __restrict__ dz1_row, float* __restrict__ loss_term) {
    __shared__ float red[MAX_WARPS];
    __shared__ float dz2[MAX_CLASSES];
    float part[MAX_CLASSES];
#pragma unroll
    for (int c = 0; c < MAX_CLASSES; ++c) part[c] = 0.0f;
    for (int j = threadIdx.x; j < H; j += blockDim.x) {
        float hj = 1.0f / (1.0f + expf(-z1_of(j)));
        h_row[j] = hj;
#pragma unroll
        for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) part[c] += hj * W2[j * C + c];
    }
    float z2[MAX_CLASSES];
#pragma unroll
    for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) z2[c] = block_sum(part[c], red) + b2[c];
    float top = z2[0];
#pragma unroll
    for (int c = 1; c < MAX_CLASSES; ++c) if (c < C) top = fmaxf(top, z2[c]);
    float total = 0.0f;
#pragma unroll
    for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) total += expf(z2[c] - top);
    if (threadIdx.x == 0) {
#pragma unroll
        for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) {
            float p = expf(z2[c] - top) / total;
            dz2[c] = (p - (c == label ? 1.0f : 0.0f)) * inv_batch;
            dz2_row[c] = dz2[c];
        }
        *loss_term = -(z2[label] - top - logf(total));
    }
    __syncthreads();
    for (int j = threadIdx.x; j < H; j += blockDim.x) {
        float dh = 0.0f;
#pragma unroll
        for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) dh += dz2[c] * W2[j * C + c];
        float hj = h_row[j];
        dz1_row[j] = dh * hj * (1.0f - hj);
    }
}

// The small parameters' SGD update, by blocks 0..H-1 of a launch (block j
// owns hidden unit j; every thread strides over the documents):
//   W2[j, :] -= lr * sum_i h[i, j] dz2[i, :],   b1[j] -= lr * sum_i dz1[i, j],
// and block 0 also b2 -= lr * sum_i dz2[i, :] and the batch's mean loss.
__device__ void small_updates(int j, int B, int H, int C, float lr, const float* __restrict__ h,
                              const float* __restrict__ dz2, const float* __restrict__ dz1,
                              const float* __restrict__ loss_terms, float* __restrict__ W2,
                              float* __restrict__ b1, float* __restrict__ b2, float* __restrict__ loss) {
    __shared__ float red[MAX_WARPS];
    float gw[MAX_CLASSES], gb2[MAX_CLASSES];
    float gb1 = 0.0f, gl = 0.0f;
#pragma unroll
    for (int c = 0; c < MAX_CLASSES; ++c) gw[c] = gb2[c] = 0.0f;
    for (int i = threadIdx.x; i < B; i += blockDim.x) {
        float hij = h[(long)i * H + j];
#pragma unroll
        for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) {
            float d = dz2[i * C + c];
            gw[c] += hij * d;
            gb2[c] += d;
        }
        gb1 += dz1[(long)i * H + j];
        gl += loss_terms[i];
    }
#pragma unroll
    for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) {
        float s = block_sum(gw[c], red);
        if (threadIdx.x == 0) W2[j * C + c] -= lr * s;
    }
    float s = block_sum(gb1, red);
    if (threadIdx.x == 0) b1[j] -= lr * s;
    if (j == 0) {
#pragma unroll
        for (int c = 0; c < MAX_CLASSES; ++c) if (c < C) {
            float t = block_sum(gb2[c], red);
            if (threadIdx.x == 0) b2[c] -= lr * t;
        }
        float t = block_sum(gl, red);
        if (threadIdx.x == 0) *loss = t / B;
    }
}
