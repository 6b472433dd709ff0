"""The hidden checks of the convpool chapter's exercises: instructors only (see gpulab.exercises)."""
from gpulab.workloads.convpool.problem import Shape

HIDDEN = {
    "convpool.1": (
        {"registers": 46, "threads": 256, "shared_bytes": 3200},
        {"registers": 33, "threads": 160, "shared_bytes": 0},   # 9 blocks (48 warps by sub-partition; one pool: 10)
        {"registers": 32, "threads": 96, "shared_bytes": 116736},
        {"registers": 16, "threads": 32, "shared_bytes": 0},
        {"registers": 255, "threads": 96, "shared_bytes": 0},
        {"registers": 40, "threads": 1024, "shared_bytes": 0},
    ),
    "convpool.2": (
        {"shape": Shape(N=1, C=5, H=10, W=36, M=3), "seed": 9137},
        {"shape": Shape(N=3, C=2, H=18, W=4, M=7), "seed": 9241},
    ),
    "convpool.3": ({"perturb": 6907}, {"perturb": 7013}),
}
