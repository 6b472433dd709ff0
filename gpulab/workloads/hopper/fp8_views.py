"""What the hopper chapter shows of its FP8 steps (9 and 10) on any machine: both on all-positive
inputs, where the tensor cores' FP8 accumulation shows (:func:`chapter_checks`), the accumulation
model on more outputs (:func:`accuracy_table`) and the numbers the prose quotes. The steps' check
is the chapter's (``CHAPTER.check(steps=FP8_STEPS)``); the formats and the model are
:mod:`gpulab.fp8`'s.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import fp8, ladder
from ...check import compare
from ...kernels import get_backend
from .launchers import needs_hopper
from .problem import FP8_POSITIVE_SHAPE, Fp8Gemm, from_bf16_bits, to_bf16_bits
from .steps import FP8_STEPS


def _fp8_inputs(M: int, N: int, K: int, low: float, seed: int):
    """A (M x K) and B (N x K) uniform in [low, 1), each as e4m3 codes with its per-tensor scale
    (the hopper chapter's :class:`~gpulab.workloads.hopper.problem.Fp8Gemm` inputs)."""
    inputs = Fp8Gemm(M, N, K, low=low).inputs(seed)
    return inputs["A"], inputs["B"], float(inputs["scale_a"]), float(inputs["scale_b"])


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
        A, B, sa, sb = _fp8_inputs(n, n, K, low, seed)
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
