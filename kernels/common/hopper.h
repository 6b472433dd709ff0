// Hopper's asynchronous GEMM machinery, as small inline functions over inline PTX (the hopper
// chapter's steps include this file as <common/hopper.h>; build with -arch=sm_90a: wgmma and
// setmaxnreg exist only in the sm_90a target).
//
//   CUtensorMap                  a tensor map, made on the host (gpulab.tensormap.encode_2d) and
//                                passed by value: `const __grid_constant__ CUtensorMap map`
//   tma_load_2d(dst, &map, x, y, bar)
//                                the bulk tensor copy engine (TMA) copies the box whose first
//                                element is (column x, row y) into shared memory at dst, laid out
//                                with the map's swizzle; elements outside the array arrive as zeros;
//                                the copy counts its bytes on the mbarrier bar when they have landed
//   mbar_init(bar, count), mbar_arrive(bar), mbar_arrive_expect_tx(bar, bytes), mbar_wait(bar, parity)
//                                a shared-memory barrier (mbarrier): a phase completes when `count`
//                                threads have arrived AND the bytes announced by expect_tx have
//                                landed; mbar_wait(bar, p) returns once the phase of parity p is done
//   smem_desc(tile, lbo, sbo, swizzle)
//                                a 64-bit wgmma matrix descriptor of a K-major tile in shared memory
//   wgmma_m64n128k16(d, desc_a, desc_b, scale_d), wgmma_m64n256k16(...)
//                                d (64 x N floats spread over the warpgroup's 128 threads) =
//                                A (64 x 16 halves) * B^T (N x 16 halves) + (scale_d ? d : 0);
//                                asynchronous: wgmma_fence() before, wgmma_commit() after, and
//                                wgmma_wait<n>() until at most n committed groups still run
//   tma_store_2d(&map, src, x, y), bulk_commit(), bulk_wait_read<n>(), bulk_wait<n>()
//                                the copy engine writes a box from shared memory to global memory
//                                (clipped to the array), asynchronously, in committed groups
//   named_barrier_sync(id, threads)
//                                bar.sync on barrier id (1-15) for `threads` threads of the block
//   setmaxnreg_inc<R>(), setmaxnreg_dec<R>()
//                                move registers between the warpgroups of a block
//
// Layouts (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
//   128-byte swizzle: in a tile of 128-byte rows, the 16-byte chunk c of row r is stored at
//   chunk c ^ (r % 8): bits 4-6 of the shared-memory address are XORed with bits 7-9. The tile
//   must start 1024-byte aligned (8 rows), so that the pattern starts with it.
//   Accumulators of m64nNk16: thread t of the warpgroup (warp w = t / 32, lane 4 g + q) holds
//   d[4 j + e] = D(16 w + g + 8 (e / 2), 8 j + 2 q + e % 2), j = 0 .. N/8 - 1, e = 0..3.
//
// The CPU backend runs the same functions (gpulab/cpu/include/gpulab_hopper_cpu.h): tensor maps
// of its own layout, the copy done at once with the same swizzle, mbarriers with the same phase
// rules (a waiting thread lets the others run), wgmma computed from the same descriptors at
// issue, setmaxnreg as a no-op. A kernel with a wrong swizzle, descriptor or parity gets the
// same wrong answer, or hangs and is reported, on both.
#ifndef GPULAB_COMMON_HOPPER_H
#define GPULAB_COMMON_HOPPER_H
#include <cuda_fp16.h>

// The driver's type (cuda.h, which NVRTC cannot include): 128 opaque bytes.
struct __align__(64) CUtensorMap {
    unsigned long long opaque[16];
};

// Descriptor swizzle modes (bits 62-63 of a wgmma matrix descriptor).
#define SMEM_SWIZZLE_NONE 0
#define SMEM_SWIZZLE_128B 1
#define SMEM_SWIZZLE_64B 2
#define SMEM_SWIZZLE_32B 3

#ifdef GPULAB_CPU_BACKEND
#include <gpulab_hopper_cpu.h>
#else

__device__ __forceinline__ unsigned smem_u32(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_u32(bar)), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the copy engine (the async proxy) before any copy
// signals them; a __syncthreads() after it makes them visible to the other threads.
__device__ __forceinline__ void mbar_fence_init()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(unsigned long long* bar)
{
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n"
                 :: "r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes)
{
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n"
                 :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity)
{
    asm volatile("{\n.reg .pred done;\n"
                 "WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT_%=;\n}\n"
                 :: "r"(smem_u32(bar)), "r"(parity) : "memory");
}

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int x, int y,
                                            unsigned long long* bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(smem_u32(dst)), "l"(map), "r"(x), "r"(y), "r"(smem_u32(bar)) : "memory");
}

__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int groups>
__device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(groups) : "memory");
}

// Ordinary shared-memory stores made visible to the tensor cores and the copy engine.
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The bulk tensor copy the other way (TMA store): the box at (column x, row y) of the map's
// array is written from shared memory at src (laid out with the map's swizzle); elements outside
// the array are not written. Asynchronous: bulk_commit() closes a group of stores;
// bulk_wait_read<n>() returns once at most n groups may still read their shared memory (then src
// may be overwritten), bulk_wait<n>() once at most n groups are still writing global memory.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int x, int y)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n"
                 :: "l"(map), "r"(smem_u32(src)), "r"(x), "r"(y) : "memory");
}

__device__ __forceinline__ void bulk_commit()
{
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

template <int groups>
__device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(groups) : "memory");
}

template <int groups>
__device__ __forceinline__ void bulk_wait()
{
    asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(groups) : "memory");
}

// A barrier of `threads` threads (a multiple of 32) of the block on hardware barrier `id`
// (1-15; 0 is __syncthreads'): one warpgroup synchronises without stopping the others.
__device__ __forceinline__ void named_barrier_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}

template <int regs>
__device__ __forceinline__ void setmaxnreg_inc()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(regs));
}

template <int regs>
__device__ __forceinline__ void setmaxnreg_dec()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(regs));
}

__device__ __forceinline__ void wgmma_m64n128k16(float d[64], unsigned long long desc_a, unsigned long long desc_b, int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n256k16(float d[128], unsigned long long desc_a, unsigned long long desc_b, int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
        "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

#endif  // GPULAB_CPU_BACKEND

// Matrix descriptor (PTX ISA, "Matrix Descriptor Format"): bits 0-13 the start address / 16,
// 16-29 the leading-dimension byte offset / 16, 32-45 the stride-dimension byte offset / 16,
// 62-63 the swizzle mode. For a K-major tile with the 128-byte swizzle, the stride offset is
// 1024 (from one group of 8 rows to the next) and the leading offset is unused (a k16 slice,
// 32 bytes, never leaves its 128-byte row); the slice at k0 starts 2 k0 bytes into the row.
__device__ __forceinline__ unsigned long long smem_desc(const void* tile, unsigned lbo, unsigned sbo, int swizzle)
{
    return (unsigned long long)((smem_u32(tile) & 0x3FFFF) >> 4) |
           (unsigned long long)((lbo & 0x3FFFF) >> 4) << 16 |
           (unsigned long long)((sbo & 0x3FFFF) >> 4) << 32 |
           (unsigned long long)swizzle << 62;
}
// ---- hopper2: bf16 and tf32 operands (additive; the fp16 functions above are unchanged) ----
// The same m64n256 product with other operand types, both from K-major shared-memory tiles read
// through descriptors, float accumulators laid out as wgmma_m64n256k16's:
//   wgmma_m64n256k16_bf16   A 64 x 16, B 256 x 16 bfloat16 (2-byte elements: a k16 slice is 32
//                           bytes of a row, as for halves)
//   wgmma_m64n256k8_tf32    A 64 x 8, B 256 x 8 tf32 read from 4-byte floats (a k8 slice is 32
//                           bytes too, so a 128-byte swizzled row holds 32 k, 4 slices); tf32
//                           keeps a float's 8 exponent bits and the top 10 of its 23 mantissa
//                           bits. PTX allows no transpose for tf32 (K-major only), so the
//                           instruction has no imm-trans operands.
#ifndef GPULAB_CPU_BACKEND
#define GPULAB_WGMMA_D128(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

__device__ __forceinline__ void wgmma_m64n256k16_bf16(float d[128], unsigned long long desc_a, unsigned long long desc_b, int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
        "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : GPULAB_WGMMA_D128(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

__device__ __forceinline__ void wgmma_m64n256k8_tf32(float d[128], unsigned long long desc_a, unsigned long long desc_b, int scale_d)
{
    asm volatile(
        "{\n.reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32 "
        "{"
        "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
        "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
        "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
        "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
        "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
        "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
        "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
        "}, %128, %129, p, 1, 1;\n}\n"
        : GPULAB_WGMMA_D128(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
#endif  // GPULAB_CPU_BACKEND (the CPU backend's are in gpulab_hopper_cpu.h)
// ---- end hopper2 ----
// ---- fp8: e4m3 and e5m2 operands (additive; the functions above are unchanged) ----
// wgmma_m64n256k32_<A's kind>_<B's kind>(d, desc_a, desc_b, scale_d) and wgmma_m64n128k32_..., for
// the four pairs of kinds (e4m3_e4m3, e4m3_e5m2, e5m2_e4m3, e5m2_e5m2): A 64 x 32 and B N x 32
// one-byte elements from K-major shared-memory tiles (a k32 slice is 32 bytes of a row, as a k16
// slice of halves is, so the descriptors are built as for halves, 32 elements further along the
// rows per instruction), float accumulators laid out as wgmma_m64n256k16's (n128: j = 0 .. 15).
// Twice the k of an fp16 instruction in the same time: twice the rate. PTX allows no transpose
// for FP8 (K-major only), so there are no imm-trans operands.
//
// The tensor cores add an instruction's 32 products and the accumulator it is given in reduced
// precision: 13 fraction bits below the largest exponent among them, the bits below cut (Khattak
// and Mikaitis's measured model, gpulab/fp8.py's tensor_core_gemm). Summed over a long K in one
// accumulator, the cuts pile up (DeepSeek-V3's report, section 3.3.2); step 10 adds each slice's
// partial sums into float registers instead. The CPU backend computes the same model.
#ifndef GPULAB_CPU_BACKEND
#define GPULAB_WGMMA_REGS128 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define GPULAB_WGMMA_REGS64 "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
#define GPULAB_WGMMA_D64(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define GPULAB_WGMMA_FP8(AT, BT)                                                                         \
    __device__ __forceinline__ void wgmma_m64n256k32_##AT##_##BT(float d[128], unsigned long long desc_a,   \
                                                                 unsigned long long desc_b, int scale_d)    \
    {                                                                                                    \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                       \
                     "wgmma.mma_async.sync.aligned.m64n256k32.f32." #AT "." #BT " "                      \
                     "{" GPULAB_WGMMA_REGS128 "}, %128, %129, p, 1, 1;\n}\n"                             \
                     : GPULAB_WGMMA_D128(d)                                                              \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                          \
    }                                                                                                    \
    __device__ __forceinline__ void wgmma_m64n128k32_##AT##_##BT(float d[64], unsigned long long desc_a,    \
                                                                 unsigned long long desc_b, int scale_d)    \
    {                                                                                                    \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                        \
                     "wgmma.mma_async.sync.aligned.m64n128k32.f32." #AT "." #BT " "                      \
                     "{" GPULAB_WGMMA_REGS64 "}, %64, %65, p, 1, 1;\n}\n"                                \
                     : GPULAB_WGMMA_D64(d)                                                               \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                          \
    }
GPULAB_WGMMA_FP8(e4m3, e4m3)
GPULAB_WGMMA_FP8(e4m3, e5m2)
GPULAB_WGMMA_FP8(e5m2, e4m3)
GPULAB_WGMMA_FP8(e5m2, e5m2)
#undef GPULAB_WGMMA_FP8
#undef GPULAB_WGMMA_D64
#undef GPULAB_WGMMA_REGS64
#undef GPULAB_WGMMA_REGS128
#undef GPULAB_WGMMA_D128
#endif  // GPULAB_CPU_BACKEND (the CPU backend's are in gpulab_hopper_cpu.h)
// ---- end fp8 ----
#endif  // GPULAB_COMMON_HOPPER_H
