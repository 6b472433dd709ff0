"""Chapter 1's workload: SAXPY, z = a*x + y, declared once.

:mod:`.problem` (the sizes, the work, the seeded inputs, the float64 reference, the case, the
working set against the L2), :mod:`.launchers` (a step's kernel on its grid, bound to a case),
:mod:`.steps` (the ladder, the exercise's step and each kernel file's prediction, data),
:mod:`.views` (what the notebook shows of a recorded run) and :mod:`.record` (``python -m gpulab
record measuring``, and the notebook's live run). Each module imports only those listed before it.
"""
from ...ladder import Chapter, owned_names
from . import launchers, problem, record, steps, views
from .problem import TITLE

CHAPTER = Chapter(problem.NAME, TITLE, steps.STEPS, problem.cases(), predicted=steps.PREDICTED, views=views,
                  recording=record.benchmark_all, cases=problem.cases, seed=0, exercises=[steps.EXERCISE])
benchmark_all = CHAPTER.recording
#: The name the chapter's notebook imports this package under (``from gpulab.workloads import
#: measuring as saxpy``): exercise cells run with it.
IMPORTED_AS = "saxpy"
#: Compatibility shim: the names the notebook reads as ``saxpy.X`` (``saxpy.MAIN_SIZE``,
#: ``saxpy.speedup_by_size``), from the module that owns each.
__getattr__ = owned_names(__name__, (problem, launchers, steps, views, record))
