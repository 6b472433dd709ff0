// Step 2 -- streams: the batch in chunks over several streams, so copies overlap kernels.
//
// What changed from step 1: nothing in the kernel, which this file includes unchanged. The host
// splits the batch into chunks, and gives each chunk its own CUDA stream: copy the chunk's
// images in (from pinned host memory), run the forward pass on them, copy the results out.
// Work on different streams may overlap, so while one chunk's kernels run, the next chunk's
// images cross PCIe (the copy engines and the SMs are separate hardware).
//
// Why it should be faster: the copy-in of 10,000 images (296 MB) takes ~6 ms at the ~50 GB/s
// that pinned memory reaches over PCIe 5.0 x16;
// hidden under the kernels of other chunks, only the first chunk's copy stays exposed.
// Why it might not be: the kernels' own time cannot shrink, and kernels of different chunks
// compete for the same SMs; the report saw no gain in its op times for that reason.
// Prediction: the kernel times equal step 1's; the end-to-end time (copies + forward pass) drops
// by about the copy time when the kernels take longer than the copies.

#include "01_direct_global.cu"
