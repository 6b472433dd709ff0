// CUDA's <mma.h> (nvcuda::wmma, the tensor cores' warp matrix functions) for
// the CPU backend.  Supported: the shapes m16n16k16, m32n8k16 and m8n32k16
// with __half A and B and a float or __half accumulator, and m16n16k8 with
// precision::tf32 A and B and a float accumulator; row_major and col_major A
// and B; mem_row_major and mem_col_major accumulators.
//
// On a GPU a fragment is spread over the 32 lanes of a warp, in a mapping that
// CUDA leaves unspecified.  Here every lane holds the whole tile: num_elements
// is rows * columns (256 for a 16x16 accumulator) and x[i] is element
// (i / columns, i % columns), so code that treats x[] elementwise without
// assuming a mapping computes what it computes on a GPU.  Each lane loads and
// stores the whole tile itself (32 times the traffic of a GPU); mma_sync is
// computed once per warp when its lanes hold the same fragments (the usual case).
// mma_sync multiplies the exact products of the inputs and adds them to the
// accumulator in float, in order of k, rounding to __half at the end for a
// __half result.  tf32 fragments hold floats as loaded; mma_sync uses only
// their top 19 bits (sign, exponent, 10 mantissa bits), as an H100's tensor
// cores do; a kernel that wants them rounded calls __float_to_tf32, as on a GPU.
//
// load_matrix_sync, store_matrix_sync and mma_sync are warp-collective: every
// lane of the warp that has not exited meets at the same call before it runs
// and, for the loads and stores, again after it, so the warp reads and writes
// memory as one, as on a GPU.  A fragment starts as NaN, so an accumulator
// used before fill_fragment or a load shows in the results.
#ifndef GPULAB_MMA_H
#define GPULAB_MMA_H
#include <cuda_fp16.h>
#include <type_traits>

namespace nvcuda {
namespace wmma {

struct row_major;
struct col_major;
struct matrix_a;
struct matrix_b;
struct accumulator;
namespace precision {
struct tf32;
}

enum layout_t { mem_row_major, mem_col_major };

// Rounds to tf32 (10 mantissa bits; the low 13 bits become zero): to nearest,
// ties away from zero, as the GPU's cvt.rna.tf32.f32.  Infinities and NaNs are
// kept; values past the largest tf32 round to infinity.
static inline float __float_to_tf32(float in) {
    uint32_t bits;
    __builtin_memcpy(&bits, &in, 4);
    if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & 0xffffe000u;
    float out;
    __builtin_memcpy(&out, &bits, 4);
    return out;
}

}  // namespace wmma
}  // namespace nvcuda

namespace gpulab {
namespace wmma_detail {
using namespace nvcuda::wmma;

template <class T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };

// The shapes and element types CUDA defines fragments for (and this header supports).
template <int M, int N, int K, class T> struct ab_type : std::false_type {};
template <> struct ab_type<16, 16, 16, __half> : std::true_type {};
template <> struct ab_type<32, 8, 16, __half> : std::true_type {};
template <> struct ab_type<8, 32, 16, __half> : std::true_type {};
template <> struct ab_type<16, 16, 8, precision::tf32> : std::true_type {};
template <int M, int N, int K, class T> struct acc_type : std::false_type {};
template <int M, int N> struct acc_type<M, N, 16, __half> : ab_type<M, N, 16, __half> {};
template <int M, int N> struct acc_type<M, N, 16, float> : ab_type<M, N, 16, __half> {};
template <> struct acc_type<16, 16, 8, float> : std::true_type {};

template <class Use, int M, int N, int K, class T, class Layout> struct supported : std::false_type {};
template <int M, int N, int K, class T> struct supported<matrix_a, M, N, K, T, row_major> : ab_type<M, N, K, T> {};
template <int M, int N, int K, class T> struct supported<matrix_a, M, N, K, T, col_major> : ab_type<M, N, K, T> {};
template <int M, int N, int K, class T> struct supported<matrix_b, M, N, K, T, row_major> : ab_type<M, N, K, T> {};
template <int M, int N, int K, class T> struct supported<matrix_b, M, N, K, T, col_major> : ab_type<M, N, K, T> {};
template <int M, int N, int K, class T> struct supported<accumulator, M, N, K, T, void> : acc_type<M, N, K, T> {};

template <class Use, int M, int N, int K> struct shape;
template <int M, int N, int K> struct shape<matrix_a, M, N, K> { enum { rows = M, cols = K }; };
template <int M, int N, int K> struct shape<matrix_b, M, N, K> { enum { rows = K, cols = N }; };
template <int M, int N, int K> struct shape<accumulator, M, N, K> { enum { rows = M, cols = N }; };

static inline float to_float(float v) { return v; }
static inline float to_float(__half v) { return __half2float(v); }
template <class S> static inline S from_float(float v);
template <> inline float from_float<float>(float v) { return v; }
template <> inline __half from_float<__half>(float v) { return __float2half_rn(v); }
static inline void set_nan(float& v) { v = __builtin_nanf(""); }
static inline void set_nan(__half& v) { v = __half(__half_raw{0x7fff}); }

// The value mma_sync multiplies: a tf32 input keeps its top 19 bits (the
// tensor cores ignore the low 13 mantissa bits of a value not rounded by
// __float_to_tf32); a NaN stays a NaN.
template <class T> static inline float operand(float v) {
    if (!std::is_same<T, precision::tf32>::value) return v;
    uint32_t bits;
    __builtin_memcpy(&bits, &v, 4);
    const bool nan_only_in_low_bits =
        (bits & 0x7fffe000u) == 0x7f800000u && (bits & 0x1fffu) != 0;  // would become an infinity
    if (!nan_only_in_low_bits) bits &= 0xffffe000u;
    __builtin_memcpy(&v, &bits, 4);
    return v;
}

// ldm must be a multiple of 16 bytes (8 __half or 4 float elements) on a GPU.
template <class S> static inline void check_ldm(const char* op, unsigned ldm, const char* file, int line) {
    if ((ldm * sizeof(S)) % 16 != 0) {
        char what[300];
        snprintf(what, sizeof what,
                 "nvcuda::wmma::%s: ldm = %u is not a multiple of %d (%s elements, 16 bytes), which "
                 "CUDA requires (a GPU gives wrong results or a misaligned-address error)",
                 op, ldm, (int)(16 / sizeof(S)), sizeof(S) == 2 ? "__half" : "float");
        trap(what, file, line);
    }
}

// Element (r, c) of a tile stored with leading dimension ldm.
static inline size_t offset(bool row_major_, int r, int c, unsigned ldm) {
    return row_major_ ? (size_t)r * ldm + c : (size_t)c * ldm + r;
}
}  // namespace wmma_detail
}  // namespace gpulab

namespace nvcuda {
namespace wmma {

template <class Use, int m, int n, int k, class T, class Layout = void>
class fragment {
    static_assert(gpulab::wmma_detail::supported<Use, m, n, k, T, Layout>::value,
                  "nvcuda::wmma::fragment: this combination of use, shape, element type and layout is "
                  "not one CUDA defines (the CPU backend supports m16n16k16, m32n8k16 and m8n32k16 with "
                  "__half A/B and a float or __half accumulator, and m16n16k8 with precision::tf32 A/B "
                  "and a float accumulator; A and B take row_major or col_major, an accumulator no layout)");
    typedef gpulab::wmma_detail::shape<Use, m, n, k> tile;

public:
    enum { num_elements = tile::rows * tile::cols };
    enum { num_storage_elements = num_elements };
    enum { gpulab_rows = tile::rows, gpulab_cols = tile::cols };
    typedef T element_type;
    typedef typename gpulab::wmma_detail::storage<T>::type storage_element_type;
    storage_element_type x[num_elements];

    fragment() {
        for (int i = 0; i < num_elements; ++i) gpulab::wmma_detail::set_nan(x[i]);
    }
};

template <class Use, int m, int n, int k, class T, class Layout>
static inline void fill_fragment(fragment<Use, m, n, k, T, Layout>& f,
                                 const typename fragment<Use, m, n, k, T, Layout>::storage_element_type& v) {
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = v;
}

// A or B: the layout is the fragment's.
template <class Use, int m, int n, int k, class T, class Layout>
GPULAB_UNCOUNTED static inline typename std::enable_if<!std::is_same<Use, accumulator>::value>::type
load_matrix_sync(fragment<Use, m, n, k, T, Layout>& f,
                 const typename fragment<Use, m, n, k, T, Layout>::storage_element_type* p, unsigned ldm,
                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    typedef fragment<Use, m, n, k, T, Layout> F;
    typedef typename F::storage_element_type S;
    static const char name[] = "nvcuda::wmma::load_matrix_sync";
    gpulab::wmma_detail::check_ldm<S>("load_matrix_sync", ldm, file, line);
    gpulab::warp_collective(name, 0, file, line);
    const bool rows = std::is_same<Layout, row_major>::value;
    for (int r = 0; r < F::gpulab_rows; ++r)
        for (int c = 0; c < F::gpulab_cols; ++c)
            f.x[r * F::gpulab_cols + c] = p[gpulab::wmma_detail::offset(rows, r, c, ldm)];
    gpulab::warp_collective(name, 1, file, line);
}

// An accumulator: the layout is given.
template <int m, int n, int k, class T>
GPULAB_UNCOUNTED static inline void load_matrix_sync(fragment<accumulator, m, n, k, T>& f,
                                    const typename fragment<accumulator, m, n, k, T>::storage_element_type* p,
                                    unsigned ldm, layout_t layout,
                                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    typedef fragment<accumulator, m, n, k, T> F;
    typedef typename F::storage_element_type S;
    static const char name[] = "nvcuda::wmma::load_matrix_sync";
    gpulab::wmma_detail::check_ldm<S>("load_matrix_sync", ldm, file, line);
    gpulab::warp_collective(name, 0, file, line);
    const bool rows = layout == mem_row_major;
    for (int r = 0; r < F::gpulab_rows; ++r)
        for (int c = 0; c < F::gpulab_cols; ++c)
            f.x[r * F::gpulab_cols + c] = p[gpulab::wmma_detail::offset(rows, r, c, ldm)];
    gpulab::warp_collective(name, 1, file, line);
}

template <int m, int n, int k, class T>
GPULAB_UNCOUNTED static inline void store_matrix_sync(typename fragment<accumulator, m, n, k, T>::storage_element_type* p,
                                     const fragment<accumulator, m, n, k, T>& f, unsigned ldm, layout_t layout,
                                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    typedef fragment<accumulator, m, n, k, T> F;
    typedef typename F::storage_element_type S;
    static const char name[] = "nvcuda::wmma::store_matrix_sync";
    gpulab::wmma_detail::check_ldm<S>("store_matrix_sync", ldm, file, line);
    gpulab::warp_collective(name, 0, file, line);
    const bool rows = layout == mem_row_major;
    for (int r = 0; r < F::gpulab_rows; ++r)
        for (int c = 0; c < F::gpulab_cols; ++c)
            p[gpulab::wmma_detail::offset(rows, r, c, ldm)] = f.x[r * F::gpulab_cols + c];
    gpulab::warp_collective(name, 1, file, line);
}

// d = a * b + c; d may be c.
template <int m, int n, int k, class Tab, class La, class Lb, class Td, class Tc>
GPULAB_UNCOUNTED static inline void mma_sync(fragment<accumulator, m, n, k, Td>& d, const fragment<matrix_a, m, n, k, Tab, La>& a,
                            const fragment<matrix_b, m, n, k, Tab, Lb>& b, const fragment<accumulator, m, n, k, Tc>& c,
                            const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    typedef typename fragment<accumulator, m, n, k, Td>::storage_element_type Sd;
    gpulab::warp_collective("nvcuda::wmma::mma_sync", 0, file, line);
    // The lanes of a warp nearly always multiply the same fragments: the first
    // to run computes, and the others find the same inputs here, bit for bit,
    // and copy its result.  (One slot per warp of the block that this OS thread runs.)
    struct Memo {
        bool valid = false;
        fragment<matrix_a, m, n, k, Tab, La> a;
        fragment<matrix_b, m, n, k, Tab, Lb> b;
        fragment<accumulator, m, n, k, Tc> c;
        fragment<accumulator, m, n, k, Td> d;
    };
    static thread_local Memo memo[32];
    const unsigned warp = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / 32;
    Memo& slot = memo[warp];
    if (slot.valid && memcmp(slot.a.x, a.x, sizeof a.x) == 0 && memcmp(slot.b.x, b.x, sizeof b.x) == 0 &&
        memcmp(slot.c.x, c.x, sizeof c.x) == 0) {
        __builtin_memcpy(d.x, slot.d.x, sizeof d.x);
        return;
    }
    float av[m * k], bv[k * n], acc[m * n];
    for (int i = 0; i < m * k; ++i) av[i] = gpulab::wmma_detail::operand<Tab>(gpulab::wmma_detail::to_float(a.x[i]));
    for (int i = 0; i < k * n; ++i) bv[i] = gpulab::wmma_detail::operand<Tab>(gpulab::wmma_detail::to_float(b.x[i]));
    for (int i = 0; i < m * n; ++i) acc[i] = gpulab::wmma_detail::to_float(c.x[i]);
    for (int i = 0; i < m; ++i)
        for (int kk = 0; kk < k; ++kk) {
            const float aik = av[i * k + kk];
            for (int j = 0; j < n; ++j) acc[i * n + j] += aik * bv[kk * n + j];
        }
    __builtin_memcpy(slot.a.x, a.x, sizeof a.x);
    __builtin_memcpy(slot.b.x, b.x, sizeof b.x);
    __builtin_memcpy(slot.c.x, c.x, sizeof c.x);
    for (int i = 0; i < m * n; ++i) d.x[i] = slot.d.x[i] = gpulab::wmma_detail::from_float<Sd>(acc[i]);
    slot.valid = true;
}

}  // namespace wmma
}  // namespace nvcuda
#endif  // GPULAB_MMA_H
