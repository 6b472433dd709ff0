"""The multigpu chapter's workload: the training chapter's classifier trained
data-parallel on two GPUs, declared once.

* :mod:`.steps`: the chapter's kernels as a ladder (:mod:`gpulab.ladder`), each checked
  alone against float64 (:func:`.steps.check_steps`);
* :mod:`.replicas`: the data-parallel step (replicas, flat gradient buffers,
  buckets) and its CPU-backend stand-in with the all-reduce in NumPy;
* :mod:`.costmodel`: the ring all-reduce cost model, its fit and predictions;
* :mod:`.record`: the recorded run (:data:`benchmark_all`, a
  :class:`gpulab.recorder.Recording`) that ``python -m gpulab record multigpu``
  makes on a machine with two GPUs or more;
* :mod:`.workers`: one process per GPU, each driving its GPU's replica and NCCL;
* :mod:`.ddp`: PyTorch DistributedDataParallel on the same model, the baseline;
* :mod:`.scaling`: the chapter's ladder, one GPU to the bucketed two-GPU step, each step's
  prediction and its verdict on the recorded run;
* :mod:`.views`: the recorded run's figures and the notebook's cells.
"""
from .costmodel import RingModel, allreduce_time_ms, bus_bandwidth_gbs, fit, predictions, scaling_efficiency
from .record import CHAPTER, benchmark_all
from .replicas import Bucket, DataParallel, Layout, Replica, numpy_allreduce, split_batch
from .steps import STEPS, check_steps

TITLE = "When one GPU is not enough: data-parallel training on two GPUs with NCCL"
#: The GPUs the recorded run needs.
GPUS_NEEDED = 2

__all__ = ["CHAPTER", "TITLE", "GPUS_NEEDED", "Bucket", "DataParallel", "Layout", "Replica", "RingModel",
           "allreduce_time_ms", "benchmark_all", "bus_bandwidth_gbs", "fit", "numpy_allreduce", "predictions",
           "scaling_efficiency", "split_batch", "STEPS", "check_steps"]
