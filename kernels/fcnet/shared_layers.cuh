// The parts of fcnet's steps 3-6 (weights and activations in shared memory, one thread per
// hidden unit j of one of the block's vectors) that later steps take over unchanged, each
// under the step that wrote it. IN, HID and OUT are the including file's.
#pragma once

// Step 3: copy n floats into shared memory, consecutive threads on consecutive elements: the
// reads coalesce.
__device__ __forceinline__ void copy_to_shared(float* dst, const float* src, int n)
{
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// Step 3: the V input vectors from `first` on (X is feature-major: X[k * N + v]; zeros past N)
// into xs[c][k], V consecutive vectors per feature.
template <int V>
__device__ __forceinline__ void fill_vectors(float (*xs)[IN], const float* __restrict__ X, int N, int first)
{
    for (int i = threadIdx.x; i < V * IN; i += blockDim.x) {
        int k = i / V, c = i % V;   // V consecutive vectors per feature
        xs[c][k] = (first + c < N) ? X[(size_t)k * N + first + c] : 0.0f;
    }
}

// Step 3: a hidden layer, thread j of the block's vector `local`: out[local][j] =
// ReLU(row j of the K-input weights Ws . in[local]), from shared memory.
template <int K>
__device__ __forceinline__ void dense_relu(const float* Ws, const float (*in)[K], float (*out)[HID], int j, int local)
{
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += Ws[j * K + k] * in[local][k];
    out[local][j] = fmaxf(acc, 0.0f);
}

// Step 5: the same with row j of the weights in this thread's registers, w.
template <int K>
__device__ __forceinline__ void dense_relu_registers(const float w[K], const float (*in)[K], float (*out)[HID], int j,
                                                     int local)
{
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) acc += w[k] * in[local][k];
    out[local][j] = fmaxf(acc, 0.0f);
}

// Step 3: the output layer: threads j < OUT of each vector compute output j of vector v.
__device__ __forceinline__ void dense_output(const float* W3s, const float (*h2s)[HID], float* __restrict__ Y, int N,
                                             int v, int j, int local)
{
    if (j < OUT && v < N) {
        float acc = 0.0f;
        for (int k = 0; k < HID; ++k) acc += W3s[j * HID + k] * h2s[local][k];
        Y[(size_t)j * N + v] = acc;
    }
}
