// See cuda_fp16.h beside this file.
#include <cuda_fp16.h>
