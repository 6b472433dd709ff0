// Step 3 -- the report's work-groups: a block per strip of one output row, a thread per filter,
// the input strip shared in shared memory.
//
// What changed from step 2: the mapping. The report gave each work-group (block) a piece of the
// image and each work-item (thread) a filter, so that all the block's threads use the same
// input values: a block stages CB channels x 5 rows x (TF + 4) columns of x in shared memory
// (the report's "__local inputBuffer") and every thread reads them from there. When all 32
// threads of a warp read the same shared-memory word, it is one broadcast: the input costs one
// shared load per 16 FMAs of each thread, not a trip to L1. Each thread keeps TF = 16 sums.
//
// The weights: thread m needs w[m, c, r, 0..4]. Read as stored (M x C x 5 x 5), a warp's 32
// filters would be 32 addresses 25.6 KB apart on every load; so this step reads them from a
// copy laid out wt[c][r][s][m] (C x 5 x 5 x M), made once when the model is loaded, in which
// the warp's 32 filters are 32 consecutive floats: one coalesced 128-byte load.
//
// Blocks loop over the strips (a grid-stride loop), threads over the filters (m = tid,
// tid + blockDim.x, ...), so any grid and any block size computes the whole layer: the launch
// shape is a free parameter, as in the report's table.
//
// Why it should be faster: per channel and thread, 25 coalesced weight loads and 100 shared
// values (25 broadcast 16-byte loads: a staged row is 20 aligned floats) feed 400 FMAs (step 2: 85 scattered loads per 200 FMAs), and the input comes from
// DRAM once per strip and filter pass instead of once per thread.
//
// Launch: grid = any number of blocks (the chapter uses one per strip: N * E * ceil(F / 16)),
// block = any number of threads up to 1024 (the chapter uses 256, one per filter); then
// relu_maxpool.
//
// Prediction: 2-3x faster than step 2: ~6 ms for one image.
#define RS 5            // filter height and width
#define TF 16           // outputs per thread along the row
#define CB 8            // channels staged per pass
#define PITCH (TF + RS - 1)

extern "C" __global__ void conv_shared_tiles(const float* __restrict__ x, const float* __restrict__ wt,
                                             const float* __restrict__ b, float* __restrict__ yconv,
                                             int N, int C, int Hp, int Wp, int M, int E, int F)
{
    __shared__ float tile[CB][RS][PITCH];
    const int chunks = (F + TF - 1) / TF;
    const int strips = N * E * chunks;
    for (int t = blockIdx.x; t < strips; t += gridDim.x) {
        const int chunk = t % chunks, ne = t / chunks;
        const int e = ne % E, n = ne / E;
        const int f0 = chunk * TF;
        for (int m0 = 0; m0 < M; m0 += blockDim.x) {
            const int m = m0 + threadIdx.x;
            float acc[TF];
#pragma unroll
            for (int j = 0; j < TF; ++j) acc[j] = 0.0f;
            for (int c0 = 0; c0 < C; c0 += CB) {
                __syncthreads();                  // everyone is done with the previous stage
                for (int i = threadIdx.x; i < CB * RS * PITCH; i += blockDim.x) {
                    const int col = i % PITCH, rc = i / PITCH;
                    const int r = rc % RS, c = c0 + rc / RS;
                    tile[rc / RS][r][col] = (c < C && f0 + col < Wp)
                        ? x[((size_t)(n * C + c) * Hp + e + r) * Wp + f0 + col] : 0.0f;
                }
                __syncthreads();
                if (m < M) {
                    const int cn = min(CB, C - c0);
                    for (int cc = 0; cc < cn; ++cc) {
#pragma unroll
                        for (int r = 0; r < RS; ++r) {
                            float wr[RS];
#pragma unroll
                            for (int s = 0; s < RS; ++s) wr[s] = wt[((size_t)(c0 + cc) * RS * RS + r * RS + s) * M + m];
#pragma unroll
                            for (int j = 0; j < TF; ++j)
#pragma unroll
                                for (int s = 0; s < RS; ++s) acc[j] += wr[s] * tile[cc][r][j + s];
                        }
                    }
                }
            }
            if (m < M) {
                float* out = yconv + ((size_t)(n * M + m) * E + e) * F;
#pragma unroll
                for (int j = 0; j < TF; ++j)
                    if (f0 + j < F) out[f0 + j] = acc[j] + b[m];
            }
        }
    }
}
