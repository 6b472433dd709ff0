"""The hardware limits a kernel is judged against.

Two measured ceilings, each beside its datasheet value: device memory
bandwidth (a large device-to-device copy, counting bytes read plus written)
and the FP32 arithmetic rate (a large cuBLAS SGEMM through CuPy). A kernel's
achieved GFLOP/s and GB/s come from the workload's FLOP and byte counts over
its measured time; its arithmetic intensity (FLOP per byte) places it on the
roofline.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import datasheet as _datasheet
from .device import require_gpu
from .timing import benchmark

def datasheet(gpu_name: str) -> dict | None:
    """The datasheet's rates for ``gpu_name`` (from :mod:`gpulab.datasheet`,
    the lab's one table of hardware facts), or None if the lab has none."""
    gpu = _datasheet.lookup(gpu_name)
    if gpu is None:
        return None
    return {"memory_gbs": gpu.memory_gbs, "fp32_tflops": gpu.fp32_tflops,
            "tf32_tensor_tflops": gpu.tf32_tensor_tflops, "fp16_tensor_tflops": gpu.fp16_tensor_tflops,
            "source": gpu.source}


def measure_ceilings(copy_bytes: int = 2**30, gemm_n: int = 8192, repeats: int = 20) -> list[dict]:
    """Measure the two ceilings on this GPU; return timing rows (experiment
    ``ceilings``) whose flops/bytes columns give the rates."""
    require_gpu("measuring the device's ceilings")
    import cupy

    n = copy_bytes // 4
    src = cupy.random.random(n, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    copy = benchmark(lambda: cupy.copyto(dst, src), warmup=5, repeats=repeats)
    a = cupy.random.random((gemm_n, gemm_n), dtype=cupy.float32)
    b = cupy.random.random((gemm_n, gemm_n), dtype=cupy.float32)
    c = cupy.empty_like(a)
    gemm = benchmark(lambda: cupy.matmul(a, b, out=c), warmup=3, repeats=repeats)
    del src, dst, a, b, c
    cupy.get_default_memory_pool().free_all_blocks()
    return [copy.row("ceilings", "device copy", copy_bytes, "kernel", bytes=2.0 * copy_bytes),
            gemm.row("ceilings", "cuBLAS SGEMM", gemm_n, "kernel", flops=2.0 * gemm_n**3)]


def rates(rows: pd.DataFrame) -> pd.DataFrame:
    """Add achieved ``gflops``, ``gbs`` (from the median time) and
    ``intensity`` (FLOP per byte) to timing rows."""
    out = rows.copy()
    seconds = out["median_ms"] / 1e3
    out["gflops"] = out["flops"] / seconds / 1e9
    out["gbs"] = out["bytes"] / seconds / 1e9
    with np.errstate(divide="ignore", invalid="ignore"):
        out["intensity"] = np.where(out["bytes"] > 0, out["flops"] / out["bytes"], np.nan)
    return out


def ceilings_table(rows: pd.DataFrame, gpu_name: str) -> pd.DataFrame:
    """Measured ceilings next to the datasheet: one row per ceiling."""
    measured = rates(rows[rows["experiment"] == "ceilings"]).set_index("variant")
    sheet = datasheet(gpu_name) or {}
    table = pd.DataFrame([
        {"ceiling": "memory bandwidth (GB/s)", "measured": measured.loc["device copy", "gbs"],
         "datasheet": sheet.get("memory_gbs", np.nan), "how": "device-to-device copy, read + write"},
        {"ceiling": "FP32 rate (GFLOP/s)", "measured": measured.loc["cuBLAS SGEMM", "gflops"],
         "datasheet": sheet.get("fp32_tflops", np.nan) * 1e3, "how": "cuBLAS SGEMM (CuPy matmul)"},
    ]).set_index("ceiling")
    table["measured / datasheet"] = table["measured"] / table["datasheet"]
    table.attrs["source"] = sheet.get("source", "no datasheet entry for this GPU")
    return table


def floors_ms(flops: float, bytes_moved: float, peak_gflops: float, peak_gbs: float) -> dict:
    """The two floors of a workload: its FLOPs at the peak rate and its bytes at
    peak bandwidth. The larger is the time no version can beat by much."""
    compute = flops / (peak_gflops * 1e9) * 1e3
    memory = bytes_moved / (peak_gbs * 1e9) * 1e3
    return {"compute_ms": compute, "memory_ms": memory, "floor_ms": max(compute, memory),
            "bound": "compute" if compute >= memory else "memory"}
