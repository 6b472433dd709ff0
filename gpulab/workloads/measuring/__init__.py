"""Chapter 1's workload: SAXPY, z = a*x + y, declared once.

* :mod:`.steps`: the sizes, the FLOP and byte counts, the float64 reference, the ladder's steps
  with their launch configurations and their checks, whether the arrays fit in the L2, and what
  each kernel file's prediction claims;
* :mod:`.record`: the benchmark that ``python -m gpulab record measuring`` (and the notebook's
  live run) turns into the recorded run;
* :mod:`.views`: what the notebook shows of a recorded run.

:mod:`.record` and :mod:`.views` each import :mod:`.steps` alone.
"""
from . import record, steps, views
from .record import benchmark_all
from .steps import (A, BLOCK, BYTES_PER_ELEMENT, CHAPTER, CHECK_SIZES, EXERCISE, FLOPS_PER_ELEMENT, MAIN_SIZE,
                    PREDICTED, SIZES, STEPS, Step, check_steps, fits_in_l2, kernel, l2_bytes, launcher, make_inputs,
                    reference, run, work)
from .views import COLD_GAP, dispatch_table, fastest_against_ceiling, gpu_comparison, prediction_table, speedup_by_size

TITLE = "Measuring a GPU kernel"
#: The name the chapter's notebook imports this package under (``from gpulab.workloads import
#: measuring as saxpy``): exercise cells run with it.
IMPORTED_AS = "saxpy"

__all__ = ["CHAPTER", "TITLE", "IMPORTED_AS", "record", "steps", "views", "benchmark_all", "A", "BLOCK",
           "BYTES_PER_ELEMENT", "CHECK_SIZES", "EXERCISE", "FLOPS_PER_ELEMENT", "MAIN_SIZE", "PREDICTED", "SIZES",
           "STEPS", "Step", "check_steps", "fits_in_l2", "kernel", "l2_bytes", "launcher", "make_inputs",
           "reference", "run", "work", "COLD_GAP", "dispatch_table", "fastest_against_ceiling", "gpu_comparison", "prediction_table",
           "speedup_by_size"]
