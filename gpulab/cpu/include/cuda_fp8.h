// The part of CUDA's cuda_fp8.h that the lab's kernels use, for the CPU backend: the 8-bit float
// types __nv_fp8_e4m3 and __nv_fp8_e5m2, their pairs, and the C-style conversions, computed as
// CUDA's header computes them on the host (cuda_fp8.hpp, which is also the GPU's result where the
// GPU converts in software; the GPU's cvt instructions round the same way).
//
//   e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits. No infinity: the codes 0x7F and 0xFF
//         are NaN, so the largest finite value is 0x7E = 448 (1.75 * 2^8); the smallest normal
//         is 2^-6, subnormals go down to 2^-9 (0x01).
//   e5m2: sign, 5 exponent bits (bias 15), 2 mantissa bits, IEEE-like: 0x7C is infinity,
//         0x7D-0x7F NaN, 57344 (1.75 * 2^15) the largest finite, subnormals down to 2^-16. It is
//         the upper byte of a half.
//
// Narrowing (float, double, half, bfloat16 -> fp8) rounds to nearest, ties to even. With
// __NV_SATFINITE (what the types' constructors use) a value past the largest finite one becomes
// that value of its sign; with __NV_NOSAT it becomes NaN in e4m3 (0x7F, 0xFF) and infinity in
// e5m2. A magnitude of at most half the smallest subnormal becomes a zero of its sign. NaN: a
// float's becomes 0x7F in both kinds (the header makes it the positive canonical NaN first); a
// double's keeps its sign (0x7F/0xFF in e4m3; in e5m2 0x7E ORed with its top two mantissa bits).
// Widening (fp8 -> half, float, bfloat16) is exact; an fp8 NaN becomes the wider type's
// canonical NaN.
//
// Not here: the e8m0 and ue5m3 scale types, x4 vectors, fp8 arithmetic (CUDA has none either).
#ifndef GPULAB_CUDA_FP8_H
#define GPULAB_CUDA_FP8_H
#define __CUDA_FP8_TYPES_EXIST__      // as CUDA's header: code may test for the types
#include <stdint.h>
#include <string.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short int __nv_fp8x2_storage_t;
typedef unsigned int __nv_fp8x4_storage_t;

typedef enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;

// double -> fp8, CUDA's algorithm: the mantissa cut to the target's width, then one ulp added
// where the cut-off bits are over half an ulp, or exactly half and the kept mantissa odd.
static inline __nv_fp8_storage_t __nv_cvt_double_to_fp8(const double x, const __nv_saturation_t saturate,
                                                         const __nv_fp8_interpretation_t kind) {
    uint64_t xbits;
    memcpy(&xbits, &x, 8);
    const bool e4m3 = kind != __NV_E5M2;          // CUDA treats any other value as e4m3
    const bool satfinite = saturate != __NV_NOSAT;
    const unsigned bias = e4m3 ? 7u : 15u;
    const uint64_t significand_bits = e4m3 ? 4u : 3u;           // with the leading bit
    const unsigned char mantissa_mask = e4m3 ? 0x7u : 0x3u;
    const uint64_t min_denorm_over_2 = e4m3 ? 0x3F50000000000000ull : 0x3EE0000000000000ull;   // 2^-10, 2^-17
    // The largest finite value plus half its ulp: 448 + 16 (a tie there rounds down to the even
    // 448) and 57344 + 4096 (a tie there rounds up to the even infinity, hence the - 1).
    const uint64_t overflow = e4m3 ? 0x407D000000000000ull : 0x40EE000000000000ull - 1u;
    const unsigned char max_finite = e4m3 ? 0x7Eu : 0x7Bu;
    const uint64_t min_normal = e4m3 ? 0x3F90000000000000ull : 0x3F10000000000000ull;          // 2^-6, 2^-14
    const uint64_t half_ulp = 1ull << (53u - significand_bits - 1u);
    const unsigned char sign = (unsigned char)((xbits >> 63) << 7);
    const unsigned char exp = (unsigned char)((((unsigned)(xbits >> 52)) & 0x7FFu) - 1023u + bias);
    unsigned char mantissa = (unsigned char)(xbits >> (53u - significand_bits)) & mantissa_mask;
    const uint64_t absx = xbits & 0x7FFFFFFFFFFFFFFFull;
    unsigned char res;
    if (absx <= min_denorm_over_2) {
        res = 0;
    } else if (absx > 0x7FF0000000000000ull) {                 // NaN
        res = e4m3 ? 0x7Fu : (unsigned char)(0x7Eu | mantissa);
    } else if (absx > overflow) {
        res = satfinite ? max_finite : e4m3 ? 0x7Fu : 0x7Cu;
    } else if (absx >= min_normal) {
        res = (unsigned char)((exp << (significand_bits - 1u)) | mantissa);
        const uint64_t round = xbits & ((half_ulp << 1) - 1u);
        if (round > half_ulp || (round == half_ulp && (mantissa & 1u))) res = (unsigned char)(res + 1u);
    } else {                                                    // subnormal: shift the leading bit in
        const unsigned char shift = (unsigned char)(1u - exp);
        mantissa |= (unsigned char)(1u << (significand_bits - 1u));
        res = (unsigned char)(mantissa >> shift);
        const uint64_t round = (xbits | (1ull << 52)) & ((half_ulp << (shift + 1u)) - 1u);
        if (round > (half_ulp << shift) || (round == (half_ulp << shift) && (res & 1u)))
            res = (unsigned char)(res + 1u);
    }
    return (__nv_fp8_storage_t)(res | sign);
}

static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(const float x, const __nv_saturation_t saturate,
                                                        const __nv_fp8_interpretation_t kind) {
    uint32_t xbits;
    memcpy(&xbits, &x, 4);
    if ((xbits & 0x7FFFFFFFu) > 0x7F800000u) xbits = 0x7FFFFFFFu;   // NaN: the positive canonical NaN
    float fx;
    memcpy(&fx, &xbits, 4);
    return __nv_cvt_double_to_fp8((double)fx, saturate, kind);      // float -> double is exact
}

static inline __nv_fp8x2_storage_t __nv_cvt_double2_to_fp8x2(const double2 x, const __nv_saturation_t saturate,
                                                              const __nv_fp8_interpretation_t kind) {
    return (__nv_fp8x2_storage_t)(__nv_cvt_double_to_fp8(x.y, saturate, kind) << 8 |
                                  __nv_cvt_double_to_fp8(x.x, saturate, kind));
}
static inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(const float2 x, const __nv_saturation_t saturate,
                                                             const __nv_fp8_interpretation_t kind) {
    return (__nv_fp8x2_storage_t)(__nv_cvt_float_to_fp8(x.y, saturate, kind) << 8 |
                                  __nv_cvt_float_to_fp8(x.x, saturate, kind));
}
// half and bfloat16 widen exactly to float first.
static inline __nv_fp8_storage_t __nv_cvt_halfraw_to_fp8(const __half_raw x, const __nv_saturation_t saturate,
                                                          const __nv_fp8_interpretation_t kind) {
    return __nv_cvt_float_to_fp8(gpulab::half_bits_to_float(x.x), saturate, kind);
}
static inline __nv_fp8_storage_t __nv_cvt_bfloat16raw_to_fp8(const __nv_bfloat16_raw x,
                                                              const __nv_saturation_t saturate,
                                                              const __nv_fp8_interpretation_t kind) {
    return __nv_cvt_float_to_fp8(gpulab::bfloat16_bits_to_float(x.x), saturate, kind);
}

// fp8 -> half, exactly: e5m2 is a half's upper byte; e4m3's exponent is rebiased (7 -> 15) and
// its subnormals normalised (every e4m3 subnormal is a normal half).
static inline __half_raw __nv_cvt_fp8_to_halfraw(const __nv_fp8_storage_t x, const __nv_fp8_interpretation_t kind) {
    unsigned short ur = (unsigned short)(x << 8);
    if (kind == __NV_E5M2) {
        if ((ur & 0x7FFFu) > 0x7C00u) ur = 0x7FFFu;             // NaN: the canonical half NaN
    } else {
        const unsigned short sign = ur & 0x8000u;
        unsigned short exponent = (unsigned short)(((ur & 0x7800u) >> 1) + 0x2000u);
        unsigned short mantissa = (ur & 0x0700u) >> 1;
        if ((x & 0x7Fu) == 0x7Fu) {
            ur = 0x7FFFu;                                        // NaN, its sign dropped
        } else if (exponent == 0x2000u) {                        // zero or subnormal
            if (mantissa != 0) {
                mantissa = (unsigned short)(mantissa << 1);
                while ((mantissa & 0x0400u) == 0) {
                    mantissa = (unsigned short)(mantissa << 1);
                    exponent = (unsigned short)(exponent - 0x0400u);
                }
                mantissa &= 0x03FFu;
            } else {
                exponent = 0;
            }
            ur = (unsigned short)(sign | exponent | mantissa);
        } else {
            ur = (unsigned short)(sign | exponent | mantissa);
        }
    }
    return __half_raw{ur};
}

namespace gpulab {
static inline float fp8_to_float(__nv_fp8_storage_t x, __nv_fp8_interpretation_t kind) {
    return half_bits_to_float(__nv_cvt_fp8_to_halfraw(x, kind).x);
}
}  // namespace gpulab

static inline __nv_bfloat16_raw __nv_cvt_fp8_to_bf16raw(const __nv_fp8_storage_t x,
                                                        const __nv_fp8_interpretation_t kind) {
    // exact: bfloat16 has 7 mantissa bits and float's exponent range; a NaN stays NaN
    const float f = gpulab::fp8_to_float(x, kind);
    uint32_t u;
    memcpy(&u, &f, 4);
    return __nv_bfloat16_raw{(unsigned short)(u >> 16)};
}

#define GPULAB_FP8_TYPE(NAME, KIND)                                                                      \
    struct __attribute__((aligned(1))) NAME {                                                            \
        __nv_fp8_storage_t __x;                                                                          \
        NAME() = default;                                                                                \
        explicit NAME(const __half f) : __x(__nv_cvt_halfraw_to_fp8(__half_raw{f.__x}, __NV_SATFINITE, KIND)) {} \
        explicit NAME(const __nv_bfloat16 f)                                                             \
            : __x(__nv_cvt_bfloat16raw_to_fp8(__nv_bfloat16_raw{f.__x}, __NV_SATFINITE, KIND)) {}        \
        explicit NAME(const float f) : __x(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, KIND)) {}            \
        explicit NAME(const double f) : __x(__nv_cvt_double_to_fp8(f, __NV_SATFINITE, KIND)) {}          \
        explicit NAME(const int v) : __x(__nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, KIND)) {}      \
        explicit NAME(const unsigned int v) : __x(__nv_cvt_float_to_fp8((float)v, __NV_SATFINITE, KIND)) {} \
        explicit operator float() const { return gpulab::fp8_to_float(__x, KIND); }                     \
        explicit operator double() const { return (double)gpulab::fp8_to_float(__x, KIND); }            \
        explicit operator __half() const { return __half(__half_raw{__nv_cvt_fp8_to_halfraw(__x, KIND).x}); } \
        explicit operator __nv_bfloat16() const {                                                        \
            return __nv_bfloat16(__nv_bfloat16_raw{__nv_cvt_fp8_to_bf16raw(__x, KIND).x});               \
        }                                                                                                \
    };
GPULAB_FP8_TYPE(__nv_fp8_e4m3, __NV_E4M3)
GPULAB_FP8_TYPE(__nv_fp8_e5m2, __NV_E5M2)
#undef GPULAB_FP8_TYPE

// Pairs: element x in the low byte, y in the high one (as CUDA packs them).
#define GPULAB_FP8X2_TYPE(NAME, KIND)                                                                    \
    struct __attribute__((aligned(2))) NAME {                                                            \
        __nv_fp8x2_storage_t __x;                                                                        \
        NAME() = default;                                                                                \
        explicit NAME(const float2 f) : __x(__nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, KIND)) {}        \
        explicit NAME(const double2 f) : __x(__nv_cvt_double2_to_fp8x2(f, __NV_SATFINITE, KIND)) {}      \
        explicit operator float2() const {                                                               \
            return make_float2(gpulab::fp8_to_float((__nv_fp8_storage_t)__x, KIND),                      \
                               gpulab::fp8_to_float((__nv_fp8_storage_t)(__x >> 8), KIND));              \
        }                                                                                                \
    };
GPULAB_FP8X2_TYPE(__nv_fp8x2_e4m3, __NV_E4M3)
GPULAB_FP8X2_TYPE(__nv_fp8x2_e5m2, __NV_E5M2)
#undef GPULAB_FP8X2_TYPE
#endif  // GPULAB_CUDA_FP8_H
