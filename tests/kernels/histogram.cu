// Histogram of byte values: per-block counts in shared memory, merged with atomics.
extern "C" __global__ void histogram(int n, const unsigned char* data, unsigned int* bins)
{
    __shared__ unsigned int local[256];
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        local[b] = 0;
    }
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        atomicAdd(&local[data[i]], 1u);
    }
    __syncthreads();
    for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        atomicAdd(&bins[b], local[b]);
    }
}
