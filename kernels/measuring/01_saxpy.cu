// Step 1: SAXPY, one element per thread.
//
// z = a * x + y over n floats. Each thread computes one element, so a launch
// needs ceil(n / blockDim.x) blocks, and the last block has threads with no
// element: the `if (i < n)` guard is what keeps them from writing past the end.
//
// Per element: 2 FLOPs (a multiply and an add) against 12 bytes of traffic
// (read x, read y, write z). At 1/6 FLOP per byte this kernel can only ever be
// limited by memory bandwidth: an H100 moves 3.35 TB/s on its datasheet
// (gpulab.datasheet) and somewhat less in practice, so 16M elements, 201 MB,
// should take ~0.06-0.07 ms once the array is large enough to fill the GPU.
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x,
                                 const float* __restrict__ y, float* __restrict__ z)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        z[i] = a * x[i] + y[i];
    }
}
