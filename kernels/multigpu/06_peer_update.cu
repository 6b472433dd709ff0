// Step 6 of the data-parallel chapter: the all-reduce and the SGD update in
// one kernel, each GPU reading the other's gradient over NVLink.
//
// What changed from steps 2-5 (an NCCL all-reduce of the gradient, then
// 02_update_and_zero.cu's pass): nothing is sent. With peer access (the two
// processes map each other's gradient buffer through CUDA IPC handles), a
// kernel on each GPU reads its own gradient and the peer's for a range of the
// flat buffer and writes w -= lr * (g_own + g_peer) to its own copy. Both
// GPUs add the same two floats (addition is commutative, bit for bit), so the
// copies stay bit-identical. This is the "one-shot" custom all-reduce that
// vLLM and TensorRT-LLM run for small and medium messages between GPUs of one
// NVLink domain; here the update rides in the same pass.
//
// Why it can be faster than NCCL then the update: NCCL's ring on two GPUs
// moves the same bytes over NVLink (each GPU receives half the buffer in the
// reduce-scatter and half in the all-gather), but in two phases, through its
// own staging buffers and kernels, with a separate update pass after it;
// here each float crosses NVLink once, is used where it lands, and the
// update's read of g and write of w happen in the same pass. Each launch is an
// ordinary kernel: it is captured into a CUDA graph like any other, with no
// NCCL launch or proxy thread behind it, so a second bucket costs about one
// kernel's start and one NVLink round trip instead of a second collective.
//
// The ordering across GPUs is done by flags in peer memory, per block (as
// vLLM's kernels do): block b of the launch on each GPU covers the same
// floats on both. Before reading, block b writes "ready, call e" into the
// peer's flag and waits until the peer's block b has written the same into
// its own (the launches before it on the stream have finished the gradient:
// stream order). After reading, it writes "done, call e" and waits for the
// peer's "done" before zeroing its own gradient for the next step's
// scatter-add: the peer may still be reading it until then. e counts this
// block's calls in device memory (epochs), so the same kernel replays in a
// CUDA graph without new arguments. Each GPU's block b waits only for the
// other's block b. The block scheduler starts a grid's blocks in index order
// (what GPUs do in practice; CUDA does not promise it), so the blocks running
// on both GPUs always include the lowest waiting one, which then finishes and
// frees its SM; the plain step's launch (one block per SM) is resident whole.
//
// sync = 0 (the CPU backend, where both replicas run in one process one after
// the other): no flags and no zeroing; the caller zeroes both gradients after
// both replicas' launches.

#define PEER_MAX_BLOCKS 1024      // flag slots per call site and phase
#define PEER_UNROLL 4             // float4 loads in flight per thread from the peer

__device__ __forceinline__ void peer_wait(unsigned int* mine, unsigned int* theirs, unsigned int e) {
    if (threadIdx.x == 0) {
        __threadfence_system();                                  // this block's earlier accesses first
        *(volatile unsigned int*)theirs = e;
        while (*(volatile unsigned int*)mine < e) {
        }
        __threadfence_system();
    }
    __syncthreads();
}

// w[i] -= lr * (g[i] + peer_g[i]) over [off, off + n): float4 where aligned, PEER_UNROLL loads in flight.
__device__ __forceinline__ void peer_range(long off, long n, float lr, float* __restrict__ w,
                                           const float* __restrict__ g, const float* __restrict__ peer_g) {
    long vec = 0;
    if (((off & 3) == 0) && ((((unsigned long long)w | (unsigned long long)g | (unsigned long long)peer_g) & 15) == 0)) {
        vec = n / 4;
        float4* w4 = reinterpret_cast<float4*>(w + off);
        const float4* g4 = reinterpret_cast<const float4*>(g + off);
        const float4* p4 = reinterpret_cast<const float4*>(peer_g + off);
        long step = (long)blockDim.x * PEER_UNROLL;
        for (long base = threadIdx.x; base < vec; base += step) {
            float4 p[PEER_UNROLL];
#pragma unroll
            for (int u = 0; u < PEER_UNROLL; ++u) {
                long i = base + (long)u * blockDim.x;
                if (i < vec) p[u] = p4[i];
            }
#pragma unroll
            for (int u = 0; u < PEER_UNROLL; ++u) {
                long i = base + (long)u * blockDim.x;
                if (i < vec) {
                    float4 a = w4[i], d = g4[i];
                    a.x -= lr * (d.x + p[u].x); a.y -= lr * (d.y + p[u].y);
                    a.z -= lr * (d.z + p[u].z); a.w -= lr * (d.w + p[u].w);
                    w4[i] = a;
                }
            }
        }
        vec *= 4;
    }
    for (long i = vec + threadIdx.x; i < n; i += blockDim.x)
        w[off + i] -= lr * (g[off + i] + peer_g[off + i]);
}

__device__ __forceinline__ void zero_range(long off, long n, float* __restrict__ g) {
    for (long i = threadIdx.x; i < n; i += blockDim.x) g[off + i] = 0.0f;
}

// Block b's share of a range of n floats: chunks of a multiple of 4 floats, so that every chunk of
// a range starting on a multiple of 4 starts on one too (float4 loads).
__device__ __forceinline__ void chunk(long n, long* lo, long* len) {
    long per = ((n + gridDim.x - 1) / gridDim.x + 3) & ~3L;
    long a = (long)blockIdx.x * per;
    *lo = a < n ? a : n;
    long b = a + per < n ? a + per : n;
    *len = b - *lo;
}

// Two ranges of the flat buffers, [off0, off0 + n0) and [off1, off1 + n1) (n1 may be 0): the last
// bucket of W1 and the small parameters, which are not contiguous, go in one launch.
// flags: this GPU's flags (the peer writes them), peer_flags: the peer's (this GPU writes them),
// each 2 phases x PEER_MAX_BLOCKS per slot; epochs: this GPU's call counts, PEER_MAX_BLOCKS per slot.
extern "C" __global__ void peer_sgd_update(int n0, int off0, int n1, int off1, float lr, float* __restrict__ w,
                                           float* __restrict__ g, const float* __restrict__ peer_g,
                                           unsigned int* flags, unsigned int* peer_flags, unsigned int* epochs,
                                           int slot, int sync) {
    long lo0, len0, lo1, len1;
    chunk(n0, &lo0, &len0);
    chunk(n1, &lo1, &len1);
    unsigned int e = 0;
    long at = (long)slot * 2 * PEER_MAX_BLOCKS + blockIdx.x;
    if (sync) {
        e = epochs[(long)slot * PEER_MAX_BLOCKS + blockIdx.x] + 1;     // read by thread 0 only
        peer_wait(flags + at, peer_flags + at, e);                      // the peer's gradient is complete
    }
    peer_range(off0 + lo0, len0, lr, w, g, peer_g);
    peer_range(off1 + lo1, len1, lr, w, g, peer_g);
    if (!sync)
        return;
    __syncthreads();                                                    // every read of the peer has returned
    peer_wait(flags + at + PEER_MAX_BLOCKS, peer_flags + at + PEER_MAX_BLOCKS, e);   // the peer is done with ours
    zero_range(off0 + lo0, len0, g);
    zero_range(off1 + lo1, len1, g);
    if (threadIdx.x == 0)
        epochs[(long)slot * PEER_MAX_BLOCKS + blockIdx.x] = e;
}
