// Warp-level tensor-core and copy instructions that CUDA C++ has no functions
// for, as small inline functions over inline PTX (the later tensor-core steps
// of the fcnet and alexnet chapters include this file as <common/ptx.h>).
//
//   mma_16816(d, a, b)       d += a * b, m16n8k16: A 16x16 and B 16x8 in half, d 16x8 in float
//   mma_1688_tf32(d, a, b)   d += a * b, m16n8k8: A 16x8 and B 8x8 in tf32 (float bits), d 16x8 float
//   ldmatrix_x4(r, p)        four 8x8 matrices of 16-bit elements from shared memory
//   ldmatrix_x2(r, p), ldmatrix_x4_trans(r, p)
//   cp_async16(dst, src, n)  copy 16 bytes global -> shared without registers (n = 16) or
//                            write 16 zero bytes (n = 0); cp_async_commit(), cp_async_wait<G>()
//   pack_half2(lo, hi)       two floats as one 32-bit register of two halves (lo in the low bits)
//   tf32_bits(x)             x rounded to tf32 (10 mantissa bits, to nearest, ties away from zero),
//                            as the bits of a float: an operand for mma_1688_tf32
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"); lane = 4 g + t:
//   A (16 x 16, row-major): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..2t+1),
//                           a[2] = (g, 2t+8..2t+9), a[3] = (g+8, 2t+8..2t+9)
//   B (16 x 8, k x n):      b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8..2t+9, n g)
//   C, D (16 x 8, float):   d[0..1] = (g, 2t..2t+1), d[2..3] = (g+8, 2t..2t+1)
//   m16n8k8 tf32: a[0] = (g, t), a[1] = (g+8, t), a[2] = (g, t+4), a[3] = (g+8, t+4);
//                 b[0] = (k t, n g), b[1] = (k t+4, n g); D as above.
//   ldmatrix: lanes 8i..8i+7 give the addresses of rows 0..7 of matrix i (16 bytes each);
//   r[i] of lane 4g + t receives row g, elements 2t and 2t+1 of matrix i (.trans: element
//   (2t, g) and (2t+1, g), the matrix transposed).
//
// The CPU backend runs the same functions with the same layouts (gpulab/cpu/include/
// gpulab_ptx_cpu.h): every lane exchanges its registers through the warp, so a kernel that
// gets a layout wrong gets the same wrong answer on both backends.
#ifndef GPULAB_COMMON_PTX_H
#define GPULAB_COMMON_PTX_H
#include <cuda_fp16.h>

#ifdef GPULAB_CPU_BACKEND
#include <gpulab_ptx_cpu.h>
#else

__device__ __forceinline__ unsigned shared_address(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mma_16816(float d[4], const unsigned a[4], const unsigned b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void mma_1688_tf32(float d[4], const unsigned a[4], const unsigned b[2])
{
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(shared_address(p)));
}

__device__ __forceinline__ void ldmatrix_x2(unsigned r[2], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(shared_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned r[4], const void* p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(shared_address(p)));
}

// src_bytes 16: copy; 0: the 16 bytes are written as zeros and nothing is read.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(shared_address(dst)), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Wait until at most `groups` of this thread's committed groups are still in flight.
template <int groups>
__device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" :: "n"(groups) : "memory");
}

__device__ __forceinline__ unsigned tf32_bits(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ unsigned pack_half2(float lo, float hi)
{
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}
#endif  // GPULAB_CPU_BACKEND
#endif  // GPULAB_COMMON_PTX_H
