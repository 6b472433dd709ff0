"""The fcnet chapter's exercises, found through the toc by gpulab.exercises (which explains them)."""
import numpy as np

from gpulab.exercises import Exercise, measured_ceilings, recorded_run
from gpulab.workloads import fcnet


def _inputs_2(case: dict) -> dict:
    if "random" in case:
        rng = np.random.default_rng(case["random"])
        return {"vectors": rng.integers(0, 32, 32), "features": rng.integers(0, 72, 32),
                "row_halves": case.get("row_halves", 72)}
    return {"vectors": np.asarray(case["vectors"]), "features": np.asarray(case["features"]),
            "row_halves": case.get("row_halves", 72)}


def _inputs_3(case: dict) -> dict:
    run = recorded_run("fcnet", case)
    return {"large": fcnet.ladder(run.timings, "large"), "ceilings": measured_ceilings(run)}


_LANES = list(range(32))

EXERCISES = [
    Exercise("fcnet.1", "fcnet", "fuse the ReLU into step 1's matrix product", 4, "kernel",
             "kernels/fcnet/16_exercise_matmul_relu.cu", step="16", public=({"seed": 0},), number="2",
             hint="Guard both row < M and col < N, sum over all K, and apply max(C, 0) only when "
                  "apply_relu is non-zero (the last layer has no ReLU)."),
    Exercise("fcnet.2", "fcnet", "count the bank conflicts of a fill", 2, "function",
             "book/fcnet/fcnet.ipynb", cell="619b1bd5", function="ways",
             signature="ways(vectors, features, row_halves=72)", number="1",
             public=({"vectors": _LANES, "features": [5] * 32},
                     {"vectors": [i % 8 for i in _LANES], "features": [4 + i // 8 for i in _LANES]}),
             inputs=_inputs_2, tolerance=0.0, reveal=False,
             hint="Two halves share one 4-byte word: count distinct words per bank (word % 32), "
                  "not lanes, and take the largest count."),
    Exercise("fcnet.3", "fcnet", "how far from each floor?", 2, "function",
             "book/fcnet/fcnet.ipynb", cell="de400ff3", function="floor_multiples",
             signature="floor_multiples(large, ceilings)", public=({},), inputs=_inputs_3, uses_run=True,
             hint="Take the fastest row of each precision in the large case; the floors are "
                  "fcnet.floors_ms(n, tflops=..., gbs=...) with the measured FP32 rate (in TFLOP/s) "
                  "and bandwidth (GB/s)."),
]
