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
// This step's kernel body, channel_partials4, is in direct_conv.cuh: step 12 runs it unchanged
// on __half data. It uses fill_weight_rows4, this step's padded copy of the filter rows (there
// too, because steps 12 and 13 reuse it), and fill_patch (step 9's patch); the reduction is
// step 7's sum_channel_partials.
#include "direct_conv.cuh"
extern "C" __global__ void conv_channel_partials_vec(const float* x, const float* w, float* partial,
                                                     int N, int C, int H, int W, int M, int R, int S,
                                                     int U, int P, int E, int F)
{
    extern __shared__ float4 smem4[];           // float4: keeps the start 16-byte aligned
    channel_partials4(x, w, partial, N, C, H, W, M, R, S, U, P, E, F, smem4);
}

// As in step 7.
extern "C" __global__ void reduce_channels(const float* partial, float* y, int N, int C, int M, int EF)
{
    sum_channel_partials(partial, y, N, C, M, EF);
}
