"""The measuring chapter's exercises, found through the toc by gpulab.exercises (which explains them)."""
from gpulab.exercises import Exercise, measured_ceilings, recorded_run


def _inputs_2(case: dict) -> dict:
    run = recorded_run("measuring", case)
    return {"ladder": run.experiment("ladder"), "ceilings": measured_ceilings(run)}


EXERCISES = [
    Exercise("measuring.1", "measuring", "a grid-stride loop", 4, "kernel",
             "kernels/measuring/03_saxpy_grid_stride.cu", step="03", public=({"seed": 0},),
             hint="With 8 blocks of 256 threads, every element past 2047 needs the loop; "
                  "the loop's bound must be n itself (i < n)."),
    Exercise("measuring.2", "measuring", "the bandwidth each variant reaches", 2, "function",
             "book/measuring/measuring.ipynb", cell="31037b4e", function="bandwidth_fractions",
             signature="bandwidth_fractions(ladder, ceilings)", public=({},), inputs=_inputs_2,
             uses_run=True,
             hint="Use the largest size only; bytes / (median_ms / 1e3) is bytes per second; divide "
                  "by the measured device-copy bandwidth, which is in GB/s."),
]
