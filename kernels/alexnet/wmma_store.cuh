// Step 15's epilogue, which step 16 keeps unchanged: a warp's wmma accumulators written to y
// through a per-warp staging buffer. A file that includes this includes <mma.h> first and
// defines WM, WN (the warp's filters and pixels) and FRAG (the fragment's side, 16).
#pragma once
#include <cuda_fp16.h>

// Step 15: each warp stages one FRAG x FRAG fragment at a time in `stage` (FRAG * FRAG floats of
// shared memory) and writes it to y (N x M x E x F) as __half: fragment rows are filters from
// m_first, columns pixels from pixel_first, which scatter to (image, e, f); those past M or
// NEF are left out.
__device__ __forceinline__ void store_fragments(
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, FRAG, FRAG, FRAG, float> (&acc)[WM / FRAG][WN / FRAG],
    float* stage, __half* __restrict__ y, int m_first, int pixel_first, int M, int NEF, int EF, int lane)
{
#pragma unroll
    for (int i = 0; i < WM / FRAG; ++i) {
#pragma unroll
        for (int j = 0; j < WN / FRAG; ++j) {
            nvcuda::wmma::store_matrix_sync(stage, acc[i][j], FRAG, nvcuda::wmma::mem_row_major);
            __syncwarp();
            for (int q = lane; q < FRAG * FRAG; q += 32) {
                const int m = m_first + i * FRAG + q / FRAG;
                const int pixel = pixel_first + j * FRAG + q % FRAG;
                if (m < M && pixel < NEF) {
                    const int n = pixel / EF;
                    y[((size_t)n * M + m) * EF + (pixel - n * EF)] = __float2half(stage[q]);
                }
            }
            __syncwarp();
        }
    }
}
