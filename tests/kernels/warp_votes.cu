// Per thread: the ballot of (x > 0) over its warp, whether all lanes' x > -1,
// and the warp's sum of x by a butterfly of __shfl_xor_sync.  The block may
// end in a partial warp: lanes that do not exist take no part.
extern "C" __global__ void warp_votes(int n, const int* x, unsigned int* ballot, int* all_ok, int* warp_sum)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? x[i] : 0;
    unsigned int b = __ballot_sync(0xffffffffu, v > 0);
    int ok = __all_sync(0xffffffffu, v > -1);
    int sum = v;
    for (int mask = 16; mask > 0; mask >>= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, mask);
    }
    if (i < n) {
        ballot[i] = b;
        all_ok[i] = ok;
        warp_sum[i] = sum;
    }
}
