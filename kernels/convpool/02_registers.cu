// Step 2 -- weights and inputs cached in registers: 8 outputs per thread.
//
// What changed from step 1: each thread computes 8 neighbouring outputs of one row,
// yconv[n, m, e, f0 .. f0 + 7]. For each channel c and filter row r it loads the 5 weights
// w[m, c, r, 0..4] and the 12 inputs x[n, c, e + r, f0 .. f0 + 11] into registers once, then
// does the 8 x 5 = 40 multiply-adds from registers -- the report's "__private" caching of the
// mask and of a row of the input. Loads per FMA: 17 / 40 instead of 2.
//
// Why it should be faster: step 1 was limited by issuing loads; this issues 0.43 loads per FMA
// instead of 2, and the index arithmetic is shared by 40 FMAs instead of 1.
// Why it might not be: consecutive threads now start 8 floats apart, so a warp's load of
// "input i" touches 32 addresses 32 bytes apart: 32 sectors per request instead of 4. The
// next 7 loads of each thread hit the same lines in L1, but every request costs L1 cycles.
//
// Launch: grid (ceil(F / 256), ceil(E / 8), N * M), block (32, 8); then relu_maxpool.
// A partial last group of 8 (F not a multiple of 8) clamps its input reads to the row and
// skips the stores past F.
//
// Prediction: 3-4x faster than step 1: ~15-20 ms for one image.
#define RS 5        // filter height and width
#define OUT 8       // outputs per thread along the row
#define IN (OUT + RS - 1)

extern "C" __global__ void conv_registers(const float* __restrict__ x, const float* __restrict__ w,
                                          const float* __restrict__ b, float* __restrict__ yconv,
                                          int N, int C, int Hp, int Wp, int M, int E, int F)
{
    const int f0 = (blockIdx.x * blockDim.x + threadIdx.x) * OUT;
    const int e = blockIdx.y * blockDim.y + threadIdx.y;
    const int nm = blockIdx.z;
    if (f0 >= F || e >= E) return;
    const int n = nm / M, m = nm - (nm / M) * M;
    float acc[OUT];
#pragma unroll
    for (int j = 0; j < OUT; ++j) acc[j] = 0.0f;
    for (int c = 0; c < C; ++c) {
        const float* x_c = x + ((size_t)(n * C + c) * Hp + e) * Wp;
        const float* w_c = w + (size_t)(m * C + c) * RS * RS;
        for (int r = 0; r < RS; ++r) {
            float wr[RS], in[IN];
#pragma unroll
            for (int s = 0; s < RS; ++s) wr[s] = w_c[r * RS + s];
#pragma unroll
            for (int i = 0; i < IN; ++i) in[i] = x_c[r * Wp + min(f0 + i, Wp - 1)];
#pragma unroll
            for (int j = 0; j < OUT; ++j)
#pragma unroll
                for (int s = 0; s < RS; ++s) acc[j] += wr[s] * in[j + s];
        }
    }
    float* out = yconv + ((size_t)nm * E + e) * F;
#pragma unroll
    for (int j = 0; j < OUT; ++j)
        if (f0 + j < F) out[f0 + j] = acc[j] + b[m];
}
