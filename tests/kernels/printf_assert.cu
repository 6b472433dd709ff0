#include <cassert>
#include <cstdio>

extern "C" __global__ void hello(int tag)
{
    if (threadIdx.x == 0) {
        printf("hello from block %d, tag %d\n", (int)blockIdx.x, tag);
    }
}

// Every element must be non-negative.
extern "C" __global__ void check_non_negative(int n, const float* x)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        assert(x[i] >= 0.0f);
    }
}
