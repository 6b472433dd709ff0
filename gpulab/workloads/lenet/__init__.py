"""The LeNet chapter's workload: two convolution layers of a small network, on real digits.

Declared once and read by the notebook, the tests and ``python -m gpulab record lenet``:
:mod:`.data` (the digits and their augmentation), :mod:`.network` (the layers' shapes, the
trained weights, the float64 reference), :mod:`.steps` (the ladder and how each step is
launched), :mod:`.baselines` (cuDNN and PyTorch in the same run) and :mod:`.record` (the
benchmark of the recorded run).
"""
from .record import CHAPTER, benchmark_all, profile_driver
from .data import CLASSES, IMAGE, TEST_BATCH, DataError, load_digits, test_batch, test_inputs
from .network import (CONV1, CONV2, FLAT, HIDDEN, LAYERS, Conv, accuracy, forward, load_weights, pool2,
                      predict)
from .views import gpu_comparison
from .steps import (CHECK_SIZES, EXERCISE, STEP, STEPS, Forward, Step, check_forward,
                    check_steps, layer_launch, run_forward, run_layer)

TITLE = "A LeNet-style network's two convolution layers, on real handwritten digits"
#: The report's batch sizes.
BATCHES = (100, 1_000, 10_000)
MAIN_N = 10_000
