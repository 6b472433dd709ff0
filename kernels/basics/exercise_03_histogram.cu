// Exercise 3: a histogram with atomics.
//
// Task: counts[v] = the number of i < n with values[i] == v, for v in 0 .. bins - 1
// (every value is in that range). counts starts at zero. One thread per element,
// blocks of 256 threads, ceil(n / 256) of them: many threads add to the same bin at
// once, so each addition must be atomic (atomicAdd), or two of them can read the same
// old count and one increment is lost. (The CPU backend's check reports two threads
// that write one word without an atomic.)
extern "C" __global__ void histogram(int n, int bins, const int* __restrict__ values, unsigned int* counts)
{
    // BEGIN SOLUTION
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&counts[values[i]], 1u);
    // END SOLUTION
}
