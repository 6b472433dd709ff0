// The pieces of kernels/common/hopper.h one at a time, for tests/test_hopper.py: what a tensor
// copy leaves in shared memory, what wgmma computes from a descriptor, and the mbarrier's phases.
#include <cuda_fp16.h>
#include <common/hopper.h>

// One box copied by the copy engine at (x, y); its shared-memory bytes, as laid out, go to out.
extern "C" __global__ void tma_box_bytes(const __grid_constant__ CUtensorMap map, unsigned char* out, int x, int y,
                                         int bytes)
{
    extern __shared__ unsigned char smem_raw[];
    unsigned char* box = (unsigned char*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) {
        mbar_init(&bar, 1);
        mbar_fence_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        mbar_arrive_expect_tx(&bar, bytes);
        tma_load_2d(box, &map, x, y, &bar);
    }
    mbar_wait(&bar, 0);
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) out[i] = box[i];
}

// A (64 rows) and B (128 rows) images written to shared memory as given (1 KiB aligned, B 16 KiB
// after A), then `ksteps` wgmma m64n128k16 whose descriptors start kstep_bytes further each
// step; thread t's 64 accumulators go to out[64 t ..].
extern "C" __global__ void wgmma_tile(const unsigned char* a_img, int a_bytes, const unsigned char* b_img,
                                      int b_bytes, int mode, int lbo, int sbo, int ksteps, int kstep_bytes,
                                      float* out)
{
    extern __shared__ unsigned char smem_raw[];
    unsigned char* a = (unsigned char*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    unsigned char* b = a + 16384;
    for (int i = threadIdx.x; i < a_bytes; i += blockDim.x) a[i] = a_img[i];
    for (int i = threadIdx.x; i < b_bytes; i += blockDim.x) b[i] = b_img[i];
    fence_proxy_async();      // ordinary stores, read next by the tensor cores
    __syncthreads();
    float d[64];
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;
    wgmma_fence();
    for (int s = 0; s < ksteps; ++s)
        wgmma_m64n128k16(d, smem_desc(a + s * kstep_bytes, lbo, sbo, mode), smem_desc(b + s * kstep_bytes, lbo, sbo, mode),
                         1);
    wgmma_commit();
    wgmma_wait<0>();
    for (int i = 0; i < 64; ++i) out[64 * threadIdx.x + i] = d[i];
}

// One thread arrives `arrivals` times on a barrier of count 1, then waits for the phase of
// `parity`; out[0] = 1 once it got past.
extern "C" __global__ void mbarrier_parity(int arrivals, int parity, int* out)
{
    __shared__ __align__(8) unsigned long long bar;
    mbar_init(&bar, 1);
    for (int i = 0; i < arrivals; ++i) mbar_arrive(&bar);
    mbar_wait(&bar, parity);
    out[0] = 1;
}

// The image `img` (bytes, as the box is to lie in shared memory) handed to the copy engine and
// stored as the box at (x, y) of the map's array. C: that array, which the kernel does not touch
// on a GPU; the CPU backend writes the store into the launch's copy of it.
extern "C" __global__ void tma_store_box(const __grid_constant__ CUtensorMap map, __half* C, const unsigned char* img,
                                         int bytes, int x, int y)
{
    extern __shared__ unsigned char smem_raw[];
    unsigned char* box = (unsigned char*)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    (void)C;
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) box[i] = img[i];
    fence_proxy_async();      // ordinary stores, read next by the copy engine
    __syncthreads();
    if (threadIdx.x == 0) {
        tma_store_2d(&map, box, x, y);
        bulk_commit();
        bulk_wait<0>();
    }
}

// Two warpgroups, each on its own named barrier of `threads` threads: every round a thread
// writes its slot, and after the barrier reads its neighbour's (in its own warpgroup) into out.
extern "C" __global__ void named_barrier_exchange(int rounds, int threads, int* out)
{
    __shared__ int slots[256];
    const int g = threadIdx.x / 128, t = threadIdx.x % 128;
    for (int r = 0; r < rounds; ++r) {
        slots[threadIdx.x] = 1000 * r + threadIdx.x;
        named_barrier_sync(1 + g, threads);
        out[r * blockDim.x + threadIdx.x] = slots[128 * g + (t + 1) % 128];
        named_barrier_sync(1 + g, threads);   // everyone has read before the next round writes
    }
}
