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

// Thread 5 of block 1 frees a pointer malloc never returned: the C library aborts. (It frees
// the middle of its own zeroed block, so the header the C library reads is zeros, every time:
// freeing an argument's address instead made it read whatever lay before the array -- another
// thread's store, a canary or a guard page -- and so crash differently from run to run.)
extern "C" __global__ void free_argument(float* x)
{
    if (blockIdx.x == 1 && threadIdx.x == 5) {
        unsigned char* block = (unsigned char*)malloc(64);
        memset(block, 0, 64);
        free(block + 32);
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
