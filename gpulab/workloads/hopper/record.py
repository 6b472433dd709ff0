"""What a GPU run of the chapter measures: every step checked and timed at each size, with
cuBLAS through CuPy and through PyTorch timed in the same run on the same inputs.

    rows = benchmark_all(sizes=(4096,))      # tidy rows: one per (size, variant)
"""
from __future__ import annotations

import traceback

import numpy as np
import pandas as pd

from ... import datasheet
from ...check import compare
from ...kernels import get_backend
from ...timing import benchmark
from .steps import STEPS, make_launch

#: H100 SXM dense fp16/bf16 tensor-core peak with float accumulation, TFLOP/s (gpulab.datasheet,
#: where the fact is typed once: 989.4).
H100_FP16_DENSE_TFLOPS = datasheet.lookup("H100 80GB HBM3").fp16_tensor_tflops


def gemm_flops(M: int, N: int, K: int) -> float:
    return 2.0 * M * N * K


def gemm_bytes(M: int, N: int, K: int) -> float:
    """The fewest bytes a GEMM moves: A and B read once, C written once, all in half."""
    return 2.0 * (M * K + N * K + M * N)


def _reference_gpu(A, B):
    """C = A B^T in float64 on the GPU (the 4096^3 product takes seconds there, minutes on a host)."""
    import cupy
    return cupy.matmul(A.astype(cupy.float64), B.astype(cupy.float64).T)


def vendor_launches(A, B):
    """cuBLAS on the same A and B, fp16 in and out with float accumulation: through CuPy
    (cupy.matmul) and through PyTorch (torch.matmul, cuBLASLt with its heuristics' pick)."""
    import cupy
    launches = {}
    C1 = cupy.empty((A.shape[0], B.shape[0]), cupy.float16)
    Bt = B.T
    launches["cuBLAS (cupy.matmul) fp16"] = (lambda: cupy.matmul(A, Bt, out=C1), C1)
    try:
        import torch
        ta, tb = torch.from_dlpack(A), torch.from_dlpack(B)
        out = torch.empty((A.shape[0], B.shape[0]), dtype=torch.float16, device=ta.device)
        launches["cuBLASLt (torch.matmul) fp16"] = (lambda: torch.matmul(ta, tb.t(), out=out),
                                                    cupy.from_dlpack(out))
    except Exception as exc:  # no PyTorch on this machine: CuPy's path only
        print(f"torch.matmul not timed: {exc!r}")
    return launches


def benchmark_all(sizes=(4096,), *, budget_ms: float = 500.0, rounds: int = 3, seed: int = 0,
                  log=print) -> pd.DataFrame:
    """Check every step and both cuBLAS paths at each square size n^3, then time them in
    ``rounds`` rounds, every variant once per round in turn: a large GEMM heats the card and
    its clock drifts down over a run, so timing the variants one after the other would favour
    the first. A variant's row holds the samples of all its rounds (``round_medians_ms``: each
    round's median). Errors are caught per variant: one failing step leaves the others' rows."""
    be = get_backend("gpu")
    import cupy
    from ...timing import Timing
    rows = []
    for n in sizes:
        M = N = K = int(n)
        rng = cupy.random.RandomState(seed)
        A = rng.uniform(-1, 1, (M, K)).astype(cupy.float16)
        B = rng.uniform(-1, 1, (N, K)).astype(cupy.float16)
        ref = _reference_gpu(A, B)
        variants = []
        for step in STEPS:
            C = cupy.full((M, N), np.nan, cupy.float16)
            try:
                variants.append((f"step {step.label}", make_launch(step, A, B, C, be), C, step.number))
            except Exception as exc:
                log(f"{n}^3 step {step.number}: could not launch: {exc!r}")
                rows.append({"size": n, "variant": f"step {step.label}", "step": step.number, "error": repr(exc)})
        for label, (fn, C) in vendor_launches(A, B).items():
            variants.append((label, fn, C, "vendor"))
        checked = []
        for label, fn, C, number in variants:
            row = {"size": n, "variant": label, "step": number}
            try:
                fn()
                cupy.cuda.Device().synchronize()
                result = compare(C, ref, precision="fp16", name=label)
                row.update(rel_error=result.rel_error, unwritten=result.unwritten, passed=bool(result.passed))
                checked.append((row, fn))
            except Exception as exc:
                row["error"] = repr(exc)
                log(f"{n}^3 {label}: error {exc!r}\n{traceback.format_exc()}")
                rows.append(row)
        del ref
        samples = {id(row): [] for row, _ in checked}
        medians = {id(row): [] for row, _ in checked}
        for _ in range(rounds):
            for row, fn in checked:
                timing = benchmark(fn, budget_ms=budget_ms, repeats=100)
                samples[id(row)].append(timing.samples_ms)
                medians[id(row)].append(timing.median_ms)
        for row, fn in checked:
            timing = Timing(np.concatenate(samples[id(row)]), method="cuda events, rounds interleaved")
            row.update(timing.row("hopper_gemm", row["variant"], size=n, flops=gemm_flops(M, N, K),
                                  bytes=gemm_bytes(M, N, K)))
            row["round_medians_ms"] = " ".join(f"{m:.4f}" for m in medians[id(row)])
            row["tflops"] = gemm_flops(M, N, K) / (timing.median_ms * 1e-3) / 1e12
            log(f"{n}^3 {row['variant']}: {row['median_ms']:.4f} ms, {row['tflops']:.1f} TFLOP/s "
                f"(rounds {row['round_medians_ms']}), rel error {row['rel_error']:.2e}"
                f"{'' if row['passed'] else ' FAILED'}")
            rows.append(row)
    table = pd.DataFrame(rows)
    if "tflops" in table:
        for n in sizes:
            here = table["size"] == n
            vendor = table[here & (table["step"] == "vendor")]["tflops"].max()
            table.loc[here, "vs_best_cublas"] = table.loc[here, "tflops"] / vendor
        table["vs_fp16_peak"] = table["tflops"] / H100_FP16_DENSE_TFLOPS
    return table
