// Kernels with deliberate bugs, for the CPU backend's traps.

// Threads below 16 return early; the others wait at a barrier forever.
extern "C" __global__ void early_return_barrier(float* x)
{
    if (threadIdx.x < 16) {
        return;
    }
    x[threadIdx.x] = 1.0f;
    __syncthreads();
    x[threadIdx.x] += 1.0f;
}

// Even and odd threads wait at two different barriers.
extern "C" __global__ void split_barrier(float* x)
{
    if (threadIdx.x % 2 == 0) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    x[threadIdx.x] = 1.0f;
}

// Off by one: writes y[n].
extern "C" __global__ void write_past_end(int n, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) {
        y[i] = 1.0f;
    }
}

// Reads x[i + 1] for every i < n, so the last thread reads x[n].
extern "C" __global__ void read_past_end(int n, const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = x[i + 1] - x[i];
    }
}

// Writes y[i - 1]: thread 0 writes y[-1].
extern "C" __global__ void write_before_start(int n, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i - 1] = 2.0f;
    }
}

// Writes one element just outside one of its three arrays ('which': 0 a, 1 b,
// 2 c): a[n] past the end when 'after' is non-zero, a[-1] before the start otherwise.
extern "C" __global__ void overrun_one(int n, int which, int after, float* a, float* b, float* c)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float* arrays[3] = {a, b, c};
    if (i < n) {
        arrays[which][i] = 1.0f;
    }
    if (i == n - 1) {
        arrays[which][after ? n : -1] = 5.0f;
    }
}

// A loop that never ends while x[0] >= 0.
extern "C" __global__ void spin(float* x)
{
    int i = threadIdx.x;
    while (x[0] >= 0) {
        x[1 + i % 4] += 1;
    }
}

// Thread 5 of block 1 frees a pointer malloc never returned: the C library aborts. It frees the
// middle of its own block after zeroing it, so the chunk header the C library reads there is
// zeros, every time. (Freeing an argument's address made it read whatever lay before the array.)
// The zeros are written through a volatile pointer: g++ drops a memset just before free() as a
// dead store, and the header was then whatever the heap held there before -- in a worker forked
// from a process with other threads, old data of their arenas: free() then took it for a chunk
// and returned, or waited forever on a lock at a garbage address (the launch stopped by the
// clock after 180 s). So the block is first left holding a plausible header (an 80-byte chunk in
// use), as a busy heap leaves it: were the zeros lost again, free() would return, and the launch
// would not abort at thread 5.
extern "C" __global__ void free_argument(float* x)
{
    if (blockIdx.x == 1 && threadIdx.x == 5) {
        volatile unsigned long long* used = (volatile unsigned long long*)malloc(64);
        used[3] = 0x51;               // the size word of a chunk at used + 16: 80 bytes, previous in use
        free((void*)used);
        // The same block again: the thread's cache of freed blocks is last in, first out.
        volatile unsigned char* block = (volatile unsigned char*)malloc(64);
        for (int i = 0; i < 64; ++i) block[i] = 0;
        free((void*)(block + 32));
    }
    x[threadIdx.x] = 1.0f;
}

// A __device__ variable the kernel updates: its value outlives the launch.
__device__ unsigned int launches_seen;
extern "C" __global__ void count_launches(unsigned int* seen)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        launches_seen += 1;
        seen[0] = launches_seen;
    }
}

// A local array larger than the stack the CPU backend gives a thread (128 KiB):
// a GPU spills it to local memory; here its first write past the stack's end
// lands in the guard page under it. 'n' keeps the compiler from dropping it.
extern "C" __global__ void deep_local_array(int n, float* y)
{
    volatile float local[48 * 1024];              // 192 KiB
    for (int i = 0; i < n; ++i) local[i] = (float)i;
    y[threadIdx.x] = local[n - 1];
}
