// A 2-D block, and which of its threads form a warp.
//
// CUDA numbers a block's threads x fastest, then y, then z: thread (x, y, z) has
// the linear id t = x + y * blockDim.x + z * blockDim.x * blockDim.y, and warp w is
// the 32 consecutive ids 32w .. 32w + 31 (CUDA C++ Programming Guide, "Thread
// Hierarchy" and "SIMT Architecture"). With blockDim.x = 8, one warp is four rows of
// eight threads; with blockDim.x = 32, one row.

// For every thread, its linear id, and the linear id of lane 0 of its warp, which
// __shfl_sync fetches from that lane: the grouping the hardware made, not a
// formula of ours. The block's size must be a multiple of 32 (every lane of the
// mask must exist).
extern "C" __global__ void warp_leader(int* linear, int* leader)
{
    const int t = threadIdx.x + (threadIdx.y + threadIdx.z * blockDim.y) * blockDim.x;
    linear[t] = t;
    leader[t] = __shfl_sync(0xffffffffu, t, 0);
}

// out = 2 * in for an H x W matrix stored row after row. x runs along a row: the
// 32 lanes of a warp (one value of threadIdx.y when blockDim.x = 32) read 32
// neighbouring floats, 128 bytes.
extern "C" __global__ void scale_x_along_rows(int H, int W, const float* __restrict__ in,
                                              float* __restrict__ out)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < H && col < W) out[row * W + col] = 2.0f * in[row * W + col];
}

// The same, with x running down a column: a warp's 32 lanes read 32 floats W apart,
// each in a different 32-byte sector.
extern "C" __global__ void scale_x_down_columns(int H, int W, const float* __restrict__ in,
                                                float* __restrict__ out)
{
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < H && col < W) out[row * W + col] = 2.0f * in[row * W + col];
}
