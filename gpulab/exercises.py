"""Every exercise of the lab, declared once.

The book's check cells (``exercises.check("fcnet.2", globals())``), the student
export (``python -m gpulab student``), the grader (``python -m gpulab grade``) and
the tests all read :data:`EXERCISES`. An exercise is one of two kinds:

``kernel``
    The student edits a ``.cu`` file (``file``, relative to the repository root).
    Its check runs the chapter's ``check_steps`` on the workload's exercise step
    (``step``, an attribute of the chapter's workload module) with the student's
    file, once per *case*: a case is the keyword arguments ``check_steps`` takes
    (sizes, layers, N, seed), plus optionally ``"step": {...}`` to change the
    step's launch (e.g. a different fixed grid).

``function``
    The student edits one notebook cell (``file`` and ``cell``, the cell's id),
    which must define the function ``function``. Its check calls that function
    once per case with the keyword arguments ``inputs(case)`` builds, and
    compares the result with the instructor's solution cell run on the same
    inputs (in the student copy, with the answers the export stored for the
    public cases), numbers within ``tolerance`` (relative).

Public cases (``public``) are what the student's check cell runs. Hidden cases
(held-out sizes, seeds, shapes and perturbed runs) live in
``gpulab/hidden_checks.py``, which the student export leaves out; the grader
runs both and never shows a hidden case's inputs.

Adding an exercise
------------------
1. Write it in the chapter: a kernel with ``// BEGIN SOLUTION`` ... ``// END SOLUTION``
   (and a workload step for it), or a notebook code cell (give it a stable id) whose
   solution sits between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` and defines a
   function. Below it, a check cell: ``exercises.check("<id>", globals())``
   (kernels: ``exercises.check("<id>", backend=backend)``).
2. Add an :class:`Exercise` to :data:`EXERCISES` (for a function exercise, an
   ``inputs`` builder: case -> keyword arguments).
3. Add its hidden cases to ``gpulab/hidden_checks.py`` and two or more known-wrong
   answers under ``tests/fixtures/grading/wrong/<id>/`` (a ``.cu`` file, or a ``.py``
   file holding the cell's source), each opening with a comment saying what is wrong.
   ``tests/test_grading.py`` then proves the checks accept the solution and reject
   every wrong answer.
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from . import paths
from .errors import GpulabError
from .ladder import failures, find

#: The text the student export puts in place of a solution.
PLACEHOLDER = "TODO: your code here"
#: Where the student export stores the public answers of function exercises.
EXPECTED_FILE = Path("labdata") / "exercises" / "expected.json"


class ExerciseNotSolved(GpulabError):
    """The student has not written the exercise yet (its placeholder is still there)."""

    def _render_traceback_(self):   # IPython shows this instead of a traceback
        return [str(self)]


class ExerciseFailed(GpulabError, AssertionError):
    """The student's answer is wrong; the message says how."""

    def _render_traceback_(self):
        return [str(self)]


@dataclass(frozen=True)
class Exercise:
    """One gradable exercise (or one part of an exercise)."""

    id: str                  # "<chapter>.<number>[<part>]", e.g. "alexnet.1a"
    chapter: str
    title: str
    points: int
    kind: str                # "kernel" or "function"
    file: str                # the file the student edits, relative to the repository root
    cell: str = ""           # function exercises: the id of the notebook cell the student edits
    function: str = ""       # function exercises: the function that cell defines
    signature: str = ""      # function exercises: how the book states it, e.g. "ways(vectors, features)"
    step: str = "EXERCISE"   # kernel exercises: the workload module's attribute holding the step
    module: str = ""         # kernel exercises of a chapter with no workload: the module holding step
                             # and check_steps (basics: "gpulab.puzzles")
    public: tuple = ()       # the public cases (see the module docstring)
    inputs: Callable[[dict], dict] | None = field(default=None, compare=False, repr=False)
    uses_run: bool = False   # function exercises: inputs come from the chapter's recorded run
    tolerance: float = 0.01  # relative, for numbers in a function's answer
    reveal: bool = True      # a wrong public answer is shown next to the right one
    hint: str = ""           # shown with a wrong answer: the usual mistakes

    def __post_init__(self):
        if self.kind not in ("kernel", "function"):
            raise ValueError(f"exercise {self.id}: kind must be 'kernel' or 'function', got {self.kind!r}")
        if self.kind == "function" and not (self.cell and self.function and self.inputs):
            raise ValueError(f"exercise {self.id}: a function exercise needs cell, function and inputs")
        if not self.public:
            raise ValueError(f"exercise {self.id}: declare at least one public case")

    @property
    def where(self) -> str:
        """Where the student works, in their terms."""
        if self.kind == "kernel":
            return self.file
        return f"the cell defining `{self.signature or self.function}` in {self.file}"


# ----------------------------------------------------------------- inputs of function exercises
def _run(chapter: str, case: dict):
    """The chapter's recorded run; with ``case["perturb"]``, a copy whose times are scaled
    by seeded random factors (a held-out run: hard-coded numbers fail on it)."""
    from .runs import load_run
    run = load_run(chapter)
    seed = case.get("perturb")
    if seed is None:
        return run
    rng = np.random.default_rng(seed)
    timings = run.timings.copy()
    factor = rng.lognormal(0.0, 0.3, len(timings))
    for column in ("median_ms", "q1_ms", "q3_ms", "min_ms", "max_ms"):
        if column in timings:
            timings[column] = timings[column] * factor
    return dataclasses.replace(run, timings=timings)


def _ceilings(run) -> pd.DataFrame:
    from .roofline import ceilings_table
    return ceilings_table(run.timings, run.gpu)


def _measuring_2(case: dict) -> dict:
    run = _run("measuring", case)
    return {"ladder": run.experiment("ladder"), "ceilings": _ceilings(run)}


def _fcnet_2(case: dict) -> dict:
    if "random" in case:
        rng = np.random.default_rng(case["random"])
        return {"vectors": rng.integers(0, 32, 32), "features": rng.integers(0, 72, 32),
                "row_halves": case.get("row_halves", 72)}
    return {"vectors": np.asarray(case["vectors"]), "features": np.asarray(case["features"]),
            "row_halves": case.get("row_halves", 72)}


def _fcnet_3(case: dict) -> dict:
    from .workloads import fcnet
    run = _run("fcnet", case)
    return {"large": fcnet.ladder(run.timings, "large"), "ceilings": _ceilings(run)}


def _alexnet_totals(case: dict) -> dict:
    from .workloads import alexnet
    return {"totals": alexnet.layer_totals(_run("alexnet", case).experiment("ladder"))}


def _alexnet_2(case: dict) -> dict:
    from .workloads import alexnet
    return {"step": find([*alexnet.STEPS, alexnet.EXERCISE], case["step"]),
            "capacity": case["capacity"]}


def _alexnet_3(case: dict) -> dict:
    from .workloads import alexnet
    run = _run("alexnet", case)
    ladder = run.experiment("ladder")
    return {"main": ladder[ladder["size"] == alexnet.MAIN_N],
            "fp32_rate": _ceilings(run).loc["FP32 rate (GFLOP/s)", "measured"]}


def _lenet_2(case: dict) -> dict:
    return {"threads": case["threads"], "blocks": case["blocks"]}


def _lenet_3(case: dict) -> dict:
    """One-stream copy-in, forward-pass and copy-out times: a step's, from the recorded
    timeline (``"step"``), or seeded random ones (``"random"``), and the number of streams."""
    if "random" in case:
        rng = np.random.default_rng(case["random"])
        h2d, kernel, d2h = rng.uniform(0.01, 10.0, 3)
        return {"h2d_ms": float(h2d), "kernel_ms": float(kernel), "d2h_ms": float(d2h),
                "streams": int(case.get("streams", rng.integers(2, 9)))}
    from .workloads.lenet import results
    lanes = results.step_labels(_run("lenet", case).tables["timeline"])
    return {**results.one_stream_ms(lanes, case["step"]), "streams": case["streams"]}


def _alexnet_check_layers():
    from .workloads.alexnet import CHECK_LAYERS, Layer
    return [Layer(1, C=3, H=35, W=35, M=10, R=11, S=11, U=4, P=0), *CHECK_LAYERS[1:]]


def _convpool_shape(**sizes):
    from .workloads.convpool import Shape
    return Shape(**sizes)


def _training_dims(B: int, V: int, *HC: int):
    from .workloads.training import Dims
    return Dims(B, V, *HC)


def _training_2(case: dict) -> dict:
    from .workloads.training import data
    c = data.sample(case["docs"], vocab=case.get("vocab", data.VOCAB), stream=case["stream"])
    return {"indptr": c.indptr, "indices": c.indices, "batch": case["batch"]}


def _training_3(case: dict) -> dict:
    rng = np.random.default_rng(case["seed"])
    n = case["n"]
    values = rng.lognormal(np.log(case["typical"]), 2.0, n) * rng.choice([-1.0, 1.0], n)
    values[rng.random(n) < 0.1] = 0.0          # some exact zeros, which do not count
    return {"values": values}


def _multigpu_1(case: dict) -> dict:
    # Whole numbers in float32: every order of summation gives the same sums exactly.
    rng = np.random.default_rng(case["seed"])
    return {"buffers": [rng.integers(-100, 100, case["n"]).astype(np.float32) for _ in range(case["p"])]}


def _multigpu_2(case: dict) -> dict:
    return dict(case)


def _convpool_1(case: dict) -> dict:
    return {"registers": case["registers"], "threads": case["threads"], "shared_bytes": case.get("shared_bytes", 0)}


def _convpool_3(case: dict) -> dict:
    run = _run("convpool", case)
    return {"ladder": run.experiment("ladder"), "cudnn_conv": run.experiment("cudnn_conv"),
            "copy_gbs": _ceilings(run).loc["memory bandwidth (GB/s)", "measured"]}


def _hopper_1(case: dict) -> dict:
    """Byte offsets into a swizzled tile: a whole 1024-byte tile, 16-byte chunk starts, or random
    offsets (any byte, several tiles on)."""
    if "random" in case:
        rng = np.random.default_rng(case["random"])
        return {"offsets": rng.integers(0, case.get("span", 8192), 64), "swizzle": case["swizzle"]}
    return {"offsets": np.arange(0, case.get("span", 1024), case.get("stride", 16)), "swizzle": case["swizzle"]}


def _hopper_2(case: dict) -> dict:
    """A valid sequence of mbarrier events over ``phases`` phases of a barrier of ``count``
    arrivals (one arrival announcing ``tx`` bytes in each phase when ``tx``, landing in pieces),
    with waits of random parity anywhere."""
    rng = np.random.default_rng(case["seed"])
    count, events = case["count"], []
    for _ in range(case["phases"]):
        phase = [["arrive", 1]] * (count - 1)
        if case.get("tx"):
            cuts = np.sort(rng.choice(np.arange(1, case["tx"]), 2, replace=False))
            pieces = np.diff([0, *cuts, case["tx"]])
            first = [["arrive_expect_tx", int(case["tx"])]]
            rest = [*phase, *[["complete_tx", int(b)] for b in pieces]]
            rng.shuffle(rest)
            phase = first + list(rest)
        else:
            phase = phase + [["arrive", 1]]
        for event in phase:
            if rng.random() < 0.4:
                events.append(["wait", int(rng.integers(0, 2))])
            events.append(list(event))
        events.append(["wait", int(rng.integers(0, 2))])
    return {"count": count, "events": events}


_LANES = list(range(32))
#: The ids of the lenet notebook's exercise cells.
LENET_CELLS = {"ex2": "e9cb45ac", "ex3": "e3cce15b"}

#: Every exercise of the book, in reading order.
EXERCISES: list[Exercise] = [
    Exercise("basics.1", "basics", "a map with a guard", 2, "kernel", "kernels/basics/exercise_01_relu.cu",
             step="GUARDED_MAP", module="gpulab.puzzles",
             public=({"sizes": [1, 255, 1000, 4099], "seed": 0},),
             hint="The global index is blockIdx.x * blockDim.x + threadIdx.x; the threads of the last "
                  "block with an index at or past n must neither read x nor write y."),
    Exercise("basics.2", "basics", "two dimensions", 2, "kernel", "kernels/basics/exercise_02_broadcast_add.cu",
             step="TWO_D", module="gpulab.puzzles",
             public=({"sizes": [(1, 1), (5, 70), (33, 17)], "seed": 0},),
             hint="Column c = blockIdx.x * blockDim.x + threadIdx.x, row r from the y parts; guard r < H "
                  "and c < W; rows are W floats apart."),
    Exercise("basics.3", "basics", "a histogram with atomics", 2, "kernel",
             "kernels/basics/exercise_03_histogram.cu", step="HISTOGRAM", module="gpulab.puzzles",
             public=({"sizes": [(1000, 16), (257, 3)], "seed": 0},),
             hint="One atomicAdd(&counts[values[i]], 1u) per element i < n; a plain counts[v] += 1 loses "
                  "updates when two threads add to one bin at once."),
    Exercise("measuring.1", "measuring", "a grid-stride loop", 4, "kernel",
             "kernels/measuring/03_saxpy_grid_stride.cu", public=({"seed": 0},),
             hint="With 8 blocks of 256 threads, every element past 2047 needs the loop; "
                  "the loop's bound must be n itself (i < n)."),
    Exercise("measuring.2", "measuring", "the bandwidth each variant reaches", 2, "function",
             "book/measuring/measuring.ipynb", cell="31037b4e", function="bandwidth_fractions",
             signature="bandwidth_fractions(ladder, ceilings)", public=({},), inputs=_measuring_2,
             uses_run=True,
             hint="Use the largest size only; bytes / (median_ms / 1e3) is bytes per second; divide "
                  "by the measured device-copy bandwidth, which is in GB/s."),
    Exercise("fcnet.1", "fcnet", "fuse the ReLU into step 1's matrix product", 4, "kernel",
             "kernels/fcnet/16_exercise_matmul_relu.cu", public=({"seed": 0},),
             hint="Guard both row < M and col < N, sum over all K, and apply max(C, 0) only when "
                  "apply_relu is non-zero (the last layer has no ReLU)."),
    Exercise("fcnet.2", "fcnet", "count the bank conflicts of a fill", 2, "function",
             "book/fcnet/fcnet.ipynb", cell="619b1bd5", function="ways",
             signature="ways(vectors, features, row_halves=72)",
             public=({"vectors": _LANES, "features": [5] * 32},
                     {"vectors": [i % 8 for i in _LANES], "features": [4 + i // 8 for i in _LANES]}),
             inputs=_fcnet_2, tolerance=0.0, reveal=False,
             hint="Two halves share one 4-byte word: count distinct words per bank (word % 32), "
                  "not lanes, and take the largest count."),
    Exercise("fcnet.3", "fcnet", "how far from each floor?", 2, "function",
             "book/fcnet/fcnet.ipynb", cell="de400ff3", function="floor_multiples",
             signature="floor_multiples(large, ceilings)", public=({},), inputs=_fcnet_3, uses_run=True,
             hint="Take the fastest row of each precision in the large case; the floors are "
                  "fcnet.floors_ms(n, tflops=..., gbs=...) with the measured FP32 rate (in TFLOP/s) "
                  "and bandwidth (GB/s)."),
    Exercise("alexnet.1a", "alexnet", "four filters per block (the kernel)", 4, "kernel",
             "kernels/alexnet/exercise_01_four_filters.cu",
             # Race-checked: the chapter's five reduced layers, the first one smaller (7 x 7 outputs,
             # not 33 x 33: 11 x 11 filters at stride 4 all the same), at a few seconds of CPU.
             public=({"layers": _alexnet_check_layers(), "seed": 0},),
             hint="Every filter index m0 + k at or past M must be skipped when reading w, and "
                  "rows and columns outside the input (the padding) contribute nothing."),
    Exercise("alexnet.1b", "alexnet", "four filters per block (the speedup)", 1, "function",
             "book/alexnet/alexnet.ipynb", cell="20e407f9", function="speedup_over_step_2",
             signature="speedup_over_step_2(totals)", public=({},), inputs=_alexnet_totals, uses_run=True,
             hint="Step 2's five-layer time at N = 128 divided by step E1's "
                  "(alexnet.step_ms(totals, ...)); above 1 means E1 is faster."),
    Exercise("alexnet.2", "alexnet", "how large a batch fits?", 2, "function",
             "book/alexnet/alexnet.ipynb", cell="4adb18aa", function="largest_batch",
             signature="largest_batch(step, capacity=80e9)",
             public=({"step": "07", "capacity": 80e9}, {"step": "13", "capacity": 80e9}),
             inputs=_alexnet_2, tolerance=0.0, reveal=False,
             hint="Double N while every layer's alexnet.footprint_bytes(step, layer, N) fits; "
                  "return the last N that fitted (a power of two)."),
    Exercise("alexnet.3", "alexnet", "which layer holds step 14 back?", 2, "function",
             "book/alexnet/alexnet.ipynb", cell="2d08d205", function="step14_fractions",
             signature="step14_fractions(main, fp32_rate)", public=({},), inputs=_alexnet_3, uses_run=True,
             hint="Per layer: flops / median_ms is FLOP per ms; the FP32 rate is in GFLOP/s. "
                  "Key the dict by the layer number (an int)."),
    Exercise("lenet.1", "lenet", "ReLU and pool in step 7's epilogue", 4, "kernel",
             "kernels/lenet/exercise_01_pool_epilogue.cu", public=({"sizes": (1, 7), "seed": 0},),
             hint="Each thread computes all four outputs of its window (rows 2i, 2i + 1, columns 2j, 2j + 1), "
                  "every one a full sum over C x 7 x 7, and writes max(0, the largest)."),
    Exercise("lenet.2", "lenet", "how many registers does __launch_bounds__ leave?", 2, "function",
             "book/lenet/lenet.ipynb", cell=LENET_CELLS["ex2"], function="launch_bounds_registers",
             signature="launch_bounds_registers(threads, blocks)",
             public=({"threads": 289, "blocks": 2}, {"threads": 1024, "blocks": 1}, {"threads": 32, "blocks": 1}),
             inputs=_lenet_2, tolerance=0.0, reveal=False,
             hint="Warps per block round up (289 threads are 10 warps); the SM's blocks x warps spread over its "
                  "four quarters (round up); a quarter's 16,384 registers over its warps, rounded down to whole "
                  "units of 256, over 32 threads; at most 255; 0 past 64 warps or 32 blocks."),
    Exercise("lenet.3", "lenet", "what will four streams buy?", 2, "function",
             "book/lenet/lenet.ipynb", cell=LENET_CELLS["ex3"], function="pipelined_ms",
             signature="pipelined_ms(h2d_ms, kernel_ms, d2h_ms, streams)",
             public=({"step": "01", "streams": 4}, {"step": "12", "streams": 4}), inputs=_lenet_3,
             uses_run=True,
             hint="With c equal chunks, each stage of a chunk takes 1/c of its one-stream time; the first chunk "
                  "goes through all three stages, and every later chunk adds one chunk of the slowest stage."),
    Exercise("training.1", "training", "the SGD update with 16-byte accesses", 4, "kernel",
             "kernels/training/exercise_01_sgd_update_float4.cu",
             # Race-checked (one block at a time): sizes that cover every fault the hidden checks
             # look for -- many blocks, n % 4 of 0, 2 and 3 -- at a few seconds of CPU.
             public=({"dims": (_training_dims(37, 1001),), "seed": 0},
                     {"dims": (_training_dims(37, 1001, 30, 3),), "seed": 0}),
             hint="Thread i updates elements 4i..4i+3 when 4i+3 < n; the last n % 4 elements (b2 has 3 "
                  "in the second case, W1 30,030) are updated one float each, after the last whole float4."),
    Exercise("training.2", "training", "how much of W1 does one batch touch?", 2, "function",
             "book/training/training.ipynb", cell="tr-ex2-sol", function="rows_touched",
             signature="rows_touched(indptr, indices, batch)",
             public=({"docs": 2048, "batch": 32, "stream": 300}, {"docs": 4096, "batch": 1024, "stream": 301}),
             inputs=_training_2,
             hint="Count distinct word ids per batch (np.unique over the batch's slice of indices, which "
                  "runs from indptr[first] to indptr[first + batch]); average over whole batches only."),
    Exercise("training.3", "training", "what fp16 does to dZ1", 2, "function",
             "book/training/training.ipynb", cell="tr-ex3-sol", function="flushed_to_zero",
             signature="flushed_to_zero(values)",
             public=({"seed": 1, "n": 20000, "typical": 1e-6}, {"seed": 2, "n": 20000, "typical": 1e-3}),
             inputs=_training_3,
             hint="Round with values.astype(np.float16) and count the results equal to 0, among the "
                  "entries that were not 0 to begin with; subnormal fp16 numbers are not zero."),
    Exercise("multigpu.1", "multigpu", "a ring all-reduce in NumPy", 2, "function",
             "book/multigpu/multigpu.ipynb", cell="a1f0c017", function="ring_allreduce",
             signature="ring_allreduce(buffers)",
             public=({"p": 2, "n": 10, "seed": 0}, {"p": 3, "n": 11, "seed": 1}), inputs=_multigpu_1,
             tolerance=0.0,
             hint="Take copies of every message of a step before adding any; in the reduce-scatter GPU r "
                  "sends chunk (r - s) % p, in the all-gather chunk (r + 1 - s) % p; count the bytes of "
                  "each message sent (chunks differ in size when p does not divide n)."),
    Exercise("multigpu.2", "multigpu", "from which batch do two GPUs pay?", 2, "function",
             "book/multigpu/multigpu.ipynb", cell="a1f0c020", function="smallest_scaling_batch",
             signature="smallest_scaling_batch(fixed_ms, ms_per_doc, grad_bytes, bw_gbs, alpha_us, target=0.55)",
             public=({"fixed_ms": 0.02, "ms_per_doc": 5e-5, "grad_bytes": 16.8e6, "bw_gbs": 300.0,
                      "alpha_us": 6.0},
                     {"fixed_ms": 0.5, "ms_per_doc": 1e-6, "grad_bytes": 16.8e6, "bw_gbs": 300.0,
                      "alpha_us": 6.0}),
             inputs=_multigpu_2, tolerance=0.0, reveal=False,
             hint="Two GPUs: fixed_ms + B / 2 x ms_per_doc + the all-reduce (p = 2); one GPU: fixed_ms + "
                  "B x ms_per_doc; try B = 1,024, 2,048, ... 1,048,576 in order; return 0 when none qualifies."),
    Exercise("convpool.1", "convpool", "the occupancy calculator", 2, "function",
             "book/convpool/convpool.ipynb", cell="c0a1d048", function="occupancy",
             signature="occupancy(registers, threads, shared_bytes=0)",
             public=({"registers": 72, "threads": 256, "shared_bytes": 3840},
                     {"registers": 32, "threads": 256, "shared_bytes": 61440},
                     {"registers": 72, "threads": 1024, "shared_bytes": 0},
                     {"registers": 40, "threads": 64, "shared_bytes": 0}),
             inputs=_convpool_1, tolerance=0.0,
             hint="Resident blocks are the smallest of four limits: registers (per warp, rounded up to "
                  "256; whole warps in each of the four quarters of 16,384; whole blocks), shared memory "
                  "(each block's plus 1 KB, out of 228 KB), 64 warps and 32 blocks; occupancy is blocks x warps per block / 64 (0 if none fits)."),
    Exercise("convpool.2", "convpool", "fuse the pool into step 2", 4, "kernel",
             "kernels/convpool/exercise_pooled_registers.cu",
             # Race-checked: the chapter's check shape with fewer channels and filters (every fault
             # of the exercise is in rows, taps and windows, which keep their sizes).
             public=({"shape": _convpool_shape(N=2, C=6, H=14, W=20, M=9), "seed": 0},),
             hint="Input row i feeds output row 0 with tap i (i < 5) and output row 1 with tap i - 1 "
                  "(i > 0); a window is the max of both rows' sums 2q and 2q + 1, plus b[m], clipped at "
                  "zero; skip windows at or past PF."),
    Exercise("convpool.3", "convpool", "what cuDNN's separate ReLU and pool cost", 2, "function",
             "book/convpool/convpool.ipynb", cell="c0a1d055", function="epilogue_costs",
             signature="epilogue_costs(ladder, cudnn_conv, copy_gbs)", public=({},), inputs=_convpool_3,
             uses_run=True,
             hint="Per N in (1, 8, 32): the eager fp16 NHWC layer's median minus the fp16 convolution's; "
                  "the round trip is the fp16 pre-pool tensor written and read once "
                  "(convpool.LAYER.batch(N).prepool_bytes(2)) over the bandwidth in GB/s, in ms."),
    Exercise("hopper.1", "hopper", "the swizzle as a function of the address", 2, "function",
             "book/hopper/hopper.ipynb", cell="hop-ex1-sol", function="swizzled_offsets",
             signature="swizzled_offsets(offsets, swizzle=128)",
             public=({"swizzle": 128}, {"swizzle": 64, "random": 3}), inputs=_hopper_1, tolerance=0.0,
             hint="XOR, not add; the chunk bits are 4 .. 4 + b - 1 and the bits XORed in start at bit 7 "
                  "for every swizzle (b = 3, 2, 1 for 128, 64, 32 bytes; 0 leaves the offset as it is)."),
    Exercise("hopper.2", "hopper", "an mbarrier's phases", 2, "function",
             "book/hopper/hopper.ipynb", cell="hop-ex2-sol", function="mbarrier_waits",
             signature="mbarrier_waits(count, events)",
             public=({"count": 2, "phases": 3, "seed": 1}, {"count": 1, "phases": 4, "tx": 96, "seed": 2}),
             inputs=_hopper_2, tolerance=0.0,
             hint="A phase completes only when every arrival has come AND every announced byte has landed; "
                  "then the count starts again. wait(p) returns when the current phase's parity is not p."),
]


def solutions_present() -> bool:
    """Whether this copy of the lab has the instructors' solutions (False in a student copy)."""
    return any("BEGIN SOLUTION" in (paths.REPO / e.file).read_text() for e in EXERCISES if e.kind == "kernel")


def get(exercise_id: str) -> Exercise:
    for exercise in EXERCISES:
        if exercise.id == exercise_id:
            return exercise
    raise KeyError(f"no exercise '{exercise_id}'; the exercises are: "
                   f"{', '.join(e.id for e in EXERCISES)}")


def table() -> pd.DataFrame:
    """The exercises as a table (the instructor's page shows it)."""
    rows = pd.DataFrame([{"id": e.id, "chapter": e.chapter, "title": e.title, "points": e.points,
                          "kind": e.kind, "the student edits": e.where,
                          "public cases": len(e.public), "hidden cases": len(hidden_cases(e))}
                         for e in EXERCISES])
    return rows if solutions_present() else rows.drop(columns="hidden cases")   # a student copy has none


def hidden_cases(exercise: Exercise) -> list[dict]:
    """The held-out cases (empty in the student copy, which has no hidden_checks module)."""
    try:
        hidden = importlib.import_module(".hidden_checks", __package__)
    except ModuleNotFoundError:
        return []
    return list(hidden.HIDDEN.get(exercise.id, ()))


# ----------------------------------------------------------------- kernel exercises
def workload_step(exercise: Exercise, kernel_file: str | Path, case: dict):
    """The exercise's step with ``kernel_file`` in place of the lab's file."""
    from .workloads import workload
    module = importlib.import_module(exercise.module) if exercise.module else workload(exercise.chapter)
    step = getattr(module, exercise.step)
    changes = dict(case.get("step", {}))
    return module, dataclasses.replace(step, file=str(Path(kernel_file).resolve()), **changes)


def run_kernel_case(exercise: Exercise, kernel_file: str | Path, case: dict, backend=None) -> pd.DataFrame:
    """One case of a kernel exercise: the chapter's check table (see :mod:`gpulab.ladder`)."""
    module, step = workload_step(exercise, kernel_file, case)
    kwargs = {k: v for k, v in case.items() if k != "step"}
    return module.check_steps(backend, steps=[step], **kwargs)


def is_unsolved(text: str) -> bool:
    return PLACEHOLDER in text


def describe_case(case: dict) -> str:
    """A public case in words (never used for hidden cases)."""
    parts = []
    for key, value in case.items():
        if key in ("vectors", "features"):
            value = f"[{', '.join(map(str, value[:4]))}, ...]"
        parts.append(f"{key}={value}")
    return ", ".join(parts) or "the recorded run"


# ----------------------------------------------------------------- function exercises
def notebook_cell(notebook: str | Path, cell_id: str, function: str = "") -> str | None:
    """The source of the cell ``cell_id`` (or, if the student's copy lost that id, of the
    first code cell defining ``function``), or None."""
    nb = json.loads(Path(notebook).read_text())
    cells = [c for c in nb.get("cells", []) if c.get("cell_type") == "code"]
    for cell in cells:
        if cell.get("id") == cell_id:
            return _source(cell)
    if function:
        for cell in cells:
            if re.search(rf"^\s*def\s+{re.escape(function)}\s*\(", _source(cell), re.M):
                return _source(cell)
    return None


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def namespace(chapter: str) -> dict:
    """What a chapter notebook's first cell imports: a function cell runs in this."""
    import gpulab
    from . import plots, roofline
    from .workloads import workload
    ns = {"np": np, "pd": pd, "gpulab": gpulab, "plots": plots, "roofline": roofline,
          "math": math, "display": print, "__name__": "__exercise__"}
    module = workload(chapter)
    ns[getattr(module, "IMPORTED_AS", chapter)] = module
    return ns


def define(exercise: Exercise, source: str, extra: dict | None = None):
    """Run a function cell's source and return the function it defines (None if it does not).
    IPython lines (``%magic``, ``!shell``) are dropped."""
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    ns = namespace(exercise.chapter)
    ns.update(extra or {})
    exec(compile(code, f"<{exercise.id} cell>", "exec"), ns)  # noqa: S102 -- the student's cell
    fn = ns.get(exercise.function)
    return fn if callable(fn) else None


def plain(value):
    """An answer as JSON-like data (dict keys as strings), so answers compare and store."""
    if isinstance(value, pd.Series):
        value = value.to_dict()
    if isinstance(value, pd.DataFrame):
        raise TypeError("return a dict (or a number), not a DataFrame")
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def differences(got, expected, tolerance: float, where: str = "your answer", reveal: bool = True) -> list[str]:
    """What is wrong with ``got`` against ``expected``, in words (empty when it is right).
    ``reveal=False`` says which parts are wrong without showing the right values."""
    if isinstance(expected, dict):
        if not isinstance(got, dict):
            return [f"{where} should be a dict with keys {sorted(expected)}, got {type(got).__name__}"]
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        problems = [f"{where} lacks the keys {missing}"] if missing else []
        problems += [f"{where} has unexpected keys {extra}"] if extra else []
        for key in expected:
            if key in got:
                problems += differences(got[key], expected[key], tolerance, f"{where}[{key!r}]", reveal)
        return problems
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return [f"{where} should be a list of {len(expected)} items"]
        return [p for i, (g, e) in enumerate(zip(got, expected))
                for p in differences(g, e, tolerance, f"{where}[{i}]", reveal)]
    if isinstance(expected, (bool, str)):
        if str(got).strip().casefold() != str(expected).strip().casefold():
            return [f"{where} is {got!r}, " + (f"expected {expected!r}" if reveal else "which is not right")]
        return []
    if isinstance(expected, (int, float)):
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return [f"{where} should be a number, got {type(got).__name__} {got!r}"]
        if math.isclose(got, expected, rel_tol=tolerance, abs_tol=1e-12):
            return []
        if not reveal:
            return [f"{where} is {got:.4g}, which is not right"]
        text = f"{where} is {got:.4g}, expected {expected:.4g}"
        text += f" (within {tolerance:.0%})" if tolerance else " exactly"
        if expected and got and (ratio := got / expected) > 0:
            power = math.log10(ratio)
            if abs(power) >= 2.5 and abs(power - round(power)) < 0.05:
                text += f": off by a factor of 1e{round(power)} -- check the units (ms vs s, bytes vs GB)"
            elif math.isclose(got * expected, 1.0, rel_tol=0.05):
                text += ": this is the reciprocal -- is the ratio upside down?"
        return [text]
    if got != expected:
        return [f"{where} is {got!r}, " + (f"expected {expected!r}" if reveal else "which is not right")]
    return []


def solution_function(exercise: Exercise, notebook: Path | None = None):
    """The instructor's function, from the solution cell of the lab's notebook (None in the
    student copy, where that cell holds only the placeholder)."""
    source = notebook_cell(notebook or paths.REPO / exercise.file, exercise.cell)
    if source is None or "BEGIN SOLUTION" not in source:
        return None
    return define(exercise, source)


def _run_id(exercise: Exercise) -> str | None:
    """Which recorded run a function exercise's public answers come from (None: no run)."""
    if not exercise.uses_run:
        return None
    from .runs import load_run
    run = load_run(exercise.chapter)
    return f"{run.gpu}, recorded {run.meta['date']}"


def expected_answers(exercise: Exercise) -> list:
    """The right answers to the public cases: from the solution cell when this is the
    instructor's copy, else from the answers the student export stored."""
    solution = solution_function(exercise)
    if solution is not None:
        return [plain(solution(**exercise.inputs(case))) for case in exercise.public]
    stored_path = paths.REPO / EXPECTED_FILE
    if not stored_path.is_file():
        raise GpulabError(f"no solution for {exercise.id} in {exercise.file} and no stored answers in "
                          f"{EXPECTED_FILE}: make the student copy with `python -m gpulab student DEST`")
    stored = json.loads(stored_path.read_text()).get(exercise.id)
    if stored is None:
        raise GpulabError(f"{EXPECTED_FILE} has no answers for {exercise.id}; re-make the student copy")
    run_id = _run_id(exercise)
    if stored["run"] != run_id:
        raise GpulabError(f"{exercise.id}: the stored answers are for the run on {stored['run']}, but this "
                          f"copy's recorded run is on {run_id}; re-make the student copy")
    return stored["answers"]


def store_expected_answers(dest_root: Path) -> Path:
    """Write the public answers of every function exercise into a student copy."""
    answers = {e.id: {"run": _run_id(e), "answers": expected_answers(e)}
               for e in EXERCISES if e.kind == "function"}
    path = Path(dest_root) / EXPECTED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    return path


# ----------------------------------------------------------------- the book's check cells
class Passed:
    """What a check cell shows when the answer is right."""

    def __init__(self, exercise: Exercise, lines: list[str], details: pd.DataFrame | None = None):
        self.exercise, self.lines, self.details = exercise, lines, details

    def __repr__(self) -> str:
        text = "\n".join([f"Exercise {self.exercise.id} ({self.exercise.title}): correct"] + self.lines)
        if self.details is not None:
            text += "\n" + self.details.to_string(index=False)
        return text

    def _repr_html_(self) -> str:
        body = "<br>".join(self.lines)
        table = "" if self.details is None else self.details.to_html(index=False)
        return (f"<p style='color:green'>&#10004; Exercise {self.exercise.id} "
                f"({self.exercise.title}): correct</p><p>{body}</p>{table}")


def not_solved(exercise: Exercise) -> ExerciseNotSolved:
    if exercise.kind == "kernel":
        task = f"Write the kernel in {exercise.file},"
    else:
        task = f"Complete {exercise.signature or exercise.function} in the cell above,"
    return ExerciseNotSolved(f"Exercise {exercise.id}: exercise not solved yet.\n{task}\nthen run this cell again.")


def check(exercise_id: str, namespace: dict | None = None, backend=None) -> Passed:
    """The public check of one exercise, as the book's check cell runs it.

    Kernel exercises compile the lab's copy of the kernel file and run the chapter's
    check on it (on the CPU backend with bounds checking on); function exercises call
    the function the notebook defined (pass ``globals()``) on the public inputs. A right
    answer returns a summary; a missing one raises :class:`ExerciseNotSolved`, a wrong
    one :class:`ExerciseFailed` saying what is wrong. Run from inside another copy of the
    lab than this ``gpulab``'s, it refuses (:func:`gpulab.paths.require_this_lab`)."""
    paths.require_this_lab()
    exercise = get(exercise_id)
    if exercise.kind == "kernel":
        return _check_kernel(exercise, backend)
    if namespace is None:
        raise TypeError(f"check('{exercise_id}', globals()): a function exercise needs the notebook's names")
    fn = namespace.get(exercise.function)
    if not callable(fn):
        raise not_solved(exercise)
    problems, lines = [], []
    for case, expected in zip(exercise.public, expected_answers(exercise)):
        got = plain(fn(**exercise.inputs(case)))
        if got is None:         # the student copy's skeleton: a docstring and the placeholder
            raise not_solved(exercise)
        wrong = differences(got, expected, exercise.tolerance, reveal=exercise.reveal)
        label = describe_case(case)
        if wrong:
            problems += [f"  on {label}: {p}" for p in wrong]
        else:
            lines.append(f"on {label}: {got!r}" if len(repr(got)) < 200 else f"on {label}: ok")
    if problems:
        raise ExerciseFailed(f"Exercise {exercise.id} ({exercise.title}): not yet right.\n"
                             + "\n".join(problems) + (f"\nHint: {exercise.hint}" if exercise.hint else ""))
    return Passed(exercise, lines)


def _check_kernel(exercise: Exercise, backend=None) -> Passed:
    from .kernels import get_backend
    be = get_backend(backend)
    path = paths.REPO / exercise.file
    tables = []
    with bounds_checking(be.name):
        for case in exercise.public:
            tables.append(run_kernel_case(exercise, path, case, be))
    checks = pd.concat(tables, ignore_index=True)
    failed = checks[failures(checks)]
    if len(failed):
        if is_unsolved(path.read_text()):
            raise not_solved(exercise)
        raise ExerciseFailed(f"Exercise {exercise.id} ({exercise.title}): {len(failed)} of {len(checks)} "
                             f"checks disagree with the float64 reference:\n{failed.to_string(index=False)}"
                             + (f"\nHint: {exercise.hint}" if exercise.hint else ""))
    return Passed(exercise, [f"{len(checks)} checks against the float64 reference, {be.caption}"
                             + (", with bounds checking" if be.name == "cpu" else "")], checks)


def bounds_checking(backend_name: str, **extra):
    """The CPU backend's checking modes for exercise checks (bounds always on); a no-op on
    the GPU. Only the options this version of the CPU backend knows are passed."""
    import contextlib
    if backend_name != "cpu":
        return contextlib.nullcontext()
    from . import cpu
    accepted = inspect.signature(cpu.checking).parameters
    options = {k: v for k, v in {"bounds": True, **extra}.items() if k in accepted}
    return cpu.checking(**options)
