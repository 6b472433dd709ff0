// Step 14 (beyond the report): fp32, each thread computes an 8 x 8 tile of a layer.
//
// What changed: the organisation, back to the matrix product of step 1 but
// done the way fast matrix-multiply kernels do it. Steps 7-13 gave each thread
// a piece of a weight row and one vector at a time: every multiply-add needed
// its own activation from shared memory, so shared-memory loads -- not
// arithmetic -- set the pace. Here a block takes a tile of TILE vectors and
// computes each layer as a small matrix product, out[64 x TILE] = W[64 x K] *
// in[K x TILE], with every thread owning an 8 (units) x VPT (vectors) block of
// the output in registers. For each k a thread loads 8 weights (two float4,
// the same for the 16 threads of a unit group: a broadcast) and VPT
// activations (float4s), and does 8 x VPT multiply-adds with them: 64 FMAs
// per 4 shared loads at VPT = 8. Arithmetic, not loads, is now the limit.
//
// The network stays fused: the block's shared memory holds the transposed
// weights (35 KB, copied once per block), the input tile xs[72][TILE] and the
// hidden tile hs[64][TILE]; layer 2 writes its result over xs, which layer 1
// no longer needs. The output layer is one thread per vector computing all 4
// outputs, the 4 weights of each k read as one float4 (a broadcast). Inputs
// are read as float4 (16-byte loads) when N is a multiple of 4, which keeps
// every row of X 16-byte aligned. Blocks are persistent (as many as fit on the
// GPU at once, looping over tiles).
//
// Two kernels, one per size, from one template (TILE vectors, THREADS threads,
// PREFETCH): tiled_fp32_large takes 128-vector tiles (8 x 8 outputs per
// thread) and loads the next tile's inputs into registers while this one
// computes, as step 11 did; tiled_fp32_small takes 64-vector tiles (8 x 4 per
// thread), so the small case's 12,800 vectors make 200 tiles instead of 100
// and reach more of the GPU's 132 SMs.
//
// Prediction: 91.8 GFLOP at ~75% of the H100's datasheet FP32 peak (66.9
// TFLOP/s, gpulab.datasheet), i.e. ~50 TFLOP/s: about 1.8-1.9 ms on the large
// case, 2-3x faster than step 13. (That is ~95% of the rate cuBLAS's SGEMM
// measured, ~51 TFLOP/s: ambitious. 75% of the measured rate would be 2.4 ms.)
// On the small case, 100-200 tiles leave part of the GPU idle: ~10 us.

#define IN 72
#define HID 64
#define OUT 4
#define UNITS_PER_THREAD 8           // 64 units = 8 unit groups of 8
#define UNIT_GROUPS (HID / UNITS_PER_THREAD)

// Shared memory, in floats: the weights, then xs (72 x TILE), then hs (64 x TILE).
#define W1T_OFFSET 0
#define W2T_OFFSET (W1T_OFFSET + IN * HID)
#define W3T_OFFSET (W2T_OFFSET + HID * HID)
#define XS_OFFSET (W3T_OFFSET + HID * OUT)

// Copy n floats from global to shared memory, 16 bytes at a time (n is a multiple of 4).
template <int THREADS>
__device__ __forceinline__ void copy_weights(float* dst, const float* __restrict__ src, int n, int tid)
{
    for (int i = tid; i < n / 4; i += THREADS)
        reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(src)[i];
}

// This thread's float4s of the input tile starting at vector `first`: float4 f -> feature
// f / (TILE/4), vectors 4*(f % (TILE/4)) .. +3. Zeros past N; scalar loads if rows are unaligned.
template <int TILE, int THREADS>
__device__ __forceinline__ void load_tile(const float* __restrict__ X, int N, int first, int tid,
                                          float4 in[IN * TILE / 4 / THREADS])
{
    constexpr int F4_PER_ROW = TILE / 4;
    bool aligned = (N % 4) == 0;
#pragma unroll
    for (int i = 0; i < IN * F4_PER_ROW / THREADS; ++i) {
        int f = tid + i * THREADS;
        int c = first + 4 * (f % F4_PER_ROW);
        const float* src = X + (size_t)(f / F4_PER_ROW) * N + c;
        if (aligned && c + 3 < N) {
            in[i] = reinterpret_cast<const float4*>(src)[0];
        } else {
            in[i].x = c < N ? src[0] : 0.0f;
            in[i].y = c + 1 < N ? src[1] : 0.0f;
            in[i].z = c + 2 < N ? src[2] : 0.0f;
            in[i].w = c + 3 < N ? src[3] : 0.0f;
        }
    }
}

template <int TILE, int THREADS>
__device__ __forceinline__ void store_tile(float* xs, int tid, const float4 in[IN * TILE / 4 / THREADS])
{
    constexpr int F4_PER_ROW = TILE / 4;
#pragma unroll
    for (int i = 0; i < IN * F4_PER_ROW / THREADS; ++i) {
        int f = tid + i * THREADS;
        reinterpret_cast<float4*>(xs + (f / F4_PER_ROW) * TILE + 4 * (f % F4_PER_ROW))[0] = in[i];
    }
}

// One layer as a matrix product over the tile: out[u][v] = relu(sum_k Wt[k][u] * in[k][v]).
// Thread (ug, vg) owns units 8*ug .. 8*ug+7 and the vectors 4*vg + 4*VG*q + 0..3, q < VPT/4,
// where VG = THREADS / 8 vector groups share the tile.
template <int K, int TILE, int THREADS>
__device__ __forceinline__ void dense_relu(const float* Wt, const float* in, float* out, int ug, int vg)
{
    constexpr int VG = THREADS / UNIT_GROUPS;       // vector groups
    constexpr int VPT = TILE / VG;                  // vectors per thread: 8 or 4
    constexpr int Q = VPT / 4;                      // float4s of vectors per thread
    float acc[UNITS_PER_THREAD][VPT];
#pragma unroll
    for (int u = 0; u < UNITS_PER_THREAD; ++u)
#pragma unroll
        for (int v = 0; v < VPT; ++v) acc[u][v] = 0.0f;

#pragma unroll 4
    for (int k = 0; k < K; ++k) {
        const float4* wrow = reinterpret_cast<const float4*>(Wt + k * HID + UNITS_PER_THREAD * ug);
        float4 w0 = wrow[0], w1 = wrow[1];
        float w[UNITS_PER_THREAD] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
        float a[VPT];
#pragma unroll
        for (int q = 0; q < Q; ++q) {
            float4 a4 = reinterpret_cast<const float4*>(in + k * TILE + 4 * vg + 4 * VG * q)[0];
            a[4 * q] = a4.x; a[4 * q + 1] = a4.y; a[4 * q + 2] = a4.z; a[4 * q + 3] = a4.w;
        }
#pragma unroll
        for (int u = 0; u < UNITS_PER_THREAD; ++u)
#pragma unroll
            for (int v = 0; v < VPT; ++v) acc[u][v] = fmaf(w[u], a[v], acc[u][v]);
    }
#pragma unroll
    for (int u = 0; u < UNITS_PER_THREAD; ++u)
#pragma unroll
        for (int q = 0; q < Q; ++q) {
            float4 r = make_float4(fmaxf(acc[u][4 * q], 0.0f), fmaxf(acc[u][4 * q + 1], 0.0f),
                                   fmaxf(acc[u][4 * q + 2], 0.0f), fmaxf(acc[u][4 * q + 3], 0.0f));
            reinterpret_cast<float4*>(out + (UNITS_PER_THREAD * ug + u) * TILE + 4 * vg + 4 * VG * q)[0] = r;
        }
}

// The whole network over tiles of TILE vectors. With PREFETCH, each thread loads its share of
// the next tile into registers while this tile computes (step 11's idea).
template <int TILE, int THREADS, bool PREFETCH>
__device__ __forceinline__ void forward(int N, const float* __restrict__ X, const float* __restrict__ W1t,
                                        const float* __restrict__ W2t, const float* __restrict__ W3t,
                                        float* __restrict__ Y, float* smem)
{
    constexpr int VG = THREADS / UNIT_GROUPS;
    float* w1s = smem + W1T_OFFSET;
    float* w2s = smem + W2T_OFFSET;
    float* w3s = smem + W3T_OFFSET;     // W3t: 64 x 4, so w3s[k*4 + o] = W3[o][k]
    float* xs = smem + XS_OFFSET;       // 72 x TILE; layer 2's output reuses it
    float* hs = xs + IN * TILE;         // 64 x TILE

    int tid = threadIdx.x;
    int ug = tid / VG, vg = tid % VG;
    copy_weights<THREADS>(w1s, W1t, IN * HID, tid);
    copy_weights<THREADS>(w2s, W2t, HID * HID, tid);
    copy_weights<THREADS>(w3s, W3t, HID * OUT, tid);

    int tiles = (N + TILE - 1) / TILE;
    float4 in[IN * TILE / 4 / THREADS];
    if (PREFETCH) load_tile<TILE, THREADS>(X, N, blockIdx.x * TILE, tid, in);
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int first = tile * TILE;
        if (!PREFETCH) load_tile<TILE, THREADS>(X, N, first, tid, in);
        store_tile<TILE, THREADS>(xs, tid, in);
        __syncthreads();                // xs is full (and, the first time, the weights)
        if (PREFETCH) load_tile<TILE, THREADS>(X, N, first + gridDim.x * TILE, tid, in);
        dense_relu<IN, TILE, THREADS>(w1s, xs, hs, ug, vg);
        __syncthreads();
        dense_relu<HID, TILE, THREADS>(w2s, hs, xs, ug, vg);
        __syncthreads();
        // Output layer: one thread per vector, all 4 outputs (W3t's row k is one float4).
        for (int v = tid; v < TILE; v += THREADS) {
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 16
            for (int k = 0; k < HID; ++k) {
                float4 w = reinterpret_cast<const float4*>(w3s)[k];
                float h = xs[k * TILE + v];
                acc.x = fmaf(w.x, h, acc.x); acc.y = fmaf(w.y, h, acc.y);
                acc.z = fmaf(w.z, h, acc.z); acc.w = fmaf(w.w, h, acc.w);
            }
            if (first + v < N) {
                Y[first + v] = acc.x;
                Y[(size_t)N + first + v] = acc.y;
                Y[(size_t)2 * N + first + v] = acc.z;
                Y[(size_t)3 * N + first + v] = acc.w;
            }
        }
        __syncthreads();                // before the next tile overwrites xs
    }
}

// Dynamic shared memory: (IN*HID + HID*HID + HID*OUT + (IN + HID) * TILE) floats.
extern "C" __global__ void __launch_bounds__(128)
tiled_fp32_large(int N, const float* __restrict__ X, const float* __restrict__ W1t,
                 const float* __restrict__ W2t, const float* __restrict__ W3t, float* __restrict__ Y)
{
    extern __shared__ __align__(16) float smem[];
    forward<128, 128, true>(N, X, W1t, W2t, W3t, Y, smem);   // 8 x 8 per thread, next tile prefetched
}

extern "C" __global__ void __launch_bounds__(128)
tiled_fp32_small(int N, const float* __restrict__ X, const float* __restrict__ W1t,
                 const float* __restrict__ W2t, const float* __restrict__ W3t, float* __restrict__ Y)
{
    extern __shared__ __align__(16) float smem[];
    forward<64, 128, false>(N, X, W1t, W2t, W3t, Y, smem);   // 8 x 4 per thread: twice the blocks
}
