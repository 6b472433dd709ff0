// The part of CUDA's cuda_fp16.h that the lab's kernels use, for the CPU
// backend.  Conversions round to nearest even bit-exactly like the GPU's;
// arithmetic is done in float and rounded once, which is what the GPU's
// half instructions give for +, -, * and fma of two or three halves.
#ifndef GPULAB_CUDA_FP16_H
#define GPULAB_CUDA_FP16_H
#include <stdint.h>
#include <string.h>

namespace gpulab {
static inline unsigned short float_to_half_bits(float f) {
    uint32_t x;
    __builtin_memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return 0x7fffu;                    // NaN: the GPU's canonical NaN
    if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // rounds to infinity
    if (ax < 0x38800000u) {                                  // half subnormal or zero
        if (ax < 0x33000000u) return (unsigned short)sign;
        const uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t h = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
        return (unsigned short)(sign | h);
    }
    uint32_t h = (ax - 0x38000000u) >> 13;
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry correctly bumps the exponent
    return (unsigned short)(sign | h);
}
static inline float half_bits_to_float(unsigned short h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t x;
    if (e == 0) {
        const float v = (float)m * 5.9604644775390625e-8f;  // m * 2^-24, exact
        __builtin_memcpy(&x, &v, 4);
        x |= sign;
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    __builtin_memcpy(&f, &x, 4);
    return f;
}
}  // namespace gpulab

struct __half_raw { unsigned short x; };

struct __attribute__((aligned(2))) __half {
#ifdef GPULAB_INSTRUMENTED
    // Constant-initialised, so that a __shared__ (thread_local static) array
    // of halves needs no guard variable, whose accesses would look like races.
    unsigned short __x = 0;
#else
    unsigned short __x;
#endif
    __half() = default;
    constexpr __half(__half_raw r) : __x(r.x) {}
    __half(float f) : __x(gpulab::float_to_half_bits(f)) {}
    __half(double f) : __x(gpulab::float_to_half_bits((float)f)) {}
    __half(int i) : __x(gpulab::float_to_half_bits((float)i)) {}
    __half(unsigned int i) : __x(gpulab::float_to_half_bits((float)i)) {}
    __half& operator=(float f) { __x = gpulab::float_to_half_bits(f); return *this; }
    operator float() const { return gpulab::half_bits_to_float(__x); }
    operator __half_raw() const { return __half_raw{__x}; }
};
typedef __half half;

struct __attribute__((aligned(4))) __half2 {
    __half x, y;
    __half2() = default;
    constexpr __half2(__half a, __half b) : x(a), y(b) {}
};
typedef __half2 half2;

static inline __half __float2half(float f) { return __half(f); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline __half __double2half(double d) { return __half((float)d); }
static inline float __half2float(__half h) { return gpulab::half_bits_to_float(h.__x); }
static inline __half __int2half_rn(int i) { return __half((float)i); }
static inline int __half2int_rn(__half h) { return (int)nearbyintf(__half2float(h)); }
static inline int __half2int_rz(__half h) { return (int)__half2float(h); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline short __half_as_short(__half h) { return (short)h.__x; }
static inline __half __ushort_as_half(unsigned short u) { return __half(__half_raw{u}); }
static inline __half __short_as_half(short s) { return __half(__half_raw{(unsigned short)s}); }
static inline __half2 __float2half2_rn(float f) { return __half2(__half(f), __half(f)); }
static inline __half2 __floats2half2_rn(float a, float b) { return __half2(__half(a), __half(b)); }
static inline __half2 __float22half2_rn(float2 v) { return __half2(__half(v.x), __half(v.y)); }
static inline float2 __half22float2(__half2 h) { return make_float2(__half2float(h.x), __half2float(h.y)); }
static inline float __low2float(__half2 h) { return __half2float(h.x); }
static inline float __high2float(__half2 h) { return __half2float(h.y); }
static inline __half __low2half(__half2 h) { return h.x; }
static inline __half __high2half(__half2 h) { return h.y; }
static inline __half2 __halves2half2(__half a, __half b) { return __half2(a, b); }
static inline __half2 __half2half2(__half a) { return __half2(a, a); }
static inline __half2 __low2half2(__half2 h) { return __half2(h.x, h.x); }
static inline __half2 __high2half2(__half2 h) { return __half2(h.y, h.y); }
static inline __half2 __lowhigh2highlow(__half2 h) { return __half2(h.y, h.x); }
static inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2(a.x, b.x); }
static inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2(a.y, b.y); }

static inline __half __hadd(__half a, __half b) { return __half((float)a + (float)b); }
static inline __half __hsub(__half a, __half b) { return __half((float)a - (float)b); }
static inline __half __hmul(__half a, __half b) { return __half((float)a * (float)b); }
static inline __half __hdiv(__half a, __half b) { return __half((float)a / (float)b); }
static inline __half __hfma(__half a, __half b, __half c) { return __half(fmaf((float)a, (float)b, (float)c)); }
static inline __half __hneg(__half a) { return __half(__half_raw{(unsigned short)(a.__x ^ 0x8000u)}); }
static inline __half __habs(__half a) { return __half(__half_raw{(unsigned short)(a.__x & 0x7fffu)}); }
static inline __half __hmax(__half a, __half b) { return (float)a < (float)b ? b : a; }
static inline __half __hmin(__half a, __half b) { return (float)b < (float)a ? b : a; }
static inline bool __heq(__half a, __half b) { return (float)a == (float)b; }
static inline bool __hne(__half a, __half b) { return (float)a != (float)b; }
static inline bool __hgt(__half a, __half b) { return (float)a > (float)b; }
static inline bool __hge(__half a, __half b) { return (float)a >= (float)b; }
static inline bool __hlt(__half a, __half b) { return (float)a < (float)b; }
static inline bool __hle(__half a, __half b) { return (float)a <= (float)b; }
static inline bool __hisnan(__half a) { return (a.__x & 0x7fffu) > 0x7c00u; }
static inline bool __hisinf(__half a) { return (a.__x & 0x7fffu) == 0x7c00u; }
static inline __half hexp(__half a) { return __half(expf((float)a)); }
static inline __half hlog(__half a) { return __half(logf((float)a)); }
static inline __half hsqrt(__half a) { return __half(sqrtf((float)a)); }
static inline __half hrsqrt(__half a) { return __half(1.0f / sqrtf((float)a)); }

#define GPULAB_HALF2_OP(NAME, F) \
    static inline __half2 NAME(__half2 a, __half2 b) { return __half2(F(a.x, b.x), F(a.y, b.y)); }
GPULAB_HALF2_OP(__hadd2, __hadd)
GPULAB_HALF2_OP(__hsub2, __hsub)
GPULAB_HALF2_OP(__hmul2, __hmul)
GPULAB_HALF2_OP(__h2div, __hdiv)
GPULAB_HALF2_OP(__hmax2, __hmax)
GPULAB_HALF2_OP(__hmin2, __hmin)
#undef GPULAB_HALF2_OP
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
    return __half2(__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y));
}
static inline __half2 __hneg2(__half2 a) { return __half2(__hneg(a.x), __hneg(a.y)); }
static inline __half2 __habs2(__half2 a) { return __half2(__habs(a.x), __habs(a.y)); }

static inline __half operator+(const __half& a, const __half& b) { return __hadd(a, b); }
static inline __half operator-(const __half& a, const __half& b) { return __hsub(a, b); }
static inline __half operator*(const __half& a, const __half& b) { return __hmul(a, b); }
static inline __half operator/(const __half& a, const __half& b) { return __hdiv(a, b); }
static inline __half operator-(const __half& a) { return __hneg(a); }
static inline __half operator+(const __half& a) { return a; }
static inline __half& operator+=(__half& a, const __half& b) { return a = __hadd(a, b); }
static inline __half& operator-=(__half& a, const __half& b) { return a = __hsub(a, b); }
static inline __half& operator*=(__half& a, const __half& b) { return a = __hmul(a, b); }
static inline __half& operator/=(__half& a, const __half& b) { return a = __hdiv(a, b); }
static inline bool operator==(const __half& a, const __half& b) { return __heq(a, b); }
static inline bool operator!=(const __half& a, const __half& b) { return __hne(a, b); }
static inline bool operator<(const __half& a, const __half& b) { return __hlt(a, b); }
static inline bool operator<=(const __half& a, const __half& b) { return __hle(a, b); }
static inline bool operator>(const __half& a, const __half& b) { return __hgt(a, b); }
static inline bool operator>=(const __half& a, const __half& b) { return __hge(a, b); }
static inline __half2 operator+(const __half2& a, const __half2& b) { return __hadd2(a, b); }
static inline __half2 operator-(const __half2& a, const __half2& b) { return __hsub2(a, b); }
static inline __half2 operator*(const __half2& a, const __half2& b) { return __hmul2(a, b); }
static inline __half2 operator/(const __half2& a, const __half2& b) { return __h2div(a, b); }
static inline __half2& operator+=(__half2& a, const __half2& b) { return a = __hadd2(a, b); }
static inline __half2& operator-=(__half2& a, const __half2& b) { return a = __hsub2(a, b); }
static inline __half2& operator*=(__half2& a, const __half2& b) { return a = __hmul2(a, b); }

static inline __half atomicAdd(__half* a, __half v) {
    unsigned short* p = reinterpret_cast<unsigned short*>(a);
    unsigned short old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(p, &old, __hadd(__ushort_as_half(old), v).__x, true,
                                        __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return __ushort_as_half(old);
}
#endif  // GPULAB_CUDA_FP16_H
