// Sum of x: each block reduces its 256-element slice in shared memory down to
// one warp, finishes with __shfl_down_sync and adds its partial atomically.
extern "C" __global__ void reduce_sum(int n, const float* x, float* total)
{
    __shared__ float partial[256];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    partial[tid] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride >= 32; stride /= 2) {
        if (tid < stride) {
            partial[tid] += partial[tid + stride];
        }
        __syncthreads();
    }
    if (tid < 32) {
        float v = partial[tid];
        for (int offset = 16; offset > 0; offset /= 2) {
            v += __shfl_down_sync(0xffffffffu, v, offset);
        }
        if (tid == 0) {
            atomicAdd(total, v);
        }
    }
}
