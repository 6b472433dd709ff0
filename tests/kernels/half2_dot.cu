#include <cuda_fp16.h>

// Dot product of two fp16 vectors stored as pairs: products in __half2,
// accumulated in float.
extern "C" __global__ void half2_dot(int npairs, const __half2* a, const __half2* b, float* result)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (; i < npairs; i += blockDim.x * gridDim.x) {
        __half2 p = __hmul2(a[i], b[i]);
        float2 f = __half22float2(p);
        acc += f.x + f.y;
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(result, acc);
    }
}

// Round-trips floats through __half and through __half2 arithmetic, to compare
// the conversions bit for bit with NumPy's float16.
extern "C" __global__ void half_convert(int n, const float* x, __half* rounded, __half* doubled)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        __half h = __float2half_rn(x[i]);
        rounded[i] = h;
        doubled[i] = __hadd(h, h);
    }
}
