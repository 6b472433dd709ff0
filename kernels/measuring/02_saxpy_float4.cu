// Step 2: SAXPY with 16-byte loads and stores, four elements per thread.
//
// What changed from step 1: each thread reads x and y as float4 (one 16-byte
// load instead of four 4-byte loads) and writes z as one float4. The bytes
// moved are the same, so this cannot beat the bandwidth floor; what it saves
// is instructions and memory requests (a quarter as many), which matters only
// if step 1 is not already at the floor. Prediction: within ~10% of step 1 on
// large arrays, perhaps a little faster; no gain at all on small ones, where
// the launch itself dominates.
//
// The float4 casts need x, y and z aligned to 16 bytes (CuPy allocations are
// 256-byte aligned). When n is not a multiple of 4, the last thread finishes
// the 1-3 leftover elements one at a time.
extern "C" __global__ void saxpy_float4(int n, float a, const float* __restrict__ x,
                                        const float* __restrict__ y, float* __restrict__ z)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int n4 = n / 4;
    if (i < n4) {
        float4 xv = reinterpret_cast<const float4*>(x)[i];
        float4 yv = reinterpret_cast<const float4*>(y)[i];
        float4 zv = make_float4(a * xv.x + yv.x, a * xv.y + yv.y,
                                a * xv.z + yv.z, a * xv.w + yv.w);
        reinterpret_cast<float4*>(z)[i] = zv;
    }
    if (i == n4) {
        for (int k = 4 * n4; k < n; ++k) {
            z[k] = a * x[k] + y[k];
        }
    }
}
