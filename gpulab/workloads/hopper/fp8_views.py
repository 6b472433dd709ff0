"""What the hopper chapter shows of its FP8 steps (9 and 10) on any machine: both on all-positive
inputs, where the tensor cores' FP8 accumulation shows (:func:`chapter_checks`), the accumulation
model on more outputs (:func:`accuracy_table`) and the numbers the prose quotes. The steps' check
is the chapter's (``CHAPTER.check(steps=FP8_STEPS)``); the formats and the model are
:mod:`gpulab.fp8`'s.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import fp8, ladder, runs
from ...check import compare
from ...errors import RecordedRunError
from ...kernels import get_backend
from .launchers import needs_hopper
from .problem import FP8_POSITIVE_SHAPE, NAME as CHAPTER, Fp8Gemm, from_bf16_bits, to_bf16_bits
from .steps import FP8_STEPS


def _rel_error(got, ref) -> float:
    """The check's relative error (gpulab.check.compare: the error's norm over the reference's)."""
    return compare(got, ref, precision="bf16").rel_error


def _bf16(x):
    return from_bf16_bits(to_bf16_bits(np.asarray(x, np.float32)))


def chapter_checks(backend=None, seed: int = 5) -> pd.DataFrame:
    """Steps 9 and 10 (``hopper.FP8_STEPS``, B in e4m3) run once on this backend (a Hopper GPU's
    tensor cores, or the CPU backend's emulation of their FP8 wgmma) at the all-positive
    ``FP8_POSITIVE_SHAPE``, where step 9's accumulation loses most: C's relative error against
    float64 of the FP8 values the kernel reads, whether any element was left unwritten, the mean
    error's sign (cutting goes toward zero), and (CPU backend) whether every bit of C is the
    accumulation model's (:func:`gpulab.fp8.tensor_core_gemm`, rounded to bfloat16 as the epilogue
    rounds).
    A measurement, not a pass or fail: ``hopper.CHAPTER.check(steps=FP8_STEPS)`` is the check. A
    GPU that is not a Hopper is one row per step with the reason."""
    be = get_backend(backend)
    why = needs_hopper(be)
    M, N, K = FP8_POSITIVE_SHAPE
    if why:
        return pd.DataFrame([{"step": s, "shape": f"{M}x{N}x{K}", "status": f"skipped: {why}"} for s in ("09", "10")])
    case = Fp8Gemm(M, N, K, low=0.0)
    inputs = case.inputs(seed)
    ref = case.reference(inputs)
    scales = np.float32(inputs["scale_a"]) * np.float32(inputs["scale_b"])
    rows = []
    for step in (s for s in FP8_STEPS if s.launcher.accepts(case)):
        C = ladder.run(step, case, inputs, be)
        got = case.values(C, step.precision).astype(np.float64)
        checked = compare(got, ref, precision="bf16", name=f"step {step.number}")
        row = {"step": step.number, "shape": f"{M}x{N}x{K}", "unwritten": checked.unwritten,
               "relative error": checked.rel_error, "mean error / |mean|": float(np.mean(got - ref) / np.mean(ref))}
        if be.name == "cpu":
            model = to_bf16_bits(fp8.tensor_core_gemm(inputs["A"], inputs["B"], promote_every=step.promote_every)
                                 * scales)
            row["bits as the model's"] = f"{int((C == model).sum())} of {C.size}"
        rows.append(row)
    return pd.DataFrame(rows)


def accuracy_table(n: int = 64, seed: int = 11) -> pd.DataFrame:
    """The accumulation model's C (:func:`gpulab.fp8.tensor_core_gemm` on n x n outputs, rounded to
    bfloat16 as the kernels write it) against float64, for inputs in [-1, 1) and in [0, 1) at
    K = 4096 and 8192: step 9 (the accumulator handed to every wgmma), step 10 (promoted to float
    every 4 instructions, one 128-deep slice) and bfloat16's rounding of the exact product alone."""
    rows = []
    for low, K in ((-1.0, 4096), (0.0, 4096), (0.0, 8192)):
        inputs = Fp8Gemm(n, n, K, low=low).inputs(seed)   # scales left out of both C and the reference
        A, B = inputs["A"], inputs["B"]
        ref = fp8.reference(A, B)
        rows.append({"inputs": f"uniform in [{low:g}, 1)", "K": K,
                     "step 9: FP8 accumulation": _rel_error(_bf16(fp8.tensor_core_gemm(A, B)), ref),
                     "step 10: promoted every 128 k": _rel_error(_bf16(fp8.tensor_core_gemm(A, B, promote_every=4)), ref),
                     "bf16's rounding of C alone": _rel_error(_bf16(ref), ref)})
    return pd.DataFrame(rows)


def chapter_numbers(accuracy: pd.DataFrame, checks: pd.DataFrame) -> dict:
    """What the prose quotes of :func:`accuracy_table` (percent) and :func:`chapter_checks` (as text)."""
    by = {(r["inputs"], r["K"]): r for _, r in accuracy.iterrows()}
    mixed, pos, pos8 = by[("uniform in [-1, 1)", 4096)], by[("uniform in [0, 1)", 4096)], by[("uniform in [0, 1)", 8192)]
    out = {"fp8_err9_mixed": 100 * mixed["step 9: FP8 accumulation"],
           "fp8_err9_pos": 100 * pos["step 9: FP8 accumulation"],
           "fp8_err9_pos_8192": 100 * pos8["step 9: FP8 accumulation"],
           "fp8_err10_pos": 100 * pos["step 10: promoted every 128 k"],
           "fp8_err10_pos_8192": 100 * pos8["step 10: promoted every 128 k"],
           "fp8_err_bf16": 100 * pos["bf16's rounding of C alone"]}
    for step in ("09", "10"):
        hit = checks[checks["step"] == step]
        ran = "relative error" in checks.columns and len(hit) and pd.notna(hit["relative error"].iloc[0])
        # As text: a GPU that is not a Hopper ran neither step (the prose then says so).
        out[f"fp8_check_err{step}"] = f"{100 * float(hit['relative error'].iloc[0]):.2g}%" if ran else None
    return out


# ------------------------------------------------------------------ the recorded run's FP8 rows
#: The recorded run's experiment of the FP8 rung (gpulab/workloads/hopper/record.py: ``fp8``).
EXPERIMENT = "hopper_gemm_fp8"
VENDOR = "vendor"


def _has_rung(run) -> bool:
    return run is not None and EXPERIMENT in set(run.timings["experiment"]) \
        and run.experiment(EXPERIMENT)["median_ms"].notna().any()


def rung_run(run):
    """The run whose FP8 rows the chapter shows: ``run`` if it timed the rung, else the run
    recorded on the same GPU, else the H100's (a live run times the fp16 ladder only); None
    where none has (runs recorded before the rung)."""
    if _has_rung(run):
        return run
    for gpu in (run.gpu, "H100"):
        try:
            recorded = runs.load_run(CHAPTER, gpu)
        except RecordedRunError:
            continue
        if _has_rung(recorded):
            return recorded
    return None


def timings(run) -> pd.DataFrame | None:
    """The FP8 rung's rows (steps 9 and 10 and cuBLASLt's FP8 GEMM at each n^3, from
    :func:`rung_run`), each with its TFLOP/s, its error against float64 of the FP8 values and its
    time over the fastest cuBLASLt path of its size; None where no run has timed the rung."""
    source = rung_run(run)
    if source is None:
        return None
    t = source.experiment(EXPERIMENT)
    t = t[t["median_ms"].notna()]
    out = []
    for n, here in t.groupby("size", sort=True):
        vendors = here[here["step"].astype(str) == VENDOR]
        fastest = float(vendors["median_ms"].min()) if len(vendors) else float("nan")
        for _, r in here.iterrows():
            out.append({"size": f"{int(n)}^3", "path": r["variant"], "ms": float(r["median_ms"]),
                        "TFLOP/s": float(r["flops"]) / (float(r["median_ms"]) * 1e-3) / 1e12,
                        "error vs float64": float(r["rel_error"]), "time / fastest cuBLASLt": float(r["median_ms"]) / fastest})
    table = pd.DataFrame(out)
    table.attrs["caption"] = ("C = scale_a scale_b A B^T, A and B in e4m3 with per-tensor scales, C in bfloat16; "
                              "error: ||C - C64|| / ||C64|| against float64 of the FP8 values the kernel reads; "
                              + source.caption)
    table.attrs["run"] = source
    return table


def timings_styled(run):
    """:func:`timings` for the notebook (nothing where the run predates the rung)."""
    table = timings(run)
    if table is None:
        return None
    return (table.style.format({"ms": "{:.4f}", "TFLOP/s": "{:.0f}", "error vs float64": "{:.1e}",
                                "time / fastest cuBLASLt": "{:.3f}"}).hide(axis="index")
            .set_caption(table.attrs["caption"]))


def timing_status(run) -> str:
    """What the prose says of the rung's times: measured (the table below, and which run), or not yet."""
    table = timings(run)
    if table is None:
        return (f"The recorded run ({run.gpu}, {run.meta['date']}) predates these two steps, so their times are not "
                "measured yet (each kernel file states its prediction)")
    source = table.attrs["run"]
    return (f"Their times ({source.gpu}, {source.meta['date']}), beside cuBLASLt's FP8 GEMM on the same codes and "
            "scales, are in the table after the checks")
