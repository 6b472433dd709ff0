// printf needs no #include in CUDA device code (NVRTC provides it), and none here.
extern "C" __global__ void hello(int tag)
{
    if (threadIdx.x == 0) {
        printf("hello from block %d, tag %d\n", (int)blockIdx.x, tag);
    }
}
