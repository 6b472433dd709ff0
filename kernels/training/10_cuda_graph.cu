// Step 10 (beyond the report): the whole training step captured in a CUDA graph.
//
// No kernel changes: step 10 launches step 9's two kernels
// (09_sparse_first_layer.cu). What changes is how: the step's launches are
// recorded once into a CUDA graph (stream capture) and each training step
// replays the graph with one call.
//
// Why faster: at batch 1,024 step 9's two kernels run for a few tens of
// microseconds, about what the host needs to issue them from Python (CuPy's
// launch path costs several microseconds per kernel, plus argument
// handling), so the GPU waits for the host between kernels. A graph replay
// hands the GPU the whole step at once; the gaps between kernels shrink to
// the device's own scheduling time. Prediction: the step time approaches the
// sum of the two kernels' durations, a 1.5-2x gain at batch 1,024 and more at
// small batches, where the kernels are shortest.
