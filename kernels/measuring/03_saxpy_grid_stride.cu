// Exercise: SAXPY with a grid-stride loop.
//
// What changes from step 1: the grid no longer has to cover the array. Each
// thread starts at its global index and strides by the total number of threads
// in the grid (gridDim.x * blockDim.x), so a fixed grid -- for example a few
// blocks per SM -- handles any n. Prediction: the same time as step 1 on large
// arrays (the same bytes move), with fewer, longer-lived blocks; on small
// arrays, no difference. The loop is also how a kernel handles n larger than
// the largest grid.
//
// Task: write the loop (where your copy says "TODO: your code here") so that
// z[i] = a * x[i] + y[i] for every i < n, whatever the grid and block sizes.
extern "C" __global__ void saxpy_grid_stride(int n, float a, const float* __restrict__ x,
                                             const float* __restrict__ y, float* __restrict__ z)
{
    // BEGIN SOLUTION
    int stride = gridDim.x * blockDim.x;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        z[i] = a * x[i] + y[i];
    }
    // END SOLUTION
}
