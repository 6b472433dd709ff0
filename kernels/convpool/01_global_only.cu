// Step 1 -- one thread per convolution output, every operand read from global memory.
//
// The layer: x is N x C x Hp x Wp (the 224 x 224 image with its 2-pixel zero border already
// written out, as in the report: 228 x 228), w is M x C x 5 x 5, b has M entries. The
// convolution yconv[n, m, e, f] = b[m] + sum over c, r, s of w[m, c, r, s] x[n, c, e + r, f + s]
// is E x F = 224 x 224 per filter; relu_maxpool.cu then keeps the largest of each 2 x 2 window,
// clipped at zero: y is N x M x 112 x 112.
//
// This is the report's starting point: no caching of any kind. Thread (f, e) of block z = n*M + m
// runs the whole C x 5 x 5 sum for one output, loading the weight and the input for every
// multiply-add -- two loads per FMA. The sum itself lives in a register. A warp's 32 threads
// are 32 neighbouring outputs of one row and one filter, so each input load is 32 consecutive
// floats (coalesced) and each weight load is one address for the whole warp (a broadcast).
//
// Why it is slow: 2 loads and some index arithmetic per FMA, so the load units, not the FMA
// units, set the pace, and every input value is fetched 25 times per filter (once per tap),
// 6400 times in all -- from L1 and L2, not DRAM, but each fetch is an instruction.
//
// Launch: grid (ceil(F / 32), ceil(E / 8), N * M), block (32, 8); then relu_maxpool.
//
// Prediction: about 3 instructions per FMA. An H100 SM issues at most 4 warp instructions per
// cycle, so 132 SMs at ~1.8 GHz could do ~10 T FMA/s (~20 TFLOP/s, ~8 ms for one image) if issue
// were the limit; but its 32 load/store lanes take one warp-wide load per cycle, and each FMA
// needs two: at most ~3.8 T FMA/s, ~7.6 TFLOP/s, ~22 ms for one image. Plus the pre-pool tensor
// (51 MB written, read back by the pool): ~0.05 ms, invisible here.
#define RS 5    // filter height and width

extern "C" __global__ void conv_global(const float* __restrict__ x, const float* __restrict__ w,
                                       const float* __restrict__ b, float* __restrict__ yconv,
                                       int N, int C, int Hp, int Wp, int M, int E, int F)
{
    const int f = blockIdx.x * blockDim.x + threadIdx.x;
    const int e = blockIdx.y * blockDim.y + threadIdx.y;
    const int nm = blockIdx.z;                        // n * M + m
    if (f >= F || e >= E) return;
    const int n = nm / M, m = nm - (nm / M) * M;
    float sum = 0.0f;
    for (int c = 0; c < C; ++c)
        for (int r = 0; r < RS; ++r)
            for (int s = 0; s < RS; ++s)
                sum += w[((size_t)(m * C + c) * RS + r) * RS + s]
                     * x[((size_t)(n * C + c) * Hp + e + r) * Wp + f + s];
    yconv[((size_t)nm * E + e) * F + f] = sum + b[m];
}
