"""gpulab: the teaching lab's small package.

Notebooks import what they need from here, so they read like the chapter text:
compile and launch kernels on the GPU or the CPU backend (:mod:`gpulab.kernels`),
check them against references (:mod:`gpulab.check`; a chapter's ladder of steps:
:mod:`gpulab.ladder`), time them
(:mod:`gpulab.timing`, :mod:`gpulab.transfers`), judge them against the
hardware (:mod:`gpulab.roofline`), keep and load recorded runs
(:mod:`gpulab.runs`) and draw the figures (:mod:`gpulab.plots`).
"""
from .check import TOLERANCE, check, compare
from .device import describe, gpu_available, require_gpu
from .errors import (CheckFailed, KernelArgumentError, KernelCompileError, KernelLaunchError,
                     NoGPUError, RecordedRunError)
from .kernels import get_backend, load_module, resource_table, show_source
from .ladder import assert_ok
from .runs import live_or_recorded, load_run

__all__ = [
    "TOLERANCE", "assert_ok", "check", "compare", "describe", "gpu_available", "require_gpu",
    "CheckFailed", "KernelArgumentError", "KernelCompileError", "KernelLaunchError",
    "NoGPUError", "RecordedRunError", "get_backend", "load_module", "resource_table",
    "show_source", "live_or_recorded", "load_run",
]
__version__ = "0.1.0"
