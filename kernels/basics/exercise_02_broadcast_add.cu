// Exercise 2: two dimensions.
//
// Task: out[r][c] = a[r] + b[c] for an H x W matrix out stored row after row
// (element (r, c) at out[r * W + c]); a has H elements, b has W. The check launches
// blocks of 32 x 8 threads on a grid of ceil(W / 32) x ceil(H / 8) blocks: x along
// the columns (so that a warp writes 32 neighbours of one row), y along the rows.
// H and W are not multiples of the block: guard both.
extern "C" __global__ void broadcast_add(int H, int W, const float* __restrict__ a,
                                         const float* __restrict__ b, float* __restrict__ out)
{
    // BEGIN SOLUTION
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < H && c < W) out[r * W + c] = a[r] + b[c];
    // END SOLUTION
}
