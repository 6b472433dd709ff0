// ReLU and 2 x 2 max-pool (stride 2) of a conv output: the layer's epilogue for the steps whose
// convolution kernel writes the pre-pool output y (steps 1-9). One thread per pooled value;
// max and ReLU commute, so the ReLU is applied once, to the window's maximum.

extern "C" __global__ void relu_pool(const float* __restrict__ y, float* __restrict__ p, int planes, int E)
{
    const int P = E / 2;
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)planes * P * P) return;
    const size_t plane = i / (P * P);
    const int r = (int)(i % (P * P)) / P, c = (int)(i % P);
    const float* src = y + plane * E * E + (2 * r) * E + 2 * c;
    const float v = fmaxf(fmaxf(src[0], src[1]), fmaxf(src[E], src[E + 1]));
    p[i] = fmaxf(v, 0.0f);
}
