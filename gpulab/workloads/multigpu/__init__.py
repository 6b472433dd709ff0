"""The multigpu chapter's workload: the training chapter's classifier trained
data-parallel on two GPUs, declared once.

* :mod:`.problem`: the check case (replica 0 of two on a small batch, W1's gradient in
  buckets), its seeded inputs and float64 reference;
* :mod:`.launchers`: the launch families, each kernel of a replica's step bound to the case
  and compared with the reference, a row per quantity;
* :mod:`.steps`: the chapter's kernels as a ladder (:mod:`gpulab.ladder`), data, each checked
  alone against float64 by ``CHAPTER.check(backend)``;
* :mod:`.replicas`: the data-parallel step (replicas, flat gradient buffers,
  buckets) and its CPU-backend stand-in with the all-reduce in NumPy;
* :mod:`.costmodel`: the ring all-reduce cost model, its fit and predictions;
* :mod:`.record`: the recorded run (:data:`benchmark_all`, a
  :class:`gpulab.recorder.Recording`) that ``python -m gpulab record multigpu``
  makes on a machine with two GPUs or more;
* :mod:`.configs`: the launch configurations the run sweeps (bucket counts, grids, streams, the
  plain step's forms, NCCL's settings) and the names its rows carry;
* :mod:`.gpustep`: one rank's step on its GPU (streams, events, NCCL, the peer link over CUDA IPC);
* :mod:`.workers`: one process per GPU, each driving its GPU's step, and what each measures;
* :mod:`.ddp`: PyTorch DistributedDataParallel on the same model, the baseline;
* :mod:`.scaling`: the chapter's ladder of launch forms, one GPU to the bucketed two-GPU step,
  each step's prediction and its verdict on the recorded run (the kernel files state none:
  ``CHAPTER.predicted`` is empty);
* :mod:`.views`: the recorded run's figures and the notebook's cells.
"""
from ...ladder import Chapter
from . import launchers, problem, record, steps, views
from .costmodel import RingModel, allreduce_time_ms, bus_bandwidth_gbs, fit, predictions, scaling_efficiency
from .problem import TITLE
from .replicas import Bucket, DataParallel, Layout, Replica, numpy_allreduce, split_batch

CHAPTER = Chapter(problem.NAME, TITLE, steps.STEPS, problem.cases(), views=views, recording=record.benchmark_all,
                  seed=problem.SEED)
benchmark_all = CHAPTER.recording
#: The GPUs the recorded run needs.
GPUS_NEEDED = record.GPUS

__all__ = ["CHAPTER", "TITLE", "GPUS_NEEDED", "Bucket", "DataParallel", "Layout", "Replica", "RingModel",
           "allreduce_time_ms", "benchmark_all", "bus_bandwidth_gbs", "fit", "numpy_allreduce", "predictions",
           "scaling_efficiency", "split_batch"]
