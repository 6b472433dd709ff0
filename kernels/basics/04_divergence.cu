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
//
// Each path is a loop of `steps` dependent multiply-adds, `steps` a launch
// argument. A short branch (a line or two on each side) the compiler does not
// branch over at all: it computes both sides for every thread and keeps one
// result (predication, or a select), so by_warp would pay for both paths just
// like by_lane. A loop whose trip count is known only at run time cannot be
// turned into straight-line code, so the machine code keeps its branches, and
// a warp whose lanes disagree really runs one loop after the other.
//
// Prediction: with many steps, by_lane takes about twice as long as by_warp.
__device__ float path_one(float x, int steps)
{
    float y = 0.0f;
#pragma unroll 1
    for (int k = 0; k < steps; ++k)
        y = y * x + 1.0f;              // 1 + x + x^2 + ...: tends to 1 / (1 - x) for |x| < 1
    return y;
}

__device__ float path_zero(float x, int steps)
{
    float y = 0.0f;
#pragma unroll 1
    for (int k = 0; k < steps; ++k)
        y = y * 0.5f - x;              // -x (1 + 1/2 + 1/4 + ...): tends to -2x
    return y;
}

extern "C" __global__ void by_lane(int n, int steps, const float* x, float* y, int* path)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int p = threadIdx.x % 2;            // neighbouring threads disagree
    path[i] = p;
    y[i] = p ? path_one(x[i], steps) : path_zero(x[i], steps);
}

extern "C" __global__ void by_warp(int n, int steps, const float* x, float* y, int* path)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int p = (threadIdx.x / 32) % 2;     // whole warps agree
    path[i] = p;
    y[i] = p ? path_one(x[i], steps) : path_zero(x[i], steps);
}

// For comparison, a short branch: one line on each side, split by lane as in by_lane. The
// compiler computes both sides for every thread and keeps one, so no warp diverges on the GPU.
extern "C" __global__ void short_by_lane(int n, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[i] = threadIdx.x % 2 ? x[i] * x[i] + 1.0f : 2.0f * x[i] - 1.0f;
}
