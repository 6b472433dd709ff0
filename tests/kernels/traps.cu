// Kernels with deliberate bugs, for the CPU backend's traps.

// Threads below 16 return early; the others wait at a barrier forever.
extern "C" __global__ void early_return_barrier(float* x)
{
    if (threadIdx.x < 16) {
        return;
    }
    x[threadIdx.x] = 1.0f;
    __syncthreads();
    x[threadIdx.x] += 1.0f;
}

// Even and odd threads wait at two different barriers.
extern "C" __global__ void split_barrier(float* x)
{
    if (threadIdx.x % 2 == 0) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    x[threadIdx.x] = 1.0f;
}

// Off by one: writes y[n].
extern "C" __global__ void write_past_end(int n, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) {
        y[i] = 1.0f;
    }
}

// Reads x[i + 1] for every i < n, so the last thread reads x[n].
extern "C" __global__ void read_past_end(int n, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i + 1] - x[i];
    }
}

// Writes y[i - 1]: thread 0 writes y[-1].
extern "C" __global__ void write_before_start(int n, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i - 1] = 2.0f;
    }
}
