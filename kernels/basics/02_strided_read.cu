// Basics 2: how a warp's addresses become memory traffic.
//
// Thread i reads in[i * stride] and writes it to out[i]. With stride 1 the 32
// threads of a warp read 32 consecutive floats: 128 bytes, four 32-byte
// sectors, every byte used. With stride 2 the same 32 floats are spread over
// 256 bytes, eight sectors, and half of every sector is wasted; from stride 8
// on, each float sits in a sector of its own: 32 sectors for 128 useful bytes.
// Device memory and the caches move whole sectors, so a strided warp pays for
// bytes it never uses. (The CPU backend runs this kernel for correctness; the
// chapter counts the sectors from the addresses.)
extern "C" __global__ void strided_read(int n, int stride, const float* __restrict__ in, float* __restrict__ out)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[(size_t)i * stride];
}
