// See cuda_bf16.h beside this file.
#include <cuda_bf16.h>
