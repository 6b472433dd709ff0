"""The AlexNet chapter's workload: the five convolution layers, declared once.

The notebook, the tests and ``python -m gpulab record alexnet`` all read this package:

* :mod:`.shapes`: the layers' shapes, their FLOP and byte counts, the seeded inputs and the
  float64 reference;
* :mod:`.steps`: the ladder of kernels with their launch configurations, the checks, and each
  kernel file's prediction; :mod:`.tc` launches steps 18-22 (``mma.sync``), :mod:`.winograd`
  steps 23-24, :mod:`.wgmma` step 25 (``wgmma`` fed by TMA), :mod:`.copies` step 28 (step 25
  with one-pass copies to channels-last);
* :mod:`.baselines`: cuDNN's paths; :mod:`.profile`: the Nsight Compute profile;
* :mod:`.record`: the CPU baselines and the recorded run, declared as its experiments
  (``benchmark_all``, a :class:`gpulab.recorder.Recording`);
* :mod:`.views`: what the notebook shows of a run.

Each module imports only those listed before it (``tc`` and ``winograd`` read only the shapes,
``wgmma`` and ``copies`` not even those).
"""
from . import baselines, copies, profile, record, shapes, steps, tc, views, wgmma, winograd
from .baselines import CUDNN_FP32_TOLERANCE, vendor_paths
from .profile import (PROFILE_EXTRA_METRICS, PROFILE_N, PROFILE_RUNS, PROFILE_STALL_METRICS, label_profile,
                      profile_driver, profile_table)
from .record import (COLD_GAP, COLD_N, NCHW_INPUT, NHWC_INPUT, SCALING_STEPS, TRANSFER_STEPS, benchmark_all, cpu_baseline_rows,
                     host_description, numpy_conv)
from .shapes import (BATCHES, CHAPTER, CHECK_LAYERS, CHECK_N, LAYERS, MAIN_N, MEMORY_FRACTION,
                     RECORDING_MEMORY_BYTES, SCALING_BATCHES, Layer, block_shape, k_table, layers_table,
                     make_inputs, memory_limit, reference, total_flops)
from .steps import (CHANNELS_PER_BLOCK, CPU_LOOP_FILE, EXERCISE, GEMM_BK, GEMM_THREADS, GEMM_TILE, MAX_SPLITS,
                    MIN_SLICES_PER_SPLIT, MMA_STEPS, PREDICTED,
                    CHAPTER_STEPS, PREDICTION_CASES, REDUCE_BLOCK, RESIDENT_BLOCKS,
                    STEP, STEPS, TILE_OVERHEAD_SLICES, WGMMA_FALLBACK, WGMMA_STEPS, WINOGRAD_STEPS, COPY_OF,
                    COPY_STEPS, Step, accuracy_table, check_steps, fallback_step, footprint_bytes, gemm_offsets,
                    gemm_padded_k, gemm_splits, kernels_per_layer, launch_config, main_kernel, make_launch,
                    memory_table, padded_channels, padded_filter_row, resources_table, run, scratch_bytes,
                    shared_bytes, unfit_reason)
from .views import (INPUT_RULES, PROFILED_COLUMNS, TARGETS_MS, beats_cudnn, copy_table, cudnn_algorithms, fastest,
                    gap_reason, gpu_comparison, input_rules, layer_totals, prediction_table, profiled, recorded_beside,
                    step_labels, step_ms, target_verdict, targets_table, totals_at, unrecorded_steps, vendor_best, vendor_figure,
                    vendor_lines)
from .winograd import multiply_table

TITLE = "AlexNet's five convolution layers, from a CPU loop to tensor cores"

__all__ = ["CHAPTER", "TITLE", "baselines", "copies", "profile", "record", "shapes", "steps", "tc", "views", "winograd",
           "CUDNN_FP32_TOLERANCE", "vendor_paths", "PROFILE_EXTRA_METRICS", "PROFILE_N", "PROFILE_RUNS",
           "PROFILE_STALL_METRICS", "label_profile", "profile_driver", "profile_table", "COLD_GAP", "COLD_N", "SCALING_STEPS",
           "TRANSFER_STEPS", "benchmark_all", "cpu_baseline_rows", "host_description", "numpy_conv", "BATCHES",
           "CHECK_LAYERS", "CHECK_N", "LAYERS", "MAIN_N", "MEMORY_FRACTION", "RECORDING_MEMORY_BYTES",
           "SCALING_BATCHES", "Layer", "block_shape", "k_table", "layers_table", "make_inputs", "memory_limit",
           "reference", "total_flops", "CHANNELS_PER_BLOCK", "CPU_LOOP_FILE", "EXERCISE", "GEMM_BK",
           "GEMM_THREADS", "GEMM_TILE", "MAX_SPLITS", "MIN_SLICES_PER_SPLIT", "MMA_STEPS", "PREDICTED",
           "PREDICTION_CASES", "REDUCE_BLOCK", "RESIDENT_BLOCKS", "STEP", "STEPS", "TILE_OVERHEAD_SLICES",
           "WINOGRAD_STEPS", "Step", "accuracy_table", "check_steps", "fallback_step", "footprint_bytes",
           "gemm_offsets", "gemm_padded_k", "gemm_splits", "kernels_per_layer", "launch_config", "main_kernel",
           "make_launch", "memory_table", "padded_channels", "padded_filter_row", "resources_table", "run",
           "scratch_bytes", "shared_bytes", "unfit_reason", "PROFILED_COLUMNS", "TARGETS_MS", "beats_cudnn",
           "cudnn_algorithms", "fastest", "gap_reason", "gpu_comparison", "layer_totals", "prediction_table",
           "profiled", "recorded_beside", "step_labels", "step_ms", "targets_table", "totals_at",
           "unrecorded_steps", "vendor_best", "vendor_figure", "vendor_lines", "multiply_table", "INPUT_RULES",
           "input_rules", "WGMMA_STEPS", "WGMMA_FALLBACK", "wgmma", "NCHW_INPUT", "NHWC_INPUT", "copy_table",
           "COPY_STEPS", "COPY_OF", "CHAPTER_STEPS"]
