"""The Hopper GEMM chapter's workload, declared once: C = A B^T in half precision with float
accumulation, from the lab's mma.sync GEMM to the bulk tensor copy engine (TMA), wgmma and warp
specialization.

:mod:`.steps` holds the ladder, its launches and its check against a float64 reference.
"""
from .steps import BK, CHECK_SHAPES, GPU_OPTIONS, STEP, STEPS, Step, check, check_shape, make_inputs, make_launch, \
    reference, run

CHAPTER = "hopper"
TITLE = "What wins on Hopper: a GEMM from mma.sync to TMA, wgmma and warp specialization"

__all__ = ["CHAPTER", "TITLE", "BK", "CHECK_SHAPES", "GPU_OPTIONS", "STEP", "STEPS", "Step", "check", "check_shape",
           "make_inputs", "make_launch", "reference", "run"]
