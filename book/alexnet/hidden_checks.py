"""The hidden checks of the alexnet chapter's exercises: instructors only (see gpulab.exercises)."""
from gpulab.workloads.alexnet.problem import Layer

HIDDEN = {
    "alexnet.1a": (
        {"layers": [Layer(1, C=2, H=23, W=19, M=5, R=5, S=3, U=2, P=1),
                    Layer(2, C=3, H=9, W=9, M=6, R=3, S=3, U=1, P=1),
                    Layer(3, C=1, H=6, W=7, M=3, R=1, S=1, U=1, P=0)], "N": 3, "seed": 8111},
        {"layers": [Layer(4, C=5, H=11, W=11, M=9, R=5, S=5, U=1, P=2)], "N": 1, "seed": 8219},
    ),
    "alexnet.1b": ({"perturb": 6511}, {"perturb": 6607}),
    "alexnet.2": (
        {"step": "01", "capacity": 16e9},
        {"step": "09", "capacity": 24e9},
        {"step": "14", "capacity": 40e9},
        {"step": "07", "capacity": 8e9},
    ),
    "alexnet.3": ({"perturb": 6701}, {"perturb": 6803}),
}
