"""What the notebook reads from a run: the ladder at a batch size, the vendor lines, the fastest
path per precision, the targets, the rates against the measured ceilings."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import baselines, roofline
from .shapes import LAYER
from .steps import STEP, STEPS

#: The chapter's targets: (batch, precision) -> what our best kernel must at least match.
TARGETS = [(1, "fp32"), (1, "tf32"), (1, "fp16"), (32, "tf32"), (32, "fp16")]


def ladder(run, N: int, vendor: bool = True) -> pd.DataFrame:
    """The ladder experiment at batch ``N`` with achieved rates: our steps in ladder order, then
    (``vendor=True``) every cuDNN path, with ``gflops`` and ``tflops`` columns."""
    rows = run.experiment("ladder")
    rows = roofline.rates(rows[rows["size"] == N])
    rows = rows.assign(tflops=rows["gflops"] / 1e3)
    ours = rows[~baselines.is_vendor(rows)]
    order = {s.label: i for i, s in enumerate(STEPS)}
    ours = ours.assign(order=ours["variant"].map(order)).sort_values("order").drop(columns="order")
    if not vendor:
        return ours.reset_index(drop=True)
    return pd.concat([ours, rows[baselines.is_vendor(rows)]], ignore_index=True)


def vendor_lines(run, N: int, precisions=("fp32", "tf32", "fp16")) -> pd.DataFrame:
    """The fastest cuDNN path of each precision class at batch ``N`` (the dashed lines)."""
    rows = ladder(run, N)
    picks = [baselines.fastest(rows, p) for p in precisions]
    return pd.DataFrame([p for p in picks if p is not None]).reset_index(drop=True)


def best_step(run, N: int, precision: str) -> pd.Series:
    """Our fastest step of ``precision`` at batch ``N``."""
    ours = ladder(run, N, vendor=False)
    return ours[ours["precision"] == precision].sort_values("median_ms").iloc[0]


def measured_rates(run) -> dict:
    """The run's ceilings: copy GB/s, SGEMM, TF32 and FP16 GEMM TFLOP/s."""
    # A ceiling is the best rate measured for it (a run may hold a ceiling twice).
    rows = roofline.rates(run.experiment("ceilings")).groupby("variant")[["gbs", "gflops"]].max()
    out = {"copy_gbs": rows.loc["device copy", "gbs"], "fp32_tflops": rows.loc["cuBLAS SGEMM", "gflops"] / 1e3}
    for name, key in (("cuBLAS TF32 GEMM (PyTorch)", "tf32_tflops"), ("cuBLAS HGEMM (fp16)", "fp16_tflops")):
        out[key] = rows.loc[name, "gflops"] / 1e3 if name in rows.index else np.nan
    return out


def floors(run, N: int = 1) -> pd.DataFrame:
    """The layer's floors at batch ``N`` on the run's measured ceilings: arithmetic at the SGEMM,
    TF32 and FP16 GEMM rates, memory at the copy bandwidth (fp32 and fp16 inputs)."""
    r = measured_rates(run)
    shape = LAYER.batch(N)
    return pd.DataFrame([
        {"floor": "arithmetic, FP32 (cuBLAS SGEMM rate)", "ms": shape.flops / (r["fp32_tflops"] * 1e9)},
        {"floor": "arithmetic, TF32 tensor cores (cuBLAS rate)", "ms": shape.flops / (r["tf32_tflops"] * 1e9)},
        {"floor": "arithmetic, FP16 tensor cores (cuBLAS rate)", "ms": shape.flops / (r["fp16_tflops"] * 1e9)},
        {"floor": "memory, fp32 inputs (copy bandwidth)", "ms": shape.bytes(4) / (r["copy_gbs"] * 1e6)},
        {"floor": "memory, fp16 inputs (copy bandwidth)", "ms": shape.bytes(2) / (r["copy_gbs"] * 1e6)},
    ]).set_index("floor")


def targets(run) -> pd.DataFrame:
    """Each target: our fastest step of the precision against the fastest cuDNN path of matching
    precision (fp16 is matched with fp16 and bf16), at batch 1 or 32, from the run."""
    out = []
    for N, precision in TARGETS:
        ours = best_step(run, N, precision)
        vendor = baselines.fastest(ladder(run, N), precision)
        out.append({"N": N, "precision": precision, "our best step": ours["variant"], "ours (ms)": ours["median_ms"],
                    "fastest cuDNN path": vendor["variant"], "cuDNN (ms)": vendor["median_ms"],
                    "cuDNN / ours": vendor["median_ms"] / ours["median_ms"],
                    "met": bool(ours["median_ms"] <= vendor["median_ms"])})
    return pd.DataFrame(out)


def fusion_bytes(batches=(1, 8, 32)) -> pd.DataFrame:
    """What fusing the pool saves: the pre-pool tensor, written once and read once, in MB, per
    batch size and storage precision, from the shapes."""
    return pd.DataFrame([{"N": N, "pre-pool tensor, fp32 (MB)": LAYER.batch(N).prepool_bytes(4) / 2e6,
                          "saved traffic, fp32 (MB)": LAYER.batch(N).prepool_bytes(4) / 1e6,
                          "saved traffic, fp16 (MB)": LAYER.batch(N).prepool_bytes(2) / 1e6,
                          "compulsory traffic, fp32 (MB)": LAYER.batch(N).bytes(4) / 1e6}
                         for N in batches]).set_index("N")


def step_label(number: str) -> str:
    return STEP[number].label


def gpu_comparison_rows(run, N: int = 1) -> pd.DataFrame:
    """What :func:`gpu_comparison` compares from one run: every step timed at batch ``N`` and
    every eager cuDNN path (the CUDA-graph twins of a path take milliseconds too, and add
    nothing here)."""
    rows = ladder(run, N)
    if "mode" in rows:
        rows = rows[rows["mode"] != "graph"]
    return rows[["variant", "median_ms", "flops", "bytes", "precision"]].reset_index(drop=True)


def gpu_comparison(N: int = 1, root=None):
    """Per step and eager cuDNN path at batch ``N``, the H200's recorded time over the H100's
    against the roofline's prediction (:func:`gpulab.runs.gpu_comparison`): (table, figure),
    or None until both runs exist."""
    from ...runs import gpu_comparison as compare_gpus
    return compare_gpus("convpool", lambda run: gpu_comparison_rows(run, N), root=root,
                        title=f"Does each step gain what the roofline predicts on the H200? "
                              f"({'one image' if N == 1 else f'N = {N}'})")
