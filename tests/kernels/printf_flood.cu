// Prints 'lines' numbered lines from every thread: enough of them overflows
// the 1 MiB that a launch's printf output may take, on a GPU and here.
extern "C" __global__ void flood(int lines)
{
    for (int k = 0; k < lines; ++k) {
        printf("block %04d thread %03d line %02d\n", (int)blockIdx.x, (int)threadIdx.x, k);
    }
}

// Prints one line per thread, then thread 'failing' of block 0 traps: what
// was printed before still shows.
extern "C" __global__ void print_then_trap(int failing)
{
    printf("before the trap: block %d thread %d\n", (int)blockIdx.x, (int)threadIdx.x);
    __syncthreads();
    if (blockIdx.x == 0 && threadIdx.x == failing) {
        __trap();
    }
}
