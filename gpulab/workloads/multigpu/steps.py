"""The multigpu chapter's ladder, as data: the six kernels a replica adds to the training chapter's
step 9 (``kernels/multigpu/NN_*.cu``), each with its launch family (:mod:`.launchers`), which checks
it alone on replica 0's share of a small batch (:mod:`.problem`) against the float64 reference.

The data-parallel step itself (replicas, buckets, the all-reduce, the GPU streams) is declared in
:mod:`.replicas` and :mod:`.workers`; each of its forms launches these kernels. The variants the run
compares (plain, bucketed, overlapped) are launch configurations of these kernels,
:data:`~.configs.OVERLAPS`, each checked again by the record against the plain step. The chapter's
predictions are those of its scaling ladder (:mod:`.scaling`: launch forms, one GPU to the bucketed
two-GPU step, some claims built from the run), not of these kernel files.
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import ladder
from .launchers import (BUCKET_GRADIENTS, FIRST_BUCKET_AND_SMALL, FORWARD_AND_FIRST_BUCKET, PEER_UPDATE,
                        SMALL_GRADIENTS, UPDATE_AND_ZERO)


@dataclass(frozen=True)
class Step(ladder.Step):
    """One kernel of the chapter: its file, its kernel (as a failed check names it) and, in words,
    what its check compares."""

    kernel: str
    checks: str


STEPS = [
    Step("01", "multigpu/01_w1_gradient_buckets.cu", "W1's gradient one bucket of rows at a time", "w1_gradient_rows",
         "each bucket's rows of dW1 (the other rows untouched)", launcher=BUCKET_GRADIENTS),
    Step("02", "multigpu/02_update_and_zero.cu", "the update of a flat range, its gradient zeroed", "sgd_update_zero",
         "w - lr g over the range, and g = 0 there", launcher=UPDATE_AND_ZERO),
    Step("03", "multigpu/03_small_gradients.cu", "the small parameters' gradient, coalesced", "small_gradients",
         "dW2, db1, db2 and the loss", launcher=SMALL_GRADIENTS),
    Step("04", "multigpu/04_first_bucket_and_small.cu", "the first bucket and the small gradients in one launch",
         "first_bucket_and_small", "the first bucket's rows of dW1 and dW2, db1, db2", launcher=FIRST_BUCKET_AND_SMALL),
    Step("05", "multigpu/05_forward_and_first_bucket.cu", "the first bucket's gradient in the forward kernel",
         "forward_and_first_bucket", "dZ1 and the first bucket's rows of dW1", launcher=FORWARD_AND_FIRST_BUCKET),
    Step("06", "multigpu/06_peer_update.cu", "the all-reduce fused with the update, reading the peer's gradient",
         "peer_sgd_update", "w - lr (g + g_peer) over two ranges (one unaligned), w elsewhere untouched",
         launcher=PEER_UPDATE),
]
