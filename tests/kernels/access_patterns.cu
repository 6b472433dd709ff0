// Small kernels whose memory-access counters are known by hand (one warp each
// unless said otherwise): the CPU backend's counters are tested against them.

// Coalesced: lane i reads x[i], so a warp's 32 floats are 128 bytes, 4 sectors.
extern "C" __global__ void load_coalesced(const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[i];
}

// Strided: lane i reads x[2 i], 256 bytes apart in all: 8 sectors.
extern "C" __global__ void load_strided(const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[2 * i];
}

// Scattered: lane i reads x[i * 64], each in its own sector: 32 sectors.
extern "C" __global__ void load_scattered(const float* x, float* y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[i * 64];
}

// Shared-memory loads with a given stride in words: stride 1 is
// conflict-free, 2 is a 2-way conflict, 32 a 32-way conflict, 0 a broadcast
// (every lane reads word 0).  The fill before them is conflict-free: with 64
// threads, warp 0 stores 17 times and warp 1 16 times.
extern "C" __global__ void shared_stride(int stride, float* y)
{
    __shared__ float s[32 * 33];
    int t = threadIdx.x;
    for (int k = t; k < 32 * 33; k += blockDim.x) {
        s[k] = (float)k;
    }
    __syncthreads();
    y[t] = s[(t * stride) % (32 * 33)];
}

// Every thread adds one to counter[0] without an atomic: a data race.
extern "C" __global__ void racy_increment(unsigned int* counter)
{
    counter[0] += 1;
}

// The same with atomicAdd: no race.
extern "C" __global__ void atomic_increment(unsigned int* counter)
{
    atomicAdd(&counter[0], 1u);
}

// Thread 0 writes a shared word that all threads read after a barrier: no
// race.  Without the barrier (barrier == 0) it is one.
extern "C" __global__ void shared_publish(int barrier, float* y)
{
    __shared__ float value;
    if (threadIdx.x == 0) {
        value = 42.0f;
    }
    if (barrier) {
        __syncthreads();
    }
    y[threadIdx.x] = value;
}

// Lanes below 8 take one branch, the others another: a divergent warp.
extern "C" __global__ void diverge(float* y)
{
    int t = threadIdx.x;
    if (t < 8) {
        y[t] = 1.0f;
    } else {
        y[t] = 2.0f;
    }
}
