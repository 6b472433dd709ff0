// Kernels that read or write outside their __shared__ arrays, and correct
// ones beside them, for the CPU backend's shared-memory bounds checking.

#define TILE 16

// Transposes an n x n matrix through a padded tile (correct): the static
// shared array's accesses all stay inside, at any n.
extern "C" __global__ void transpose_tiled(int n, const float* in, float* out)
{
    __shared__ float tile[TILE][TILE + 1];   // +1: the column reads spread over the banks
    int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
    if (x < n && y < n) {
        tile[threadIdx.y][threadIdx.x] = in[y * n + x];
    }
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;
    y = blockIdx.x * TILE + threadIdx.y;
    if (x < n && y < n) {
        out[y * n + x] = tile[threadIdx.x][threadIdx.y];
    }
}

// Sums each block's chunk of x into sums[block] through a static shared
// array of one float per thread.  In block 'bad_block' only: 'shift' moves
// thread t's slot to t + shift, so the last thread's store (shift > 0) or the
// first's (shift < 0) lands outside, and 'read_ahead' has every thread read
// partial[t + 1] too, so the last thread reads past the end.
extern "C" __global__ void block_sum(int n, int bad_block, int shift, int read_ahead, const float* x, float* sums)
{
    __shared__ float partial[128];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int bad = blockIdx.x == bad_block;
    partial[(int)threadIdx.x + (bad ? shift : 0)] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (bad && read_ahead) {
        float next = partial[threadIdx.x + 1];
        if (next == 12345.0f) {
            sums[blockIdx.x] = next;   // keeps the read
        }
    }
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int k = 0; k < 128; ++k) {
            total += partial[k];
        }
        sums[blockIdx.x] = total;
    }
}

// Two static arrays in one statement, one of them 2-D.  Thread t writes
// rows[t][col]: col = 8 is the first column past the end of a row, which is
// still inside the array (rows[t + 1][0]) except for the last row's thread, in
// block 'bad_block' only (the others write column 0).
extern "C" __global__ void two_arrays(int bad_block, int col, float* out)
{
    __shared__ float rows[32][8], other[4];
    rows[threadIdx.x][blockIdx.x == bad_block ? col : 0] = (float)threadIdx.x;
    if (threadIdx.x < 4) {
        other[threadIdx.x] = 10.0f * threadIdx.x;
    }
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = rows[threadIdx.x][0] + other[threadIdx.x % 4];
}

// Reverses each block's chunk of x (the last one partial) in place through
// dynamic shared memory; block 'bad_block' indexes 'extra' elements further,
// past the end of what the launch gave when extra > 0.
extern "C" __global__ void reverse_dynamic(int n, int bad_block, int extra, float* x)
{
    extern __shared__ float chunk[];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int start = blockIdx.x * blockDim.x;
    int count = min(n - start, (int)blockDim.x);
    int offset = blockIdx.x == bad_block ? extra : 0;
    if (threadIdx.x < count) {
        chunk[(int)threadIdx.x + offset] = x[i];
    }
    __syncthreads();
    if (threadIdx.x < count) {
        x[i] = chunk[count - 1 - (int)threadIdx.x + offset];
    }
}
