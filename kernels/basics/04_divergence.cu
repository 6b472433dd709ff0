// Basics 4: warp divergence.
//
// The 32 threads of a warp execute one instruction at a time, together. When
// they disagree at a branch, the warp runs both sides one after the other,
// each with the threads that did not take it switched off: a warp split 16/16
// takes as long as both paths together. Here each thread records which path
// it took. by_lane branches on threadIdx.x % 2, so every warp has threads on
// both paths (divergent); by_warp branches on (threadIdx.x / 32) % 2, so all
// threads of a warp agree and each warp runs only one path -- the same work
// split differently across warps.
__device__ float work(float x, int path)
{
    // Two different computations, so a divergent warp really has two paths to run.
    return path ? x * x + 1.0f : 2.0f * x - 1.0f;
}

extern "C" __global__ void by_lane(int n, const float* x, float* y, int* path)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int p = threadIdx.x % 2;            // neighbouring threads disagree
    path[i] = p;
    y[i] = work(x[i], p);
}

extern "C" __global__ void by_warp(int n, const float* x, float* y, int* path)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int p = (threadIdx.x / 32) % 2;     // whole warps agree
    path[i] = p;
    y[i] = work(x[i], p);
}
