"""The training chapter's exercises, found through the toc by gpulab.exercises (which explains them)."""
import numpy as np

from gpulab.exercises import Exercise
from gpulab.workloads.training import data
from gpulab.workloads.training.problem import Dims


def _dims(B: int, V: int, *HC: int):
    return Dims(B, V, *HC)


def _inputs_2(case: dict) -> dict:
    c = data.sample(case["docs"], vocab=case.get("vocab", data.VOCAB), stream=case["stream"])
    return {"indptr": c.indptr, "indices": c.indices, "batch": case["batch"]}


def _inputs_3(case: dict) -> dict:
    rng = np.random.default_rng(case["seed"])
    n = case["n"]
    values = rng.lognormal(np.log(case["typical"]), 2.0, n) * rng.choice([-1.0, 1.0], n)
    values[rng.random(n) < 0.1] = 0.0          # some exact zeros, which do not count
    return {"values": values}


EXERCISES = [
    Exercise("training.1", "training", "the SGD update with 16-byte accesses", 4, "kernel",
             "kernels/training/exercise_01_sgd_update_float4.cu", step="11", number="3",
             # Race-checked (one block at a time): sizes that cover every fault the hidden checks
             # look for -- many blocks, n % 4 of 0, 2 and 3 -- at a few seconds of CPU.
             public=({"dims": (_dims(37, 1001),), "seed": 0},
                     {"dims": (_dims(37, 1001, 30, 3),), "seed": 0}),
             hint="Thread i updates elements 4i..4i+3 when 4i+3 < n; the last n % 4 elements (b2 has 3 "
                  "in the second case, W1 30,030) are updated one float each, after the last whole float4."),
    Exercise("training.2", "training", "how much of W1 does one batch touch?", 2, "function",
             "book/training/training.ipynb", cell="tr-ex2-sol", function="rows_touched",
             signature="rows_touched(indptr, indices, batch)", number="2",
             public=({"docs": 2048, "batch": 32, "stream": 300}, {"docs": 4096, "batch": 1024, "stream": 301}),
             inputs=_inputs_2,
             hint="Count distinct word ids per batch (np.unique over the batch's slice of indices, which "
                  "runs from indptr[first] to indptr[first + batch]); average over whole batches only."),
    Exercise("training.3", "training", "what fp16 does to dZ1", 2, "function",
             "book/training/training.ipynb", cell="tr-ex3-sol", function="flushed_to_zero",
             signature="flushed_to_zero(values)", number="1",
             public=({"seed": 1, "n": 20000, "typical": 1e-6}, {"seed": 2, "n": 20000, "typical": 1e-3}),
             inputs=_inputs_3,
             hint="Round with values.astype(np.float16) and count the results equal to 0, among the "
                  "entries that were not 0 to begin with; subnormal fp16 numbers are not zero."),
]
