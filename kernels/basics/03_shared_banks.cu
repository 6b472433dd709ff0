// Basics 3: shared memory and its 32 banks, in a matrix transpose.
//
// A block of 32 x 32 threads transposes a 32 x 32 tile: thread (tx, ty) reads
// in[ty][tx] into tile[ty][tx] (a warp, one value of ty, writes one row of
// the tile), waits at __syncthreads() until the whole tile is in, and writes
// tile[tx][ty] to out[ty][tx] (a warp reads one COLUMN of the tile). Both
// global accesses are coalesced; the column read is where shared memory's
// banks matter. Shared memory is 32 banks, 4-byte word w in bank w % 32, and
// a warp's access takes as many passes as the most distinct words it asks of
// one bank. With rows of 32 words, a column is 32 words of one bank: 32
// passes. One word of padding per row (PITCH 33) puts element [r][c] in bank
// (33 r + c) % 32 = (r + c) % 32, so a column hits all 32 banks: one pass.
#define TILE 32

template <int PITCH>
__device__ void transpose(const float* __restrict__ in, float* __restrict__ out)
{
    __shared__ float tile[TILE][PITCH];
    int tx = threadIdx.x, ty = threadIdx.y;
    tile[ty][tx] = in[ty * TILE + tx];
    __syncthreads();
    out[ty * TILE + tx] = tile[tx][ty];
}

extern "C" __global__ void transpose_tile(const float* in, float* out) { transpose<TILE>(in, out); }
extern "C" __global__ void transpose_tile_padded(const float* in, float* out) { transpose<TILE + 1>(in, out); }
