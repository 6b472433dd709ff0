// Thread-block clusters (step 8): the blocks of a cluster run at once on neighbouring SMs (one
// GPC) and can reach each other's shared memory. Inline PTX, as kernels/common/hopper.h:
//
//   cluster_ctarank()            %cluster_ctarank: the block's rank in its cluster (x fastest;
//                                for __cluster_dims__(2, 1, 1), blockIdx.x % 2)
//   mbar_arrive_cluster(bar, r)  mapa turns bar's shared-memory address into the same place in
//                                block r's shared memory; mbarrier.arrive.shared::cluster arrives
//                                there, with the default semantics (release at CTA scope), as
//                                CUTLASS's ClusterBarrier does. What it hands back is a slot the
//                                arriving warp's tensor-core reads have finished with (wgmma_wait
//                                returned), so nothing of this thread's needs ordering at cluster
//                                scope; an explicit .release.cluster, tried, made step 8 more than
//                                twice as slow on the H100.
//   tma_load_2d_multicast(dst, &map, x, y, bar, mask)
//                                cp.async.bulk.tensor ... .multicast::cluster: ONE read of the box
//                                from L2, written into the shared memory of every block r with
//                                bit r of mask, at dst's offset there, each copy counting its bytes
//                                on the mbarrier at bar's offset in that block
//   cluster_arrive(), cluster_wait()
//                                barrier.cluster.arrive.release / .wait.acquire: every thread of
//                                every block of the cluster; all of a warp's threads together
//                                (.aligned)
//
// The CPU backend's versions are in gpulab/cpu/include/gpulab_cluster_cpu.h.
#ifndef GPULAB_HOPPER_CLUSTER_CUH
#define GPULAB_HOPPER_CLUSTER_CUH
#include <common/hopper.h>

#ifdef GPULAB_CPU_BACKEND
#include <gpulab_cluster_cpu.h>
#else

__device__ __forceinline__ unsigned cluster_ctarank()
{
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}

__device__ __forceinline__ void cluster_arrive()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void cluster_wait()
{
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_cluster(unsigned long long* bar, unsigned rank)
{
    asm volatile("{\n.reg .b32 remote;\n"
                 "mapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(smem_u32(bar)), "r"(rank) : "memory");
}

__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, int x, int y,
                                                      unsigned long long* bar, unsigned short mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(smem_u32(dst)), "l"(map), "r"(x), "r"(y), "r"(smem_u32(bar)), "h"(mask) : "memory");
}

#endif  // GPULAB_CPU_BACKEND
#endif  // GPULAB_HOPPER_CLUSTER_CUH
