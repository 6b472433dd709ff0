// Step 11 -- step 9 with 16-byte (float4) reads from shared memory.
//
// What changed from step 9: the filter slice is stored with each row padded with zeros to a
// whole number of float4s (S4 = S rounded up to 4: 12 for layer 1, 8 for layer 2, 4 for
// layers 3-5), and the inner loop reads four weights with one float4 load. Where the stride
// U is a multiple of 4 (layer 1), each thread's input window also starts on a 16-byte
// boundary, and the four input values are one float4 load too. The patch rows are padded
// to a multiple of 4 floats so that every row starts 16-byte aligned. (The report used
// float3 for its 3 x 3 filters; a kernel generic over the layer shape pads to float4.)
//
// Launch: as step 9, with (R*S4 + PH*PW)*4 bytes of dynamic shared memory,
// PH = (BY-1)*U + R, PW = ((BX-1)*U + S4) rounded up to a multiple of 4.
//
// Prediction: layer 1 gains most (4x fewer shared loads for both operands, and step 9's
// stride-4 scalar reads had 4-way bank conflicts): about 2x on layer 1. Layers 3-5 pad
// 3 -> 4 and do a third more multiply-adds for fewer load instructions: roughly even.
//
// From direct_conv.cuh: fill_weight_rows4, this step's padded copy of the filter rows (written
// there because steps 12 and 13 reuse it), fill_patch (step 9's patch) and sum_channel_partials
// (step 7's reduction).
#include "direct_conv.cuh"
extern "C" __global__ void conv_channel_partials_vec(const float* x, const float* w, float* partial,
                                                     int N, int C, int H, int W, int M, int R, int S,
                                                     int U, int P, int E, int F)
{
    extern __shared__ float4 smem4[];           // float4: keeps the start 16-byte aligned
    const int S4 = (S + 3) & ~3;                // filter row padded to whole float4s
    const int PH = (blockDim.y - 1) * U + R;
    const int PW = ((blockDim.x - 1) * U + S4 + 3) & ~3;   // row pitch: whole float4s
    float* w_s = (float*)smem4;                 // w[m, c], R rows of S4 floats
    float* in_s = w_s + R * S4;                 // R*S4 is a multiple of 4: still aligned
    const int m = blockIdx.x;
    const int n = blockIdx.y;
    const int c = blockIdx.z;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int threads = blockDim.x * blockDim.y;
    const float* wc = w + ((size_t)m * C + c) * R * S;
    fill_weight_rows4(w_s, wc, R, S, S4, tid, threads);   // zero weights beyond S
    const float* xc = x + ((size_t)n * C + c) * H * W;
    float* out = partial + (((size_t)n * C + c) * M + m) * E * F;
    const bool aligned_input = (U % 4) == 0;   // each window starts on a float4 boundary
    for (int e0 = 0; e0 < E; e0 += blockDim.y) {
        for (int f0 = 0; f0 < F; f0 += blockDim.x) {
            __syncthreads();
            fill_patch(in_s, xc, e0, f0, PH, PW, H, W, U, P, tid, threads);
            __syncthreads();
            const int e = e0 + threadIdx.y;
            const int f = f0 + threadIdx.x;
            if (e < E && f < F) {
                const float* patch = in_s + threadIdx.y * U * PW + threadIdx.x * U;
                float acc = 0.0f;
                for (int r = 0; r < R; ++r) {
                    const float4* w4 = (const float4*)(w_s + r * S4);
                    const float* in_row = patch + r * PW;
                    for (int q = 0; q < S4 / 4; ++q) {
                        const float4 wv = w4[q];
                        float4 iv;
                        if (aligned_input) {
                            iv = ((const float4*)in_row)[q];
                        } else {
                            iv = make_float4(in_row[4 * q], in_row[4 * q + 1], in_row[4 * q + 2],
                                             in_row[4 * q + 3]);
                        }
                        acc += iv.x * wv.x + iv.y * wv.y + iv.z * wv.z + iv.w * wv.w;
                    }
                }
                out[e * F + f] = acc;
            }
        }
    }
}

// As in step 7.
extern "C" __global__ void reduce_channels(const float* partial, float* y, int N, int C, int M, int EF)
{
    sum_channel_partials(partial, y, N, C, M, EF);
}
