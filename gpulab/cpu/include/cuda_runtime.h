// NVRTC kernels need no runtime header; this empty one lets sources that include it compile.
