// The one-core CPU baseline: the convolution as a plain loop nest, run by ONE thread.
//
// Not a GPU kernel. On the CPU backend (g++ -O2) a launch with grid 1 and block 1 runs this
// body once, as ordinary compiled C++ loops on one core: the "straightforward compiled loop
// nest" that student reports compare their GPU kernels against. The chapter times it with
// the host's clock. Any other thread returns at once, so a bigger launch does no extra work.
//
// Layout: NCHW, as every kernel of the chapter; zero padding P, stride U.
extern "C" __global__ void conv_loop_nest(const float* x, const float* w, float* y,
                                          int N, int C, int H, int W, int M, int R, int S,
                                          int U, int P, int E, int F)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (int n = 0; n < N; ++n)
        for (int m = 0; m < M; ++m)
            for (int e = 0; e < E; ++e)
                for (int f = 0; f < F; ++f) {
                    float acc = 0.0f;
                    for (int c = 0; c < C; ++c)
                        for (int r = 0; r < R; ++r) {
                            const int row = e * U - P + r;
                            if (row < 0 || row >= H) continue;
                            for (int s = 0; s < S; ++s) {
                                const int col = f * U - P + s;
                                if (col < 0 || col >= W) continue;
                                acc += x[((size_t)(n * C + c) * H + row) * W + col]
                                     * w[((size_t)(m * C + c) * R + r) * S + s];
                            }
                        }
                    y[((size_t)(n * M + m) * E + e) * F + f] = acc;
                }
}
