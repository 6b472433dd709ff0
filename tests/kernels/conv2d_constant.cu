// 2D convolution (cross-correlation) with a 5x5 filter held in constant memory,
// zero padding at the borders.
#define R 2

__constant__ float weights[(2 * R + 1) * (2 * R + 1)];

extern "C" __global__ void conv2d(int height, int width, const float* in, float* out)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= width || y >= height) {
        return;
    }
    float acc = 0.0f;
    for (int dy = -R; dy <= R; ++dy) {
        for (int dx = -R; dx <= R; ++dx) {
            int yy = y + dy, xx = x + dx;
            if (yy >= 0 && yy < height && xx >= 0 && xx < width) {
                acc += weights[(dy + R) * (2 * R + 1) + (dx + R)] * in[yy * width + xx];
            }
        }
    }
    out[y * width + x] = acc;
}
