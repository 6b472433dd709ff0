// Step 15 (beyond the report): the matrix products on tensor cores (wmma, fp16 in, fp32 sums).
//
// What changed from step 14: each layer is still a small matrix product over
// a tile of vectors, out[64 x TILE] = W[64 x K] * in[K x TILE], but a warp now
// hands 16 x 16 x 16 pieces of it to the tensor cores (nvcuda::wmma,
// m16n16k16: half inputs, float accumulators): one mma_sync, a warp-wide
// call, does 4,096 multiply-adds (it compiles to two HMMA.16816 tensor-core
// instructions on sm_80/sm_90, 2,048 each). The inputs are converted to half as they are copied into
// shared memory; the accumulators pass through ReLU in registers and are
// stored as half for the next layer (the output layer's, as float, to a small
// per-warp scratch from which the 4 real rows are written out).
// Shapes must be multiples of 16, so layer 1's 72 inputs are padded to 80
// (the host passes W1 as 64 x 80 with zero columns; rows 72-79 of the input
// tile are zero) and layer 3's 4 outputs to 16 (W3 as 16 x 64, zero rows).
// Padded or not, the tensor cores have arithmetic to spare.
//
// Each row of a shared-memory tile is padded by 8 halves (16 bytes). A
// fragment load is served 8 rows (16 bytes each) at a time; with the padding
// those 8 rows start in 8 different groups of 4 banks (a 68-word pitch puts
// row r at bank 4r mod 32), so each phase covers all 32 banks once: no
// conflict. (Rows r and r + 8 do share a start bank, but they are read in
// different phases.)
// The next tile's inputs are loaded into registers while this one computes
// (step 11's idea), because this kernel is meant to be limited by memory.
//
// Why it should be faster: tensor cores do fp16 matrix arithmetic ~15x
// faster than the fp32 FMA units, so the arithmetic floor (1.8 ms at the
// FP32 rate) drops far below the memory floor: the kernel only has to read 72
// floats and write 4 per vector. Prediction: 0.6-0.7 ms on the large case,
// 80-90% of the measured copy bandwidth.
#include <mma.h>
#include <cuda_fp16.h>
using namespace nvcuda;

#define IN 72
#define K1 80                        // layer 1's inputs, padded to a multiple of 16
#define HID 64
#define OUT 4
#define M3 16                        // layer 3's outputs, padded to one 16-row tile
#define TILE 128                     // vectors per tile
#define THREADS 256
#define WARPS (THREADS / 32)
#define FRAG 16                      // wmma tile edge
#define X_LD (TILE + 8)              // half row strides, padded by 16 bytes
#define W1_LD (K1 + 8)
#define W_LD (HID + 8)
#define F4_PER_ROW (TILE / 4)
#define FILL_PER_THREAD (IN * F4_PER_ROW / THREADS)   // 9 float4 per thread per tile

// Shared memory layout, in bytes (every offset a multiple of 32, as wmma needs).
#define W1S_BYTES (HID * W1_LD * 2)
#define W2S_BYTES (HID * W_LD * 2)
#define W3S_BYTES (M3 * W_LD * 2)
#define XS_BYTES (K1 * X_LD * 2)
#define HS_BYTES (HID * X_LD * 2)
#define SCRATCH_BYTES (WARPS * FRAG * FRAG * 4)
#define SMEM_BYTES (W1S_BYTES + W2S_BYTES + W3S_BYTES + XS_BYTES + HS_BYTES + SCRATCH_BYTES)

typedef wmma::fragment<wmma::matrix_a, FRAG, FRAG, FRAG, __half, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, FRAG, FRAG, FRAG, __half, wmma::row_major> FragB;
typedef wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, float> FragC;
typedef wmma::fragment<wmma::accumulator, FRAG, FRAG, FRAG, __half> FragH;

// This thread's 9 float4 of the tile starting at vector `first`: float4 f -> feature
// f / 32, vectors 4*(f % 32) .. +3. Zeros past N; scalar loads when rows are not 16-byte aligned.
__device__ __forceinline__ void load_tile(const float* __restrict__ X, int N, int first, int tid,
                                          float4 next[FILL_PER_THREAD])
{
    bool aligned = (N % 4) == 0;
#pragma unroll
    for (int i = 0; i < FILL_PER_THREAD; ++i) {
        int f = tid + i * THREADS;
        int k = f / F4_PER_ROW, c = first + 4 * (f % F4_PER_ROW);
        const float* src = X + (size_t)k * N + c;
        if (aligned && c + 3 < N) {
            next[i] = reinterpret_cast<const float4*>(src)[0];
        } else {
            next[i].x = c < N ? src[0] : 0.0f;
            next[i].y = c + 1 < N ? src[1] : 0.0f;
            next[i].z = c + 2 < N ? src[2] : 0.0f;
            next[i].w = c + 3 < N ? src[3] : 0.0f;
        }
    }
}

// The accumulator, through ReLU, stored as half into a tile with row stride ld. The float
// accumulator is copied element by element into a half accumulator fragment: this relies on
// the two fragment types placing element i at the same (row, col), which holds for the
// mma.sync layouts wmma uses on sm_80 and sm_90 (the API does not promise it; the full-size
// check on the GPU would catch a mismatch). It saves a round trip through shared memory.
__device__ __forceinline__ void store_relu(const FragC& acc, __half* dst, int ld)
{
    FragH h;
#pragma unroll
    for (int i = 0; i < acc.num_elements; ++i) h.x[i] = __float2half(fmaxf(acc.x[i], 0.0f));
    wmma::store_matrix_sync(dst, h, ld, wmma::mem_row_major);
}

// A hidden layer: out[64 x TILE] = relu(W[64 x K] in[K x TILE]). Warp w computes unit rows
// 16*(w%4) .. +15 for vector columns 64*(w/4) .. +63: 4 accumulator tiles.
template <int K>
__device__ __forceinline__ void dense_relu(const __half* W, int w_ld, const __half* in, __half* out, int warp)
{
    int row = FRAG * (warp % 4), col0 = 4 * FRAG * (warp / 4);
    FragC acc[4];
#pragma unroll
    for (int f = 0; f < 4; ++f) wmma::fill_fragment(acc[f], 0.0f);
#pragma unroll
    for (int kk = 0; kk < K; kk += FRAG) {
        FragA a;
        wmma::load_matrix_sync(a, W + row * w_ld + kk, w_ld);
#pragma unroll
        for (int f = 0; f < 4; ++f) {
            FragB b;
            wmma::load_matrix_sync(b, in + kk * X_LD + col0 + f * FRAG, X_LD);
            wmma::mma_sync(acc[f], a, b, acc[f]);
        }
    }
#pragma unroll
    for (int f = 0; f < 4; ++f) store_relu(acc[f], out + row * X_LD + col0 + f * FRAG, X_LD);
}

// Dynamic shared memory: SMEM_BYTES (70,144 bytes).
extern "C" __global__ void __launch_bounds__(THREADS, 2)
tensor_cores(int N, const float* __restrict__ X, const __half* __restrict__ W1p,
             const __half* __restrict__ W2, const __half* __restrict__ W3p, float* __restrict__ Y)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __half* w1s = reinterpret_cast<__half*>(smem);
    __half* w2s = reinterpret_cast<__half*>(smem + W1S_BYTES);
    __half* w3s = reinterpret_cast<__half*>(smem + W1S_BYTES + W2S_BYTES);
    __half* xs = reinterpret_cast<__half*>(smem + W1S_BYTES + W2S_BYTES + W3S_BYTES);
    __half* hs = reinterpret_cast<__half*>(smem + W1S_BYTES + W2S_BYTES + W3S_BYTES + XS_BYTES);
    float* scratch = reinterpret_cast<float*>(smem + SMEM_BYTES - SCRATCH_BYTES);

    int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    float* my_scratch = scratch + warp * FRAG * FRAG;

    // Weights into padded rows; the input tile's padding rows 72..79 are zero once and for all.
    for (int i = tid; i < HID * K1; i += THREADS) w1s[(i / K1) * W1_LD + i % K1] = W1p[i];
    for (int i = tid; i < HID * HID; i += THREADS) w2s[(i / HID) * W_LD + i % HID] = W2[i];
    for (int i = tid; i < M3 * HID; i += THREADS) w3s[(i / HID) * W_LD + i % HID] = W3p[i];
    for (int i = tid; i < (K1 - IN) * X_LD; i += THREADS) xs[IN * X_LD + i] = __float2half(0.0f);

    int tiles = (N + TILE - 1) / TILE;
    float4 next[FILL_PER_THREAD];
    load_tile(X, N, blockIdx.x * TILE, tid, next);
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int first = tile * TILE;
        // The previous tile's last reads of xs (layer 3's h2) ended at its final barrier.
#pragma unroll
        for (int i = 0; i < FILL_PER_THREAD; ++i) {
            int f = tid + i * THREADS;
            __half2* dst = reinterpret_cast<__half2*>(xs + (f / F4_PER_ROW) * X_LD + 4 * (f % F4_PER_ROW));
            dst[0] = __floats2half2_rn(next[i].x, next[i].y);
            dst[1] = __floats2half2_rn(next[i].z, next[i].w);
        }
        __syncthreads();
        load_tile(X, N, (tile + gridDim.x) * TILE, tid, next);   // in flight during the layers

        dense_relu<K1>(w1s, W1_LD, xs, hs, warp);
        __syncthreads();
        dense_relu<HID>(w2s, W_LD, hs, xs, warp);   // h2 overwrites xs
        __syncthreads();

        // Output layer: warp w computes the 16 (padded) outputs of vectors 16w .. 16w+15.
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < HID; kk += FRAG) {
            FragA a;
            FragB b;
            wmma::load_matrix_sync(a, w3s + kk, W_LD);
            wmma::load_matrix_sync(b, xs + kk * X_LD + warp * FRAG, X_LD);
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(my_scratch, acc, FRAG, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < OUT * FRAG; e += 32) {    // only rows 0..3 are real outputs
            int o = e / FRAG, v = first + warp * FRAG + e % FRAG;
            if (v < N) Y[(size_t)o * N + v] = my_scratch[e];
        }
        __syncthreads();                                  // before the next fill overwrites xs
    }
}
