// Reverses each block-sized chunk of x in place through dynamic shared memory.
extern "C" __global__ void reverse_chunks(int n, float* x)
{
    extern __shared__ float chunk[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int start = blockIdx.x * blockDim.x;
    int count = min(n - start, (int)blockDim.x);
    if (threadIdx.x < count) {
        chunk[threadIdx.x] = x[i];
    }
    __syncthreads();
    if (threadIdx.x < count) {
        x[i] = chunk[count - 1 - threadIdx.x];
    }
}
