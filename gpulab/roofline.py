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

from .device import require_gpu
from .timing import benchmark

#: Datasheet figures (dense, no sparsity), matched against the device name.
#: FP32 is the CUDA-core rate; fp16/tf32 are the tensor-core rates.
DATASHEET = [
    # name contains, memory GB/s, FP32 TFLOP/s, TF32 TC, FP16 TC, source
    ("H100 80GB HBM3", 3350, 66.9, 494.7, 989.4, "NVIDIA H100 SXM5 datasheet"),
    ("H100 PCIe", 2000, 51.2, 378.0, 756.0, "NVIDIA H100 PCIe datasheet"),
    ("H100 NVL", 3900, 60.0, 835.0 / 2, 1671.0 / 2, "NVIDIA H100 NVL datasheet"),
    ("H200", 4800, 66.9, 494.7, 989.4, "NVIDIA H200 SXM datasheet"),
    ("A100-SXM4-80GB", 2039, 19.5, 156.0, 312.0, "NVIDIA A100 datasheet"),
    ("A100-SXM4-40GB", 1555, 19.5, 156.0, 312.0, "NVIDIA A100 datasheet"),
    ("A100-PCIE", 1935, 19.5, 156.0, 312.0, "NVIDIA A100 datasheet"),
    ("L4", 300, 30.3, 60.0, 121.0, "NVIDIA L4 datasheet"),
    ("Tesla T4", 320, 8.1, 0.0, 65.0, "NVIDIA T4 datasheet"),
    ("V100", 900, 15.7, 0.0, 125.0, "NVIDIA V100 SXM2 datasheet"),
]


def datasheet(gpu_name: str) -> dict | None:
    """The datasheet figures for ``gpu_name``, or None if the lab has none."""
    for key, gbs, fp32, tf32, fp16, source in DATASHEET:
        if key.lower() in gpu_name.lower():
            return {"memory_gbs": gbs, "fp32_tflops": fp32, "tf32_tensor_tflops": tf32,
                    "fp16_tensor_tflops": fp16, "source": source}
    return None


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
