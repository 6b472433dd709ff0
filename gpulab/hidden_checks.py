"""Hidden checks: the held-out cases the grader runs besides each exercise's public ones.

Instructors only: ``python -m gpulab student`` leaves this file out, and the grader's
feedback names a hidden check only by its number and the kind of failure, never its
inputs. Keys are exercise ids (see :data:`gpulab.exercises.EXERCISES`); each case has
the form of that exercise's public cases (kernel exercises: the keyword arguments of
the chapter's ``check_steps``, plus ``"step"`` for launch changes; function exercises:
what the exercise's ``inputs`` builder reads, with ``"perturb": seed`` for a copy of
the recorded run whose times are scaled by seeded random factors).
"""
from .workloads.alexnet import Layer
from .workloads.training import Dims
from .workloads.convpool import Shape

HIDDEN = {
    "basics.1": (
        {"sizes": [2, 256, 257, 5000, 65_539], "seed": 3301},
        {"sizes": [511, 769], "seed": 3413},
    ),
    "basics.2": (
        {"sizes": [(2, 33), (9, 1), (40, 65)], "seed": 3517},
        {"sizes": [(64, 32), (1, 100)], "seed": 3631},
    ),
    "basics.3": (
        {"sizes": [(5003, 7), (300, 1), (2000, 300)], "seed": 3739},
        # Two threads adding to one bin without an atomic: a data race the checker names.
        {"sizes": [(700, 5)], "seed": 3851, "races": True},
    ),
    "measuring.1": (
        {"sizes": [2048, 2049, 65_537, 300_007], "seed": 7103},
        {"sizes": [5000, 123_457], "seed": 7211, "step": {"fixed_grid": 3}},
        {"sizes": [17, 4096], "seed": 7307, "step": {"fixed_grid": 1}},
    ),
    "fcnet.1": (
        {"sizes": (1, 17, 4111), "seed": 9151},
        {"sizes": (257,), "seed": 9203},
    ),
    "alexnet.1a": (
        {"layers": [Layer(1, C=2, H=23, W=19, M=5, R=5, S=3, U=2, P=1),
                    Layer(2, C=3, H=9, W=9, M=6, R=3, S=3, U=1, P=1),
                    Layer(3, C=1, H=6, W=7, M=3, R=1, S=1, U=1, P=0)], "N": 3, "seed": 8111},
        {"layers": [Layer(4, C=5, H=11, W=11, M=9, R=5, S=5, U=1, P=2)], "N": 1, "seed": 8219},
    ),
    "measuring.2": ({"perturb": 6101}, {"perturb": 6203}),
    "fcnet.2": (
        {"random": 5101},
        {"random": 5209, "row_halves": 64},
        {"vectors": [0] * 32, "features": list(range(32))},
        {"vectors": [i // 4 for i in range(32)], "features": [i % 4 for i in range(32)], "row_halves": 40},
        {"vectors": list(range(32)), "features": [0] * 32, "row_halves": 64},
    ),
    "fcnet.3": ({"perturb": 6301}, {"perturb": 6407}),
    "alexnet.1b": ({"perturb": 6511}, {"perturb": 6607}),
    "alexnet.2": (
        {"step": "01", "capacity": 16e9},
        {"step": "09", "capacity": 24e9},
        {"step": "14", "capacity": 40e9},
        {"step": "07", "capacity": 8e9},
    ),
    "alexnet.3": ({"perturb": 6701}, {"perturb": 6803}),
    "lenet.1": (
        {"sizes": (2, 13), "seed": 9511},
        {"sizes": (33,), "seed": 9613},
    ),
    "lenet.2": (
        {"threads": 96, "blocks": 5},      # 15 warps: 4 to a quarter, 128; one pool of 65,536 would say 136
        {"threads": 100, "blocks": 4},     # 4 warps a block, not 3
        {"threads": 288, "blocks": 3},
        {"threads": 32, "blocks": 33},     # 33 warps fit, but more than 32 blocks: 0
        {"threads": 1024, "blocks": 3},    # 96 warps: 0
        {"threads": 160, "blocks": 7},
        {"threads": 64, "blocks": 3},      # 2 warps to a quarter: 256 would fit, a thread holds 255
    ),
    "lenet.3": ({"random": 7121}, {"random": 7229, "streams": 1}, {"random": 7331}, {"step": "12h", "streams": 3}),
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
    "multigpu.1": (
        {"p": 4, "n": 13, "seed": 8101},
        {"p": 5, "n": 3, "seed": 8117},
        {"p": 2, "n": 1, "seed": 8123},
        {"p": 7, "n": 997, "seed": 8147},
    ),
    "multigpu.2": (
        {"fixed_ms": 0.05, "ms_per_doc": 2e-5, "grad_bytes": 4e6, "bw_gbs": 50.0, "alpha_us": 20.0},
        {"fixed_ms": 0.0, "ms_per_doc": 1e-4, "grad_bytes": 16.8e6, "bw_gbs": 450.0, "alpha_us": 0.0},
        {"fixed_ms": 0.01, "ms_per_doc": 3e-5, "grad_bytes": 64e6, "bw_gbs": 25.0, "alpha_us": 10.0,
         "target": 0.6},
        {"fixed_ms": 2.0, "ms_per_doc": 1e-7, "grad_bytes": 16.8e6, "bw_gbs": 300.0, "alpha_us": 6.0},
    ),
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
    "hopper.1": (
        {"swizzle": 32, "random": 9311},
        {"swizzle": 64, "stride": 16},
        {"swizzle": 0, "random": 9319},
        {"swizzle": 128, "random": 9323, "span": 65536},
    ),
    "hopper.2": (
        {"count": 3, "phases": 5, "tx": 4096, "seed": 9401},
        {"count": 1, "phases": 6, "seed": 9403},
        {"count": 4, "phases": 3, "tx": 50, "seed": 9413},
    ),
}
