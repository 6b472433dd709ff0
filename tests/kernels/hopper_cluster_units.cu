// The pieces of kernels/hopper/cluster.cuh one at a time, for tests/test_hopper_cluster.py: a
// multicast copy into the blocks of a mask, a remote mbarrier arrival, each block's own shared
// memory and __syncthreads() inside a cluster. Every kernel runs in clusters of 2 blocks along x.
#include <cuda_fp16.h>
#include <common/hopper.h>
#include <hopper/cluster.cuh>

// Block rank 0 multicasts the box at (x, y) into the blocks of `mask`; every block waits for the
// bytes its mask bit promises, then writes its shared-memory bytes (0xAB where nothing landed)
// to out[blockIdx.x * bytes ..] and its rank to ranks[blockIdx.x].
extern "C" __global__ void __cluster_dims__(2, 1, 1)
multicast_box(const __grid_constant__ CUtensorMap map, unsigned char* out, int* ranks, int x, int y, int bytes,
              int mask)
{
    extern __shared__ unsigned char smem_raw[];
    unsigned char* box = (unsigned char*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    unsigned long long* bar = (unsigned long long*)(box + bytes);
    const unsigned rank = cluster_ctarank();
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) box[i] = 0xAB;
    fence_proxy_async();                            // the copy engine writes after these stores
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        mbar_fence_init();
    }
    __syncwarp();
    cluster_arrive();                               // the peer's barrier exists before the copy
    cluster_wait();
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(bar, (mask >> rank & 1) ? bytes : 0);
        if (rank == 0) tma_load_2d_multicast(box, &map, x, y, bar, (unsigned short)mask);
    }
    mbar_wait(bar, 0);
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) out[(size_t)blockIdx.x * bytes + i] = box[i];
    if (threadIdx.x == 0) ranks[blockIdx.x] = (int)rank;
    __syncwarp();
    cluster_arrive();                               // rank 0's copy may still be landing in its peer
    cluster_wait();
}

// Rank 0 waits on its own barrier (count 1), on which only rank 1 arrives, from the other SM
// (unless skip); then order[blockIdx.x / 2] = 1. Rank 1 arrives only after its own
// __syncthreads(), so the arrival is the peer's, not something rank 0 did itself.
extern "C" __global__ void __cluster_dims__(2, 1, 1) remote_arrive(int* order, int skip)
{
    extern __shared__ unsigned char smem_raw[];
    unsigned long long* bar = (unsigned long long*)(((size_t)smem_raw + 7) & ~(size_t)7);
    const unsigned rank = cluster_ctarank();
    if (threadIdx.x == 0) {
        mbar_init(bar, 1);
        mbar_fence_init();
    }
    __syncwarp();
    cluster_arrive();
    cluster_wait();
    if (rank == 0) {
        mbar_wait(bar, 0);
        if (threadIdx.x == 0) order[blockIdx.x / 2] = 1;
    } else {
        __syncthreads();
        if (threadIdx.x == 0 && !skip) mbar_arrive_cluster(bar, 0);
    }
    __syncwarp();
    cluster_arrive();
    cluster_wait();
}

// Each block sums its 64 inputs in a static __shared__ array with __syncthreads() between the
// halvings: the blocks of a cluster run together but each has its own array and its own barrier.
extern "C" __global__ void __cluster_dims__(2, 1, 1) block_sums(const float* in, float* out)
{
    __shared__ float part[64];
    part[threadIdx.x] = in[blockIdx.x * 64 + threadIdx.x];
    __syncthreads();
    for (int half = 32; half > 0; half /= 2) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

// Every block writes the same offsets of its own shared memory (the race checker must tell the
// blocks' copies apart); with `racy`, 32 threads of a block write each element unsynchronised.
extern "C" __global__ void __cluster_dims__(2, 1, 1) shared_writes(int* out, int racy)
{
    __shared__ int cell[128];
    const int at = racy ? threadIdx.x % 4 : threadIdx.x;
    cell[at] = threadIdx.x;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = cell[threadIdx.x % 4];
}
