"""The lenet chapter's exercises, found through the toc by gpulab.exercises (which explains them)."""
import numpy as np

from gpulab.exercises import Exercise, recorded_run
from gpulab.workloads.lenet import views
from gpulab.workloads.lenet.network import LAYERS, Conv


def _inputs_1b(case: dict) -> dict:
    """A layer of the chapter (by name) or of the shape [C, H, M], and the batch."""
    layer = case["layer"]
    if isinstance(layer, str):
        layer = {conv.name: conv for conv in LAYERS}[layer]
    else:
        layer = Conv("layer", C=layer[0], H=layer[1], M=layer[2])
    return {"layer": layer, "N": case["N"]}


def _inputs_2(case: dict) -> dict:
    return {"threads": case["threads"], "blocks": case["blocks"]}


def _inputs_3(case: dict) -> dict:
    """One-stream copy-in, forward-pass and copy-out times: a step's, from the recorded
    timeline (``"step"``), or seeded random ones (``"random"``), and the number of streams."""
    if "random" in case:
        rng = np.random.default_rng(case["random"])
        h2d, kernel, d2h = rng.uniform(0.01, 10.0, 3)
        return {"h2d_ms": float(h2d), "kernel_ms": float(kernel), "d2h_ms": float(d2h),
                "streams": int(case.get("streams", rng.integers(2, 9)))}
    lanes = views.step_labels(recorded_run("lenet", case).tables["timeline"])
    return {**views.one_stream_ms(lanes, case["step"]), "streams": case["streams"]}


EXERCISES = [
    Exercise("lenet.1a", "lenet", "ReLU and pool in step 7's epilogue (the kernel)", 4, "kernel",
             "kernels/lenet/exercise_01_pool_epilogue.cu", step="E1", public=({"sizes": (1, 7), "seed": 0},),
             number="3a",
             hint="Each thread computes all four outputs of its window (rows 2i, 2i + 1, columns 2j, 2j + 1), "
                  "every one a full sum over C x 7 x 7, and writes max(0, the largest)."),
    Exercise("lenet.1b", "lenet", "ReLU and pool in step 7's epilogue (the bytes it saves)", 1, "function",
             "book/lenet/lenet.ipynb", cell="lenet-ex1b-sol", function="bytes_written",
             signature="bytes_written(layer, N)", number="3b",
             public=({"layer": "conv1", "N": 10_000}, {"layer": "conv2", "N": 1}), inputs=_inputs_1b,
             tolerance=0.0, reveal=False,
             hint="4 bytes a float; step 7 writes N x M x E x E conv outputs, relu_pool N x M x P x P pooled ones "
                  "(P = E // 2: an odd last row or column is not pooled), the fused kernel only the pooled ones."),
    Exercise("lenet.2", "lenet", "how many registers does __launch_bounds__ leave?", 2, "function",
             "book/lenet/lenet.ipynb", cell="e9cb45ac", function="launch_bounds_registers",
             signature="launch_bounds_registers(threads, blocks)", number="2",
             public=({"threads": 289, "blocks": 2}, {"threads": 1024, "blocks": 1}, {"threads": 32, "blocks": 1}),
             inputs=_inputs_2, tolerance=0.0, reveal=False,
             hint="Warps per block round up (289 threads are 10 warps); the SM's blocks x warps spread over its "
                  "four quarters (round up); a quarter's 16,384 registers over its warps, rounded down to whole "
                  "units of 256, over 32 threads; at most 255; 0 past 64 warps or 32 blocks."),
    Exercise("lenet.3", "lenet", "what will four streams buy?", 2, "function",
             "book/lenet/lenet.ipynb", cell="e3cce15b", function="pipelined_ms",
             signature="pipelined_ms(h2d_ms, kernel_ms, d2h_ms, streams)", number="1",
             public=({"step": "01", "streams": 4}, {"step": "12", "streams": 4}), inputs=_inputs_3,
             uses_run=True,
             hint="With c equal chunks, each stage of a chunk takes 1/c of its one-stream time; the first chunk "
                  "goes through all three stages, and every later chunk adds one chunk of the slowest stage."),
]
