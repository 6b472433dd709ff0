"""The hidden checks of the training chapter's exercises: instructors only (see gpulab.exercises)."""
from gpulab.workloads.training.problem import Dims

HIDDEN = {
    "training.1": (
        {"dims": (Dims(5, 1003, 17, 2),), "seed": 4111},
        {"dims": (Dims(66, 2003, 128, 4),), "seed": 4127},
    ),
    "training.2": (
        {"docs": 3001, "batch": 100, "stream": 3771},
        {"docs": 1507, "batch": 7, "stream": 3779, "vocab": 509},
    ),
    "training.3": (
        {"seed": 9173, "n": 5003, "typical": 3e-8},
        {"seed": 9181, "n": 101, "typical": 1.0},
        {"seed": 9187, "n": 7001, "typical": 2e-7},
    ),
}
