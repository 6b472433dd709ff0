// kernels/common/ptx.h for the CPU backend: mma.sync (m16n8k16 half, m16n8k8
// tf32), ldmatrix and cp.async, with the GPU's register layouts exactly.
//
// The warp-level instructions are collective: every live lane of the warp
// meets at the call, leaves its registers (or its row address) in a slot of
// its warp, meets again, and then takes the values its own registers receive
// on a GPU, by the layouts that kernels/common/ptx.h lists; a third meeting
// keeps the slots until every lane has read them.  A kernel that puts a value
// in the wrong register gets the same wrong result here as on a GPU.
//
// mma: the products of the operands are exact in float (half x half, and
// tf32 x tf32 with the low 13 mantissa bits of each operand ignored, as the
// H100 ignores them), summed onto the accumulator in float in order of k.
// cp.async completes at once (a legal schedule of the asynchronous copy:
// cp_async_wait then has nothing left to wait for).
#ifndef GPULAB_PTX_CPU_H
#define GPULAB_PTX_CPU_H
#include <cuda_fp16.h>
#include <string.h>

namespace gpulab {
namespace ptx_detail {

struct Slot {
    const void* address;
    unsigned reg[10];
};
// One slot per lane of each warp of the block this OS thread runs (at most 32 warps).
static thread_local Slot slots[32][32];

static inline unsigned linear_thread() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

static inline float half_lo(unsigned r) { return half_bits_to_float((unsigned short)(r & 0xffffu)); }
static inline float half_hi(unsigned r) { return half_bits_to_float((unsigned short)(r >> 16)); }
static inline float tf32(unsigned r) {
    if ((r & 0x7fffe000u) != 0x7f800000u || (r & 0x1fffu) == 0) r &= 0xffffe000u;  // keep NaNs NaN
    float v;
    __builtin_memcpy(&v, &r, 4);
    return v;
}
static inline unsigned read32(const void* p) {
    unsigned v;
    __builtin_memcpy(&v, p, 4);
    return v;
}
static inline unsigned short read16(const void* p) {
    unsigned short v;
    __builtin_memcpy(&v, p, 2);
    return v;
}

static inline void check_row_address(const char* op, const void* p, const char* file, int line) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
        char what[200];
        snprintf(what, sizeof what, "%s: a row address is not 16-byte aligned (%p), which ldmatrix requires",
                 op, p);
        trap(what, file, line);
    }
}

// ldmatrix of `count` matrices, optionally transposed.
static inline void ldmatrix(unsigned* r, int count, bool trans, const void* p, const char* op,
                            const char* file, int line) {
    const unsigned t = linear_thread(), warp = t / 32, lane = t % 32;
    // Lanes past the matrices' 8 * count addresses give none (their address is ignored).
    if (lane < 8u * count) check_row_address(op, p, file, line);
    slots[warp][lane].address = p;
    warp_collective(op, 0, file, line);
    const unsigned g = lane / 4, q = lane % 4;
    for (int i = 0; i < count; ++i) {
        if (!trans) {
            r[i] = read32(static_cast<const char*>(slots[warp][8 * i + g].address) + 4 * q);
        } else {   // elements (2q, g) and (2q + 1, g) of matrix i
            const unsigned lo = read16(static_cast<const char*>(slots[warp][8 * i + 2 * q].address) + 2 * g);
            const unsigned hi = read16(static_cast<const char*>(slots[warp][8 * i + 2 * q + 1].address) + 2 * g);
            r[i] = lo | (hi << 16);
        }
    }
    warp_collective(op, 1, file, line);
}

// d += a * b for one lane; kind 0: m16n8k16 half, 1: m16n8k8 tf32.
static inline void mma(float d[4], const unsigned a[4], const unsigned b[2], int kind, const char* op,
                       const char* file, int line) {
    const unsigned t = linear_thread(), warp = t / 32, lane = t % 32;
    Slot& mine = slots[warp][lane];
    __builtin_memcpy(mine.reg, a, 4 * sizeof(unsigned));
    __builtin_memcpy(mine.reg + 4, b, 2 * sizeof(unsigned));
    warp_collective(op, 0, file, line);
    const int g = lane / 4, q = lane % 4;
    float out[4];
    for (int e = 0; e < 4; ++e) {
        const int row = g + 8 * (e / 2), col = 2 * q + (e % 2);
        float acc = d[e];
        if (kind == 0) {
            for (int k = 0; k < 16; ++k) {
                // A(row, k): lane 4 (row % 8) + (k % 8) / 2, register (row >= 8) + 2 (k >= 8), half k % 2
                const unsigned ra = slots[warp][4 * (row % 8) + (k % 8) / 2].reg[(row >= 8) + 2 * (k >= 8)];
                // B(k, col): lane 4 col + (k % 8) / 2, register k >= 8, half k % 2
                const unsigned rb = slots[warp][4 * col + (k % 8) / 2].reg[4 + (k >= 8)];
                const float av = (k % 2) ? half_hi(ra) : half_lo(ra);
                const float bv = (k % 2) ? half_hi(rb) : half_lo(rb);
                acc += av * bv;
            }
        } else {
            for (int k = 0; k < 8; ++k) {
                // A(row, k): lane 4 (row % 8) + k % 4, register (row >= 8) + 2 (k >= 4)
                const unsigned ra = slots[warp][4 * (row % 8) + k % 4].reg[(row >= 8) + 2 * (k >= 4)];
                // B(k, col): lane 4 col + k % 4, register k >= 4
                const unsigned rb = slots[warp][4 * col + k % 4].reg[4 + (k >= 4)];
                acc += tf32(ra) * tf32(rb);
            }
        }
        out[e] = acc;
    }
    warp_collective(op, 1, file, line);
    __builtin_memcpy(d, out, sizeof out);
}
}  // namespace ptx_detail
}  // namespace gpulab

#define GPULAB_PTX_SITE const char* file = __builtin_FILE(), int line = __builtin_LINE()

static inline void mma_16816(float d[4], const unsigned a[4], const unsigned b[2], GPULAB_PTX_SITE) {
    gpulab::ptx_detail::mma(d, a, b, 0, "mma.sync.m16n8k16", file, line);
}
static inline void mma_1688_tf32(float d[4], const unsigned a[4], const unsigned b[2], GPULAB_PTX_SITE) {
    gpulab::ptx_detail::mma(d, a, b, 1, "mma.sync.m16n8k8.tf32", file, line);
}
static inline void ldmatrix_x4(unsigned r[4], const void* p, GPULAB_PTX_SITE) {
    gpulab::ptx_detail::ldmatrix(r, 4, false, p, "ldmatrix.x4", file, line);
}
static inline void ldmatrix_x2(unsigned r[2], const void* p, GPULAB_PTX_SITE) {
    gpulab::ptx_detail::ldmatrix(r, 2, false, p, "ldmatrix.x2", file, line);
}
static inline void ldmatrix_x4_trans(unsigned r[4], const void* p, GPULAB_PTX_SITE) {
    gpulab::ptx_detail::ldmatrix(r, 4, true, p, "ldmatrix.x4.trans", file, line);
}
static inline void cp_async16(void* dst, const void* src, int src_bytes, GPULAB_PTX_SITE) {
    if (reinterpret_cast<uintptr_t>(dst) % 16 || (src_bytes && reinterpret_cast<uintptr_t>(src) % 16))
        gpulab::trap("cp.async: a 16-byte copy needs 16-byte aligned addresses", file, line);
    if (src_bytes)
        __builtin_memcpy(dst, src, 16);
    else
        __builtin_memset(dst, 0, 16);
}
static inline void cp_async_commit() {}
template <int groups> static inline void cp_async_wait() {}
// cvt.rna.tf32.f32: to nearest, ties away from zero; infinities and NaNs kept.
static inline unsigned tf32_bits(float x) {
    uint32_t bits;
    __builtin_memcpy(&bits, &x, 4);
    if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & 0xffffe000u;
    return bits;
}
static inline unsigned pack_half2(float lo, float hi) {
    return (unsigned)gpulab::float_to_half_bits(lo) | ((unsigned)gpulab::float_to_half_bits(hi) << 16);
}
#undef GPULAB_PTX_SITE
#endif  // GPULAB_PTX_CPU_H
