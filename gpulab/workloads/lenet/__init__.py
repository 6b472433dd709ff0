"""The LeNet chapter's workload: two convolution layers of a small network, on real digits.

:mod:`.data` (the digits and their augmentation), :mod:`.network` (the layers' shapes, the
trained weights, the float64 reference network), :mod:`.problem` (the cases: a layer at a batch
size, its seeded inputs and float64 reference), :mod:`.launchers` (the launch families, and the
whole forward pass built from them), :mod:`.steps` (the ladder and each kernel file's prediction,
data), :mod:`.baselines` (cuDNN and PyTorch in the same run), :mod:`.record` (``python -m gpulab
record lenet``), :mod:`.views` (what the notebook shows of a run) and :mod:`.mapping` (step 10's
threads on the outputs).
"""
from ...ladder import Chapter, owned_names
from . import baselines, data, launchers, mapping, network, problem, record, steps, views
from .problem import TITLE

CHAPTER = Chapter(problem.NAME, TITLE, steps.STEPS, problem.cases(), predicted=steps.PREDICTED, views=views,
                  recording=record.benchmark_all, cases=problem.cases, seed=None, exercises=(steps.EXERCISE,),
                  profile_driver=record.profile_driver)
benchmark_all, profile_driver = CHAPTER.recording, CHAPTER.profile_driver
#: Compatibility shim: the names the notebook and the exercises read as ``lenet.X`` (``lenet.load_weights``,
#: ``lenet.MAIN_N``), from the module that owns each, until their cells name that module.
__getattr__ = owned_names(__name__, (data, network, problem, launchers, steps, record, views))
