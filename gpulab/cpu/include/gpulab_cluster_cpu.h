// kernels/hopper/cluster.cuh for the CPU backend: thread-block clusters.
//
// A kernel declared with __cluster_dims__ runs each cluster's blocks together on one worker (the
// runtime schedules the fibers of all its blocks, each block with its own shared memory), so a
// thread may wait on an mbarrier that a thread of another block completes. What the cluster adds:
//   cluster_ctarank()            the block's rank in its cluster (x fastest)
//   mbar_arrive_cluster(bar, r)  an arrival on the mbarrier at bar's place in block r's shared
//                                memory (mapa, then mbarrier.arrive.shared::cluster)
//   tma_load_2d_multicast(dst, &map, x, y, bar, mask)
//                                one box into every block r of mask (bit r) at dst's place in its
//                                shared memory, counting its bytes on the mbarrier at bar's place
//                                in the same block, at issue (a legal schedule of the copy)
//   cluster_arrive(), cluster_wait()
//                                barrier.cluster: the wait returns once every thread of every
//                                block of the cluster has arrived
// Race checking sees none of these accesses (as for the rest of gpulab_hopper_cpu.h): each block's
// shared memory has its own shadow, and a remote arrival or a multicast copy is ordered by the
// mbarrier phases, which the checker does not model.
#ifndef GPULAB_CLUSTER_CPU_H
#define GPULAB_CLUSTER_CPU_H
#include <gpulab_hopper_cpu.h>

#define GPULAB_CLUSTER_SITE const char* file = __builtin_FILE(), int line = __builtin_LINE()

static inline unsigned cluster_ctarank() { return gpulab::cluster_rank(); }

static inline void cluster_arrive(GPULAB_CLUSTER_SITE) { gpulab::cluster_arrive(file, line); }
static inline void cluster_wait(GPULAB_CLUSTER_SITE) { gpulab::cluster_wait(file, line); }

GPULAB_UNCOUNTED static inline void mbar_arrive_cluster(unsigned long long* bar, unsigned rank, GPULAB_CLUSTER_SITE) {
    auto* remote = static_cast<unsigned long long*>(gpulab::cluster_map(bar, rank, file, line));
    gpulab::hopper_detail::arrive(remote, 0, "mbar_arrive_cluster", file, line);
}

GPULAB_UNCOUNTED static inline void tma_load_2d_multicast(void* dst, const CUtensorMap* map, int x, int y,
                                                          unsigned long long* bar, unsigned short mask,
                                                          GPULAB_CLUSTER_SITE) {
    using namespace gpulab::hopper_detail;
    const unsigned blocks = gpulab::cluster_blocks();
    if (!mask || (blocks < 16 && (mask >> blocks)))
        gpulab::trap("tma_load_2d_multicast: the mask must name blocks of the cluster (bit r: rank r) and at "
                     "least one", file, line);
    for (unsigned r = 0; r < blocks; ++r) {
        if (!(mask >> r & 1u)) continue;
        void* to = gpulab::cluster_map(dst, r, file, line);
        auto* remote = static_cast<unsigned long long*>(gpulab::cluster_map(bar, r, file, line));
        complete_tx(remote, (int)load_box_2d(to, map, x, y, "tma_load_2d_multicast", file, line), file, line);
    }
}

#undef GPULAB_CLUSTER_SITE
#endif  // GPULAB_CLUSTER_CPU_H
