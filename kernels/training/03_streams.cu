// Step 3: independent kernels run concurrently on streams (the report's
// second optimization). No kernel changes: this file has none. Step 3
// launches step 2's kernels (02_fused_elementwise.cu and the products,
// transposes and column sums of 01_one_kernel_per_op.cu); what changes is
// where they are launched -- see gpulab/workloads/training/steps.py.
//
// Many of the step's kernels do not depend on one another:
//  * the transpose of X needs only the batch, so it can run from the very
//    start, beside the whole forward pass (stream 2);
//  * the transpose of W2, likewise (stream 1);
//  * once dZ2 is known, the output layer's gradient (H^T, dW2, db2), the loss
//    and the W2, b2 updates (stream 1) are independent of the backward pass
//    into the hidden layer (dH, dZ1, dW1, db1 and the W1, b1 updates, stream 0).
// Events order what must be ordered: dH waits for W2^T, dW1 for X^T, the W2
// update for dH (which reads W2's transposed copy).
//
// Why faster: a kernel that leaves SMs idle (a small grid, or a
// memory-bound transpose) can share the GPU with another. Prediction: the
// transpose of X hides under the forward product, so step 3 saves about the
// transpose's time; the small kernels are too short to gain much.
