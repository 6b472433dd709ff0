"""The Hopper GEMM chapter's workload: C = A B^T in half precision with float accumulation, from
the lab's mma.sync GEMM to the bulk tensor copy engine (TMA), wgmma and warp specialization, and a
2x1 thread-block cluster with TMA multicast; step 7 also in bf16 and tf32.

:mod:`.problem` (the GEMM cases, inputs and float64 reference), :mod:`.launchers` (how a step is
bound), :mod:`.steps` (the ladder and its predictions, data), :mod:`.record` (``python -m gpulab
record hopper``) and :mod:`.views` (what the notebook shows of a run).
"""
from ...ladder import Chapter, owned_names
from . import launchers, problem, record, steps, views
from .problem import TITLE

CHAPTER = Chapter(problem.NAME, TITLE, steps.STEPS, problem.cases(), predicted=steps.PREDICTED, views=views,
                  recording=record.benchmark_all, cases=problem.cases, seed=None, exercises=(steps.EXERCISE,),
                  profile_driver=record.profile_driver)
benchmark_all, profile_driver = CHAPTER.recording, CHAPTER.profile_driver
#: Compatibility shim: the names the notebook reads as ``hopper.X`` (``hopper.MAIN_SIZE``), from the module that
#: owns each, until its cells name that module.
__getattr__ = owned_names(__name__, (problem, launchers, steps, record, views))
