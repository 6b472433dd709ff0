"""The fcnet chapter's workload: a 72-64-64-4 fully-connected network's inference, declared once.

:mod:`.problem` (the network, its cases, the seeded weights and inputs, the work and the float64
reference), :mod:`.launchers` (a step as a sequence of kernel launches, bound to a case),
:mod:`.steps` (the ladder, the exercise's step and each kernel file's prediction, data),
:mod:`.profile` (the Nsight Compute view, ``python -m gpulab profile-driver fcnet``),
:mod:`.views` (what the notebook shows of a recorded run) and :mod:`.record` (``python -m gpulab
record fcnet``). Each module imports only those listed before it, except that :mod:`.record`
reads the views' :func:`~.views.ladder` too.
"""
from ...ladder import Chapter, owned_names
from . import launchers, problem, profile, record, steps, views
from .problem import TITLE

CHAPTER = Chapter(problem.NAME, TITLE, steps.STEPS, problem.cases(), predicted=steps.PREDICTED, views=views,
                  recording=record.benchmark_all, cases=problem.cases, seed=0, exercises=[steps.EXERCISE],
                  profile_driver=profile.profile_driver)
benchmark_all, profile_driver = CHAPTER.recording, CHAPTER.profile_driver
#: Compatibility shim: the names the notebook reads as ``fcnet.X`` (``fcnet.ladder_figure``, ``fcnet.floors_ms``), from the module that
#: owns each, until its cells name that module.
__getattr__ = owned_names(__name__, (problem, launchers, steps, profile, views, record))
