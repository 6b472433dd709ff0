"""The multigpu chapter's exercises, found through the toc by gpulab.exercises (which explains them)."""
import numpy as np

from gpulab.exercises import Exercise


def _inputs_1(case: dict) -> dict:
    # Whole numbers in float32: every order of summation gives the same sums exactly.
    rng = np.random.default_rng(case["seed"])
    return {"buffers": [rng.integers(-100, 100, case["n"]).astype(np.float32) for _ in range(case["p"])]}


def _inputs_2(case: dict) -> dict:
    return dict(case)


def _describe_1(answer: dict) -> str:
    sums, sent = answer["sums"], answer["sent_bytes"]
    agree = "the same" if all(s == sums[0] for s in sums) else "different"
    return (f"all {len(sums)} GPUs end with {agree} {len(sums[0])} sums; they sent "
            + ", ".join(f"{b:,}" for b in sent) + " bytes")


EXERCISES = [
    Exercise("multigpu.1", "multigpu", "a ring all-reduce in NumPy", 2, "function",
             "book/multigpu/multigpu.ipynb", cell="a1f0c017", function="ring_allreduce",
             signature="ring_allreduce(buffers)",
             public=({"p": 2, "n": 10, "seed": 0}, {"p": 3, "n": 11, "seed": 1}), inputs=_inputs_1,
             tolerance=0.0,
             hint="Take copies of every message of a step before adding any; in the reduce-scatter GPU r "
                  "sends chunk (r - s) % p, in the all-gather chunk (r + 1 - s) % p; count the bytes of "
                  "each message sent (chunks differ in size when p does not divide n).", describe=_describe_1),
    Exercise("multigpu.2", "multigpu", "from which batch do two GPUs pay?", 2, "function",
             "book/multigpu/multigpu.ipynb", cell="a1f0c020", function="smallest_scaling_batch",
             signature="smallest_scaling_batch(fixed_ms, ms_per_doc, grad_bytes, bw_gbs, alpha_us, target=0.55)",
             public=({"fixed_ms": 0.02, "ms_per_doc": 5e-5, "grad_bytes": 16.8e6, "bw_gbs": 300.0,
                      "alpha_us": 6.0},
                     {"fixed_ms": 0.5, "ms_per_doc": 1e-6, "grad_bytes": 16.8e6, "bw_gbs": 300.0,
                      "alpha_us": 6.0}),
             inputs=_inputs_2, tolerance=0.0, reveal=False,
             hint="Two GPUs: fixed_ms + B / 2 x ms_per_doc + the all-reduce (p = 2); one GPU: fixed_ms + "
                  "B x ms_per_doc; try B = 1,024, 2,048, ... 1,048,576 in order; return 0 when none qualifies."),
]
