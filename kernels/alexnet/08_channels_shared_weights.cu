// Step 8 -- step 7 plus the block's weights in shared memory, loaded by all threads.
//
// What changed from step 7: the block's R x S slice of the filter (w[m, c]: 121 floats for
// layer 1, 25 for layer 2, 9 for layers 3-5) is copied into shared memory by the threads
// together before the sums start (the report's "Mk-sw-mt").
//
// Launch: as step 7, with R*S*4 bytes of dynamic shared memory for conv_channel_partials_sw.
//
// Prediction: small gain over step 7 (each weight read was already one broadcast from L1);
// the partial buffer's traffic, unchanged, still dominates at large N.
extern "C" __global__ void conv_channel_partials_sw(const float* x, const float* w, float* partial,
                                                    int N, int C, int H, int W, int M, int R, int S,
                                                    int U, int P, int E, int F)
{
    extern __shared__ float w_s[];          // w[m, c]: R*S floats
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int c = blockIdx.z;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    const float* wc = w + ((size_t)m * C + c) * R * S;
    for (int i = tid; i < R * S; i += threads) w_s[i] = wc[i];
    __syncthreads();
    const float* xc = x + ((size_t)n * C + c) * H * W;
    float* out = partial + (((size_t)n * C + c) * M + m) * E * F;
    for (int e = threadIdx.y; e < E; e += blockDim.y) {
        for (int f = threadIdx.x; f < F; f += blockDim.x) {
            float acc = 0.0f;
            for (int r = 0; r < R; ++r) {
                const int row = e * U - P + r;
                if (row < 0 || row >= H) continue;
                for (int s = 0; s < S; ++s) {
                    const int col = f * U - P + s;
                    if (col < 0 || col >= W) continue;
                    acc += xc[row * W + col] * w_s[r * S + s];
                }
            }
            out[e * F + f] = acc;
        }
    }
}

// As in step 7.
extern "C" __global__ void reduce_channels(const float* partial, float* y, int N, int C, int M, int EF)
{
    const size_t total = (size_t)N * M * EF;
    const size_t per_image = (size_t)M * EF;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t n = i / per_image;
        const size_t rest = i - n * per_image;
        const float* p = partial + n * C * per_image + rest;
        float acc = 0.0f;
        for (int c = 0; c < C; ++c) acc += p[(size_t)c * per_image];
        y[i] = acc;
    }
}
