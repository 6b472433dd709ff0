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
from .steps import ELEMENT_BYTES, STEPS, as_float, in_precision, make_launch, poisoned, storage_dtype, to_bf16_bits

#: H100 SXM dense fp16/bf16 tensor-core peak with float accumulation, TFLOP/s (gpulab.datasheet,
#: where the fact is typed once: 989.4).
H100_FP16_DENSE_TFLOPS = datasheet.lookup("H100 80GB HBM3").fp16_tensor_tflops


def gemm_flops(M: int, N: int, K: int) -> float:
    return 2.0 * M * N * K


def gemm_bytes(M: int, N: int, K: int, element_bytes: int = 2) -> float:
    """The fewest bytes a GEMM moves: A and B read once, C written once (half: 2 bytes each)."""
    return float(element_bytes) * (M * K + N * K + M * N)


def _reference_gpu(A, B):
    """C = A B^T in float64 on the GPU (the 4096^3 product takes seconds there, minutes on a host)."""
    import cupy
    return cupy.matmul(A.astype(cupy.float64), B.astype(cupy.float64).T)


#: The GEMMs of the book's other chapters, as C (M x N) = A (M x K) B^T: a convolution as an
#: implicit GEMM has M = images x output pixels, N = filters, K = input channels x filter taps; a
#: dense layer M = batch, N = outputs, K = inputs. (name, M, N, K, where it comes from.)
SHAPES = (
    ("convpool b32", 32 * 224 * 224, 256, 256 * 5 * 5,
     "convpool's layer at batch 32: 224 x 224 images, 256 -> 256 channels, 5 x 5 filters"),
    ("alexnet conv1", 128 * 55 * 55, 96, 368,
     "AlexNet conv1 at batch 128: 55 x 55 outputs, 96 filters of 3 x 11 x 11 = 363 taps, padded with zeros "
     "to 368 (rows of A and B a multiple of 16 bytes, as a tensor map needs)"),
    ("alexnet conv2", 128 * 27 * 27, 256, 96 * 5 * 5, "AlexNet conv2 at batch 128: 27 x 27, 96 -> 256, 5 x 5"),
    ("alexnet conv3", 128 * 13 * 13, 384, 256 * 3 * 3, "AlexNet conv3 at batch 128: 13 x 13, 256 -> 384, 3 x 3"),
    ("alexnet conv4", 128 * 13 * 13, 384, 384 * 3 * 3, "AlexNet conv4 at batch 128: 13 x 13, 384 -> 384, 3 x 3"),
    ("alexnet conv5", 128 * 13 * 13, 256, 384 * 3 * 3, "AlexNet conv5 at batch 128: 13 x 13, 384 -> 256, 3 x 3"),
    ("training layer 1", 1024, 128, 32_760,
     "training's first layer at batch 1,024: 32,754 words (padded to 32,760) -> 128 hidden units"),
)
#: Rows of C checked against float64 where C is larger than this many elements (the reference of
#: convpool's A, 1.6 million x 6,400, would need 82 GB in float64): a random sample of rows, the
#: first and the last always among them; every element of C is still checked for being written.
SAMPLE_ROWS = 4096


def _random(shape, seed: int, precision: str):
    """Uniform [-1, 1) in ``precision``'s storage type on the GPU, made in slabs of rows (the
    float32 intermediate of convpool's A alone would be 41 GB)."""
    import cupy
    rng = cupy.random.RandomState(seed)
    out = cupy.empty(shape, storage_dtype(precision))
    step = max(1, (1 << 28) // max(1, shape[1]))
    for r in range(0, shape[0], step):
        part = rng.uniform(-1, 1, (min(step, shape[0] - r), shape[1]), dtype=cupy.float32)
        out[r:r + part.shape[0]] = to_bf16_bits(part, cupy) if precision == "bf16" else part.astype(out.dtype)
    return out


def _checked_rows(M: int, N: int, seed: int):
    import cupy
    if M * N <= SAMPLE_ROWS * 8192:
        return None
    rows = np.random.default_rng(seed).choice(M, SAMPLE_ROWS, replace=False)
    return cupy.asarray(np.unique(np.concatenate([rows, [0, M - 1]])))


def _reference(A, B, precision: str, rows=None):
    import cupy
    a = A if rows is None else A[rows]
    return _reference_gpu(as_float(a, precision, cupy), as_float(B, precision, cupy))


_CUBLAS_TYPES = {"bf16": (14, 68), "tf32": (0, 77), "fp16": (2, 68)}   # (cudaDataType, cublasComputeType)


def _gemm_ex(A, B, C, precision: str):
    """cublasGemmEx on CuPy's libcublas (through ctypes: CuPy has no bfloat16 type, and its
    matmul's tf32 is a process-wide switch), on a handle of its own bound to the current stream:
    C (M x N, row-major) = A B^T, i.e. column-major C^T = B^T(op T) A^T, cuBLAS's TN case.
    bf16: CUDA_R_16BF with CUBLAS_COMPUTE_32F; tf32: CUDA_R_32F with CUBLAS_COMPUTE_32F_FAST_TF32."""
    import ctypes
    import cupy
    from ...baselines import _libcublas
    lib = _libcublas()
    handle = ctypes.c_void_p()
    workspace = cupy.empty(32 * 2**20, cupy.uint8)
    for status in (lib.cublasCreate_v2(ctypes.byref(handle)),
                   lib.cublasSetStream_v2(handle, ctypes.c_void_p(cupy.cuda.get_current_stream().ptr)),
                   lib.cublasSetWorkspace_v2(handle, ctypes.c_void_p(workspace.data.ptr), workspace.nbytes)):
        if status != 0:
            raise RuntimeError(f"cuBLAS setup failed with status {status}")
    data_type, compute = _CUBLAS_TYPES[precision]
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    M, K = A.shape
    N = B.shape[0]
    keep = (workspace, one, zero, handle, A, B, C)

    def run():
        assert keep
        status = lib.cublasGemmEx(handle, 1, 0, N, M, K, one.ctypes.data, B.data.ptr, data_type, K, A.data.ptr,
                                  data_type, K, zero.ctypes.data, C.data.ptr, data_type, N, compute, -1)
        if status != 0:
            raise RuntimeError(f"cublasGemmEx failed with status {status}")
    run.destroy = lambda: lib.cublasDestroy_v2(handle)
    return run


def vendor_launches(A, B, precision: str = "fp16"):
    """cuBLAS on the same A and B, in and out in ``precision``'s type with float accumulation:
    through CuPy (fp16: cupy.matmul; bf16 and tf32: cublasGemmEx on CuPy's libcublas) and through
    PyTorch (torch.matmul, cuBLASLt with its heuristics' pick; tf32 with allow_tf32 on)."""
    import cupy
    launches = {}
    C1 = poisoned(cupy, (A.shape[0], B.shape[0]), precision)
    if precision == "fp16":
        Bt = B.T
        launches["cuBLAS (cupy.matmul) fp16"] = (lambda: cupy.matmul(A, Bt, out=C1), C1)
    else:
        launches[f"cuBLAS (cublasGemmEx) {precision}"] = (_gemm_ex(A, B, C1, precision), C1)
    try:
        import torch
        ta, tb = torch.from_dlpack(A), torch.from_dlpack(B)
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32}[precision]
        if precision == "bf16":
            ta, tb = ta.view(torch.bfloat16), tb.view(torch.bfloat16)
        out = torch.empty((A.shape[0], B.shape[0]), dtype=dtype, device=ta.device)
        view = out.view(torch.int16) if precision == "bf16" else out
        C2 = cupy.from_dlpack(view)
        if precision == "bf16":
            C2 = C2.view(cupy.uint16)
        C2[...] = poisoned(cupy, (1, 1), precision)[0, 0]

        def run():
            if precision != "tf32":
                return torch.matmul(ta, tb.t(), out=out)
            before = torch.backends.cuda.matmul.allow_tf32      # float32 products in tf32 for this call only
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                return torch.matmul(ta, tb.t(), out=out)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = before
        launches[f"cuBLASLt (torch.matmul) {precision}"] = (run, C2)
    except Exception as exc:  # no PyTorch on this machine: CuPy's path only
        print(f"torch.matmul not timed: {exc!r}")
    return launches


def _measure(case: dict, variants, ref, rows, *, budget_ms, rounds, log) -> list[dict]:
    """Check every (label, launch, C, step) of one GEMM against ``ref`` (of the rows ``rows`` of C,
    or all), then time them in ``rounds`` rounds, each variant once per round in turn: a large
    GEMM heats the card and its clock drifts down over a run, so timing the variants one after the
    other would favour the first. A variant's row holds the samples of all its rounds
    (``round_medians_ms``: each round's median). Errors are caught per variant."""
    import cupy
    from ...timing import Timing
    M, N, K, precision = case["M"], case["N"], case["K"], case["precision"]
    name = case.get("shape", f"{case['size']}^3")
    out, checked = [], []
    for label, fn, C, number in variants:
        row = {**case, "variant": label, "step": number}
        try:
            fn()
            cupy.cuda.Device().synchronize()
            got = as_float(C if rows is None else C[rows], precision, cupy)
            result = compare(got, ref, precision=precision, name=label)
            unwritten = int(cupy.isnan(as_float(C, precision, cupy)).sum()) if rows is not None else result.unwritten
            row.update(rel_error=result.rel_error, unwritten=unwritten,
                       passed=bool(result.passed) and unwritten == 0)
            checked.append((row, fn))
        except Exception as exc:
            row["error"] = repr(exc)
            log(f"{name} {precision} {label}: error {exc!r}\n{traceback.format_exc()}")
            out.append(row)
    samples = {id(row): [] for row, _ in checked}
    medians = {id(row): [] for row, _ in checked}
    for _ in range(rounds):
        for row, fn in checked:
            timing = benchmark(fn, budget_ms=budget_ms, repeats=100)
            samples[id(row)].append(timing.samples_ms)
            medians[id(row)].append(timing.median_ms)
    for row, fn in checked:
        timing = Timing(np.concatenate(samples[id(row)]), method="cuda events, rounds interleaved")
        row.update(timing.row(case["experiment"], row["variant"], size=case["size"], flops=gemm_flops(M, N, K),
                              bytes=gemm_bytes(M, N, K, ELEMENT_BYTES[precision])))
        row["round_medians_ms"] = " ".join(f"{m:.4f}" for m in medians[id(row)])
        row["tflops"] = gemm_flops(M, N, K) / (timing.median_ms * 1e-3) / 1e12
        log(f"{name} {precision} {row['variant']}: {row['median_ms']:.4f} ms, {row['tflops']:.1f} TFLOP/s "
            f"(rounds {row['round_medians_ms']}), rel error {row['rel_error']:.2e}"
            f"{'' if row['passed'] else ' FAILED'}")
        out.append(row)
    return out


def _case_variants(steps, A, B, M, N, precision, be):
    import cupy
    variants, failed = [], []
    for step in steps:
        C = poisoned(cupy, (M, N), precision)
        label = f"step {step.label}" + ("" if precision == "fp16" else f" {precision}")
        try:
            variants.append((label, make_launch(step, A, B, C, be), C, step.number))
        except Exception as exc:
            failed.append({"variant": label, "step": step.number, "error": repr(exc)})
    for label, (fn, C) in vendor_launches(A, B, precision).items():
        variants.append((label, fn, C, "vendor"))
    return variants, failed


def _free():
    import cupy
    cupy.get_default_memory_pool().free_all_blocks()
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:
        pass


def benchmark_all(sizes=(4096,), *, budget_ms: float = 500.0, rounds: int = 3, seed: int = 0,
                  log=print, precisions=("fp16",), shapes=(), shape_budget_ms: float | None = None) -> pd.DataFrame:
    """Check every step and both cuBLAS paths at each square size n^3 in fp16 (experiment
    ``hopper_gemm``), then time them (see :func:`_measure`). Beside them, for each other precision
    in ``precisions`` (bf16, tf32): step 7 in that type and both cuBLAS paths in it at each size
    (experiment ``hopper_gemm_<precision>``); and for each of ``shapes`` ((name, M, N, K, note), e.g.
    :data:`SHAPES`) and each precision, step 7 and both cuBLAS paths (experiment ``hopper_shapes``,
    with columns shape, M, N, K, precision; ``shape_budget_ms`` per variant and round)."""
    be = get_backend("gpu")
    best = STEPS[-1]
    cases = [({"experiment": "hopper_gemm", "size": int(n), "M": int(n), "N": int(n), "K": int(n),
               "precision": "fp16"}, STEPS, budget_ms) for n in sizes]
    cases += [({"experiment": f"hopper_gemm_{p}", "size": int(n), "M": int(n), "N": int(n), "K": int(n),
                "precision": p}, [in_precision(best, p)], budget_ms) for p in precisions if p != "fp16" for n in sizes]
    cases += [({"experiment": "hopper_shapes", "size": 0, "shape": name, "M": M, "N": N, "K": K, "precision": p},
               [in_precision(best, p)], shape_budget_ms or budget_ms)
              for name, M, N, K, *_ in shapes for p in precisions]
    rows = []
    for case, steps, budget in cases:
        M, N, K, precision = case["M"], case["N"], case["K"], case["precision"]
        try:
            A = _random((M, K), seed, precision)
            B = _random((N, K), seed + 1, precision)
            checked = _checked_rows(M, N, seed)
            ref = _reference(A, B, precision, checked)
            variants, failed = _case_variants(steps, A, B, M, N, precision, be)
            for f in failed:
                log(f"{case} {f['variant']}: could not launch: {f['error']}")
            rows += [{**case, **f} for f in failed]
            rows += _measure(case, variants, ref, checked, budget_ms=budget, rounds=rounds, log=log)
        except Exception as exc:
            log(f"{case}: error {exc!r}\n{traceback.format_exc()}")
            rows.append({**case, "variant": "(case)", "step": "", "error": repr(exc)})
        finally:
            A = B = ref = variants = None
            _free()
    table = pd.DataFrame(rows)
    if "tflops" in table:
        key = table["experiment"] + "|" + table.get("shape", pd.Series("", index=table.index)).fillna("").astype(str) \
            + "|" + table["size"].astype(str) + "|" + table["precision"]
        vendor = table[table["step"] == "vendor"].groupby(key)["tflops"].max()
        table["vs_best_cublas"] = table["tflops"] / key.map(vendor)
        table["vs_fp16_peak"] = table["tflops"] / H100_FP16_DENSE_TFLOPS
    return table
