"""The AlexNet chapter's workload: the five convolution layers, declared once, for the two
AlexNet chapters (book/alexnet and book/alexnet_hopper read one ladder and one recorded run).

:mod:`.problem` (the layers, the :class:`~.problem.Conv` cases, inputs and float64 reference),
:mod:`.launchers` (the launch families; the geometry of steps 18 on in :mod:`.tc`,
:mod:`.winograd`, :mod:`.wgmma` and :mod:`.wgmma32`), :mod:`.steps` (the ladder and its
predictions, data), :mod:`.baselines` (cuDNN's paths), :mod:`.profile` (the Nsight Compute
profile), :mod:`.record` (``python -m gpulab record alexnet``) and :mod:`.views` (what the
notebooks show of a run).
"""
from ...ladder import Chapter, owned_names
from . import baselines, launchers, problem, profile, record, steps, tc, views, wgmma, wgmma32, winograd
from .problem import TITLE

CHAPTER = Chapter(problem.NAME, TITLE, steps.STEPS, problem.cases(), predicted=steps.PREDICTED, views=views,
                  recording=record.benchmark_all, cases=problem.cases, seed=None, exercises=(steps.EXERCISE,),
                  profile_driver=profile.profile_driver)
benchmark_all, profile_driver = CHAPTER.recording, CHAPTER.profile_driver
#: Compatibility shim: the names the notebooks read as ``alexnet.X`` (``alexnet.layer_totals``), from the module
#: that owns each, until their cells name that module.
__getattr__ = owned_names(__name__, (problem, launchers, steps, record, views, profile, baselines, winograd))
