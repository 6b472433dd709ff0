// Atomics: the sum of n floats into one number, two ways.
//
// atomicAdd(p, v) reads *p, adds v and writes the sum back as one indivisible
// operation: no other thread's update to *p can come in between. Updates to one
// address therefore happen one after the other, however many threads ask at once.

// Every thread adds its element to the total: n updates of one address.
extern "C" __global__ void sum_atomic_each(int n, const float* __restrict__ x, float* total)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(total, x[i]);
}

// Each block first adds its elements in shared memory, halving the number of active
// threads each step (a tree: log2(blockDim.x) steps), and then one thread adds the
// block's sum: one update of the total per block. blockDim.x must be a power of two,
// at most 1024.
extern "C" __global__ void sum_block_then_atomic(int n, const float* __restrict__ x, float* total)
{
    __shared__ float partial[1024];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();                 // every sum of this step is written before the next reads it
    }
    if (threadIdx.x == 0) atomicAdd(total, partial[0]);
}
