"""The alexnet chapter's exercises, found through the toc by gpulab.exercises (which explains them)."""
from gpulab.exercises import Exercise, measured_ceilings, recorded_run
from gpulab.workloads import alexnet
from gpulab.workloads.alexnet.problem import CHECK_LAYERS, Layer


def _inputs_totals(case: dict) -> dict:
    return {"totals": alexnet.layer_totals(recorded_run("alexnet", case).experiment("ladder"))}


def _inputs_2(case: dict) -> dict:
    return {"step": alexnet.CHAPTER.step(case["step"]),
            "capacity": case["capacity"]}


def _inputs_3(case: dict) -> dict:
    run = recorded_run("alexnet", case)
    ladder = run.experiment("ladder")
    return {"main": ladder[ladder["size"] == alexnet.MAIN_N],
            "fp32_rate": measured_ceilings(run).loc["FP32 rate (GFLOP/s)", "measured"]}


def _describe_3(answer: dict) -> str:
    shares = [f"layer {layer} at {share:.0%}" for layer, share in answer.items()]
    return "step 14 runs " + ", ".join(shares) + " of the measured FP32 rate"


def _check_layers():
    """The chapter's five reduced layers, the first one smaller."""
    return [Layer(1, C=3, H=35, W=35, M=10, R=11, S=11, U=4, P=0), *CHECK_LAYERS[1:]]


EXERCISES = [
    Exercise("alexnet.1a", "alexnet", "four filters per block (the kernel)", 4, "kernel",
             "kernels/alexnet/exercise_01_four_filters.cu", step="E1",
             # Race-checked: the chapter's five reduced layers, the first one smaller (7 x 7 outputs,
             # not 33 x 33: 11 x 11 filters at stride 4 all the same), at a few seconds of CPU.
             public=({"layers": _check_layers(), "seed": 0},),
             hint="Every filter index m0 + k at or past M must be skipped when reading w, and "
                  "rows and columns outside the input (the padding) contribute nothing."),
    Exercise("alexnet.1b", "alexnet", "four filters per block (the speedup)", 1, "function",
             "book/alexnet/alexnet.ipynb", cell="20e407f9", function="speedup_over_step_2",
             signature="speedup_over_step_2(totals)", public=({},), inputs=_inputs_totals, uses_run=True,
             hint="Step 2's five-layer time at N = 128 divided by step E1's "
                  "(alexnet.step_ms(totals, ...)); above 1 means E1 is faster."),
    Exercise("alexnet.2", "alexnet", "how large a batch fits?", 2, "function",
             "book/alexnet/alexnet.ipynb", cell="4adb18aa", function="largest_batch",
             signature="largest_batch(step, capacity=80e9)",
             public=({"step": "07", "capacity": 80e9}, {"step": "13", "capacity": 80e9}),
             inputs=_inputs_2, tolerance=0.0, reveal=False,
             hint="Double N while every layer's alexnet.footprint_bytes(step, layer, N) fits; "
                  "return the last N that fitted (a power of two)."),
    Exercise("alexnet.3", "alexnet", "which layer holds step 14 back?", 2, "function",
             "book/alexnet/alexnet.ipynb", cell="2d08d205", function="step14_fractions",
             signature="step14_fractions(main, fp32_rate)", public=({},), inputs=_inputs_3, uses_run=True,
             hint="Per layer: flops / median_ms is FLOP per ms; the FP32 rate is in GFLOP/s. "
                  "Key the dict by the layer number (an int).", describe=_describe_3),
]
