// The layer's last two operations as their own kernel, for the steps that write the convolution
// out in full (steps 1-4): y[n, m, pe, pf] = relu(max of the 2 x 2 window of yconv at
// (2 pe, 2 pf)). The bias is already in yconv. One thread per pooled output, in a grid-stride
// loop: consecutive threads read consecutive pairs of yconv and write consecutive outputs.
//
// max_nan and the ReLU below pass a NaN through (fmaxf would drop it): the checks poison yconv
// with NaN, so an element the convolution never wrote shows in y.
//
// Launch: grid ceil(N*M*PE*PF / 256) (capped at 65,535; the loop covers the rest), block 256.
__device__ __forceinline__ float max_nan(float a, float b) { return (a > b || a != a) ? a : b; }

extern "C" __global__ void relu_maxpool(const float* __restrict__ yconv, float* __restrict__ y, int planes,
                                        int E, int F)
{
    const int PE = E / 2, PF = F / 2;
    const long long total = (long long)planes * PE * PF;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int pf = (int)(i % PF);
        const long long row = i / PF;                 // plane * PE + pe
        const int pe = (int)(row % PE);
        const float* src = yconv + ((row / PE) * E + 2 * pe) * (long long)F + 2 * pf;
        const float v = max_nan(max_nan(src[0], src[1]), max_nan(src[F], src[F + 1]));
        y[i] = v < 0.0f ? 0.0f : v;
    }
}
