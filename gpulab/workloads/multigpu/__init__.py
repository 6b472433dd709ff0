"""The multigpu chapter's workload: the training chapter's classifier trained
data-parallel on two GPUs, declared once.

* :mod:`.replicas`: the data-parallel step (replicas, flat gradient buffers,
  buckets) and its CPU-backend stand-in with the all-reduce in NumPy;
* :mod:`.costmodel`: the ring all-reduce cost model, its fit and predictions;
* :mod:`.record`: the benchmarks ``python -m gpulab record multigpu`` runs on a
  machine with two GPUs (NCCL through CuPy, one process driving both);
* :mod:`.ddp`: PyTorch DistributedDataParallel on the same model, the baseline;
* :mod:`.views`: the recorded run's figures.
"""
from .costmodel import RingModel, allreduce_time_ms, bus_bandwidth_gbs, fit, predictions, scaling_efficiency
from .replicas import Bucket, DataParallel, Layout, Replica, numpy_allreduce, split_batch

CHAPTER = "multigpu"
TITLE = "When one GPU is not enough: data-parallel training on two GPUs with NCCL"
#: The GPUs the recorded run needs.
GPUS_NEEDED = 2


def benchmark_all(repeats: int = 100, quick: bool = False, deadline_s: float | None = None):
    """Every experiment of the chapter on two GPUs (see :mod:`.record`); fails
    at once, clearly, on a machine with fewer."""
    from .record import benchmark_all as run
    return run(repeats=repeats, quick=quick, deadline_s=deadline_s)


__all__ = ["CHAPTER", "TITLE", "GPUS_NEEDED", "Bucket", "DataParallel", "Layout", "Replica", "RingModel",
           "allreduce_time_ms", "benchmark_all", "bus_bandwidth_gbs", "fit", "numpy_allreduce", "predictions",
           "scaling_efficiency", "split_batch"]
