// The part of CUDA's cuda_bf16.h that the lab's kernels use, for the CPU backend: the type
// __nv_bfloat16 (the upper 16 bits of a float: sign, 8 exponent bits, 7 mantissa bits) and its
// conversions. float -> bfloat16 rounds to nearest, ties to even, as the GPU's cvt.rn.bf16.f32
// does: subnormals are kept (bfloat16 has float's exponent range, so every float subnormal has a
// bfloat16 neighbour), a value past the largest finite bfloat16 rounds to infinity, and a NaN
// becomes the canonical NaN 0x7FFF. bfloat16 -> float is exact (16 zero bits appended).
#ifndef GPULAB_CUDA_BF16_H
#define GPULAB_CUDA_BF16_H
#define __CUDA_BF16_TYPES_EXIST__     // as CUDA's header: code may test for the type
#include <stdint.h>
#include <string.h>
#include <cuda_fp16.h>

namespace gpulab {
static inline unsigned short float_to_bfloat16_bits(float f) {
    uint32_t x;
    __builtin_memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;      // NaN: the canonical NaN
    // Round the low 16 bits away: add just under half an ulp, plus the kept lsb for ties to even.
    // A carry out of the mantissa bumps the exponent, and from the largest finite value gives
    // infinity (0x7F80), as round-to-nearest should.
    x += 0x7fffu + ((x >> 16) & 1u);
    return (unsigned short)(x >> 16);
}
static inline float bfloat16_bits_to_float(unsigned short b) {
    const uint32_t x = (uint32_t)b << 16;
    float f;
    __builtin_memcpy(&f, &x, 4);
    return f;
}
}  // namespace gpulab

struct __nv_bfloat16_raw { unsigned short x; };

struct __attribute__((aligned(2))) __nv_bfloat16 {
#ifdef GPULAB_INSTRUMENTED
    unsigned short __x = 0;      // constant-initialised, as __half's (cuda_fp16.h here)
#else
    unsigned short __x;
#endif
    __nv_bfloat16() = default;
    constexpr __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
    __nv_bfloat16(float f) : __x(gpulab::float_to_bfloat16_bits(f)) {}
    __nv_bfloat16(double f) : __x(gpulab::float_to_bfloat16_bits((float)f)) {}
    __nv_bfloat16& operator=(float f) { __x = gpulab::float_to_bfloat16_bits(f); return *this; }
    operator float() const { return gpulab::bfloat16_bits_to_float(__x); }
    operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
};
typedef __nv_bfloat16 nv_bfloat16;

struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
    __nv_bfloat162() = default;
    constexpr __nv_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) : x(a), y(b) {}
};
typedef __nv_bfloat162 nv_bfloat162;

static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 b) { return gpulab::bfloat16_bits_to_float(b.__x); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16(__nv_bfloat16_raw{u}); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __nv_bfloat162(__nv_bfloat16(a), __nv_bfloat16(b));
}
static inline __nv_bfloat162 __float2bfloat162_rn(float f) { return __floats2bfloat162_rn(f, f); }
static inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
static inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }
#endif  // GPULAB_CUDA_BF16_H
