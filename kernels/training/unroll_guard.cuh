// The bounds test of the unrolled element-wise kernels (steps 4-6), shared so
// that the batch-size x block-shape sweep can also run them with the report's
// test, by compiling with -DREPORT_GUARD.
//
// A thread of an unrolled kernel handles the four columns first, first +
// stride, first + 2 stride, first + 3 stride of its row. Ours tests each one.
// The report's ran all four only when the last was in range and none
// otherwise: whenever a row's width is not a multiple of 4 x blockDim.x, the
// columns of the last, partial group are never written -- no error, no
// warning, just stale values that training then reads.
#pragma once

__device__ __forceinline__ bool unrolled_in_range(int col, int first, int stride, int cols) {
#ifdef REPORT_GUARD
    return first + 3 * stride < cols;
#else
    return col < cols;
#endif
}
