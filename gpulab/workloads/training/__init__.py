"""The training chapter's workload: a 32,754-128-4 bag-of-words classifier trained with mini-batch
SGD, declared once.

:mod:`.data` (the synthetic corpus and its Bayes-optimal accuracy), :mod:`.reference` (the network,
its gradients and SGD in float64 NumPy), :mod:`.problem` (the case: one SGD step on a batch, its
seeded inputs and float64 reference), :mod:`.launchers` (the launch families: each step as a list of
kernel launches), :mod:`.steps` (the ladder and each kernel file's prediction, data), :mod:`.checks`
(the loss curves), :mod:`.fit` (every step against the GPU's limits, or a simulated T4's or L4's),
:mod:`.baselines` (PyTorch on the same data), :mod:`.record` (``python -m gpulab record training``)
and :mod:`.views` (what the notebook shows of a run).
"""
from ...ladder import Chapter, owned_names
from . import checks, data, launchers, problem, record, reference, steps, views

CHAPTER = Chapter(problem.NAME, problem.TITLE, steps.STEPS, problem.cases(), predicted=steps.PREDICTED, views=views,
                  recording=record.benchmark_all, cases=problem.cases, seed=0, exercises=(steps.EXERCISE,),
                  profile_driver=record.profile_driver)
benchmark_all, profile_driver = CHAPTER.recording, CHAPTER.profile_driver
#: Compatibility shim: the names the notebook reads as ``training.X`` (``training.Dims``,
#: ``training.CHECK_DIMS``, ``training.check_curves``), from the module that owns each, until its
#: cells name that module.
__getattr__ = owned_names(__name__, (data, reference, problem, launchers, steps, checks, record, views))
