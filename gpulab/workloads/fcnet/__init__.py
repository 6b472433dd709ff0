"""The fcnet chapter's workload: a 72-64-64-4 fully-connected network's inference, declared once.

* :mod:`.shapes`: the network, its two cases, the seeded weights and inputs, the work and the
  float64 reference;
* :mod:`.steps`: the ladder, each step a list of kernel launches; binding, running and checking
  a step; each kernel file's prediction;
* :mod:`.profile`: the Nsight Compute view (``python -m gpulab profile-driver fcnet``);
* :mod:`.views`: what the notebook shows of a recorded run;
* :mod:`.record`: the benchmark that ``python -m gpulab record fcnet`` turns into the recorded run.

Each module imports only those listed before it, except that :mod:`.record` reads the views'
:func:`~.views.ladder` too. (``fcnet.steps`` is the function that selects steps, as in the
training chapter; the module is ``gpulab.workloads.fcnet.steps``.)
"""
from . import profile, record, shapes, views
from .profile import PROFILE_METRICS, kernel_names, profile_driver, profile_steps
from .record import TIMING_BUDGET_MS, VENDOR_BUDGET_MS, benchmark_all, resources
from .shapes import (BYTES_PER_VECTOR, CHAPTER, CHECK_SIZES, FLOPS_PER_VECTOR, HID, IN, INPUT_SEED,
                     MACS_PER_VECTOR, MEMORY_FRACTION, OUT, REFERENCE_CHUNK, RELU, SIZES, TC_K1, TC_M3,
                     TC_SHARED_BYTES, WEIGHT_SEED, floors_ms, footprint_bytes, make_inputs, make_weights,
                     plan_sizes, reference, weight_forms, work)
from .steps import (CPU_PERSISTENT_BLOCKS, EXERCISE, MMA_STEPS, PREDICTED, STEPS, Launch, Step, bind, buffers,
                    check_steps, mma_shared_bytes, resident_blocks, run, runnable_steps, step_kernels, steps,
                    tf32x3_shared_bytes, unfit_reason)
from .views import (COLD_GAP, FP32_GAP, REPORT_3080TI_LARGE_MS, TARGETS, VENDOR, best_vendor,
                    eager_vs_graph_figure, floor_ms, gpu_comparison, ladder, ladder_figure, measured_rates,
                    not_measured, prediction_table, profile_of, profile_run, profile_table, report_gpu_table,
                    roofline_figure, step_row, step_times, targets, tiles_per_block, vendor, vendor_figure,
                    vendor_lines, warm_cold)

TITLE = "A fully-connected network's inference, from five kernel launches to one kernel at the hardware limit"

__all__ = ["CHAPTER", "TITLE", "profile", "record", "shapes", "views", "PROFILE_METRICS", "kernel_names",
           "profile_driver", "profile_steps", "TIMING_BUDGET_MS", "VENDOR_BUDGET_MS", "benchmark_all",
           "resources", "BYTES_PER_VECTOR", "CHECK_SIZES", "FLOPS_PER_VECTOR", "HID", "IN", "INPUT_SEED",
           "MACS_PER_VECTOR", "MEMORY_FRACTION", "OUT", "REFERENCE_CHUNK", "RELU", "SIZES", "TC_K1", "TC_M3",
           "TC_SHARED_BYTES", "WEIGHT_SEED", "floors_ms", "footprint_bytes", "make_inputs", "make_weights",
           "plan_sizes", "reference", "weight_forms", "work", "CPU_PERSISTENT_BLOCKS", "EXERCISE", "MMA_STEPS",
           "PREDICTED", "STEPS", "Launch", "Step", "bind", "buffers", "check_steps", "mma_shared_bytes",
           "resident_blocks", "run", "runnable_steps", "step_kernels", "steps", "tf32x3_shared_bytes",
           "unfit_reason", "COLD_GAP", "FP32_GAP", "REPORT_3080TI_LARGE_MS", "TARGETS", "VENDOR", "best_vendor",
           "eager_vs_graph_figure", "floor_ms", "gpu_comparison", "ladder", "ladder_figure", "measured_rates",
           "not_measured", "prediction_table", "profile_of", "profile_run", "profile_table", "report_gpu_table",
           "roofline_figure", "step_row", "step_times", "targets", "tiles_per_block", "vendor", "vendor_figure",
           "vendor_lines", "warm_cold"]
