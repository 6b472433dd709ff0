"""The convpool chapter's exercises, found through the toc by gpulab.exercises (which explains them)."""
from gpulab.exercises import Exercise, measured_ceilings, recorded_run
from gpulab.workloads.convpool.problem import Shape


def _inputs_1(case: dict) -> dict:
    return {"registers": case["registers"], "threads": case["threads"], "shared_bytes": case.get("shared_bytes", 0)}


def _inputs_3(case: dict) -> dict:
    run = recorded_run("convpool", case)
    return {"ladder": run.experiment("ladder"), "cudnn_conv": run.experiment("cudnn_conv"),
            "copy_gbs": measured_ceilings(run).loc["memory bandwidth (GB/s)", "measured"]}


EXERCISES = [
    Exercise("convpool.1", "convpool", "the occupancy calculator", 2, "function",
             "book/convpool/convpool.ipynb", cell="c0a1d048", function="occupancy",
             signature="occupancy(registers, threads, shared_bytes=0)",
             public=({"registers": 72, "threads": 256, "shared_bytes": 3840},
                     {"registers": 32, "threads": 256, "shared_bytes": 61440},
                     {"registers": 72, "threads": 1024, "shared_bytes": 0},
                     {"registers": 40, "threads": 64, "shared_bytes": 0}),
             inputs=_inputs_1, tolerance=0.0,
             hint="Resident blocks are the smallest of four limits: registers (per warp, rounded up to "
                  "256; whole warps in each of the four quarters of 16,384; whole blocks), shared memory "
                  "(each block's plus 1 KB, out of 228 KB), 64 warps and 32 blocks; occupancy is blocks x warps per block / 64 (0 if none fits)."),
    Exercise("convpool.2", "convpool", "fuse the pool into step 2", 4, "kernel",
             "kernels/convpool/exercise_pooled_registers.cu", step="E2",
             # Race-checked: the chapter's check shape with fewer channels and filters (every fault
             # of the exercise is in rows, taps and windows, which keep their sizes).
             public=({"shape": Shape(N=2, C=6, H=14, W=20, M=9), "seed": 0},),
             hint="Input row i feeds output row 0 with tap i (i < 5) and output row 1 with tap i - 1 "
                  "(i > 0); a window is the max of both rows' sums 2q and 2q + 1, plus b[m], clipped at "
                  "zero; skip windows at or past PF."),
    Exercise("convpool.3", "convpool", "what cuDNN's separate ReLU and pool cost", 2, "function",
             "book/convpool/convpool.ipynb", cell="c0a1d055", function="epilogue_costs",
             signature="epilogue_costs(ladder, cudnn_conv, copy_gbs)", public=({},), inputs=_inputs_3,
             uses_run=True,
             hint="Per N in (1, 8, 32): the median of the rows whose variant is CUDNN_LAYER (an empty answer: "
                  "no row matched) minus the fp16 convolution's; "
                  "the round trip is the fp16 pre-pool tensor written and read once "
                  "(convpool.LAYER.batch(N).prepool_bytes(2)) over the bandwidth in GB/s, in ms."),
]
