// One warp exercises kernels/common/ptx.h: cp.async (with zero fill), ldmatrix (plain and
// transposed), mma.sync m16n8k16 (half) and m16n8k8 (tf32), with the documented layouts.
#include <common/ptx.h>

// D (16 x 16 float) = A (16 x 16 half, row-major) x B (16 x 16 half, k x n row-major). The
// last 16-byte chunk of A's row 15 is read as zeros (cp.async with source size 0).
extern "C" __global__ void mma_half_16x16(const __half* A, const __half* B, float* D)
{
    __shared__ __align__(16) __half as[16 * 16];
    __shared__ __align__(16) __half bs[16 * 16];
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    // 32 chunks of 16 bytes each: lane l copies chunk l of A and of B.
    cp_async16(as + 8 * lane, A + 8 * lane, lane == 31 ? 0 : 16);
    cp_async16(bs + 8 * lane, B + 8 * lane, 16);
    cp_async_commit();
    cp_async_wait<0>();
    __syncwarp();
    unsigned a[4], b[4];
    ldmatrix_x4(a, as + (lane % 16) * 16 + 8 * (lane / 16));
    // B is k-major: transposed loads. Matrices: k 0-7 | 8-15 for n 0-7, then for n 8-15.
    ldmatrix_x4_trans(b, bs + (lane % 16) * 16 + 8 * (lane / 16));
    for (int nt = 0; nt < 2; ++nt) {
        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_16816(d, a, b + 2 * nt);
        D[g * 16 + 8 * nt + 2 * t] = d[0];
        D[g * 16 + 8 * nt + 2 * t + 1] = d[1];
        D[(g + 8) * 16 + 8 * nt + 2 * t] = d[2];
        D[(g + 8) * 16 + 8 * nt + 2 * t + 1] = d[3];
    }
}

// D (16 x 8) = A (16 x 8 float, row-major) x Bt^T, Bt (8 x 8: n x k), on tf32 tensor cores,
// with B loaded by ldmatrix.x2 (rows n, 16 bytes = 4 floats of k each).
extern "C" __global__ void mma_tf32_16x8(const float* A, const float* Bt, float* D)
{
    __shared__ __align__(16) float bs[8 * 8];
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    bs[lane] = Bt[lane];
    bs[lane + 32] = Bt[lane + 32];
    __syncwarp();
    unsigned a[4] = {__float_as_uint(A[g * 8 + t]), __float_as_uint(A[(g + 8) * 8 + t]),
                     __float_as_uint(A[g * 8 + t + 4]), __float_as_uint(A[(g + 8) * 8 + t + 4])};
    unsigned b[2];
    ldmatrix_x2(b, bs + (lane % 8) * 8 + 4 * ((lane / 8) % 2));
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma_1688_tf32(d, a, b);
    D[g * 8 + 2 * t] = d[0];
    D[g * 8 + 2 * t + 1] = d[1];
    D[(g + 8) * 8 + 2 * t] = d[2];
    D[(g + 8) * 8 + 2 * t + 1] = d[3];
}
