// Exercise 1: a map with a guard.
//
// Task: y[i] = max(x[i], 0) for every i < n, one element per thread. The check
// launches blocks of 256 threads, ceil(n / 256) of them, at sizes that are not
// multiples of 256: the last block has threads with no element, and they must not
// touch x or y (the CPU backend names any read or write past an array's end).
extern "C" __global__ void relu(int n, const float* __restrict__ x, float* __restrict__ y)
{
    // BEGIN SOLUTION
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.0f);
    // END SOLUTION
}
