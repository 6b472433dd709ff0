"""The conv + ReLU + max-pool chapter's workload, declared once: a 256 -> 256 channel 5 x 5
convolution of a 224 x 224 image (228 with its zero border), ReLU and a 2 x 2 max-pool, from
a student report on OpenCL (a Tesla M60, about 655 GFLOP/s).

:mod:`.problem` (the layer, its work, the :class:`~.problem.Conv` cases, the inputs' forms and the
float64 reference), :mod:`.launchers` (the launch families), :mod:`.steps` (the ladder, the
exercise's step and each kernel file's prediction, data), :mod:`.baselines` (the cuDNN paths),
:mod:`.sweeps` (the launch-shape sweeps), :mod:`.mapping` (the thread-to-data figures),
:mod:`.record` (``python -m gpulab record convpool``, and ``profile_driver``, the process Nsight
Compute watches) and :mod:`.views` (what the notebook shows of a run).
"""
from ...ladder import Chapter, owned_names
from . import baselines, launchers, problem, record, steps, sweeps, views
from .problem import TITLE

CHAPTER = Chapter(problem.NAME, TITLE, steps.STEPS, problem.cases(), predicted=steps.PREDICTED, views=views,
                  recording=record.benchmark_all, cases=problem.cases, seed=None, exercises=(steps.EXERCISE,),
                  profile_driver=record.profile_driver)
benchmark_all, profile_driver = CHAPTER.recording, CHAPTER.profile_driver
#: Compatibility shim: the names the notebook reads as ``convpool.X`` (``convpool.LAYER``, ``convpool.work_table``),
#: from the module that owns each, until its cells name that module.
__getattr__ = owned_names(__name__, (problem, launchers, steps, record, views))
