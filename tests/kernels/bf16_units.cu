// The bfloat16 conversions the hopper chapter's bf16 step uses, one per thread (tests/test_hopper_dtypes.py
// compares them with hand-computed bit patterns; the CPU backend runs its cuda_bf16.h, a GPU its own).
#include <cuda_bf16.h>

extern "C" __global__ void to_bf16(const float* __restrict__ x, unsigned short* __restrict__ bits, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) bits[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

extern "C" __global__ void from_bf16(const __nv_bfloat16* __restrict__ b, float* __restrict__ x, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __bfloat162float(b[i]);
}

// Pairs, as the epilogue writes them (__floats2bfloat162_rn), into an array of bfloat16.
extern "C" __global__ void to_bf16_pairs(const float* __restrict__ x, __nv_bfloat16* __restrict__ out, int pairs)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pairs) *(__nv_bfloat162*)(out + 2 * i) = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
}
