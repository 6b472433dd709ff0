// y = a * x with float4 loads and stores for the bulk, scalars for the tail.
extern "C" __global__ void scale_float4(int n, float a, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int nvec = n / 4;
    if (i < nvec) {
        float4 v = reinterpret_cast<const float4*>(x)[i];
        reinterpret_cast<float4*>(y)[i] = make_float4(a * v.x, a * v.y, a * v.z, a * v.w);
    }
    int tail = nvec * 4 + i;
    if (i < 4 && tail < n) {
        y[tail] = a * x[tail];
    }
}
