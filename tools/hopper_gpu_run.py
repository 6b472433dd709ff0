"""One GPU call for the hopper chapter: build every step (and step 7's bf16 and tf32 files) for
sm_90a, report its registers and local memory, check it against float64 at sizes that are not
multiples of its tile, then check and time every step and cuBLAS (CuPy and PyTorch) at n^3 in
fp16, step 7 and cuBLAS in bf16 and tf32 at n^3 and at the book's GEMM shapes
(record.SHAPES), profile one launch of each fp16 kernel with ncu, and write the rows as CSV.

    python tools/hopper_gpu_run.py --out $OUT --sizes 4096 8192 --precisions fp16 bf16 tf32 --shapes --profile
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[4096])
    parser.add_argument("--budget-ms", type=float, default=500.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precisions", nargs="+", default=["fp16"], choices=["fp16", "bf16", "tf32"])
    parser.add_argument("--shapes", action="store_true", help="also time step 7 and cuBLAS at record.SHAPES")
    parser.add_argument("--shape-budget-ms", type=float, default=None)
    parser.add_argument("--profile", action="store_true",
                        help="ncu (SpeedOfLight, ComputeWorkloadAnalysis) of one launch of each fp16 kernel at "
                             "the first size, after the timings, into the run's profile table")
    parser.add_argument("--launch-once", action="store_true",
                        help="only launch every step once at the first size (for ncu to profile)")
    args = parser.parse_args()
    if args.launch_once:
        return launch_once(args.sizes[0])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import cupy
    from gpulab.kernels import get_backend, load_module
    from gpulab.workloads import hopper
    from gpulab.workloads.hopper.record import SHAPES, benchmark_all
    from gpulab.workloads.hopper.steps import in_precision

    props = cupy.cuda.runtime.getDeviceProperties(0)
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "gpu": props["name"].decode(), "cc": f"{props['major']}.{props['minor']}",
           "sms": props["multiProcessorCount"], "cupy": cupy.__version__,
           "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(), "driver": cupy.cuda.runtime.driverGetVersion(),
           "python": platform.python_version()}
    try:
        import torch
        env["torch"] = torch.__version__
    except Exception as exc:
        env["torch"] = repr(exc)
    from gpulab.cpu import resources
    import ctypes
    lib, _ = resources._library()
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    env["nvrtc"] = f"{major.value}.{minor.value}"
    print(json.dumps(env))
    (out / "env.json").write_text(json.dumps(env, indent=1))

    be = get_backend("gpu")
    checks, resources_rows = [], []
    variants = list(hopper.STEPS) + [in_precision(hopper.STEPS[-1], p) for p in args.precisions if p != "fp16"]
    for step in variants:
        try:
            module = load_module(step.file, be, options=hopper.GPU_OPTIONS)
            attrs = module.get_function(step.kernel).raw.attributes
            resources_rows.append({"step": step.number, "kernel": step.kernel, "registers": attrs.get("num_regs"),
                                   "local_bytes": attrs.get("local_size_bytes"),
                                   "static_shared_bytes": attrs.get("shared_size_bytes"),
                                   "dynamic_shared_bytes": step.shared_bytes, "threads": step.threads,
                                   "precision": step.precision})
            print(f"step {step.number}: {resources_rows[-1]}")
        except Exception as exc:
            print(f"step {step.number}: build failed: {exc}")
            continue
        for M, N, K in hopper.CHECK_SHAPES:
            try:
                result = hopper.check(step, M, N, K, be, seed=1)
                checks.append({"step": step.number, "precision": step.precision, "M": M, "N": N, "K": K,
                               "rel_error": result.rel_error,
                               "unwritten": result.unwritten, "passed": bool(result.passed)})
                print(f"  check {M}x{N}x{K}: {result}")
            except Exception as exc:
                checks.append({"step": step.number, "precision": step.precision, "M": M, "N": N, "K": K,
                               "error": repr(exc), "passed": False})
                print(f"  check {M}x{N}x{K}: error {exc!r}")
    sys.stdout.flush()
    from gpulab.device import GpuMonitor, describe
    from gpulab.runs import save_run
    with GpuMonitor() as monitor:
        table = benchmark_all(tuple(args.sizes), budget_ms=args.budget_ms, rounds=args.rounds,
                              precisions=tuple(args.precisions), shapes=SHAPES if args.shapes else (),
                              shape_budget_ms=args.shape_budget_ms)
    meta = describe()
    meta["gpu_state"] = monitor.summary()
    meta["nvrtc"] = env["nvrtc"]
    meta["kernel_sources_sha256"] = kernel_sources()
    meta["torch"] = env["torch"]
    timed = table[table["median_ms"].notna()] if "median_ms" in table else table.iloc[0:0]
    failed = table[table["median_ms"].isna()] if "median_ms" in table else table
    tables = {"checks": checks, "resources": resources_rows}
    if args.profile:
        try:
            tables["profile"] = profile(args.sizes[0])
            meta["profile_note"] = (f"ncu --section SpeedOfLight --section ComputeWorkloadAnalysis, one launch of "
                                    f"each fp16 kernel at {args.sizes[0]}^3 (ncu default clock control: base "
                                    "clocks), in the same call after the timings; the cuBLAS kernel is the one "
                                    "cupy.matmul ran")
        except Exception as exc:
            print(f"profile failed: {exc!r}")
    if len(failed):
        tables["errors"] = failed
    path = save_run("hopper", timed, meta=meta, root=out, tables=tables)
    print(f"saved {path}")
    cols = [c for c in ("experiment", "shape", "size", "variant", "median_ms", "tflops", "vs_best_cublas",
                        "rel_error", "error")
            if c in table]
    print(table[cols].to_string(index=False))
    return 0


def kernel_sources() -> dict:
    """sha256 of every file the steps are built from, so a record can be matched to its sources."""
    import hashlib
    root = Path(__file__).resolve().parents[1]
    files = sorted((root / "kernels" / "hopper").glob("*.cu*")) + [root / "kernels" / "common" / "hopper.h"]
    return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


#: The ncu metrics the chapter's profile table keeps (its views read SM Busy, Issue Slots Busy,
#: DRAM and L2 throughput and Duration).
PROFILE_METRICS = ("SM Frequency", "Memory Throughput", "DRAM Throughput", "Duration", "L2 Cache Throughput",
                   "Compute (SM) Throughput", "Issue Slots Busy", "SM Busy")


def is_gemm_kernel(name: str) -> bool:
    """The ladder's kernels and cuBLAS's (nvjet_..., or a name with gemm in it), not the kernels
    that made the random inputs (cupy_..., curand's, cub's)."""
    return name.startswith("nvjet") or "gemm" in name.lower()


def profile(n: int):
    """ncu over this script's --launch-once at n^3: one row per (kernel, metric), base units."""
    from gpulab.profiler import ncu_path, parse_csv
    ncu = ncu_path()
    if ncu is None:
        raise RuntimeError("ncu is not on PATH")
    cmd = [ncu, "--csv", "--print-units", "base", "--section", "SpeedOfLight", "--section",
           "ComputeWorkloadAnalysis", sys.executable, str(Path(__file__).resolve()), "--out", "/tmp/ncu_unused",
           "--sizes", str(n), "--launch-once"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if done.returncode != 0:
        raise RuntimeError(f"ncu exited {done.returncode}: {done.stderr[-2000:]}")
    rows = parse_csv(done.stdout)
    rows = rows[rows["metric"].isin(PROFILE_METRICS) & rows["kernel"].map(is_gemm_kernel)]
    print(f"profile: {rows['kernel'].nunique()} kernels, {len(rows)} rows")
    return rows[["kernel", "block", "grid", "metric", "unit", "value"]].reset_index(drop=True)


def launch_once(n: int) -> int:
    import cupy
    from gpulab.kernels import get_backend
    from gpulab.workloads import hopper
    be = get_backend("gpu")
    A = cupy.random.RandomState(0).uniform(-1, 1, (n, n)).astype(cupy.float16)
    B = cupy.random.RandomState(1).uniform(-1, 1, (n, n)).astype(cupy.float16)
    C = cupy.empty((n, n), cupy.float16)
    for step in hopper.STEPS:
        hopper.make_launch(step, A, B, C, be)()
    cupy.matmul(A, B.T)
    cupy.cuda.Device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
