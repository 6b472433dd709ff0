// The CUDA device language on the CPU, force-included (g++ -include) before
// every kernel source that gpulab's CPU backend compiles.  Each CUDA thread is
// a fiber; runtime.cpp schedules the fibers of a block on one OS thread.
#ifndef GPULAB_CUDA_CPU_H
#define GPULAB_CUDA_CPU_H

// Standard headers come first: some libstdc++ headers spell attributes
// __noinline__, which must not be a macro yet when they are read.
#include <assert.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <time.h>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __constant__
// One block runs at a time on an OS thread, so thread-local statics give each
// running block its own copy of a __shared__ array. The blocks of a cluster run
// together on one OS thread and would share such a copy: gpulab/cpu/compiler.py
// rewrites a kernel file's own static __shared__ arrays into per-block copies, so a
// cluster kernel declares its arrays there (or uses dynamic shared memory), not in
// an included header.
#define __shared__ static thread_local
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __grid_constant__
// Compile-time cluster dimensions: gpulab reads them from the kernel's declaration
// (gpulab.signature) and runs each cluster's blocks together on one worker.
#define __cluster_dims__(...)
#define GPULAB_CPU_BACKEND 1
// Code the counters and race checking must not see (an instrumented build
// compiles the kernel's source with ThreadSanitizer's hooks and coverage).
#ifdef GPULAB_INSTRUMENTED
#define GPULAB_UNCOUNTED __attribute__((no_sanitize_thread, no_sanitize_coverage, noinline))
#else
#define GPULAB_UNCOUNTED
#endif

struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define GPULAB_VEC2(T, N, A) struct __attribute__((aligned(A))) N { T x, y; }; \
    static inline N make_##N(T x, T y) { return N{x, y}; }
#define GPULAB_VEC3(T, N) struct N { T x, y, z; }; \
    static inline N make_##N(T x, T y, T z) { return N{x, y, z}; }
#define GPULAB_VEC4(T, N, A) struct __attribute__((aligned(A))) N { T x, y, z, w; }; \
    static inline N make_##N(T x, T y, T z, T w) { return N{x, y, z, w}; }
GPULAB_VEC2(float, float2, 8)
GPULAB_VEC3(float, float3)
GPULAB_VEC4(float, float4, 16)
GPULAB_VEC2(double, double2, 16)
GPULAB_VEC2(int, int2, 8)
GPULAB_VEC3(int, int3)
GPULAB_VEC4(int, int4, 16)
GPULAB_VEC2(unsigned int, uint2, 8)
GPULAB_VEC4(unsigned int, uint4, 16)
GPULAB_VEC4(unsigned char, uchar4, 4)
GPULAB_VEC4(signed char, char4, 4)
GPULAB_VEC2(long long, longlong2, 16)
static inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }
#undef GPULAB_VEC2
#undef GPULAB_VEC3
#undef GPULAB_VEC4

// ---------------------------------------------------------------- runtime API
namespace gpulab {

enum WarpOp { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, BALLOT, ANY, ALL, SYNCWARP,
              REDUCE_ADD, REDUCE_MIN, REDUCE_MAX, REDUCE_UMIN, REDUCE_UMAX,
              REDUCE_AND, REDUCE_OR, REDUCE_XOR, WARP_COLLECTIVE };
enum BarrierOp { BAR_SYNC, BAR_COUNT, BAR_AND, BAR_OR };

struct ThreadView { uint3 threadIdx, blockIdx; dim3 blockDim, gridDim; };

extern thread_local ThreadView* current_view;
int barrier(BarrierOp op, int predicate, const char* file, int line);
unsigned long long warp_op(WarpOp op, unsigned mask, unsigned long long value, int arg,
                           int width, const char* file, int line);
unsigned active_mask();
// A barrier of all live lanes of the calling thread's warp, which must all
// arrive at the same call site (file, line) with the same name and phase:
// how warp-collective operations such as nvcuda::wmma's *_sync functions meet.
void warp_collective(const char* name, int phase, const char* file, int line);
// Suspends the calling thread until ready(object, parity) holds, letting the
// block's other threads run meanwhile (how an mbarrier wait blocks: see
// gpulab_hopper_cpu.h); a block whose threads can no longer make it hold is
// reported stuck, naming the line.
void wait_until(bool (*ready)(const void*, unsigned), const void* object, unsigned parity, const char* file,
                int line);
void* dynamic_shared();
// Thread-block clusters (kernels/hopper/cluster.cuh's CPU side, gpulab_cluster_cpu.h): the
// running block's rank in its cluster and the cluster's size in blocks; mapa (the same place
// in block `rank`'s shared memory); barrier.cluster.arrive and .wait.
unsigned cluster_rank();
unsigned cluster_blocks();
void* cluster_map(const void* p, unsigned rank, const char* file, int line);
void cluster_arrive(const char* file, int line);
void cluster_wait(const char* file, int line);
// The launch's dynamic shared memory, as the array 'name' of 'type' (for messages).
void* dynamic_shared(const char* name, const char* type, size_t itemsize);
// A function's static __shared__ array: the compiler rewrites each
// declaration, the id-th of the file, into a call of static_shared, which
// gives the running block's copy (guarded like an argument's when bounds are
// checked).  The key tells apart the instantiations of one declaration in a
// template (their sizes may differ).
void* static_shared_raw(const void* key, int id, const char* name, const char* type, size_t bytes, size_t align,
                        size_t itemsize, const size_t* extents, int rank);
template <class T, int Id> static inline T* static_shared(const char* name, const char* type, size_t align) {
    static const char key = 0;
    static constexpr size_t extents[4] = {std::extent<T, 0>::value, std::extent<T, 1>::value,
                                          std::extent<T, 2>::value, std::extent<T, 3>::value};
    return static_cast<T*>(static_shared_raw(&key, Id, name, type, sizeof(T), align > alignof(T) ? align : alignof(T),
                                             sizeof(std::remove_all_extents_t<T>), extents,
                                             (int)std::rank<T>::value));
}
[[noreturn]] void trap(const char* what, const char* file, int line);

template <class T> static inline unsigned long long to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes per call");
    unsigned long long bits = 0;
    __builtin_memcpy(&bits, &v, sizeof(T));
    return bits;
}
template <class T> static inline T from_bits(unsigned long long bits) {
    T v;
    __builtin_memcpy(&v, &bits, sizeof(T));
    return v;
}
}  // namespace gpulab


#define threadIdx (gpulab::current_view->threadIdx)
#define blockIdx (gpulab::current_view->blockIdx)
#define blockDim (gpulab::current_view->blockDim)
#define gridDim (gpulab::current_view->gridDim)
static constexpr int warpSize = 32;

#define __syncthreads() gpulab::barrier(gpulab::BAR_SYNC, 0, __FILE__, __LINE__)
#define __syncthreads_count(p) gpulab::barrier(gpulab::BAR_COUNT, (p) != 0, __FILE__, __LINE__)
#define __syncthreads_and(p) gpulab::barrier(gpulab::BAR_AND, (p) != 0, __FILE__, __LINE__)
#define __syncthreads_or(p) gpulab::barrier(gpulab::BAR_OR, (p) != 0, __FILE__, __LINE__)
#define __syncwarp(...) ((void)gpulab::warp_op(gpulab::SYNCWARP, gpulab_mask_or_all(__VA_ARGS__), 0, 0, 32, __FILE__, __LINE__))
static inline unsigned gpulab_mask_or_all(unsigned mask = 0xffffffffu) { return mask; }
#define __trap() gpulab::trap("__trap() was called", __FILE__, __LINE__)
#define __brkpt() gpulab::trap("__brkpt() was called", __FILE__, __LINE__)

// The file and line of a shuffle are the caller's: default arguments are
// evaluated where the call is written.
#define GPULAB_SITE const char* file = __builtin_FILE(), int line = __builtin_LINE()
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, GPULAB_SITE) {
    return gpulab::from_bits<T>(gpulab::warp_op(gpulab::SHFL_IDX, mask, gpulab::to_bits(v), src, width, file, line));
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, GPULAB_SITE) {
    return gpulab::from_bits<T>(gpulab::warp_op(gpulab::SHFL_UP, mask, gpulab::to_bits(v), (int)delta, width, file, line));
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, GPULAB_SITE) {
    return gpulab::from_bits<T>(gpulab::warp_op(gpulab::SHFL_DOWN, mask, gpulab::to_bits(v), (int)delta, width, file, line));
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, GPULAB_SITE) {
    return gpulab::from_bits<T>(gpulab::warp_op(gpulab::SHFL_XOR, mask, gpulab::to_bits(v), lane_mask, width, file, line));
}
static inline unsigned __ballot_sync(unsigned mask, int p, GPULAB_SITE) {
    return (unsigned)gpulab::warp_op(gpulab::BALLOT, mask, p != 0, 0, 32, file, line);
}
static inline int __any_sync(unsigned mask, int p, GPULAB_SITE) {
    return (int)gpulab::warp_op(gpulab::ANY, mask, p != 0, 0, 32, file, line);
}
static inline int __all_sync(unsigned mask, int p, GPULAB_SITE) {
    return (int)gpulab::warp_op(gpulab::ALL, mask, p != 0, 0, 32, file, line);
}
static inline unsigned __activemask() { return gpulab::active_mask(); }
#define GPULAB_REDUCE(NAME, T, OP) static inline T NAME(unsigned mask, T v, GPULAB_SITE) { \
    return (T)gpulab::warp_op(gpulab::OP, mask, (unsigned long long)(unsigned)v, 0, 32, file, line); }
GPULAB_REDUCE(__reduce_add_sync, unsigned, REDUCE_ADD)
GPULAB_REDUCE(__reduce_add_sync, int, REDUCE_ADD)
GPULAB_REDUCE(__reduce_min_sync, int, REDUCE_MIN)
GPULAB_REDUCE(__reduce_max_sync, int, REDUCE_MAX)
GPULAB_REDUCE(__reduce_min_sync, unsigned, REDUCE_UMIN)
GPULAB_REDUCE(__reduce_max_sync, unsigned, REDUCE_UMAX)
GPULAB_REDUCE(__reduce_and_sync, unsigned, REDUCE_AND)
GPULAB_REDUCE(__reduce_or_sync, unsigned, REDUCE_OR)
GPULAB_REDUCE(__reduce_xor_sync, unsigned, REDUCE_XOR)
#undef GPULAB_REDUCE
#undef GPULAB_SITE

// clock() is the C library's (process CPU time, declared by <time.h>); clock64()
// counts nanoseconds of a monotonic clock, strictly increasing per OS thread.
// Both only go up: neither says anything about how fast a kernel runs on a GPU.
static inline long long clock64() {
    static thread_local long long last;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (now <= last) now = last + 1;
    return last = now;
}

static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }

// ------------------------------------------------------------------ atomics
// Blocks run in parallel on OS threads, so these must be real atomics.
#define GPULAB_INT_ATOMICS(T) \
    static inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); } \
    static inline T atomicCAS(T* a, T expected, T desired) { \
        __atomic_compare_exchange_n(a, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
        return expected; } \
    static inline T atomicMax(T* a, T v) { T old = __atomic_load_n(a, __ATOMIC_SEQ_CST); \
        while (old < v && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} \
        return old; } \
    static inline T atomicMin(T* a, T v) { T old = __atomic_load_n(a, __ATOMIC_SEQ_CST); \
        while (old > v && !__atomic_compare_exchange_n(a, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} \
        return old; }
GPULAB_INT_ATOMICS(int)
GPULAB_INT_ATOMICS(unsigned int)
GPULAB_INT_ATOMICS(unsigned long long)
GPULAB_INT_ATOMICS(long long)
#undef GPULAB_INT_ATOMICS

namespace gpulab {
// Floating-point atomics: a compare-and-swap loop on the value's bits.
template <class F, class Bits, class Op> static inline F atomic_float(F* a, Op op) {
    Bits* p = reinterpret_cast<Bits*>(a);
    Bits old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    for (;;) {
        F old_value = from_bits<F>(old);
        Bits desired = (Bits)to_bits(op(old_value));
        if (__atomic_compare_exchange_n(p, &old, desired, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            return old_value;
    }
}
}  // namespace gpulab
static inline float atomicAdd(float* a, float v) { return gpulab::atomic_float<float, uint32_t>(a, [v](float o) { return o + v; }); }
static inline double atomicAdd(double* a, double v) { return gpulab::atomic_float<double, uint64_t>(a, [v](double o) { return o + v; }); }
static inline float atomicSub(float* a, float v) { return gpulab::atomic_float<float, uint32_t>(a, [v](float o) { return o - v; }); }
static inline float atomicExch(float* a, float v) { return gpulab::atomic_float<float, uint32_t>(a, [v](float) { return v; }); }
static inline float atomicMax(float* a, float v) { return gpulab::atomic_float<float, uint32_t>(a, [v](float o) { return o < v ? v : o; }); }
static inline float atomicMin(float* a, float v) { return gpulab::atomic_float<float, uint32_t>(a, [v](float o) { return o > v ? v : o; }); }
static inline unsigned int atomicInc(unsigned int* a, unsigned int limit) {
    unsigned int old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(a, &old, old >= limit ? 0u : old + 1, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return old;
}

// -------------------------------------------------------------------- math
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
static inline std::common_type_t<A, B> min(A a, B b) {
    using C = std::common_type_t<A, B>;
    return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value>>
static inline std::common_type_t<A, B> max(A a, B b) {
    using C = std::common_type_t<A, B>;
    return (C)a < (C)b ? (C)b : (C)a;
}
static inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned umax(unsigned a, unsigned b) { return a < b ? b : a; }
// glibc's math.h declares these names itself, so they can only be macros.
#define __expf(x) expf(x)
#define __exp10f(x) powf(10.0f, (x))
#define __logf(x) logf(x)
#define __log2f(x) log2f(x)
#define __sinf(x) sinf(x)
#define __cosf(x) cosf(x)
#define __tanf(x) tanf(x)
#define __powf(x, y) powf((x), (y))
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __saturatef(float x) { return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x)); }
static inline int __float_as_int(float x) { return gpulab::from_bits<int>(gpulab::to_bits(x)); }
static inline unsigned __float_as_uint(float x) { return gpulab::from_bits<unsigned>(gpulab::to_bits(x)); }
static inline float __int_as_float(int x) { return gpulab::from_bits<float>(gpulab::to_bits(x)); }
static inline float __uint_as_float(unsigned x) { return gpulab::from_bits<float>(gpulab::to_bits(x)); }
static inline long long __double_as_longlong(double x) { return gpulab::from_bits<long long>(gpulab::to_bits(x)); }
static inline double __longlong_as_double(long long x) { return gpulab::from_bits<double>(gpulab::to_bits(x)); }
static inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int __float2int_rz(float x) { return (int)x; }
static inline int __float2int_rd(float x) { return (int)floorf(x); }
static inline int __float2int_ru(float x) { return (int)ceilf(x); }
static inline float __int2float_rn(int x) { return (float)x; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
static inline int __mul24(int a, int b) { return a * b; }
static inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline unsigned __sad(int a, int b, unsigned c) { return c + (unsigned)(a > b ? a - b : b - a); }

#define GPULAB_EXPORT extern "C" __attribute__((visibility("default")))
namespace gpulab {
template <class... P, size_t... I>
GPULAB_UNCOUNTED static inline void invoke_unpacked(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(args[I])...);
}
// Unpacks CUDA's launch convention (args[i] points at the i-th argument's
// value) with the types deduced from the kernel's own declaration.
template <class... P> static inline void invoke_kernel(void (*kernel)(P...), void** args) {
    invoke_unpacked(kernel, args, std::index_sequence_for<P...>{});
}
}  // namespace gpulab

#endif  // GPULAB_CUDA_CPU_H
