// Unit kernels for kernels/common/hopper_conv.cuh (issue 26): the 4-D bulk tensor copy, on the
// CPU backend's emulation and on a Hopper GPU alike (tests/test_hopper_conv.py).
#include <common/hopper_conv.cuh>

// One box of a 4-D map copied by the copy engine at (c0, c1, c2, c3); its shared-memory bytes, as
// laid out, go to out.
extern "C" __global__ void tma_box4_bytes(const __grid_constant__ CUtensorMap map, unsigned char* out, int c0, int c1,
                                          int c2, int c3, int bytes)
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
        tma_load_4d(box, &map, c0, c1, c2, c3, &bar);
    }
    mbar_wait(&bar, 0);
    for (int i = threadIdx.x; i < bytes; i += blockDim.x) out[i] = box[i];
}
