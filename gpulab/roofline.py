"""The hardware limits a kernel is judged against.

Measured ceilings, each beside its datasheet value: device memory bandwidth
(the best of several large device-to-device copies, counting bytes read plus
written), the FP32 arithmetic rate (a large cuBLAS SGEMM through CuPy) and the
fp16 tensor-core rate (a large cuBLAS HGEMM), the floor of reduced-precision
steps. A kernel's
achieved GFLOP/s and GB/s come from the workload's FLOP and byte counts over
its measured time; its arithmetic intensity (FLOP per byte) places it on the
roofline.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import datasheet as _datasheet
from .device import require_gpu
from .timing import benchmark, graph_benchmark

def datasheet(gpu_name: str) -> dict | None:
    """The datasheet's rates for ``gpu_name`` (from :mod:`gpulab.datasheet`,
    the lab's one table of hardware facts), or None if the lab has none."""
    gpu = _datasheet.lookup(gpu_name)
    if gpu is None:
        return None
    return {"memory_gbs": gpu.memory_gbs, "fp32_tflops": gpu.fp32_tflops,
            "tf32_tensor_tflops": gpu.tf32_tensor_tflops, "fp16_tensor_tflops": gpu.fp16_tensor_tflops,
            "source": gpu.source}


#: A float4 grid-stride copy: one of the copy methods the bandwidth ceiling is the best of.
_COPY4 = r"""
extern "C" __global__ void copy_float4(const float4 *__restrict__ src, float4 *__restrict__ dst, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}
"""


def measure_ceilings(copy_bytes: int = 2**30, gemm_n: int = 8192, repeats: int = 20) -> list[dict]:
    """Measure the device's ceilings; return timing rows (experiment
    ``ceilings``) whose flops/bytes columns give the rates.

    Memory bandwidth is the best of several copy methods (CuPy's copy kernel,
    the copy engine's device-to-device ``cudaMemcpyAsync``, a float4
    grid-stride kernel), so that no kernel of the lab beats the ceiling merely
    because one copy method was slow; each method also gets its own row
    (experiment ``copy_methods``). The arithmetic ceilings are a large cuBLAS
    SGEMM (FP32 on the CUDA cores) and HGEMM (fp16 on the tensor cores, fp32
    accumulation: the floor of reduced-precision steps)."""
    require_gpu("measuring the device's ceilings")
    import cupy

    n = copy_bytes // 4
    src = cupy.random.random(n, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    copy4 = cupy.RawKernel(_COPY4, "copy_float4")
    sms = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["multiProcessorCount"]
    methods = {
        "CuPy copy kernel (cupy.copyto)": lambda: cupy.copyto(dst, src),
        "copy engine (cudaMemcpyAsync device to device)": lambda: dst.data.copy_from_device_async(src.data, copy_bytes),
        "float4 grid-stride kernel": lambda: copy4((sms * 8,), (512,), (src, dst, np.int64(copy_bytes // 16))),
    }
    rows = []
    for name, fn in methods.items():
        dst.fill(0)
        fn()
        if not bool((dst == src).all()):
            raise RuntimeError(f"the copy method '{name}' did not copy correctly")
        rows.append(benchmark(fn, warmup=5, repeats=repeats).row("copy_methods", name, copy_bytes, "kernel",
                                                               bytes=2.0 * copy_bytes))
    copies = len(rows)
    try:   # back to back in a CUDA graph, as the chapters time their small cases: no launch gap per copy
        rows.append(graph_benchmark(methods["float4 grid-stride kernel"], launches=10, repeats=repeats)
                    .row("copy_methods", "float4 grid-stride kernel, 10 in a CUDA graph", copy_bytes, "kernel",
                         bytes=2.0 * copy_bytes))
        copies += 1
    except Exception as exc:       # the eager copies still make the ceiling; say why this one is missing
        print(f"ceilings: the graph-timed copy failed: {exc}")
    try:   # reading only: HBM spends no time turning the bus around between reads and writes, so a
        # read-heavy kernel (SAXPY reads two bytes for each it writes) can pass a copy's rate
        total = cupy.empty((), dtype=cupy.float32)
        rows.append(benchmark(lambda: cupy.sum(src, out=total), warmup=5, repeats=repeats)
                    .row("copy_methods", "read only (cupy.sum), not a copy", copy_bytes, "kernel",
                         bytes=1.0 * copy_bytes))
    except Exception as exc:
        print(f"ceilings: the read-only pass failed: {exc}")
    best = min(rows[:copies], key=lambda r: r["median_ms"])     # the copies, eager or in a graph
    rows.append({**best, "experiment": "ceilings", "variant": "device copy", "method": best["variant"]})
    del src, dst
    for name, dtype in (("cuBLAS SGEMM", cupy.float32), ("cuBLAS HGEMM (fp16)", cupy.float16)):
        a = cupy.random.random((gemm_n, gemm_n), dtype=cupy.float32).astype(dtype)
        b = cupy.random.random((gemm_n, gemm_n), dtype=cupy.float32).astype(dtype)
        c = cupy.empty_like(a)
        gemm = benchmark(lambda: cupy.matmul(a, b, out=c), warmup=3, repeats=repeats)
        rows.append(gemm.row("ceilings", name, gemm_n, "kernel", flops=2.0 * gemm_n**3))
        del a, b, c
    cupy.get_default_memory_pool().free_all_blocks()
    return rows


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

    def found(variant: str, column: str) -> float:
        # A run whose ceilings were not measured (a live run that spent its budget first, a GPU
        # whose SGEMM failed) leaves the ceiling NaN, and says so, rather than stopping the chapter.
        return float(measured.loc[variant, column]) if variant in measured.index else np.nan

    missing = " (not measured in this run)"
    table = pd.DataFrame([
        {"ceiling": "memory bandwidth (GB/s)", "measured": found("device copy", "gbs"),
         "datasheet": sheet.get("memory_gbs", np.nan),
         "how": "device-to-device copy, read + write" + ("" if "device copy" in measured.index else missing)},
        {"ceiling": "FP32 rate (GFLOP/s)", "measured": found("cuBLAS SGEMM", "gflops"),
         "datasheet": sheet.get("fp32_tflops", np.nan) * 1e3,
         "how": "cuBLAS SGEMM (CuPy matmul)" + ("" if "cuBLAS SGEMM" in measured.index else missing)},
    ] + ([{"ceiling": "fp16 tensor-core rate (GFLOP/s)", "measured": measured.loc["cuBLAS HGEMM (fp16)", "gflops"],
           "datasheet": sheet.get("fp16_tensor_tflops", np.nan) * 1e3,
           "how": "cuBLAS HGEMM, fp32 accumulation (CuPy matmul)"}]
         if "cuBLAS HGEMM (fp16)" in measured.index else [])).set_index("ceiling")
    if ("method" in measured.columns and "device copy" in measured.index
            and isinstance(measured.loc["device copy", "method"], str)):
        table.loc["memory bandwidth (GB/s)", "how"] = (
            f"best of {int(((rows['experiment'] == 'copy_methods') & ~rows['variant'].str.contains('not a copy')).sum())} copy timings "
            f"({measured.loc['device copy', 'method']}), read + write")
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
