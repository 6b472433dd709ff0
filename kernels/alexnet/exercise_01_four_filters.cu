// Exercise 1 -- four filters per block: each input value loaded once, used four times.
//
// Step 2 loads x[n, c, row, col] once for every filter that needs it: M times over the grid.
// Here a block computes filters 4*blockIdx.x .. 4*blockIdx.x + 3 for image blockIdx.y (grid
// ceil(M/4) x N, block as step 2), so each load of x can feed four running sums.
//
// Task: fill in the loop over (c, r, s) so that acc[k] gets filter m0 + k's sum. M need not
// be a multiple of 4: a filter index at or past M must neither be read nor written.
//
// Prediction to check against the recorded run: about 2x over step 2 (the loads of x are a
// quarter as many; the weight loads stay one per FMA, but they are warp-uniform broadcasts).
#define FILTERS_PER_BLOCK 4

extern "C" __global__ void conv_four_filters(const float* x, const float* w, float* y,
                                             int N, int C, int H, int W, int M, int R, int S,
                                             int U, int P, int E, int F)
{
    const int m0 = blockIdx.x * FILTERS_PER_BLOCK;
    const int n = blockIdx.y;
    for (int e = threadIdx.y; e < E; e += blockDim.y) {
        for (int f = threadIdx.x; f < F; f += blockDim.x) {
            float acc[FILTERS_PER_BLOCK] = {0.0f, 0.0f, 0.0f, 0.0f};
            // BEGIN SOLUTION
            for (int c = 0; c < C; ++c) {
                const float* xc = x + ((size_t)n * C + c) * H * W;
                for (int r = 0; r < R; ++r) {
                    const int row = e * U - P + r;
                    if (row < 0 || row >= H) continue;
                    for (int s = 0; s < S; ++s) {
                        const int col = f * U - P + s;
                        if (col < 0 || col >= W) continue;
                        const float v = xc[row * W + col];
                        for (int k = 0; k < FILTERS_PER_BLOCK; ++k) {
                            if (m0 + k < M)
                                acc[k] += v * w[(((size_t)(m0 + k) * C + c) * R + r) * S + s];
                        }
                    }
                }
            }
            // END SOLUTION
            for (int k = 0; k < FILTERS_PER_BLOCK; ++k) {
                if (m0 + k < M) y[((size_t)n * M + m0 + k) * E * F + (size_t)e * F + f] = acc[k];
            }
        }
    }
}
