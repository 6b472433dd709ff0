"""The Hopper GEMM chapter's workload, declared once: C = A B^T in half precision with float
accumulation, from the lab's mma.sync GEMM to the bulk tensor copy engine (TMA), wgmma and warp
specialization, and a 2x1 thread-block cluster with TMA multicast; step 7 also in bf16 and tf32
(in_precision).

:mod:`.steps` holds the ladder (gpulab.ladder's protocol), its launches and its check against a float64
reference; :mod:`.record` what a GPU run measures (``python -m gpulab record hopper``).
"""
from .record import CHAPTER, benchmark_all, profile_driver
from .steps import BK, CHECK_SHAPES, GPU_OPTIONS, MAIN_SIZE, OTHER_PRECISIONS, PREDICTED, STEPS, Step, check, check_shape, \
    check_steps, in_precision, make_inputs, make_launch, needs_hopper, reference, run

TITLE = "What wins on Hopper: a GEMM from mma.sync to TMA, wgmma and warp specialization"

__all__ = ["CHAPTER", "TITLE", "benchmark_all", "BK", "CHECK_SHAPES", "GPU_OPTIONS", "MAIN_SIZE", "OTHER_PRECISIONS", "PREDICTED",
           "STEPS", "Step", "check", "check_shape", "check_steps", "in_precision", "make_inputs", "make_launch",
           "needs_hopper", "profile_driver", "reference", "run"]
