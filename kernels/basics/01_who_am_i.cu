// Basics 1: every thread finds out who it is.
//
// A launch runs the same kernel in many threads. They are grouped in blocks of
// blockDim.x threads, and the blocks form a grid of gridDim.x blocks. Each
// thread reads its coordinates from the built-in variables and computes its
// global index; the hardware runs the threads of a block in warps of 32
// consecutive threads (warp = threadIdx.x / 32, lane = threadIdx.x % 32).
// Nothing here is fast or slow: the kernel writes down, for each thread, the
// numbers the rest of the book uses to decide which thread does what.
extern "C" __global__ void who_am_i(int n, int* block, int* thread, int* warp, int* lane, int* global)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;   // this thread's global index
    if (i < n) {                                     // the last block may have threads with nothing to do
        block[i] = blockIdx.x;
        thread[i] = threadIdx.x;
        warp[i] = threadIdx.x / 32;
        lane[i] = threadIdx.x % 32;
        global[i] = i;
    }
}
