"""The training chapter's workload: a 32,754-128-4 bag-of-words classifier
trained with mini-batch SGD, declared once.

* :mod:`.data`: the synthetic corpus and its Bayes-optimal accuracy;
* :mod:`.reference`: the network, its gradients and SGD in float64 NumPy;
* :mod:`.steps`: the ladder, each step a list of kernel launches;
* :mod:`.checks`: every step against the reference (one step, loss curves);
* :mod:`.fit`: every step checked against the GPU's limits (or a simulated T4/L4's);
* :mod:`.baselines`: PyTorch on the same data (eager, CUDA graphs, torch.compile);
* :mod:`.record`: the benchmarks ``python -m gpulab record training`` runs,
  and the helpers the notebook reads the recorded run with.
"""
from .data import TOPICS, VOCAB, Corpus
from .reference import HIDDEN, LEARNING_RATE
from .steps import EXERCISE, STEPS, BoundStep, Config, Dims, Op, Step, buffers, step, step_kernels, steps
from .checks import CHECK_DIMS, check_curves, check_step, check_steps, loss_curve, reference_curve
from .record import CHAPTER, benchmark_all, profile_driver

TITLE = "Training a one-hidden-layer classifier on the GPU, from one kernel per operation to a fused step"

__all__ = ["CHAPTER", "TITLE", "EXERCISE", "TOPICS", "VOCAB", "HIDDEN", "LEARNING_RATE", "Corpus", "STEPS", "BoundStep",
           "Config", "Dims", "Op", "Step", "buffers", "step", "step_kernels", "steps", "CHECK_DIMS",
           "check_curves", "check_step", "check_steps", "loss_curve", "reference_curve", "benchmark_all",
           "profile_driver"]
