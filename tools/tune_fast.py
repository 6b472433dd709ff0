"""Compile, check and time the fast steps' candidate kernels on the GPU in one call.

    python tools/tune_fast.py [--out DIR] [--only alexnet|fcnet] [--profile]
    python tools/tune_fast.py --record CHAPTER [--budget-s S] [--precheck STEP ...] [--out DIR]

AlexNet (N = 128, each layer): steps 16-21 with every tile of alexnet.tc.TILES that fits the
step's precision, the layout kernels on their own, and cuDNN through PyTorch (NCHW and
channels-last, fp16 / tf32 / fp32) for reference. fcnet: the new steps beside steps 14 and 15,
large and small, eager and in a CUDA graph. Every variant is checked against the float64
reference at full size before it is timed (a failure is reported and the variant skipped).
Prints a table per chapter and writes CSVs under --out.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpulab.check import compare                                  # noqa: E402
from gpulab.kernels import get_backend, load_module, resource_table   # noqa: E402
from gpulab.timing import benchmark, graph_benchmark               # noqa: E402
from gpulab.workloads import alexnet as A, fcnet as FC   # noqa: E402
from gpulab.workloads.alexnet import launchers as AL, tc as TC   # noqa: E402

T0 = time.time()
A_STEPS = A.STEPS + [s for s in getattr(A, "MMA_STEPS", []) if s not in A.STEPS]
FC_STEPS = FC.STEPS + [s for s in getattr(FC, "MMA_STEPS", []) if s not in FC.STEPS]


def log(text):
    print(f"[{time.time() - T0:6.1f}s] {text}", flush=True)


def resources(out: Path):
    frames = []
    for path in sorted({s.file for s in A_STEPS if s.number >= "16"} | {s.file for s in FC_STEPS if s.number >= 14}):
        try:
            t = resource_table(load_module(path, "gpu")).reset_index()
            frames.append(t.assign(file=path))
        except Exception as exc:
            log(f"compile {path}: {exc}")
    table = pd.concat(frames, ignore_index=True)
    table.to_csv(out / "resources.csv", index=False)
    print(table.to_string(), flush=True)


def alexnet(out: Path, N: int = 128, repeats: int = 50):
    import cupy
    import torch
    rows = []
    be = get_backend("gpu")
    numbers = [s.number for s in A_STEPS if s.number >= "16"]
    for layer in A.LAYERS:
        x, w = A.make_inputs(layer, N)
        x32, w32 = cupy.asarray(x), cupy.asarray(w)
        ref = A.reference(x32, w32, layer, xp=cupy)
        for number in numbers:
            step = A.CHAPTER.step(number)
            xs = x32.astype(step.dtype)
            ws = w32.astype(step.dtype)
            if isinstance(step.launcher, AL.Mma):
                chosen = TC.kernel_for(number, layer)
                prefix = "_".join(chosen.split("_")[:2])
                names = [chosen] + ([n for n in TC.TILES if n.startswith(prefix + "_") and n != chosen
                                     and n not in ("conv_mma_ldmatrix", "conv_mma_cp_async")]
                                    if number >= "20" else [])
            else:
                names = [None]
            for name in names:
                label = f"{number} {name or step.kernels[0]}"
                try:
                    y = cupy.full(layer.y_shape(N), cupy.nan, dtype=step.dtype)
                    launcher = AL.Mma(tile=name) if name else step.launcher
                    launch = launcher.bind(step, A.problem.Conv(layer, N), {"x": xs, "w": ws, "y": y}, be)
                    launch()
                    r = compare(y, ref, step.precision, name=label)
                    row = {"layer": layer.index, "variant": label, "precision": step.precision,
                           "rel_error": r.rel_error, "passed": r.passed}
                    if r.passed:
                        t = benchmark(launch, repeats=repeats, budget_ms=200)
                        row["ms"] = t.median_ms
                        row["tflops"] = layer.flops(N) / t.median_ms / 1e9
                        if name:
                            parts = launch.parts
                            row["gemm_ms"] = benchmark(parts["gemm"], repeats=repeats, budget_ms=100).median_ms
                            row["layout_ms"] = benchmark(lambda: [p() for p in parts["layout"]],
                                                         repeats=repeats, budget_ms=100).median_ms
                    rows.append(row)
                    log(f"conv{layer.index} {label}: {row.get('ms', float('nan')):.4f} ms err {r.rel_error:.1e} "
                        f"{'ok' if r.passed else 'FAILED'}")
                    del launch, y
                except Exception as exc:
                    log(f"conv{layer.index} {label}: ERROR {exc}")
                    traceback.print_exc()
                    rows.append({"layer": layer.index, "variant": label, "error": str(exc)[:300]})
        # cuDNN for reference: NCHW and channels-last, inputs converted outside the timing
        torch.backends.cudnn.benchmark = True
        tx = torch.from_dlpack(x32)
        tw = torch.from_dlpack(w32)
        for prec, dtype, tf32 in (("fp16", torch.float16, False), ("tf32", torch.float32, True),
                                  ("fp32", torch.float32, False)):
            torch.backends.cudnn.allow_tf32 = tf32
            for fmt in ("NCHW", "NHWC"):
                mf = torch.channels_last if fmt == "NHWC" else torch.contiguous_format
                xi = tx.to(dtype).contiguous(memory_format=mf)
                wi = tw.to(dtype).contiguous(memory_format=mf)

                def conv():
                    return torch.nn.functional.conv2d(xi, wi, stride=layer.U, padding=layer.P)
                conv()
                t = benchmark(conv, repeats=repeats, budget_ms=200)
                rows.append({"layer": layer.index, "variant": f"cuDNN {prec} {fmt}", "precision": prec,
                             "ms": t.median_ms, "tflops": layer.flops(N) / t.median_ms / 1e9, "passed": True})
                log(f"conv{layer.index} cuDNN {prec} {fmt}: {t.median_ms:.4f} ms")
        del x32, w32, ref
        cupy.get_default_memory_pool().free_all_blocks()
        torch.cuda.empty_cache()
    table = pd.DataFrame(rows)
    table.to_csv(out / "alexnet_tune.csv", index=False)
    piv = table.pivot_table(index="variant", columns="layer", values="ms", aggfunc="first")
    piv["sum"] = piv.sum(axis=1, min_count=5)
    print(piv.round(4).to_string(), flush=True)
    if "gemm_ms" in table:
        print(table.pivot_table(index="variant", columns="layer", values="gemm_ms", aggfunc="first").round(4).to_string())
        print(table.pivot_table(index="variant", columns="layer", values="layout_ms", aggfunc="first").round(4).to_string())
    # best per layer among step 20 / 21 candidates
    for prefix in ("20 ", "21 ", "22 "):
        sub = table[table["variant"].astype(str).str.startswith(prefix) & table.get("ms", pd.Series()).notna()]
        if len(sub):
            best = sub.loc[sub.groupby("layer")["ms"].idxmin()]
            log(f"best {prefix}per layer: " + ", ".join(f"{int(r.layer)}:{r.variant} {r.ms:.4f}" for r in best.itertuples())
                + f"  sum {best['ms'].sum():.4f} ms")


def fcnet(out: Path, repeats: int = 100):
    import cupy
    rows = []
    weights = FC.make_weights()
    steps = [s for s in FC_STEPS if s.number >= 14]
    # Tuning candidates of steps 17 and 18: other tile / warp / buffer counts.
    for number, precision, shared, cands in (
            (17, "fp16", FC.mma_shared_bytes, (("mma_fp16_t16w16", 16, 16, 2), ("mma_fp16_t64w4", 4, 64, 2),
                                               ("mma_fp16_t32w6s3", 6, 32, 3), ("mma_fp16_t16w10s3", 10, 16, 3))),
            (18, "fp32", lambda tile, warps, stages: FC.tf32x3_shared_bytes(tile, warps),
             (("tf32x3_t16w12", 12, 16, 2), ("tf32x3_t16w10", 10, 16, 2)))):
        base = next(s for s in steps if s.number == number)
        for kernel, warps, tile, stages in cands:
            launch = FC.Launch(kernel, base.launches[0].args, block=(32 * warps,), vectors_per_block=warps * tile,
                               persistent=True, shared_mem=shared(tile, warps, stages))
            steps.append(FC.Step(number, base.file, f"candidate {kernel}", (launch,), precision=precision,
                                 sizes=("small", "large")))
    for case, n in FC.SIZES.items():
        bufs = FC.buffers(get_backend("gpu"), FC.make_inputs(n), weights)
        ref = FC.reference(bufs["x"], weights, cupy.float64, xp=cupy)
        for step in steps:
            try:
                fns = FC.step_kernels(step, "gpu")
                bufs["y"].fill(cupy.nan)
                inference = FC.launchers.SEQUENCE.bind(step, FC.problem.Vectors(n), bufs, "gpu", fns=fns)
                inference()
                r = compare(bufs["y"], ref, step.precision, name=step.label)
                row = {"case": case, "variant": step.label, "intended": case in step.sizes, "rel_error": r.rel_error,
                       "passed": r.passed}
                if r.passed:
                    row["ms"] = benchmark(inference, repeats=repeats, budget_ms=600).median_ms
                    row["graph_ms"] = graph_benchmark(inference, launches=20, repeats=30).median_ms
                rows.append(row)
                log(f"fcnet {case} {step.label}: {row.get('ms', float('nan')):.4f} ms, graph "
                    f"{row.get('graph_ms', float('nan')):.4f} ms, err {r.rel_error:.1e}")
            except Exception as exc:
                log(f"fcnet {case} {step.label}: ERROR {exc}")
                traceback.print_exc()
        del bufs
        cupy.get_default_memory_pool().free_all_blocks()
    table = pd.DataFrame(rows)
    table.to_csv(out / "fcnet_tune.csv", index=False)
    print(table.to_string(), flush=True)


def profile(out: Path):
    """Each chapter's own Nsight Compute profile, through the one entry point
    (``python -m gpulab profile-driver CHAPTER``): AlexNet's big steps, labelled with their layer
    and step (:func:`gpulab.workloads.alexnet.profile_table`), and fcnet's steps on the large case."""
    for name, make in (("alexnet", A.profile_table), ("fcnet", lambda: FC.profile_steps(case="large"))):
        try:
            table = make()
        except Exception as exc:
            log(f"{name} profile failed: {str(exc)[-2000:]}")
            continue
        if table is None:
            continue
        table.to_csv(out / f"profile_{name}.csv", index=False)
        with pd.option_context("display.width", 250, "display.max_columns", 40):
            print(table.T.to_string(), flush=True)


def record(chapter: str, out: Path, budget_s: float | None, precheck: list[str]):
    """``python -m gpulab record CHAPTER --out OUT --budget-s BUDGET_S`` (the record must end
    inside one device call). ``precheck``: AlexNet steps checked at N = 128 on the GPU first;
    one that fails, or nearly, is left out of the record (and must leave the ladder)."""
    import cupy
    from gpulab import recorder
    from gpulab.workloads import workload
    module = workload(chapter)
    if chapter == "alexnet" and precheck:
        be = get_backend("gpu")
        for number in precheck:
            step = A.CHAPTER.step(number)
            for layer in A.LAYERS:
                x, w = A.make_inputs(layer, 128)
                ref = A.reference(cupy.asarray(x), cupy.asarray(w), layer, xp=cupy)
                y = cupy.full(layer.y_shape(128), cupy.nan, dtype=step.dtype)
                step.launcher.bind(step, A.problem.Conv(layer, 128), {"x": cupy.asarray(x.astype(step.dtype)),
                                   "w": cupy.asarray(w.astype(step.dtype)), "y": y}, be)()
                r = compare(y, ref, step.precision, name=f"step {number} {layer.name}")
                log(f"precheck {r}")
                if not r.passed or r.rel_error > 0.7 * r.tolerance:    # a margin for other inputs
                    log(f"STEP {number} FAILS (or nearly) ON THE GPU: left out of the record")
                    A.STEPS.remove(step)          # the list the record's ladder reads
                    A.record.SCALING_STEPS = tuple(n for n in A.record.SCALING_STEPS if n != number)
                    A.record.TRANSFER_STEPS = tuple(n for n in A.record.TRANSFER_STEPS if n != number)
                    A.profile.PROFILE_RUNS = [run for run in A.profile.PROFILE_RUNS if run[1] != number]
                    break
    start = time.perf_counter()
    path, rows, failed = recorder.record(chapter, module.benchmark_all, repeats=100, budget_s=budget_s,
                                         root=out)
    log(f"{chapter}: {rows} rows, {failed} check(s) FAILED, in {time.perf_counter() - start:.0f} s -> {path}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", help="record this chapter instead of tuning")
    parser.add_argument("--budget-s", type=float, default=None, help="the record's budget (default: the chapter's)")
    parser.add_argument("--precheck", nargs="*", default=[])
    parser.add_argument("--out", default="tune_out")
    parser.add_argument("--only", choices=["alexnet", "fcnet"])
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.record:
        record(args.record, out, args.budget_s, args.precheck)
        return
    subprocess.run(["nvidia-smi", "--query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw",
                    "--format=csv"])
    resources(out)
    if args.only != "alexnet":
        fcnet(out)
    if args.only != "fcnet":
        alexnet(out)
    if args.profile:
        profile(out)
    log("done")


if __name__ == "__main__":
    main()
