"""The basics chapter's exercises, found through the toc by gpulab.exercises (which explains them)."""
from gpulab.exercises import Exercise


EXERCISES = [
    Exercise("basics.1", "basics", "a map with a guard", 2, "kernel", "kernels/basics/exercise_01_relu.cu",
             step="E1", module="gpulab.puzzles",
             public=({"sizes": [1, 255, 1000, 4099], "seed": 0},),
             hint="The global index is blockIdx.x * blockDim.x + threadIdx.x; the threads of the last "
                  "block with an index at or past n must neither read x nor write y."),
    Exercise("basics.2", "basics", "two dimensions", 2, "kernel", "kernels/basics/exercise_02_broadcast_add.cu",
             step="E2", module="gpulab.puzzles",
             public=({"sizes": [(1, 1), (5, 70), (33, 17)], "seed": 0},),
             hint="Column c = blockIdx.x * blockDim.x + threadIdx.x, row r from the y parts; guard r < H "
                  "and c < W; rows are W floats apart."),
    Exercise("basics.3", "basics", "a histogram with atomics", 2, "kernel",
             "kernels/basics/exercise_03_histogram.cu", step="E3", module="gpulab.puzzles",
             public=({"sizes": [(1000, 16), (257, 3)], "seed": 0},),
             hint="One atomicAdd(&counts[values[i]], 1u) per element i < n; a plain counts[v] += 1 loses "
                  "updates when two threads add to one bin at once."),
]
