// Step 8: step 7 in half precision: half2 weights, half activations, HFMA2.
//
// What changed from step 7: the weights arrive as __half (the host converts
// them once) and are held as __half2 pairs, so each register carries two
// weights; the inputs are converted to half as they are loaded into shared
// memory; the hidden activations are stored as half. A dot product runs on
// __hfma2, which does two multiply-adds per instruction, accumulating in
// half; the two lanes of the half2 sum and the shuffle that joins the two
// half-rows are done in float, as are the output layer and Y.
//
// Why it should be faster: half the registers for the weights (35 instead of
// 70), half the bytes of shared memory per activation (a 4-halves load brings
// 4 activations in 8 bytes), and twice the multiply-adds per instruction.
// The cost is accuracy: a half has an 11-bit significand, so we expect a
// relative error near 1e-3 against the float64 reference (tolerance 1e-2),
// where float32 steps sit near 1e-7.
// Prediction: 1.3-1.6x over step 7 (the report: 1.4x on the large case).
#include <cuda_fp16.h>

#define IN 72
#define HID 64
#define OUT 4
#define VECTORS_PER_GROUP 2                  // 2 x 128 = 256 threads
#define THREADS_PER_VECTOR (2 * HID)
#define IN_HALF (IN / 2)                     // 36 weights of W1 per thread: 18 half2
#define HID_HALF (HID / 2)                   // 32 weights of W2 per thread: 16 half2

struct __align__(8) half4 { __half2 lo, hi; };   // 4 activations in one 8-byte load

extern "C" __global__ void __launch_bounds__(256)
half_precision(int N, const float* __restrict__ X, const __half* __restrict__ W1,
               const __half* __restrict__ W2, const __half* __restrict__ W3, float* __restrict__ Y)
{
    // Half-rows start at element 36 (72 bytes) and 32: both multiples of 8 bytes.
    __shared__ __align__(16) __half xs[VECTORS_PER_GROUP][IN];
    __shared__ __align__(16) __half h1s[VECTORS_PER_GROUP][HID];
    __shared__ __align__(16) __half h2s[VECTORS_PER_GROUP][HID];

    int tid = threadIdx.x;
    int local = tid / THREADS_PER_VECTOR;
    int r = tid % THREADS_PER_VECTOR;
    int j = r / 2, half = r % 2;
    int o = r / 32, lane = r % 32;

    __half2 w1[IN_HALF / 2], w2[HID_HALF / 2], w3;
#pragma unroll
    for (int k = 0; k < IN_HALF / 2; ++k) {
        const __half* row = W1 + j * IN + half * IN_HALF;
        w1[k] = __halves2half2(row[2 * k], row[2 * k + 1]);
    }
#pragma unroll
    for (int k = 0; k < HID_HALF / 2; ++k) {
        const __half* row = W2 + j * HID + half * HID_HALF;
        w2[k] = __halves2half2(row[2 * k], row[2 * k + 1]);
    }
    w3 = __halves2half2(W3[o * HID + 2 * lane], W3[o * HID + 2 * lane + 1]);

    int groups = (N + VECTORS_PER_GROUP - 1) / VECTORS_PER_GROUP;
    for (int group = blockIdx.x; group < groups; group += gridDim.x) {
        int first = group * VECTORS_PER_GROUP;
        int v = first + local;
        if (tid < VECTORS_PER_GROUP * IN) {
            int k = tid / VECTORS_PER_GROUP, c = tid % VECTORS_PER_GROUP;
            xs[c][k] = __float2half((first + c < N) ? X[(size_t)k * N + first + c] : 0.0f);
        }
        __syncthreads();

        const half4* x4 = reinterpret_cast<const half4*>(&xs[local][half * IN_HALF]);
        __half2 acc2 = __float2half2_rn(0.0f);
#pragma unroll
        for (int q = 0; q < IN_HALF / 4; ++q) {
            half4 a = x4[q];
            acc2 = __hfma2(w1[2 * q], a.lo, acc2);
            acc2 = __hfma2(w1[2 * q + 1], a.hi, acc2);
        }
        float acc = __low2float(acc2) + __high2float(acc2);
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        if (half == 0) h1s[local][j] = __float2half(fmaxf(acc, 0.0f));
        __syncthreads();

        const half4* h4 = reinterpret_cast<const half4*>(&h1s[local][half * HID_HALF]);
        acc2 = __float2half2_rn(0.0f);
#pragma unroll
        for (int q = 0; q < HID_HALF / 4; ++q) {
            half4 a = h4[q];
            acc2 = __hfma2(w2[2 * q], a.lo, acc2);
            acc2 = __hfma2(w2[2 * q + 1], a.hi, acc2);
        }
        acc = __low2float(acc2) + __high2float(acc2);
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        if (half == 0) h2s[local][j] = __float2half(fmaxf(acc, 0.0f));
        __syncthreads();

        float2 h = __half22float2(reinterpret_cast<const __half2*>(&h2s[local][0])[lane]);
        float2 w = __half22float2(w3);
        acc = w.x * h.x + w.y * h.y;
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
        if (lane == 0 && v < N) Y[(size_t)o * N + v] = acc;
    }
}
