// Constant memory: one scale factor per channel, read by every element of it.
//
// A __constant__ array lives in device memory (64 KB in all), is read-only in a
// kernel, and is written by the host before the launch (cudaMemcpyToSymbol; here
// Module.set_constant). Its reads go through each SM's constant cache, which serves
// a warp one address at a time: "a request is then split into as many separate
// requests as there are different memory addresses in the initial request"
// (CUDA C++ Programming Guide, "Device Memory Accesses"). One address for the whole
// warp is a broadcast; 32 different ones take 32 turns.

// 1,024 floats, 4 KB: the kernels read only the first C.
#define MAX_CHANNELS 1024
__constant__ float scale[MAX_CHANNELS];

// Channels first: element i of an (N, C, HW) tensor is in channel (i / HW) % C.
// With HW a multiple of 32, the 32 lanes of a warp are in one channel: one address.
extern "C" __global__ void scale_channels_first(int n, int C, int HW, const float* __restrict__ x,
                                                float* __restrict__ y)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * scale[(i / HW) % C];
}

// Channels last: element i of an (N, HW, C) tensor is in channel i % C. Consecutive
// lanes are in consecutive channels: with C >= 32, 32 addresses per warp.
extern "C" __global__ void scale_channels_last(int n, int C, const float* __restrict__ x,
                                               float* __restrict__ y)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * scale[i % C];
}
