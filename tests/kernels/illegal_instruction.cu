// Divides by a zero g++ can see: it compiles the division into an illegal
// instruction (SIGILL); a GPU gives an unspecified value.
extern "C" __global__ void divide_by_visible_zero(int n, int* x)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int zero = 0;
    if (i < n) {
        x[i] = x[i] / zero;
    }
}
