"""The recorded run: ``python -m gpulab record hopper`` (GPU only), declared as its experiments
(:class:`gpulab.recorder.Recording`).

Experiments (tidy rows; see :mod:`gpulab.timing`), each variant checked against float64 at the
size it is timed at before it is timed (a failure is a ``FAILED`` row of the ``skipped`` table),
cuBLAS through CuPy and through PyTorch timed in the same run on the same inputs:

- ``checks``: every step (and step 7's bf16 and tf32 files) built for sm_90a, its registers and
  local memory (``resources`` table), and checked at :data:`CHECK_SHAPES`, sizes that are not
  multiples of its tile (``checks`` table);
- ``ladder``: every step and both cuBLAS paths at n^3 in fp16, n in :data:`SIZES` (experiment
  ``hopper_gemm``);
- ``bf16``, ``tf32``: step 7 and both cuBLAS paths in that type at the same sizes (experiments
  ``hopper_gemm_bf16``, ``hopper_gemm_tf32``);
- ``shapes``: step 7 and both cuBLAS paths at the book's GEMM shapes, :data:`SHAPES`, in each type
  (experiment ``hopper_shapes``, with columns shape, M, N, K, precision);
- ``fp8``: the FP8 steps (9 and 10, A and B in e4m3 with per-tensor scales, C in bfloat16) and
  cuBLASLt's FP8 GEMM (``torch._scaled_mm``, with and without its fast accumulation) on the same
  codes and scales at n^3 (experiment ``hopper_gemm_fp8``), checked against float64 of the FP8
  values times the scales;
- ``profile``: Nsight Compute's SpeedOfLight and ComputeWorkloadAnalysis of one launch of each
  fp16 kernel (``profile`` table).

The run's metadata adds the sha256 of every kernel source the steps are built from (tests/test_runs.py
holds the recorded runs to them), NVRTC's and PyTorch's versions.
"""
from __future__ import annotations

import hashlib
import subprocess

import numpy as np
import pandas as pd

from ... import datasheet, fp8, ladder, paths, profiler, recorder
from ...check import compare
from ...errors import CheckFailed
from ...kernels import get_backend, load_module
from ...recorder import Variant
from ...runs import code_digest
from .launchers import GPU_OPTIONS
from .problem import CHECK_SHAPES, ELEMENT_BYTES, FP8_CHECK_SHAPES, MAIN_SIZE, NAME, Fp8Gemm, Gemm, as_float, \
    fp8_cases, from_bf16_bits, poisoned, storage_dtype, to_bf16_bits
from .steps import FP8_STEPS, OTHER_PRECISIONS, STEPS, TYPED_STEP, in_precision

#: The square sizes n^3 the ladder (and step 7 in bf16 and tf32) is timed at; a quick run's.
SIZES = (MAIN_SIZE, 8192)
QUICK_SIZES = (1024,)
#: The FP8 rung's sizes (K a multiple of 16: its tensor maps' rows of one-byte codes) and a quick run's.
FP8_SIZES, FP8_QUICK_SIZES = SIZES, QUICK_SIZES
#: The element types the recorded run times step 7 and cuBLAS in.
PRECISIONS = ("fp16", *OTHER_PRECISIONS)
#: Each variant is timed in ``ROUNDS`` rounds (a quick run: one), each of up to the recording's
#: ``variant_budget_ms``.
ROUNDS = 3

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
#: The shapes a quick run times (the two smallest).
QUICK_SHAPES = ("alexnet conv3", "training layer 1")
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


def _checker(name: str, precision: str, ref, rows, values):
    """A variant's check at the size it is timed at: run it once, then C (``output()``: the array
    it wrote) read as floats by ``values`` against ``ref`` (of the rows ``rows`` of C, or all),
    every element of C written."""
    import cupy

    def check(label, fn, output):
        fn()
        cupy.cuda.Device().synchronize()
        C = output()
        got = values(C if rows is None else C[rows])
        result = compare(got, ref, precision=precision, name=label)
        unwritten = int(cupy.isnan(values(C)).sum()) if rows is not None else result.unwritten
        if not result.passed or unwritten:
            raise CheckFailed(f"{name} {precision}: {result}" + (f", {unwritten} elements never written"
                                                                  if unwritten else ""))
        return {"rel_error": result.rel_error, "unwritten": unwritten, "passed": True}
    return check


def _row_maker(case: dict, moved_bytes: float):
    """The timed row of a variant of ``case``: the case, the timing's columns, its rounds' medians, TFLOP/s."""
    M, N, K = case["M"], case["N"], case["K"]

    def row(label, number):
        def make(timing, checked, medians):
            out = {**case, "variant": label, "step": number, **checked}
            out.update(timing.row(case["experiment"], label, size=case["size"], flops=gemm_flops(M, N, K),
                                  bytes=moved_bytes, precision=case["precision"]))
            out["round_medians_ms"] = " ".join(f"{m:.4f}" for m in medians)
            out["tflops"] = gemm_flops(M, N, K) / (timing.median_ms * 1e-3) / 1e12
            return out
        return make
    return row


def _as_variants(launches, check, row, where) -> list[Variant]:
    """(label, launch, C or a function returning C, step number) -> checked, timed variants."""
    return [Variant(label, fn, check=lambda label=label, fn=fn, C=C: check(label, fn, C if callable(C) else lambda: C),
                    row=row(label, number), where=where) for label, fn, C, number in launches]


def _variants(rec, case: dict, steps, A, B, ref, rows, be) -> list[Variant]:
    """Each step of ``steps`` bound to the GEMM A B^T of ``case`` (a step that cannot be bound is a
    ``FAILED`` row of the ``skipped`` table), then cuBLAS's paths on A and B, each checked against
    ``ref`` (of the rows ``rows`` of C, or all) with every element of C written."""
    import cupy
    M, N, K, precision = case["M"], case["N"], case["K"], case["precision"]
    name = case.get("shape", f"{case['size']}^3")
    where = {k: case[k] for k in ("experiment", "shape", "size", "precision") if k in case}
    launches = []
    for step in steps:
        C = poisoned(cupy, (M, N), precision)
        label = f"step {step.label}" + ("" if precision == "fp16" else f" {precision}")
        bound = rec.checked(lambda: ladder.bind(step, Gemm(M, N, K), {"A": A, "B": B, "C": C}, be), **where,
                            variant=label)
        if bound:
            launches.append((label, bound.value, C, step.number))
    launches += [(label, fn, C, "vendor") for label, (fn, C) in vendor_launches(A, B, precision).items()]
    check = _checker(name, precision, ref, rows, lambda C: as_float(C, precision, cupy))
    return _as_variants(launches, check, _row_maker(case, gemm_bytes(M, N, K, ELEMENT_BYTES[precision])), where)


def _free():
    import cupy
    cupy.get_default_memory_pool().free_all_blocks()
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:          # no PyTorch here: CuPy's pool was all there was to free
        pass


def time_case(rec, case: dict, steps, *, seed: int = 0) -> None:
    """One GEMM ``case`` (experiment, size or shape, M, N, K, precision): random inputs, the
    float64 reference, ``steps`` and cuBLAS checked, then timed in rounds (:meth:`Recorder.ladder`:
    a large GEMM heats the card and its clock drifts down over a run, so timing the variants one
    after the other would favour the first). A case that fails as a whole (out of memory, say) is
    listed in the run's ``problems`` table."""
    M, N, K, precision = case["M"], case["N"], case["K"], case["precision"]

    def measure():
        try:
            A = _random((M, K), seed, precision)
            B = _random((N, K), seed + 1, precision)
            checked = _checked_rows(M, N, seed)
            ref = _reference(A, B, precision, checked)
            variants = _variants(rec, case, steps, A, B, ref, checked, get_backend("gpu"))
            rec.ladder(variants, rounds=1 if rec.quick else ROUNDS)
        finally:
            A = B = ref = variants = None
            _free()
    rec.attempt(f"{case['experiment']} {case.get('shape', case['size'])} {precision}", measure)


def _square(experiment: str, n: int, precision: str) -> dict:
    return {"experiment": experiment, "size": int(n), "M": int(n), "N": int(n), "K": int(n), "precision": precision}


def time_ladder(rec, ctx) -> None:
    for n in QUICK_SIZES if rec.quick else SIZES:
        time_case(rec, _square("hopper_gemm", n, "fp16"), STEPS)


def time_in(precision: str):
    """Step 7 and cuBLAS in ``precision`` at each square size (experiment hopper_gemm_<precision>)."""
    def time_precision(rec, ctx) -> None:
        for n in QUICK_SIZES if rec.quick else SIZES:
            time_case(rec, _square(f"hopper_gemm_{precision}", n, precision), [in_precision(TYPED_STEP, precision)])
    return time_precision


def time_shapes(rec, ctx) -> None:
    """Step 7 and cuBLAS at each of :data:`SHAPES` (a quick run: :data:`QUICK_SHAPES`), in every type."""
    for name, M, N, K, *_ in SHAPES:
        if rec.quick and name not in QUICK_SHAPES:
            continue
        for p in PRECISIONS:
            time_case(rec, {"experiment": "hopper_shapes", "size": 0, "shape": name, "M": M, "N": N, "K": K,
                            "precision": p}, [in_precision(TYPED_STEP, p)])


# ------------------------------------------------------------------ FP8
#: The FP8 steps the run times: B in e4m3, as cuBLASLt's FP8 GEMM takes it (step 9's e5m2 kernel is
#: checked, not timed).
FP8_TIMED = [step for step in FP8_STEPS if step.launcher.kind_b == "e4m3"]


def fp8_inputs(M: int, N: int, K: int, seed: int):
    """A (M x K) and B (N x K) uniform in [-1, 1), made and put into e4m3 on the GPU (by
    :func:`gpulab.fp8.quantize`'s rule), with their per-tensor scales (0-d float32 arrays)."""
    import cupy
    out = {}
    for name, rows, part in (("A", M, seed), ("B", N, seed + 1)):
        x = cupy.random.RandomState(part).uniform(-1, 1, (rows, K))      # float64, as quantize divides in
        codes, scale = fp8.quantize(x, "e4m3", xp=cupy)
        out[name], out[f"scale_{name.lower()}"] = codes, np.array(scale, np.float32)
        x = None
    return out


def fp8_vendor_launches(inputs: dict):
    """cuBLASLt's FP8 GEMM through PyTorch on the same codes and scales, C in bfloat16:
    ``torch._scaled_mm`` with its fast accumulation (the tensor cores' own, as step 9's) and
    without (partial sums promoted, as step 10's). Each launch returns C, which the check reads
    (as bfloat16 bits)."""
    import cupy
    import torch
    a = torch.from_dlpack(inputs["A"]).view(torch.float8_e4m3fn)
    b = torch.from_dlpack(inputs["B"]).view(torch.float8_e4m3fn)
    scales = [torch.tensor(float(inputs[k]), dtype=torch.float32, device=a.device) for k in ("scale_a", "scale_b")]
    launches = {}
    for fast, label in ((True, "cuBLASLt (torch._scaled_mm) fp8 fast accumulation"),
                        (False, "cuBLASLt (torch._scaled_mm) fp8")):
        held = {}

        def run(fast=fast, held=held):
            held["C"] = torch._scaled_mm(a, b.t(), scale_a=scales[0], scale_b=scales[1], out_dtype=torch.bfloat16,
                                         use_fast_accum=fast)
            return held["C"]
        launches[label] = (run, lambda held=held: cupy.from_dlpack(held["C"].view(torch.int16)).view(cupy.uint16))
    return launches


def time_fp8_case(rec, case: dict, *, seed: int = 0) -> None:
    """The FP8 steps and cuBLASLt's FP8 GEMM at one size: codes and scales made on the GPU, the
    float64 reference of the FP8 values times the scales (sampled rows where C is large), each
    variant checked (tolerance ``fp8``), then timed in rounds, interleaved."""
    import cupy
    M, N, K = case["M"], case["N"], case["K"]
    where = {k: case[k] for k in ("experiment", "size", "precision")}

    def measure():
        try:
            inputs = fp8_inputs(M, N, K, seed)
            rows = _checked_rows(M, N, seed)
            table = cupy.asarray(fp8.decode_table("e4m3"))
            a = table[inputs["A"] if rows is None else inputs["A"][rows]]
            ref = _reference_gpu(a, table[inputs["B"]]) * (float(inputs["scale_a"]) * float(inputs["scale_b"]))
            a = None
            launches = []
            for step in FP8_TIMED:
                C = poisoned(cupy, (M, N), "bf16")
                label = f"step {step.label}"
                bound = rec.checked(lambda: ladder.bind(step, Fp8Gemm(M, N, K), {**inputs, "C": C}, get_backend("gpu")),
                                    **where, variant=label)
                if bound:
                    launches.append((label, bound.value, C, step.number))
            launches += [(label, fn, C, "vendor") for label, (fn, C) in fp8_vendor_launches(inputs).items()]
            check = _checker(f"{case['size']}^3", "fp8", ref, rows, lambda C: from_bf16_bits(C, cupy))
            moved = float(M * K + N * K + 2 * M * N)             # one-byte A and B, bfloat16 C
            rec.ladder(_as_variants(launches, check, _row_maker(case, moved), where), rounds=1 if rec.quick else ROUNDS)
        finally:
            inputs = ref = launches = None
            _free()
    rec.attempt(f"{case['experiment']} {case['size']} fp8", measure)


def time_fp8(rec, ctx) -> None:
    """Steps 9 and 10 and cuBLASLt's FP8 GEMM at each square size (experiment hopper_gemm_fp8)."""
    for n in FP8_QUICK_SIZES if rec.quick else FP8_SIZES:
        time_fp8_case(rec, _square("hopper_gemm_fp8", n, "fp8"))


def vs_best_cublas(rows) -> pd.DataFrame:
    """The run's rows with each variant's TFLOP/s as a fraction of the fastest cuBLAS path of its
    case (same experiment, shape, size and type) and of the H100's fp16 dense peak."""
    table = pd.DataFrame(rows)
    if "tflops" in table:
        key = table["experiment"] + "|" + table.get("shape", pd.Series("", index=table.index)).fillna("").astype(str) \
            + "|" + table["size"].astype(str) + "|" + table["precision"]
        vendor = table[table["step"] == "vendor"].groupby(key)["tflops"].max()
        table["vs_best_cublas"] = table["tflops"] / key.map(vendor)
        table["vs_fp16_peak"] = table["tflops"] / H100_FP16_DENSE_TFLOPS
    return table


# ------------------------------------------------------------------ builds, checks, provenance
def kernel_resources(step) -> dict:
    """Registers, local and static shared memory of ``step``'s kernel as NVRTC built it for sm_90a."""
    attrs = load_module(step.file, get_backend("gpu"), options=GPU_OPTIONS).get_function(step.kernel).raw.attributes
    return {"registers": attrs.get("num_regs"), "local_bytes": attrs.get("local_size_bytes"),
            "static_shared_bytes": attrs.get("shared_size_bytes")}


def build_and_check(rec, ctx) -> None:
    """Every step, step 7 in each other type and the FP8 steps, built (``resources`` table) and
    checked at :data:`CHECK_SHAPES` (the FP8 steps at ``FP8_CHECK_SHAPES``, B in its kernel's kind)
    on the GPU (``checks`` table; a failure is listed there with its error)."""
    checks, resources = [], []
    cases = [Gemm(*shape) for shape in CHECK_SHAPES] + fp8_cases(FP8_CHECK_SHAPES)
    for step in list(STEPS) + [in_precision(TYPED_STEP, p) for p in PRECISIONS if p != "fp16"] + FP8_STEPS:
        built = rec.checked(lambda: kernel_resources(step), experiment="build", variant=f"step {step.label}",
                            precision=step.precision)
        if not built:
            continue
        resources.append({"step": step.number, "kernel": step.kernel, **built.value,
                          "dynamic_shared_bytes": step.shared_bytes, "threads": step.threads,
                          "precision": step.precision})
        for case in (c for c in cases if step.launcher.accepts(c)):
            M, N, K = case.M, case.N, case.K
            # an FP8 row names its operands' kinds (step 9 has a kernel for each kind of B)
            kind = f"{step.precision} {case.columns['operands']}" if step.precision == "fp8" else step.precision
            where = {"step": step.number, "precision": kind, "M": M, "N": N, "K": K}
            try:
                _, result = ladder.check_case(step, case, seed=1, backend="gpu")
                checks.append({**where, "rel_error": result.rel_error, "unwritten": result.unwritten,
                               "passed": bool(result.passed)})
            except Exception as exc:       # noqa: BLE001 (listed in the checks table with its error)
                checks.append({**where, "error": repr(exc), "passed": False})
            rec.progress(f"step {step.number} {step.precision} checked at {M}x{N}x{K}: "
                         f"{'ok' if checks[-1]['passed'] else 'FAILED ' + checks[-1].get('error', '')}")
    rec.table("resources", pd.DataFrame(resources))
    rec.table("checks", pd.DataFrame(checks))


def _source_files() -> list:
    root = paths.REPO
    # The step files of the ladder and of the FP8 rung and the headers they build on: an exercise's
    # starter (exercise_*.cu) is not what the run timed.
    timed = [*STEPS, *(in_precision(TYPED_STEP, precision) for precision in OTHER_PRECISIONS), *FP8_STEPS]
    named = {root / "kernels" / step.file for step in timed}
    headers = {p for p in (root / "kernels" / "hopper").glob("*.cuh")}
    return sorted(named | headers) + [root / "kernels" / "common" / "hopper.h"]


def kernel_sources() -> dict:
    """sha256 of every file the steps are built from, so a record can be matched to its sources."""
    return {str(f.relative_to(paths.REPO)): hashlib.sha256(f.read_bytes()).hexdigest() for f in _source_files()}


def kernel_code() -> dict:
    """The same files' code digests (:func:`gpulab.runs.code_digest`: comments left out), which an
    edit to a comment does not change."""
    return {str(f.relative_to(paths.REPO)): code_digest(f.read_text()) for f in _source_files()}


def nvrtc_version() -> str:
    import ctypes
    from ...cpu import resources
    lib, _ = resources._library()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def torch_version() -> str:
    try:
        import torch
        return torch.__version__
    except Exception as exc:       # noqa: BLE001 (the run says why PyTorch's paths are missing)
        return repr(exc)


def provenance(rec) -> None:
    """The recording's setup: what the run's metadata says beyond the machine."""
    rec.add_meta(kernel_sources_sha256=kernel_sources(), kernel_code_sha256=kernel_code(), nvrtc=nvrtc_version(), torch=torch_version())


# ------------------------------------------------------------------ Nsight Compute
#: The ncu metrics the chapter's profile table keeps (its views read SM Busy, Issue Slots Busy,
#: DRAM and L2 throughput and Duration).
PROFILE_METRICS = ("SM Frequency", "Memory Throughput", "DRAM Throughput", "Duration", "L2 Cache Throughput",
                   "Compute (SM) Throughput", "Issue Slots Busy", "SM Busy")


def is_gemm_kernel(name: str) -> bool:
    """The ladder's kernels and cuBLAS's (nvjet_..., or a name with gemm in it), not the kernels
    that made the random inputs (cupy_..., curand's, cub's)."""
    return name.startswith("nvjet") or "gemm" in name.lower()


def ncu_profile(n: int) -> pd.DataFrame:
    """ncu (its SpeedOfLight and ComputeWorkloadAnalysis sections, at its default base clocks) over
    :func:`profile_driver` at n^3: one row per (kernel, metric), base units."""
    ncu = profiler.ncu_path()
    if ncu is None:
        raise profiler.ProfilerError("ncu is not on PATH")
    cmd = [ncu, "--csv", "--print-units", "base", "--section", "SpeedOfLight", "--section",
           "ComputeWorkloadAnalysis", *profiler.driver(NAME, str(n))]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if done.returncode != 0:
        raise profiler.ProfilerError(f"ncu exited {done.returncode}: {done.stderr[-2000:]}")
    rows = profiler.parse_csv(done.stdout)
    rows = rows[rows["metric"].isin(PROFILE_METRICS) & rows["kernel"].map(is_gemm_kernel)]
    return rows[["kernel", "block", "grid", "metric", "unit", "value"]].reset_index(drop=True)


def profile(rec, ctx) -> None:
    n = (QUICK_SIZES if rec.quick else SIZES)[0]
    table = ncu_profile(n)
    rec.progress(f"profile: {table['kernel'].nunique()} kernels, {len(table)} rows")
    rec.table("profile", table)
    rec.add_meta(profile_note=f"ncu --section SpeedOfLight --section ComputeWorkloadAnalysis, one launch of each "
                              f"fp16 kernel at {n}^3 (ncu default clock control: base clocks), in the same call "
                              "after the timings; the cuBLAS kernel is the one cupy.matmul ran")


def profile_driver(n: str = str(MAIN_SIZE)) -> None:
    """Every fp16 step and cupy.matmul once at n^3: the child process ncu watches
    (``python -m gpulab profile-driver hopper N``)."""
    import cupy
    n = int(n)
    be = get_backend("gpu")
    A = cupy.random.RandomState(0).uniform(-1, 1, (n, n)).astype(cupy.float16)
    B = cupy.random.RandomState(1).uniform(-1, 1, (n, n)).astype(cupy.float16)
    C = cupy.empty((n, n), cupy.float16)
    for step in STEPS:
        ladder.bind(step, Gemm(n, n, n), {"A": A, "B": B, "C": C}, be)()
    cupy.matmul(A, B.T)
    cupy.cuda.Device().synchronize()


benchmark_all = recorder.Recording(NAME, [
    recorder.Experiment("checks", build_and_check),
    recorder.Experiment("ladder", time_ladder),
    *(recorder.Experiment(p, time_in(p)) for p in PRECISIONS if p != "fp16"),
    recorder.Experiment("shapes", time_shapes),
    recorder.Experiment("fp8", time_fp8),
    recorder.Experiment("profile", profile, optional=True),
], setup=provenance, keep_going=True, finish=vs_best_cublas, variant_budget_ms=500.0,
    crosscheck=lambda row: row["experiment"].startswith("hopper_gemm"))
