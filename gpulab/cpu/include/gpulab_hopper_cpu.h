// kernels/common/hopper.h for the CPU backend: tensor maps and the bulk tensor copy (TMA) with
// its swizzles, mbarriers with their phases and transaction counts, wgmma from shared-memory
// descriptors, the bulk tensor store and named barriers, setmaxnreg as a no-op.
//
// Asynchronous work completes at once, a legal schedule of it: a TMA copy lands (and counts its
// bytes on its mbarrier) when it is issued, and a wgmma computes its product when it is issued,
// so wgmma_wait has nothing left to wait for. What a kernel can get wrong stays wrong here: the
// swizzle is a function of the shared-memory address (as on the GPU), a descriptor is decoded
// field by field, and mbar_wait blocks the thread (the block's others run) until the phase of
// the parity it names has completed -- a wrong parity or a missing arrival hangs the block, and
// the CPU backend reports where its threads wait.
//
// Shared-memory addresses (smem_u32, the start field of a descriptor) are offsets from the
// launch's dynamic shared memory, which is where the chapter's kernels keep their tiles.
//
// Race checking (gpulab.cpu.checking(races=True)) does not see most accesses made here: the
// mbarrier words, the copy engine's writes to shared memory and the fp16 wgmma's reads of it are
// ordered by the mbarrier phases, which the checker does not model, so it would report races that
// are not there. The bf16 and tf32 wgmmas read each element through bf16_operand / tf32_operand,
// which the instrumented build sees (the counters count those reads): the checker records them,
// but never the copy engine's writes they follow, so it cannot pair the two into a race. A kernel
// that reads a slot the copy engine may still be writing is not caught.
//
// Not emulated (each traps with the reason): transposed (MN-major) wgmma operands, a
// descriptor's base offset, tensor maps of 3 or 5 dimensions (4-D loads: see the end of the file).
// The FP8 wgmma (at the end of the file) reproduces the tensor cores' reduced-precision sum.
#ifndef GPULAB_HOPPER_CPU_H
#define GPULAB_HOPPER_CPU_H
#include <stdint.h>
#include <string.h>
#include <stdio.h>

// Tracing (gpulab/hopper_trace.py builds a kernel with -DGPULAB_HOPPER_TRACE for the chapter's
// timelines): each mbarrier, copy, wgmma, store and barrier event is printed as one line
// "@T kind block thread a b c", in the order the CPU backend ran them; the events of a warp are
// its first lane's (the others do the same), except the copy engine's and a barrier's phase
// flips, whoever causes them. Without the macro nothing is printed and nothing changes.
#ifdef GPULAB_HOPPER_TRACE
namespace gpulab {
namespace hopper_detail {
static inline unsigned trace_thread() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
static inline void trace(bool every_lane, const char* kind, long long a, long long b = 0, long long c = 0) {
    const unsigned t = trace_thread();
    if (every_lane || t % 32 == 0)
        printf("@T %s %u %u %lld %lld %lld\n", kind, blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z), t,
               a, b, c);
}
}  // namespace hopper_detail
}  // namespace gpulab
#define GPULAB_TRACE(...) gpulab::hopper_detail::trace(__VA_ARGS__)
#define GPULAB_TRACE_BAR(bar) ((long long)reinterpret_cast<uintptr_t>(bar))
// __syncthreads, seen by the trace (the hopper steps 2's refill waits for it).
#undef __syncthreads
#define __syncthreads() (gpulab::hopper_detail::trace(false, "sync", 0), \
                         (void)gpulab::barrier(gpulab::BAR_SYNC, 0, __FILE__, __LINE__), \
                         gpulab::hopper_detail::trace(false, "syncp", 0))
#else
#define GPULAB_TRACE(...) ((void)0)
#endif

namespace gpulab {
namespace hopper_detail {

// What gpulab.tensormap.encode_2d writes for the CPU backend (its _CPU_LAYOUT).
struct CpuTensorMap {
    uint64_t magic, address, rows, cols, pitch;
    uint32_t box_cols, box_rows, elem_bytes, swizzle;
};
static const uint64_t kTensorMapMagic = 0x70616D54534C5047ull;

// An mbarrier's 64 bits here: pending arrivals (bits 0-15), the count it was initialised with
// (16-31), the transaction bytes still expected (32-55, signed: bytes may land before
// expect_tx announces them), the phase parity (56), and a tag (57-63) that tells an
// initialised barrier from memory nothing initialised (which the CPU backend fills with ones).
static const uint64_t kTag = 0x2Bull;
struct Mbar {
    uint32_t pending, count;
    int32_t tx;
    uint32_t phase;
};
static inline bool unpack(uint64_t w, Mbar* m) {
    if ((w >> 57) != kTag) return false;
    m->pending = (uint32_t)(w & 0xFFFF);
    m->count = (uint32_t)((w >> 16) & 0xFFFF);
    int32_t tx = (int32_t)((w >> 32) & 0xFFFFFF);
    if (tx & 0x800000) tx -= 0x1000000;
    m->tx = tx;
    m->phase = (uint32_t)((w >> 56) & 1);
    return true;
}
static inline uint64_t pack(const Mbar& m) {
    return (uint64_t)(m.pending & 0xFFFF) | (uint64_t)(m.count & 0xFFFF) << 16 |
           (uint64_t)((uint32_t)m.tx & 0xFFFFFF) << 32 | (uint64_t)(m.phase & 1) << 56 | kTag << 57;
}

GPULAB_UNCOUNTED static inline Mbar load_mbar(const unsigned long long* bar, const char* op, const char* file, int line) {
    Mbar m;
    if (reinterpret_cast<uintptr_t>(bar) % 8)
        trap("an mbarrier must be 8-byte aligned in shared memory", file, line);
    if (!unpack(*bar, &m)) {
        char what[160];
        snprintf(what, sizeof what, "%s on an mbarrier that mbar_init has not initialised (%p)", op, (void*)bar);
        trap(what, file, line);
    }
    return m;
}

// A phase completes when every arrival has come and every announced byte has landed; the
// barrier then starts its next phase with the full count again.
GPULAB_UNCOUNTED static inline void settle(unsigned long long* bar, Mbar m) {
    if (m.pending == 0 && m.tx == 0) {
        m.phase ^= 1u;
        m.pending = m.count;
        GPULAB_TRACE(true, "flip", GPULAB_TRACE_BAR(bar), m.phase);
    }
    *bar = pack(m);
}

GPULAB_UNCOUNTED static inline void arrive(unsigned long long* bar, int tx_bytes, const char* op, const char* file, int line) {
    Mbar m = load_mbar(bar, op, file, line);
    if (m.pending == 0)
        trap("more arrivals on an mbarrier in one phase than the count it was initialised with", file, line);
    m.tx += tx_bytes;
    m.pending -= 1;
    GPULAB_TRACE(false, "arrive", GPULAB_TRACE_BAR(bar), tx_bytes);
    settle(bar, m);
}

GPULAB_UNCOUNTED static inline void complete_tx(unsigned long long* bar, int bytes, const char* file, int line) {
    Mbar m = load_mbar(bar, "a bulk tensor copy's complete_tx", file, line);
    m.tx -= bytes;
    GPULAB_TRACE(true, "landed", GPULAB_TRACE_BAR(bar), bytes);
    settle(bar, m);
}

// mbarrier.try_wait.parity: true once the phase of this parity has completed, i.e. the
// barrier's current phase has the other parity.
GPULAB_UNCOUNTED static inline bool phase_done(const void* bar, unsigned parity) {
    Mbar m;
    unpack(*static_cast<const unsigned long long*>(bar), &m);
    return m.phase != (parity & 1u);
}

// The swizzle of `bytes` (128, 64, 32; 0: none) applied to a shared-memory address: its
// 16-byte chunk bits (4 and up) XORed with bits 7 and up, as many as the pattern has.
static inline uintptr_t swizzled(uintptr_t address, unsigned bytes) {
    const unsigned bits = bytes == 128 ? 3 : bytes == 64 ? 2 : bytes == 32 ? 1 : 0;
    const uintptr_t mask = (((uintptr_t)1 << bits) - 1) << 4;
    return address ^ ((address >> 3) & mask);
}

static inline char* shared_base() { return static_cast<char*>(dynamic_shared()); }
// The copy engine's bytes. The copy engine is no thread of the block: its writes are ordered with
// the consumers' reads by the mbarrier they wait on, which the race checker does not model, so they
// are not reported to it (not instrumented, and not a memcpy: in the race checker's build a memcpy
// is a checked call, compiler.CHECKED_CALLS). Volatile, so that g++ does not turn the loop back
// into a memcpy call.
__attribute__((no_sanitize("thread"), noinline)) static void copy_engine_bytes(void* to, const void* from, unsigned n) {
    volatile char* d = static_cast<volatile char*>(to);
    const volatile char* s = static_cast<const volatile char*>(from);
    for (unsigned i = 0; i < n; ++i) d[i] = s[i];
}
__attribute__((no_sanitize("thread"), noinline)) static void copy_engine_zeros(void* to, unsigned n) {
    volatile char* d = static_cast<volatile char*>(to);
    for (unsigned i = 0; i < n; ++i) d[i] = 0;
}
}  // namespace hopper_detail
// runtime.cpp: the launch's copy of an argument's bytes at an address the Python process passed.
void* argument_copy(const void* address, size_t bytes);
namespace hopper_detail {
}  // namespace hopper_detail
}  // namespace gpulab

#define GPULAB_HOPPER_SITE const char* file = __builtin_FILE(), int line = __builtin_LINE()

// The offset of p in the launch's dynamic shared memory (what a descriptor's address field holds).
static inline unsigned smem_u32(const void* p, GPULAB_HOPPER_SITE) {
    const intptr_t off = static_cast<const char*>(p) - gpulab::hopper_detail::shared_base();
    if (off < 0 || off >= (1 << 18))
        gpulab::trap("smem_u32 on the CPU backend: the address is not in the launch's dynamic shared memory "
                     "(the hopper kernels keep their tiles there)", file, line);
    return (unsigned)off;
}

GPULAB_UNCOUNTED static inline void mbar_init(unsigned long long* bar, unsigned count, GPULAB_HOPPER_SITE) {
    if (reinterpret_cast<uintptr_t>(bar) % 8) gpulab::trap("an mbarrier must be 8-byte aligned", file, line);
    if (count < 1 || count > 0xFFFF) gpulab::trap("mbar_init: the count must be 1 to 65535 here", file, line);
    gpulab::hopper_detail::Mbar m{count, count, 0, 0};
    *bar = gpulab::hopper_detail::pack(m);
    GPULAB_TRACE(true, "init", GPULAB_TRACE_BAR(bar), count);
}
static inline void mbar_fence_init() {}
static inline void mbar_arrive(unsigned long long* bar, GPULAB_HOPPER_SITE) {
    gpulab::hopper_detail::arrive(bar, 0, "mbar_arrive", file, line);
}
static inline void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes, GPULAB_HOPPER_SITE) {
    if (bytes >= (1u << 20)) gpulab::trap("expect_tx: at most 2^20 - 1 bytes per phase", file, line);
    gpulab::hopper_detail::arrive(bar, (int)bytes, "mbar_arrive_expect_tx", file, line);
}
static inline void mbar_wait(unsigned long long* bar, unsigned parity, GPULAB_HOPPER_SITE) {
    gpulab::hopper_detail::load_mbar(bar, "mbar_wait", file, line);
    GPULAB_TRACE(false, "wait", GPULAB_TRACE_BAR(bar), parity);
    gpulab::wait_until(gpulab::hopper_detail::phase_done, bar, parity, file, line);
    GPULAB_TRACE(false, "pass", GPULAB_TRACE_BAR(bar), parity);
}

namespace gpulab {
namespace hopper_detail {
// The box of the 2-D map at (column x, row y) into shared memory at dst, with the map's swizzle
// (elements outside the array as zeros), as the bulk tensor copy `op` does; returns its bytes.
GPULAB_UNCOUNTED static inline unsigned load_box_2d(void* dst, const CUtensorMap* map, int x, int y, const char* op,
                                                    const char* file, int line) {
    CpuTensorMap t;
    __builtin_memcpy(&t, map, sizeof t);
    if (t.magic != kTensorMapMagic) {
        char what[200];
        snprintf(what, sizeof what, "%s: the tensor map was not made by gpulab.tensormap.encode_2d for the CPU backend",
                 op);
        trap(what, file, line);
    }
    const uintptr_t start = reinterpret_cast<uintptr_t>(dst);
    const unsigned align = t.swizzle ? 8 * t.swizzle : 128;
    if (start % align) {
        char what[240];
        snprintf(what, sizeof what, "%s: the destination must be %u-byte aligned for a %u-byte swizzle "
                 "(so that the pattern starts with the box), got an address %u bytes past", op, align, t.swizzle,
                 (unsigned)(start % align));
        trap(what, file, line);
    }
    const unsigned es = t.elem_bytes, row_bytes = t.box_cols * es;
    const char* global = reinterpret_cast<const char*>(t.address);
    for (unsigned r = 0; r < t.box_rows; ++r) {
        const long gy = (long)y + r;
        for (unsigned c = 0; c < t.box_cols; ++c) {
            const long gx = (long)x + c;
            char* to = reinterpret_cast<char*>(swizzled(start + r * row_bytes + c * es, t.swizzle));
            if (gy >= 0 && gy < (long)t.rows && gx >= 0 && gx < (long)t.cols)
                copy_engine_bytes(to, global + gy * t.pitch + gx * es, es);
            else
                copy_engine_zeros(to, es);   // outside the array: zeros
        }
    }
    return t.box_rows * row_bytes;
}
}  // namespace hopper_detail
}  // namespace gpulab

GPULAB_UNCOUNTED static inline void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y, unsigned long long* bar,
                               GPULAB_HOPPER_SITE) {
    using namespace gpulab::hopper_detail;
    GPULAB_TRACE(true, "load", GPULAB_TRACE_BAR(bar), x, y);
    complete_tx(bar, (int)load_box_2d(dst, map, x, y, "tma_load_2d", file, line), file, line);
}

// The bulk tensor store: done at issue (a legal schedule of it), so the bulk_wait functions
// have nothing left to wait for. It writes the launch's copy of the map's array, which must be
// one of the kernel's (non-const) pointer arguments too: the CPU backend copies arguments back,
// not memory it reaches through a tensor map.
GPULAB_UNCOUNTED static inline void tma_store_2d(const CUtensorMap* map, const void* src, int x, int y,
                                                 GPULAB_HOPPER_SITE) {
    using namespace gpulab::hopper_detail;
    CpuTensorMap t;
    __builtin_memcpy(&t, map, sizeof t);
    if (t.magic != kTensorMapMagic)
        gpulab::trap("tma_store_2d: the tensor map was not made by gpulab.tensormap.encode_2d for the CPU backend",
                     file, line);
    const uintptr_t start = reinterpret_cast<uintptr_t>(src);
    const unsigned align = t.swizzle ? 8 * t.swizzle : 128;
    if (start % align)
        gpulab::trap("tma_store_2d: the source must be aligned as for a load (1024 bytes for the 128-byte swizzle)",
                     file, line);
    char* global = static_cast<char*>(gpulab::argument_copy(reinterpret_cast<const void*>(t.address),
                                                              t.rows * t.pitch));
    if (!global)
        gpulab::trap("tma_store_2d on the CPU backend: the map's array must also be a non-const pointer argument "
                     "of the kernel (the launch copies arguments back, not what a tensor map reaches)", file, line);
    if (x < 0 || y < 0)       // the H100 stopped on an illegal instruction for (-8, -3) (2026-11-26)
        gpulab::trap("tma_store_2d: a bulk tensor store at negative coordinates faults on the GPU (an illegal "
                     "instruction on the H100); a store is clipped only past the array's end", file, line);
    GPULAB_TRACE(true, "store", 0, x, y);
    const unsigned es = t.elem_bytes, row_bytes = t.box_cols * es;
    for (unsigned r = 0; r < t.box_rows; ++r) {
        const long gy = (long)y + r;
        for (unsigned c = 0; c < t.box_cols; ++c) {
            const long gx = (long)x + c;
            if (gy < 0 || gy >= (long)t.rows || gx < 0 || gx >= (long)t.cols) continue;   // clipped
            const char* from = reinterpret_cast<const char*>(swizzled(start + r * row_bytes + c * es, t.swizzle));
            copy_engine_bytes(global + gy * t.pitch + gx * es, from, es);
        }
    }
}
static inline void bulk_commit() { GPULAB_TRACE(false, "bcommit", 0); }
template <int groups> static inline void bulk_wait_read() { GPULAB_TRACE(false, "bwaitr", groups); }
template <int groups> static inline void bulk_wait() { GPULAB_TRACE(false, "bwait", groups); }

namespace gpulab {
namespace hopper_detail {
// Named barriers: one set per block of the worker (it runs one block, or one cluster's blocks,
// at a time, their threads as fibers), by the block's rank in its cluster.
struct NamedBarrier {
    int arrived, threads;
    unsigned generation;
};
static const int kMaxClusterBlocks = 8;
static thread_local NamedBarrier named_barriers[kMaxClusterBlocks][16];
GPULAB_UNCOUNTED static inline bool generation_passed(const void* bar, unsigned generation) {
    return static_cast<const NamedBarrier*>(bar)->generation != generation;
}
}  // namespace hopper_detail
}  // namespace gpulab

// bar.sync id, threads: the `threads`-th arrival releases the waiting ones (a thread that waits
// lets the block's others run); the same id with another count in one phase traps, as it is
// undefined on the GPU.
GPULAB_UNCOUNTED static inline void named_barrier_sync(int id, int threads, GPULAB_HOPPER_SITE) {
    using namespace gpulab::hopper_detail;
    if (id < 1 || id > 15) gpulab::trap("named_barrier_sync: the id must be 1 to 15 (0 is __syncthreads')", file, line);
    if (threads < 32 || threads % 32) gpulab::trap("named_barrier_sync: threads must be a multiple of 32", file, line);
    NamedBarrier& b = named_barriers[gpulab::cluster_rank()][id];
    if (b.arrived && b.threads != threads)
        gpulab::trap("named_barrier_sync: threads arrive on one barrier with different counts", file, line);
    b.threads = threads;
    const unsigned generation = b.generation;
    GPULAB_TRACE(false, "nbar", id, generation);
    if (++b.arrived == threads) {
        b.arrived = 0;
        b.generation++;
        GPULAB_TRACE(false, "nbarp", id, generation);
        return;
    }
    gpulab::wait_until(generation_passed, &b, generation, file, line);
    GPULAB_TRACE(false, "nbarp", id, generation);
}

static inline void wgmma_fence() {}
static inline void wgmma_commit() { GPULAB_TRACE(false, "commit", 0); }
// wgmma.wait_group.sync.aligned is executed by the warp together: no lane passes it before every
// lane of its warp has issued its products (here: computed its share of them). A lane that arrives
// on an empty barrier after it would otherwise let the producer refill a slot another lane of its
// warp has yet to read (a schedule the GPU's warp-wide wgmma cannot take).
template <int groups> static inline void wgmma_wait(GPULAB_HOPPER_SITE) {
    gpulab::warp_collective("wgmma_wait", 0, file, line);
    GPULAB_TRACE(false, "waitg", groups);
}
static inline void fence_proxy_async() { GPULAB_TRACE(false, "fence", 0); }
template <int regs> static inline void setmaxnreg_inc() {
    static_assert(regs >= 24 && regs <= 256 && regs % 8 == 0, "setmaxnreg takes 24 to 256, a multiple of 8");
}
template <int regs> static inline void setmaxnreg_dec() {
    static_assert(regs >= 24 && regs <= 256 && regs % 8 == 0, "setmaxnreg takes 24 to 256, a multiple of 8");
}

namespace gpulab {
namespace hopper_detail {
// The shared-memory address of element (row, k) of a K-major operand whose descriptor is desc.
GPULAB_UNCOUNTED static inline const char* operand_element(unsigned long long desc, int row, int k, const char* file, int line) {
    const uintptr_t start = (desc & 0x3FFF) << 4, lbo = ((desc >> 16) & 0x3FFF) << 4,
                    sbo = ((desc >> 32) & 0x3FFF) << 4;
    const unsigned mode = (unsigned)(desc >> 62);
    if ((desc >> 49) & 7) trap("wgmma on the CPU backend: a descriptor's base offset is not emulated", file, line);
    const uintptr_t base = reinterpret_cast<uintptr_t>(shared_base());
    uintptr_t a;
    if (mode == 0) {   // no swizzle: 8 x 16-byte core matrices, LBO apart along k, SBO apart along rows
        a = base + start + (row / 8) * sbo + (row % 8) * 16 + (k / 8) * lbo + (k % 8) * 2;
    } else {           // swizzled: rows of the pattern's width, 8-row groups SBO apart
        const unsigned width = mode == 1 ? 128 : mode == 2 ? 64 : 32;
        a = swizzled(base + start + (row / 8) * sbo + (row % 8) * width + k * 2, width);
    }
    return reinterpret_cast<const char*>(a);
}

// d (this thread's share of the 64 x N accumulator) = A * B^T + (scale_d ? d : 0), for
// A 64 x 16 and B N x 16 halves, both K-major, read through their descriptors.
template <int N>
GPULAB_UNCOUNTED static inline void wgmma(float* d, unsigned long long desc_a, unsigned long long desc_b, int scale_d,
                         const char* file, int line) {
    const unsigned t = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 128;
    const int warp = t / 32, g = (t % 32) / 4, q = t % 4;
    GPULAB_TRACE(false, "mma", (long long)(desc_a & 0x3FFF) << 4, (long long)(desc_b & 0x3FFF) << 4, N);
    for (int i = 0; i < N / 2; ++i) {
        const int j = i / 4, e = i % 4;
        const int row = 16 * warp + g + 8 * (e / 2), col = 8 * j + 2 * q + e % 2;
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) {
            unsigned short ab, bb;
            __builtin_memcpy(&ab, operand_element(desc_a, row, k, file, line), 2);
            __builtin_memcpy(&bb, operand_element(desc_b, col, k, file, line), 2);
            sum += half_bits_to_float(ab) * half_bits_to_float(bb);   // exact in float
        }
        d[i] = (scale_d ? d[i] : 0.0f) + sum;
    }
}
}  // namespace hopper_detail
}  // namespace gpulab

static inline void wgmma_m64n128k16(float d[64], unsigned long long desc_a, unsigned long long desc_b, int scale_d,
                                    GPULAB_HOPPER_SITE) {
    gpulab::hopper_detail::wgmma<128>(d, desc_a, desc_b, scale_d, file, line);
}
static inline void wgmma_m64n256k16(float d[128], unsigned long long desc_a, unsigned long long desc_b,
                                    int scale_d, GPULAB_HOPPER_SITE) {
    gpulab::hopper_detail::wgmma<256>(d, desc_a, desc_b, scale_d, file, line);
}
// ---- hopper2: bf16 and tf32 operands (kernels/common/hopper.h's wgmma_m64n256k16_bf16 and
// wgmma_m64n256k8_tf32). The descriptor is decoded as for halves, with the element size in the
// address arithmetic: element k of a row is k * bytes into it (no swizzle: 16 / bytes elements
// per core-matrix row). bfloat16 products are exact in float (8-bit mantissas); tf32 keeps the
// upper 19 bits of each 4-byte float (sign, exponent, 10 mantissa bits) -- here the low 13 bits
// are dropped -- and its products (11-bit mantissas) are exact in float too. Sums are in float,
// in k order: the GPU's order inside one instruction is its own, so results agree to rounding.
namespace gpulab {
namespace hopper_detail {
GPULAB_UNCOUNTED static inline const char* operand_element_sized(unsigned long long desc, int row, int k, unsigned bytes,
                                                                  const char* file, int line) {
    const uintptr_t start = (desc & 0x3FFF) << 4, lbo = ((desc >> 16) & 0x3FFF) << 4,
                    sbo = ((desc >> 32) & 0x3FFF) << 4;
    const unsigned mode = (unsigned)(desc >> 62);
    if ((desc >> 49) & 7) trap("wgmma on the CPU backend: a descriptor's base offset is not emulated", file, line);
    const uintptr_t base = reinterpret_cast<uintptr_t>(shared_base());
    const unsigned per_core = 16 / bytes;
    uintptr_t a;
    if (mode == 0) {
        a = base + start + (row / 8) * sbo + (row % 8) * 16 + (k / per_core) * lbo + (k % per_core) * bytes;
    } else {
        const unsigned width = mode == 1 ? 128 : mode == 2 ? 64 : 32;
        a = swizzled(base + start + (row / 8) * sbo + (row % 8) * width + k * bytes, width);
    }
    return reinterpret_cast<const char*>(a);
}
static inline float bf16_operand(const char* p) {
    unsigned short b;
    __builtin_memcpy(&b, p, 2);
    uint32_t x = (uint32_t)b << 16;
    float f;
    __builtin_memcpy(&f, &x, 4);
    return f;
}
static inline float tf32_operand(const char* p) {
    uint32_t x;
    __builtin_memcpy(&x, p, 4);
    x &= 0xFFFFE000u;
    float f;
    __builtin_memcpy(&f, &x, 4);
    return f;
}
// As wgmma<N> above, for operands of `bytes` bytes read by `value`, KS of k per instruction.
template <int N, int KS>
GPULAB_UNCOUNTED static inline void wgmma_typed(float* d, unsigned long long desc_a, unsigned long long desc_b, int scale_d,
                                                unsigned bytes, float (*value)(const char*), const char* file, int line) {
    const unsigned t = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 128;
    const int warp = t / 32, g = (t % 32) / 4, q = t % 4;
    GPULAB_TRACE(false, "mma", (long long)(desc_a & 0x3FFF) << 4, (long long)(desc_b & 0x3FFF) << 4, N);
    for (int i = 0; i < N / 2; ++i) {
        const int j = i / 4, e = i % 4;
        const int row = 16 * warp + g + 8 * (e / 2), col = 8 * j + 2 * q + e % 2;
        float sum = 0.0f;
        for (int k = 0; k < KS; ++k)
            sum += value(operand_element_sized(desc_a, row, k, bytes, file, line)) *
                   value(operand_element_sized(desc_b, col, k, bytes, file, line));
        d[i] = (scale_d ? d[i] : 0.0f) + sum;
    }
}
}  // namespace hopper_detail
}  // namespace gpulab

static inline void wgmma_m64n256k16_bf16(float d[128], unsigned long long desc_a, unsigned long long desc_b,
                                         int scale_d, GPULAB_HOPPER_SITE) {
    gpulab::hopper_detail::wgmma_typed<256, 16>(d, desc_a, desc_b, scale_d, 2, gpulab::hopper_detail::bf16_operand,
                                                file, line);
}
static inline void wgmma_m64n256k8_tf32(float d[128], unsigned long long desc_a, unsigned long long desc_b,
                                        int scale_d, GPULAB_HOPPER_SITE) {
    gpulab::hopper_detail::wgmma_typed<256, 8>(d, desc_a, desc_b, scale_d, 4, gpulab::hopper_detail::tf32_operand,
                                               file, line);
}
// ---- end hopper2 ----
// ---------------------------------------------------------------- 4-D bulk tensor loads (issue 26)
// The conv steps (kernels/common/hopper_conv.cuh) read a tile of an NHWC image as one box of a
// 4-D tensor map (gpulab.tensormap.encode_4d): the box's elements land as rows of box[0]
// elements, dimension 1 next, then 2, then 3, each address swizzled as for a 2-D box (the
// swizzle is a function of the shared-memory address on the GPU too); coordinates outside the
// array, negative ones included, read as zeros.
namespace gpulab {
namespace hopper_detail {
struct CpuTensorMap4 {
    uint64_t magic, address, dims[4], strides[3];
    uint32_t box[4], elem_bytes, swizzle;
};
static const uint64_t kTensorMap4Magic = 0x3470614D54534C47ull;
}  // namespace hopper_detail
}  // namespace gpulab

GPULAB_UNCOUNTED static inline void tma_load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                                unsigned long long* bar, GPULAB_HOPPER_SITE) {
    using namespace gpulab::hopper_detail;
    CpuTensorMap4 t;
    __builtin_memcpy(&t, map, sizeof t);
    if (t.magic != kTensorMap4Magic)
        gpulab::trap("tma_load_4d: the tensor map was not made by gpulab.tensormap.encode_4d for the CPU backend",
                     file, line);
    const uintptr_t start = reinterpret_cast<uintptr_t>(dst);
    const unsigned align = t.swizzle ? 8 * t.swizzle : 128;
    if (start % align)
        gpulab::trap("tma_load_4d: the destination must be aligned as for a 2-D load (1024 bytes for the "
                     "128-byte swizzle)", file, line);
    const unsigned es = t.elem_bytes;
    const long at[4] = {c0, c1, c2, c3};
    const char* global = reinterpret_cast<const char*>(t.address);
    uintptr_t offset = 0;
    for (unsigned i3 = 0; i3 < t.box[3]; ++i3)
        for (unsigned i2 = 0; i2 < t.box[2]; ++i2)
            for (unsigned i1 = 0; i1 < t.box[1]; ++i1)
                for (unsigned i0 = 0; i0 < t.box[0]; ++i0, offset += es) {
                    const long g[4] = {at[0] + i0, at[1] + i1, at[2] + i2, at[3] + i3};
                    bool inside = true;
                    for (int d = 0; d < 4; ++d) inside = inside && g[d] >= 0 && g[d] < (long)t.dims[d];
                    char* to = reinterpret_cast<char*>(swizzled(start + offset, t.swizzle));
                    if (inside)
                        copy_engine_bytes(to, global + g[0] * es + g[1] * t.strides[0] + g[2] * t.strides[1] +
                                   g[3] * t.strides[2], es);
                    else
                        copy_engine_zeros(to, es);   // outside the array: zeros
                }
    complete_tx(bar, (int)offset, file, line);
}
// ------------------------------------------------------------ end of 4-D bulk tensor loads
// ---- hconv32: m64n128k8 in tf32 (kernels/common/hopper_conv.cuh, convpool step 11) ----
// As wgmma_m64n256k8_tf32 above for 128 columns. Sums are rounded float adds here; the GPU's
// tensor cores truncate theirs (hopper_conv.cuh's step 11 notes say what that costs).
static inline void wgmma_m64n128k8_tf32(float d[64], unsigned long long desc_a, unsigned long long desc_b,
                                        int scale_d, GPULAB_HOPPER_SITE) {
    gpulab::hopper_detail::wgmma_typed<128, 8>(d, desc_a, desc_b, scale_d, 4, gpulab::hopper_detail::tf32_operand,
                                               file, line);
}
// m64n192k8 in tf32 (alexnet step 26's 192-filter tiles: 384 filters in two), likewise.
static inline void wgmma_m64n192k8_tf32(float d[96], unsigned long long desc_a, unsigned long long desc_b,
                                        int scale_d, GPULAB_HOPPER_SITE) {
    gpulab::hopper_detail::wgmma_typed<192, 8>(d, desc_a, desc_b, scale_d, 4, gpulab::hopper_detail::tf32_operand,
                                               file, line);
}
// ---- end hconv32 ----
// ---- fp8: m64nNk32 with e4m3 and e5m2 operands (kernels/common/hopper.h's fp8 section) ----
// The descriptors are decoded as for the other types with 1-byte elements. Unlike the other
// types' sums (float adds in k order, which agree with the GPU's to rounding), an FP8
// instruction's sum is the tensor cores' own, as Khattak and Mikaitis measured it on an H100
// ("Accurate Models of NVIDIA Tensor Cores", arXiv:2512.07004; gpulab/fp8.py's wgmma_block is the
// same model in NumPy, and tests/test_hopper_fp8.py holds the two to the same bits): for each
// output, the 32 products (exact) and the accumulator it is given are aligned to the largest
// exponent among them -- a product's exponent being the sum of its operands', a subnormal
// operand's the format's smallest normal exponent -- and cut toward zero to 13 fraction bits
// below it; their exact sum is cut toward zero to 13 fraction bits below its own leading bit.
// NVIDIA documents none of this; a kernel that depends on more accumulator bits than these gets
// the H100's error here too. A NaN or infinite product or accumulator gives the float sum of
// them all (NaN, or the infinity), as the model's special cases do.
namespace gpulab {
namespace hopper_detail {
static const int kFp8AccumulatorBits = 13;
static inline unsigned char fp8_operand(const char* p) {
    unsigned char c;
    memcpy(&c, p, 1);
    return c;
}
// An FP8 code's value and the exponent the adder aligns it by; false for NaN and infinity.
static inline bool fp8_term(unsigned char code, bool e5m2, double* value, int* exponent) {
    const int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, emax = e5m2 ? 31 : 15;
    const int e = (code & 0x7F) >> mbits, m = code & ((1 << mbits) - 1);
    const bool special = e5m2 ? e == emax : (code & 0x7F) == 0x7F;
    if (special) {
        *value = e5m2 && m == 0 ? (code & 0x80 ? -INFINITY : INFINITY) : NAN;
        return false;
    }
    const double mag = e == 0 ? ldexp((double)m, 1 - bias - mbits) : ldexp((double)((1 << mbits) + m), e - bias - mbits);
    *value = code & 0x80 ? -mag : mag;
    *exponent = e == 0 ? 1 - bias : e - bias;
    return true;
}
static inline double cut(double x, double quantum) { return trunc(x / quantum) * quantum; }

// One output of an FP8 wgmma: c + sum of a[k] b[k], k = 0..31, in the tensor cores' adder.
GPULAB_UNCOUNTED static inline float fp8_block_sum(const unsigned char* a, const unsigned char* b, float c, bool a5,
                                                   bool b5) {
    double p[32];
    int pe[32];
    bool finite = isfinite(c);
    double plain = c;
    int top = INT_MIN;
    for (int k = 0; k < 32; ++k) {
        double va, vb;
        int ea, eb;
        const bool fa = fp8_term(a[k], a5, &va, &ea), fb = fp8_term(b[k], b5, &vb, &eb);
        p[k] = va * vb;                                    // exact: 4-bit by 4-bit significands
        plain += p[k];
        finite = finite && fa && fb;
        pe[k] = ea + eb;
        if (fa && fb && p[k] != 0 && pe[k] > top) top = pe[k];
    }
    if (!finite) return (float)plain;
    int ec = 0;
    if (c != 0) {
        frexp((double)c, &ec);
        if (ec - 1 > top) top = ec - 1;
    }
    if (top == INT_MIN) return c;                          // no non-zero term: c (a zero) unchanged
    const double quantum = ldexp(1.0, top - kFp8AccumulatorBits);
    double s = cut((double)c, quantum);                    // every term a multiple of quantum, under
    for (int k = 0; k < 32; ++k) s += cut(p[k], quantum);  // 2^(top + 2): the sum is exact
    if (s == 0) return 0.0f;
    int es;
    frexp(s, &es);                                         // s = f 2^es, 1/2 <= |f| < 1
    return (float)cut(s, ldexp(1.0, es - 1 - kFp8AccumulatorBits));
}

// d (this thread's share of the 64 x N accumulator) = A * B^T + (scale_d ? d : 0) for A 64 x 32
// and B N x 32 FP8 codes (a5, b5: e5m2, else e4m3), both K-major, read through their descriptors.
template <int N>
GPULAB_UNCOUNTED static inline void wgmma_fp8(float* d, unsigned long long desc_a, unsigned long long desc_b,
                                              int scale_d, bool a5, bool b5, const char* file, int line) {
    const unsigned t = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 128;
    const int warp = t / 32, g = (t % 32) / 4, q = t % 4;
    for (int i = 0; i < N / 2; ++i) {
        const int j = i / 4, e = i % 4;
        const int row = 16 * warp + g + 8 * (e / 2), col = 8 * j + 2 * q + e % 2;
        unsigned char a[32], b[32];
        for (int k = 0; k < 32; ++k) {
            a[k] = fp8_operand(operand_element_sized(desc_a, row, k, 1, file, line));
            b[k] = fp8_operand(operand_element_sized(desc_b, col, k, 1, file, line));
        }
        d[i] = fp8_block_sum(a, b, scale_d ? d[i] : 0.0f, a5, b5);
    }
}
}  // namespace hopper_detail
}  // namespace gpulab

#define GPULAB_WGMMA_FP8_CPU(AT, BT, A5, B5)                                                                    \
    static inline void wgmma_m64n256k32_##AT##_##BT(float d[128], unsigned long long desc_a,                    \
                                                    unsigned long long desc_b, int scale_d, GPULAB_HOPPER_SITE) { \
        gpulab::hopper_detail::wgmma_fp8<256>(d, desc_a, desc_b, scale_d, A5, B5, file, line);                  \
    }                                                                                                           \
    static inline void wgmma_m64n128k32_##AT##_##BT(float d[64], unsigned long long desc_a,                     \
                                                    unsigned long long desc_b, int scale_d, GPULAB_HOPPER_SITE) { \
        gpulab::hopper_detail::wgmma_fp8<128>(d, desc_a, desc_b, scale_d, A5, B5, file, line);                  \
    }
GPULAB_WGMMA_FP8_CPU(e4m3, e4m3, false, false)
GPULAB_WGMMA_FP8_CPU(e4m3, e5m2, false, true)
GPULAB_WGMMA_FP8_CPU(e5m2, e4m3, true, false)
GPULAB_WGMMA_FP8_CPU(e5m2, e5m2, true, true)
#undef GPULAB_WGMMA_FP8_CPU
// ---- end fp8 ----
#undef GPULAB_HOPPER_SITE
#undef GPULAB_TRACE
#undef GPULAB_TRACE_BAR
#endif  // GPULAB_HOPPER_CPU_H
