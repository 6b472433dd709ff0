// CPU backend only: NVRTC cannot open <cassert>.
#include <cassert>

// Every element must be non-negative.
extern "C" __global__ void check_non_negative(int n, const float* x)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        assert(x[i] >= 0.0f);
    }
}
