// Step 7: every weight lives in registers; two threads share each hidden unit.
//
// What changed from step 6: W1 joins W2 and W3 in registers, and shared
// memory holds only activations. A whole row of W1 and W2 per thread would be
// 136 registers, too many to keep enough warps on an SM, so each hidden unit
// is split between two neighbouring threads: thread (j, half) holds half of
// row j of W1 (36 floats) and of W2 (32 floats) and computes that half of the
// dot product; one __shfl_xor_sync(..., 1) adds the two halves. A vector now
// takes 128 threads, so a block of 256 handles 2 vectors per iteration.
// Output o is one warp's job: lane l holds W3[o][2l], W3[o][2l+1], and a
// 5-step shuffle tree (offsets 16 .. 1) sums the 32 partial products.
// Activations are read from shared memory 4 at a time (float4: the half-rows
// start at float 36, 144 bytes, a multiple of 16) -- and since every thread of
// a warp reads the same vector, each read is a broadcast.
//
// Why it should be faster: no weight is ever read from memory in the loop, so
// the bank-conflicted W1s reads are gone and layer 1 does one shared load per
// 4 multiply-adds instead of two per multiply-add.
// Prediction: 1.5-2x over step 6 (the report: 1.4x on the large case).

#define IN 72
#define HID 64
#define OUT 4
#define VECTORS_PER_GROUP 2                  // 2 x 128 = 256 threads
#define THREADS_PER_VECTOR (2 * HID)         // two threads per hidden unit
#define IN_HALF (IN / 2)                     // 36 weights of W1 per thread
#define HID_HALF (HID / 2)                   // 32 weights of W2 per thread

extern "C" __global__ void __launch_bounds__(256)
whole_net_registers(int N, const float* __restrict__ X, const float* __restrict__ W1,
                    const float* __restrict__ W2, const float* __restrict__ W3, float* __restrict__ Y)
{
    __shared__ __align__(16) float xs[VECTORS_PER_GROUP][IN];
    __shared__ __align__(16) float h1s[VECTORS_PER_GROUP][HID];
    __shared__ __align__(16) float h2s[VECTORS_PER_GROUP][HID];

    int tid = threadIdx.x;
    int local = tid / THREADS_PER_VECTOR;        // which vector of the group
    int r = tid % THREADS_PER_VECTOR;
    int j = r / 2, half = r % 2;                 // hidden unit, and which half of its row
    int o = r / 32, lane = r % 32;               // output layer: warp o of the vector

    float w1[IN_HALF], w2[HID_HALF], w3[2];
#pragma unroll
    for (int k = 0; k < IN_HALF; ++k) w1[k] = W1[j * IN + half * IN_HALF + k];
#pragma unroll
    for (int k = 0; k < HID_HALF; ++k) w2[k] = W2[j * HID + half * HID_HALF + k];
    w3[0] = W3[o * HID + 2 * lane];
    w3[1] = W3[o * HID + 2 * lane + 1];

    int groups = (N + VECTORS_PER_GROUP - 1) / VECTORS_PER_GROUP;
    for (int group = blockIdx.x; group < groups; group += gridDim.x) {
        int first = group * VECTORS_PER_GROUP;
        int v = first + local;
        if (tid < VECTORS_PER_GROUP * IN) {
            int k = tid / VECTORS_PER_GROUP, c = tid % VECTORS_PER_GROUP;
            xs[c][k] = (first + c < N) ? X[(size_t)k * N + first + c] : 0.0f;
        }
        __syncthreads();

        const float4* x4 = reinterpret_cast<const float4*>(&xs[local][half * IN_HALF]);
        float acc = 0.0f;
#pragma unroll
        for (int q = 0; q < IN_HALF / 4; ++q) {
            float4 a = x4[q];
            acc += w1[4 * q] * a.x + w1[4 * q + 1] * a.y + w1[4 * q + 2] * a.z + w1[4 * q + 3] * a.w;
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);   // add the other half of row j
        if (half == 0) h1s[local][j] = fmaxf(acc, 0.0f);
        __syncthreads();

        const float4* h4 = reinterpret_cast<const float4*>(&h1s[local][half * HID_HALF]);
        acc = 0.0f;
#pragma unroll
        for (int q = 0; q < HID_HALF / 4; ++q) {
            float4 a = h4[q];
            acc += w2[4 * q] * a.x + w2[4 * q + 1] * a.y + w2[4 * q + 2] * a.z + w2[4 * q + 3] * a.w;
        }
        acc += __shfl_xor_sync(0xffffffffu, acc, 1);
        if (half == 0) h2s[local][j] = fmaxf(acc, 0.0f);
        __syncthreads();

        float2 h = reinterpret_cast<const float2*>(&h2s[local][0])[lane];
        acc = w3[0] * h.x + w3[1] * h.y;
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
        if (lane == 0 && v < N) Y[(size_t)o * N + v] = acc;
    }
}
