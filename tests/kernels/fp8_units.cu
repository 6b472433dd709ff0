// The FP8 conversions of cuda_fp8.h, one per thread (tests/test_cpu_fp8.py compares them with
// hand-computed codes; the CPU backend runs its own cuda_fp8.h, a GPU CUDA's). kind: 0 e4m3,
// 1 e5m2; sat: 0 __NV_NOSAT, 1 __NV_SATFINITE. Codes travel as unsigned char.
#include <cuda_fp8.h>

#define KIND(k) ((k) ? __NV_E5M2 : __NV_E4M3)
#define SAT(s) ((s) ? __NV_SATFINITE : __NV_NOSAT)

extern "C" __global__ void float_to_fp8(const float* __restrict__ x, unsigned char* __restrict__ out, int n, int sat,
                                        int kind)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __nv_cvt_float_to_fp8(x[i], SAT(sat), KIND(kind));
}

extern "C" __global__ void double_to_fp8(const double* __restrict__ x, unsigned char* __restrict__ out, int n, int sat,
                                         int kind)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __nv_cvt_double_to_fp8(x[i], SAT(sat), KIND(kind));
}

extern "C" __global__ void half_to_fp8(const __half* __restrict__ x, unsigned char* __restrict__ out, int n, int sat,
                                       int kind)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __nv_cvt_halfraw_to_fp8(static_cast<__half_raw>(x[i]), SAT(sat), KIND(kind));
}

extern "C" __global__ void bf16_to_fp8(const __nv_bfloat16* __restrict__ x, unsigned char* __restrict__ out, int n,
                                       int sat, int kind)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __nv_cvt_bfloat16raw_to_fp8(static_cast<__nv_bfloat16_raw>(x[i]), SAT(sat), KIND(kind));
}

// The types' constructors from float (satfinite) and their conversions back.
extern "C" __global__ void construct(const float* __restrict__ x, unsigned char* __restrict__ out, int n, int kind)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = kind ? __nv_fp8_e5m2(x[i]).__x : __nv_fp8_e4m3(x[i]).__x;
}

extern "C" __global__ void fp8_to_float(const unsigned char* __restrict__ codes, float* __restrict__ out, int n,
                                        int kind)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (kind) {
        __nv_fp8_e5m2 v;
        v.__x = codes[i];
        out[i] = static_cast<float>(v);
    } else {
        __nv_fp8_e4m3 v;
        v.__x = codes[i];
        out[i] = static_cast<float>(v);
    }
}

extern "C" __global__ void fp8_to_half_bits(const unsigned char* __restrict__ codes, unsigned short* __restrict__ out,
                                            int n, int kind)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __nv_cvt_fp8_to_halfraw(codes[i], KIND(kind)).x;
}

extern "C" __global__ void fp8_to_bf16_bits(const unsigned char* __restrict__ codes, unsigned short* __restrict__ out,
                                            int n, int kind)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __nv_cvt_fp8_to_bf16raw(codes[i], KIND(kind)).x;
}

// Pairs (satfinite): x[2i] in the low byte, x[2i + 1] in the high one.
extern "C" __global__ void float2_to_fp8x2(const float* __restrict__ x, unsigned short* __restrict__ out, int pairs,
                                           int kind)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < pairs) out[i] = __nv_cvt_float2_to_fp8x2(make_float2(x[2 * i], x[2 * i + 1]), __NV_SATFINITE, KIND(kind));
}
