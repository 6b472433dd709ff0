"""What ``python -m gpulab record alexnet`` measures on a GPU: the ladder at every batch size
(and cold at one image), the copies when the data starts on the host, the scaling study, the
CPU baselines, the device's ceilings, and the side tables (skipped, checks, resources, cuDNN's
algorithms, the profile). Every kernel is checked before it is timed."""
from __future__ import annotations

import os
import platform
import time

import numpy as np
import pandas as pd

from ... import baselines, roofline, transfers
from ...check import check, compare
from ...errors import CheckFailed, KernelCompileError
from ...kernels import load_module
from ...timing import Timing, benchmark
from . import winograd
from .baselines import _algorithm_rows, nchw_input_paths, vendor_paths
from .profile import profile_table
from .shapes import BATCHES, LAYERS, MAIN_N, SCALING_BATCHES, Layer, _subset, make_inputs, reference
from .steps import CPU_LOOP_FILE, EXERCISE, STEP, STEPS, Step, main_kernel, make_launch, resources_table, unfit_reason
from .views import layer_totals, vendor_best


#: The batch size also timed cold (L2 flushed between calls: experiment ``ladder_cold``):
#: one image's input, filters and output fit in the H100's 50 MB L2.
COLD_N = 1
#: Why the cold table has no L2-flushed time for cuDNN's CUDA-graph rows.
COLD_GAP = "cuDNN's CUDA-graph rows are timed warm only; its eager rows are timed both ways"
#: The experiment that times the channels-last steps (18-22, 25) at N = MAIN_N without the copy
#: of x into their channels-last layout: the input as cuDNN's channels-last paths receive it.
NHWC_INPUT = "ladder_nhwc_input"
#: The experiment that times cuDNN's fp16 channels-last path at N = MAIN_N given NCHW input, its
#: copy to channels-last inside the timed call, as the ladder's steps are timed.
NCHW_INPUT = "ladder_nchw_input"
#: Steps timed in the scaling study (N up to 2048), and in the copy breakdown at N = 128.
SCALING_STEPS = ("04", "11", "13", "14", "15", "16", "17", "20", "22")
TRANSFER_STEPS = ("13", "14", "16")


def numpy_conv(x: np.ndarray, w: np.ndarray, layer: Layer) -> np.ndarray:
    """The multi-core CPU baseline: im2col (one copy of the input windows) and one float32
    matrix product per image through NumPy's BLAS, which uses every core."""
    N, E, F, K = x.shape[0], layer.E, layer.F, layer.K
    p = layer.P
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p))) if p else x
    sn, sc, sh, sw = xp.strides
    windows = np.lib.stride_tricks.as_strided(
        xp, shape=(N, layer.C, layer.R, layer.S, E, F),
        strides=(sn, sc, sh, sw, sh * layer.U, sw * layer.U))
    cols = windows.reshape(N, K, E * F)
    return np.matmul(w.reshape(layer.M, K), cols).reshape(N, layer.M, E, F)


def host_description() -> dict:
    """The CPU the baselines ran on: model name and core count."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu_model": model, "cores": os.cpu_count(), "numpy": np.__version__}


def cpu_baseline_rows(batches=BATCHES, layers=LAYERS, loop_images: int = 1) -> list[dict]:
    """Time both CPU baselines with the host's clock. The one-core loop nest runs
    ``loop_images`` images per layer and is scaled linearly to each batch size (the full
    N = 128 loop would take many minutes); NumPy runs every batch size in full. Each result
    is checked against the float64 reference first."""
    rows = []
    host = host_description()
    loop = load_module(CPU_LOOP_FILE, "cpu").get_function("conv_loop_nest")
    for layer in layers:
        x, w = make_inputs(layer, max(batches))
        x1 = np.ascontiguousarray(x[:loop_images])
        y1 = np.full(layer.y_shape(loop_images), np.nan, np.float32)
        samples = []
        for _ in range(2):
            start = time.perf_counter()
            loop(1, 1, (x1, w, y1, *layer.dims(loop_images)))
            samples.append((time.perf_counter() - start) * 1e3)
        check(y1, reference(x1, w, layer), "fp32", name=f"loop nest {layer.name}")
        per_image = np.asarray(samples) / loop_images
        for N in batches:
            method = "measured" if N == loop_images else f"measured on {loop_images} image(s), scaled by N"
            rows.append(Timing(per_image * N, method="host timer").row(
                "cpu", "one core: compiled loop nest (g++ -O2)", N, "kernel",
                flops=layer.flops(N), bytes=layer.bytes(N), layer=layer.index, step="cpu", method=method,
                cpu_model=host["cpu_model"]))
        for N in batches:
            xs = np.ascontiguousarray(x[:N])
            if N == batches[0]:
                check(numpy_conv(xs, w, layer), reference(xs, w, layer), "fp32",
                      name=f"numpy {layer.name}")
            samples = []
            for _ in range(3 if N < MAIN_N else 1):
                start = time.perf_counter()
                numpy_conv(xs, w, layer)
                samples.append((time.perf_counter() - start) * 1e3)
            rows.append(Timing(samples, method="host timer").row(
                "cpu", f"all cores: NumPy im2col + BLAS ({os.cpu_count()} threads)", N, "kernel",
                flops=layer.flops(N), bytes=layer.bytes(N), layer=layer.index, step="cpu",
                method="measured", cpu_model=host["cpu_model"]))
    return rows


def benchmark_all(repeats: int = 100, quick: bool = False, deadline_s: float = 300.0):
    """Every experiment of the chapter on the GPU: (rows, side tables). Every kernel is
    checked against a float64 reference computed on the GPU before it is timed, at the
    size it is timed at (beyond N = 128 on three images of the batch); a failure raises.
    Scaling sizes not started within ``deadline_s`` are skipped (and listed as such)."""
    import cupy


    budget_ms = 300.0 if not quick else 100.0
    started = time.perf_counter()

    def progress(text):
        print(f"alexnet [{time.perf_counter() - started:5.0f} s] {text}", flush=True)
    batches = [1, 8] if quick else BATCHES
    scaling = [256] if quick else SCALING_BATCHES
    rows, skipped, checks, algorithms = [], [], [], []
    pool = cupy.get_default_memory_pool()

    def note_skip(step, layer, N, reason):
        skipped.append({"step": step, "layer": layer.index, "size": N, "reason": reason})

    def measure(step: Step, layer: Layer, N: int, x, w, ref, experiment: str):
        y = cupy.full(layer.y_shape(N), cupy.nan, dtype=step.dtype)
        launch = make_launch(step, layer, N, x, w, y, "gpu")
        launch()
        result = compare(y if ref.shape[0] == N else y[_subset(N)], ref, step.precision,
                         name=f"step {step.number} {layer.name} N={N}")
        checks.append({"step": step.number, "layer": layer.index, "size": N,
                       "rel_error": result.rel_error, "passed": result.passed})
        if not result.passed:
            raise CheckFailed(str(result))
        timing = benchmark(launch, repeats=repeats, budget_ms=budget_ms)
        labels = dict(flops=layer.flops(N), bytes=layer.bytes(N, step.itemsize), layer=layer.index,
                      step=step.number, precision=step.precision, kernel=main_kernel(step, layer))
        rows.append(timing.row(experiment, step.label, N, "kernel", **labels))
        if experiment == "ladder" and N == COLD_N:     # a small batch fits in L2: time it cold too
            rows.append(benchmark(launch, repeats=repeats, budget_ms=budget_ms, flush_l2=True)
                        .row("ladder_cold", step.label, N, "kernel", **labels))
        if experiment == "ladder" and N == MAIN_N and step.kind in ("mma", "wgmma"):
            # The same call given its input already channels-last, as cuDNN's channels-last paths
            # are (their copy is made before timing): the GEMM alone, without the copy of x.
            rows.append(benchmark(launch.parts["gemm"], repeats=repeats, budget_ms=budget_ms)
                        .row(NHWC_INPUT, step.label, N, "kernel", **labels))
        del launch, y
        return timing.median_ms

    def measure_cudnn(layer, N, x32, w32, ref, experiment, graphs=True, labels=None):
        paths = vendor_paths(layer, x32, w32, N, graphs=graphs, labels=labels)
        result = baselines.measure(
            paths, reference=ref, experiment=experiment, size=N, flops=layer.flops(N),
            bytes=lambda path: layer.bytes(N, 2 if path.precision in ("fp16", "bf16") else 4),
            repeats=repeats, budget_ms=min(budget_ms, 150.0), labels={"layer": layer.index, "step": "cuDNN"},
            on_failure="skip", log=lambda text: None)
        rows.extend(result.rows)
        for entry in result.skipped:
            note_skip("cuDNN", layer, N, f"{entry['variant']}: {entry['reason']}")
        if experiment == "ladder" and N == COLD_N:
            rows.extend(baselines.measure(
                [p for p in paths if not p.graph], reference=ref, experiment="ladder_cold", size=N,
                flops=layer.flops(N), bytes=lambda path: layer.bytes(N, 2 if path.precision in ("fp16", "bf16") else 4),
                repeats=repeats, budget_ms=min(budget_ms, 150.0), flush_l2=True,
                labels={"layer": layer.index, "step": "cuDNN"}, on_failure="skip", log=lambda text: None).rows)
        checks.extend({"step": r["variant"], "layer": layer.index, "size": N, "rel_error": r["rel_error"],
                       "passed": True} for r in result.rows)
        return paths

    # --- the ladder: every step, layer and batch size, cuDNN as the vendor line
    main_ms = {}
    for layer in LAYERS:
        x_host, w_host = make_inputs(layer, max(batches))
        x32, w32 = cupy.asarray(x_host), cupy.asarray(w_host)
        x16, w16 = x32.astype(cupy.float16), w32.astype(cupy.float16)
        ref_all = reference(x32, w32, layer, xp=cupy)
        for N in batches:
            ref = ref_all[:N]
            for step in STEPS + [EXERCISE]:
                why = unfit_reason(step, layer, N)
                if why:
                    note_skip(step.number, layer, N, why)
                    continue
                xs, ws = (x16, w16) if step.precision == "fp16" else (x32, w32)
                main_ms[(step.number, layer.index, N)] = measure(step, layer, N, xs[:N], ws, ref, "ladder")
                if step.kind == "winograd" and N == MAIN_N and winograd.applies(layer):
                    # The filter transform runs once per model, outside the timed calls: time it here.
                    rows.append(winograd.time_filter_transform(step, layer, w32, repeats, budget_ms))
            paths = measure_cudnn(layer, N, x32[:N], w32, ref, "ladder", graphs=N in (1, MAIN_N))
            if N == MAIN_N:
                algorithms.extend(_algorithm_rows(layer, paths))
                result = baselines.measure(
                    nchw_input_paths(layer, x16[:N], w16), reference=ref, experiment=NCHW_INPUT, size=N,
                    flops=layer.flops(N), bytes=lambda path: layer.bytes(N, 2), repeats=repeats,
                    budget_ms=min(budget_ms, 150.0), labels={"layer": layer.index, "step": "cuDNN"},
                    on_failure="skip", log=lambda text: None)
                rows.extend(result.rows)
                for entry in result.skipped:
                    note_skip("cuDNN", layer, N, f"{entry['variant']}: {entry['reason']}")
            progress(f"ladder {layer.name} N={N}: " + ", ".join(
                f"{s.number} {main_ms[(s.number, layer.index, N)]:.3g}" for s in STEPS
                if (s.number, layer.index, N) in main_ms) + " ms")
        del x32, w32, x16, w16, ref_all, ref
        pool.free_all_blocks()
        _torch_empty_cache()

    # --- where the time goes when the data starts on the host (N = 128)
    progress("transfers")
    N = batches[-1]
    for layer in LAYERS:
        x_host, w_host = make_inputs(layer, N)
        for number in ("01",) + TRANSFER_STEPS:
            step = STEP[number]
            memories = transfers.MEMORY_KINDS if number == "01" else ("pageable", "pinned")
            host_in = [x_host.astype(step.dtype), w_host.astype(step.dtype)]
            slow = main_ms.get((number, layer.index, N), 0) > 50
            for memory in memories:
                try:
                    rows.extend(r | {"layer": layer.index, "step": number, "precision": step.precision}
                                for r in transfers.transfer_breakdown(
                                    _device_launcher(step, layer, N), host_in, layer.y_shape(N), step.dtype,
                                    memory=memory, warmup=1 if slow else 2, repeats=3 if slow else 10,
                                    experiment="transfers", variant=step.label, size=N))
                except RuntimeError as exc:     # e.g. no prefetch on this platform
                    note_skip(number, layer, N, f"{memory}: {exc}")
        pool.free_all_blocks()

    # --- scaling with the batch size, beyond N = 128: cuDNN's fastest eager path per precision class
    totals = layer_totals(pd.DataFrame([r for r in rows if r["experiment"] == "ladder"]))
    fastest_cudnn = {row["variant"] for row in (vendor_best(totals, batches[-1], p, "eager")
                                                for p in ("fp32", "tf32", "fp16")) if row is not None}
    for layer in LAYERS:
        # Generated on the GPU (seeded): 1.3 GB for layer 1 at N = 2048 is slow to make on the host.
        x32 = cupy.random.default_rng(layer.index).random(layer.x_shape(max(scaling)), dtype=cupy.float32)
        w32 = cupy.asarray(make_inputs(layer, 1)[1])
        x16, w16 = x32.astype(cupy.float16), w32.astype(cupy.float16)
        for N in scaling:
            ref = reference(x32[_subset(N)], w32, layer, xp=cupy)
            if time.perf_counter() - started > deadline_s:
                note_skip("all", layer, N, "the record ran past its time budget")
                continue
            progress(f"scaling {layer.name} N={N}")
            for number in SCALING_STEPS:
                step = STEP[number]
                at_main = main_ms.get((number, layer.index, batches[-1]), 0.0)
                predicted = at_main * N / batches[-1]
                why = unfit_reason(step, layer, N)
                if why:
                    note_skip(number, layer, N, why)
                    continue
                if predicted > 4000:
                    note_skip(number, layer, N, f"about {predicted / 1e3:.0f} s per run: over the "
                                                "record's time budget")
                    continue
                xs, ws = (x16, w16) if step.precision == "fp16" else (x32, w32)
                measure(step, layer, N, xs[:N], ws, ref, "scaling")
            measure_cudnn(layer, N, x32[:N], w32, ref, "scaling", graphs=False, labels=fastest_cudnn)
            pool.free_all_blocks()
        del x32, w32, x16, w16
        pool.free_all_blocks()
        _torch_empty_cache()

    # --- the CPU baselines, the device's ceilings, and the tables that go with the run
    progress("CPU baselines")
    try:
        rows.extend(cpu_baseline_rows(batches))
    except KernelCompileError as exc:        # no g++ on the GPU machine: say so, keep the rest
        skipped.append({"step": "cpu", "layer": 0, "size": 0, "reason": f"no CPU backend: {exc}"})
    rows.extend(roofline.measure_ceilings(repeats=10))
    progress("profile")
    tables = {"skipped": pd.DataFrame(skipped, columns=["step", "layer", "size", "reason"]),
              "checks": pd.DataFrame(checks), "resources": resources_table(),
              "cudnn_algorithms": pd.DataFrame(algorithms, columns=["layer", "variant", "precision", "layout",
                                                                    "algorithm", "kernels"])}
    profile = profile_table()
    if profile is not None:
        tables["profile"] = profile
    progress("done")
    return rows, tables


def _device_launcher(step: Step, layer: Layer, N: int):
    """``launch(inputs, output)`` for :mod:`gpulab.transfers`, binding once per buffer set."""
    bound = {}

    def launch(inputs, output):
        key = (inputs[0].data.ptr, inputs[1].data.ptr, output.data.ptr)
        if key not in bound:
            bound[key] = make_launch(step, layer, N, inputs[0], inputs[1], output, "gpu")
        bound[key]()
    return launch


def _torch_empty_cache() -> None:
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:
        pass
