"""The conv + ReLU + max-pool chapter's workload, declared once: a 256 -> 256 channel 5 x 5
convolution of a 224 x 224 image (228 with its zero border), ReLU and a 2 x 2 max-pool, from
a student report on OpenCL (a Tesla M60, about 655 GFLOP/s).

:mod:`.shapes` holds the layer, its work and the float64 reference; :mod:`.steps` the ladder and
its checks; :mod:`.baselines` the cuDNN paths; :mod:`.record` what ``python -m gpulab record
convpool`` measures (its run as a :class:`gpulab.recorder.Recording`), the launch-shape sweeps
included, and ``profile_driver``, the process Nsight Compute watches.
"""
from .record import CHAPTER, benchmark_all, profile_driver
from .shapes import BATCHES, CHECK, LAYER, RS, Shape, floors_ms, make_inputs, reference, work_table
from .steps import (BATCH_STEPS, EXERCISE, STEP, STEPS, Step, check_steps, launch_config, make_launch,
                    run, strips)
from .views import gpu_comparison

TITLE = "A 256-channel conv + ReLU + max-pool layer, and finding the best launch shape by sweeping"

__all__ = ["CHAPTER", "TITLE", "benchmark_all", "profile_driver", "BATCHES", "CHECK", "LAYER", "RS", "Shape", "floors_ms",
           "make_inputs", "reference", "work_table", "BATCH_STEPS", "EXERCISE", "STEP", "STEPS", "Step",
           "check_steps", "launch_config", "make_launch", "run", "strips", "gpu_comparison"]
