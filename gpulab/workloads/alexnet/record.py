"""What ``python -m gpulab record alexnet`` measures on a GPU, declared as its experiments
(:class:`gpulab.recorder.Recording`: :data:`benchmark_all`), in order:

* ``ladder``: every step of :data:`.steps.STEPS` (and the exercise) on every layer at every batch
  size, each checked against the float64 reference (computed on the GPU, at the size it is timed
  at; beyond N = 128 on three images of the batch) before it is timed: a step that fails is a
  ``FAILED`` row of ``skipped``, never timed. One image is timed cold too (``ladder_cold``), and at
  N = 128 the channels-last steps without their copy of x (``ladder_nhwc_input``); cuDNN's paths
  beside them, and its fp16 channels-last path given NCHW input (``ladder_nchw_input``);
* ``transfers``: where the time goes when the data starts on the host (N = 128);
* ``scaling`` (optional): batches beyond 128, for :data:`SCALING_STEPS` and cuDNN's fastest eager
  path per precision; a batch not started within the run's budget is skipped, and listed;
* ``cpu``: the one-core loop nest and NumPy's BLAS on the host; ``ceilings``: the device's;
* side tables: ``checks``, ``skipped`` (step / layer / size / reason), ``cudnn_algorithms``,
  ``resources`` and, where ncu works, ``profile`` (optional).

A new step needs nothing here: the ladder checks and times (:meth:`gpulab.recorder.Recorder.ladder`)
whatever :data:`.steps.STEPS` lists, each bound by its launcher.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ... import baselines, roofline, transfers
from ...check import check, compare
from ...errors import CheckFailed, KernelCompileError
from ...kernels import get_backend, load_module, resource_table
from ...ladder import find
from ...recorder import Experiment, Recording, Variant
from ...timing import Timing, benchmark
from . import winograd
from .baselines import _algorithm_rows, nchw_input_paths, vendor_paths
from .launchers import filter_transform, main_kernel, unfit_reason
from .problem import BATCHES, LAYERS, MAIN_N, NAME, SCALING_BATCHES, Conv, Layer, _subset, make_inputs, reference
from .profile import profile_table
from .steps import CPU_LOOP_FILE, EXERCISE, STEPS, Step
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
#: The batches of a quick (smoke-test) record, and its scaling batch.
QUICK_BATCHES = (1, 8)
QUICK_SCALING_BATCHES = (256,)
#: The ``skipped`` table's columns (a part of the record that failed or was not started: its
#: name as the step, layer and size 0).
SKIPPED_COLUMNS = ("step", "layer", "size", "reason")
ALGORITHM_COLUMNS = ["layer", "variant", "precision", "layout", "algorithm", "kernels"]


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


@dataclass
class Plan:
    """What :func:`setup` decided, and what the experiments hand on: the ladder's medians (for
    the progress lines, the copies and the scaling study's predictions) and the checks made."""

    batches: list
    scaling: list
    main_ms: dict = field(default_factory=dict)       # (step, layer, N) -> median ms in the ladder
    checks: list = field(default_factory=list)
    algorithms: list = field(default_factory=list)


def setup(rec) -> Plan:
    """The batches of this record. The side tables every run has are written empty first, so a
    part that fails (or is not started) leaves them empty, not missing."""
    rec.table("checks", pd.DataFrame())
    rec.table("resources", pd.DataFrame())
    rec.table("cudnn_algorithms", pd.DataFrame(columns=ALGORITHM_COLUMNS))
    return Plan(list(QUICK_BATCHES if rec.quick else BATCHES),
                list(QUICK_SCALING_BATCHES if rec.quick else SCALING_BATCHES))


def _keep_checks(rec, plan: Plan) -> None:
    rec.table("checks", pd.DataFrame(plan.checks))
    rec.table("cudnn_algorithms", pd.DataFrame(plan.algorithms, columns=ALGORITHM_COLUMNS))


def _failed_on(rec, number: str, layer: Layer) -> list:
    """The batches at which ``number``'s check failed on ``layer`` (its later parts are not timed)."""
    return [row["size"] for row in rec.failed if row["step"] == number and row["layer"] == layer.index]


def measure(rec, plan: Plan, step: Step, layer: Layer, N: int, x, w, ref, experiment: str) -> float | None:
    """``step`` on ``layer`` at batch N, bound by its launcher, checked against ``ref`` and timed
    by the recorder's ladder loop (and, in the ladder, cold at :data:`COLD_N` and without its
    layout copy at N = 128); its median in ms, or None when the check failed (or the kernel did
    not bind or run): a ``FAILED`` row, not timed."""
    import cupy

    arrays = {"x": x, "w": w, "y": cupy.full(layer.y_shape(N), cupy.nan, dtype=step.dtype)}
    where = {"step": step.number, "layer": layer.index, "size": N}
    bound = rec.checked(lambda: step.launcher.bind(step, Conv(layer, N), arrays, "gpu"), **where)
    if not bound:
        return None
    launch = bound.value

    def checked():
        launch()
        y = arrays["y"]
        result = compare(y if ref.shape[0] == N else y[_subset(N)], ref, step.precision,
                         name=f"step {step.number} {layer.name} N={N}")
        plan.checks.append({**where, "rel_error": result.rel_error, "passed": result.passed})
        if not result.passed:
            raise CheckFailed(str(result))
        return {}

    def rows(timing, _checked, _medians) -> list[dict]:
        labels = dict(flops=layer.flops(N), bytes=layer.bytes(N, step.itemsize), layer=layer.index,
                      step=step.number, precision=step.precision, kernel=main_kernel(step, layer))
        out = [timing.row(experiment, step.label, N, "kernel", **labels)]
        budget_ms = rec.variant_budget_ms
        if experiment == "ladder" and N == COLD_N:     # a small batch fits in L2: time it cold too
            out.append(benchmark(launch, repeats=rec.repeats, budget_ms=budget_ms, flush_l2=True)
                       .row("ladder_cold", step.label, N, "kernel", **labels))
        if experiment == "ladder" and N == MAIN_N and step.launcher.copies_input:
            # The same call given its input already channels-last, as cuDNN's channels-last paths
            # are (their copy is made before timing): the GEMM alone, without the copy of x.
            out.append(benchmark(launch.parts["gemm"], repeats=rec.repeats, budget_ms=budget_ms)
                       .row(NHWC_INPUT, step.label, N, "kernel", **labels))
        return out
    added = rec.ladder([Variant(step.label, launch, checked, rows, where=where)])
    return added[0]["median_ms"] if added else None


def time_filter_transform(rec, step: Step, layer: Layer, w) -> dict:
    """One tidy row (experiment ``winograd_setup``): the GPU time of a Winograd step's filter
    transform on ``layer``, which the step's launches do once, when bound, and so leave out of
    its timed calls."""
    set_up, U = filter_transform(step, layer, w, get_backend("gpu"))
    g = winograd.geometry(step.number, layer, 1)
    timing = benchmark(set_up, repeats=rec.repeats, budget_ms=rec.variant_budget_ms)
    return timing.row("winograd_setup", step.label, 0, "filter transform",
                      bytes=4 * (layer.M * layer.K + U.size), layer=layer.index, step=step.number,
                      precision=step.precision, kernel=f"winograd_filter_{winograd.suffix(step)}", points=g.points)


def _vendor_bytes(layer: Layer, N: int):
    return lambda path: layer.bytes(N, 2 if path.precision in ("fp16", "bf16") else 4)


def _add_vendor(rec, layer: Layer, N: int, result) -> None:
    """A vendor measurement's rows, and its skipped paths with their reasons."""
    rec.add(result.rows)
    for entry in result.skipped:
        rec.skip(f"{entry['variant']}: {entry['reason']}", step="cuDNN", layer=layer.index, size=N)


def measure_cudnn(rec, plan: Plan, layer: Layer, N: int, x32, w32, ref, experiment: str, graphs: bool = True,
                  labels=None) -> list:
    """cuDNN's paths (:func:`.baselines.vendor_paths`), each checked against ``ref`` then timed
    (and cold at :data:`COLD_N` in the ladder, its eager paths); the paths."""
    paths = vendor_paths(layer, x32, w32, N, graphs=graphs, labels=labels)
    options = dict(reference=ref, size=N, flops=layer.flops(N), bytes=_vendor_bytes(layer, N), repeats=rec.repeats,
                   budget_ms=min(rec.variant_budget_ms, 150.0), labels={"layer": layer.index, "step": "cuDNN"},
                   on_failure="skip", log=lambda text: None)
    result = baselines.measure(paths, experiment=experiment, **options)
    _add_vendor(rec, layer, N, result)
    if experiment == "ladder" and N == COLD_N:
        rec.add(baselines.measure([p for p in paths if not p.graph], experiment="ladder_cold", flush_l2=True,
                                  **options).rows)
    plan.checks.extend({"step": r["variant"], "layer": layer.index, "size": N, "rel_error": r["rel_error"],
                        "passed": True} for r in result.rows)
    return paths


def ladder(rec, plan: Plan) -> None:
    """Every step, layer and batch size, cuDNN as the vendor line."""
    try:
        for layer in LAYERS:
            _ladder_layer(rec, plan, layer)
    finally:                    # what was checked before a failure stays in the run
        _keep_checks(rec, plan)


def _ladder_layer(rec, plan: Plan, layer: Layer) -> None:
    import cupy

    batches = plan.batches
    x_host, w_host = make_inputs(layer, max(batches))
    x32, w32 = cupy.asarray(x_host), cupy.asarray(w_host)
    x16, w16 = x32.astype(cupy.float16), w32.astype(cupy.float16)
    ref_all = reference(x32, w32, layer, xp=cupy)
    for N in batches:
        ref = ref_all[:N]
        for step in STEPS + [EXERCISE]:
            why = unfit_reason(step, layer, N)
            if why:
                rec.skip(why, step=step.number, layer=layer.index, size=N)
                continue
            xs, ws = (x16, w16) if step.precision == "fp16" else (x32, w32)
            ms = measure(rec, plan, step, layer, N, xs[:N], ws, ref, "ladder")
            if ms is None:
                continue
            plan.main_ms[(step.number, layer.index, N)] = ms
            if N == MAIN_N and step.launcher.sets_up_once(step, layer):
                # The filter transform runs once per model, outside the timed calls: time it here.
                rec.add(time_filter_transform(rec, step, layer, w32))
        paths = measure_cudnn(rec, plan, layer, N, x32[:N], w32, ref, "ladder", graphs=N in (1, MAIN_N))
        if N == MAIN_N:
            plan.algorithms.extend(_algorithm_rows(layer, paths))
            _add_vendor(rec, layer, N, baselines.measure(
                nchw_input_paths(layer, x16[:N], w16), reference=ref, experiment=NCHW_INPUT, size=N,
                flops=layer.flops(N), bytes=lambda path: layer.bytes(N, 2), repeats=rec.repeats,
                budget_ms=min(rec.variant_budget_ms, 150.0), labels={"layer": layer.index, "step": "cuDNN"},
                on_failure="skip", log=lambda text: None))
        rec.progress(f"ladder {layer.name} N={N}: " + ", ".join(
            f"{s.number} {plan.main_ms[(s.number, layer.index, N)]:.3g}" for s in STEPS
            if (s.number, layer.index, N) in plan.main_ms) + " ms")
    del x32, w32, x16, w16, ref_all, ref
    _free()


def copies(rec, plan: Plan) -> None:
    """Where the time goes when the data starts on the host (the largest batch): step 1 from every
    kind of host memory, :data:`TRANSFER_STEPS` from pageable and pinned memory."""
    rec.progress("transfers")
    N = plan.batches[-1]
    for layer in LAYERS:
        x_host, w_host = make_inputs(layer, N)
        for number in ("01",) + TRANSFER_STEPS:
            step = find(STEPS, number)
            if _failed_on(rec, number, layer):       # check before time: its copies are not timed either
                continue
            memories = transfers.MEMORY_KINDS if number == "01" else ("pageable", "pinned")
            host_in = [x_host.astype(step.dtype), w_host.astype(step.dtype)]
            slow = plan.main_ms.get((number, layer.index, N), 0) > 50
            for memory in memories:
                try:
                    rec.add(r | {"layer": layer.index, "step": number, "precision": step.precision}
                            for r in transfers.transfer_breakdown(
                                _device_launcher(step, layer, N), host_in, layer.y_shape(N), step.dtype,
                                memory=memory, warmup=1 if slow else 2, repeats=3 if slow else 10,
                                experiment="transfers", variant=step.label, size=N))
                except RuntimeError as exc:     # e.g. no prefetch on this platform
                    rec.skip(f"{memory}: {exc}", step=number, layer=layer.index, size=N)
        _free()


def scaling(rec, plan: Plan) -> None:
    """Batches beyond the ladder's: :data:`SCALING_STEPS` and cuDNN's fastest eager path per
    precision class at the largest ladder batch; a step predicted to take over 4 s per call, and
    every batch not started within the run's budget, skipped and listed."""
    import cupy

    main = plan.batches[-1]
    totals = layer_totals(pd.DataFrame([r for r in rec.rows if r["experiment"] == "ladder"]))
    fastest_cudnn = {row["variant"] for row in (vendor_best(totals, main, p, "eager")
                                                for p in ("fp32", "tf32", "fp16")) if row is not None}
    try:
        for layer in LAYERS:
            # Generated on the GPU (seeded): 1.3 GB for layer 1 at N = 2048 is slow to make on the host.
            x32 = cupy.random.default_rng(layer.index).random(layer.x_shape(max(plan.scaling)), dtype=cupy.float32)
            w32 = cupy.asarray(make_inputs(layer, 1)[1])
            x16, w16 = x32.astype(cupy.float16), w32.astype(cupy.float16)
            for N in plan.scaling:
                if rec.budget_spent():
                    rec.skip("the record ran past its time budget", step="all", layer=layer.index, size=N)
                    continue
                ref = reference(x32[_subset(N)], w32, layer, xp=cupy)
                rec.progress(f"scaling {layer.name} N={N}")
                for number in SCALING_STEPS:
                    step = find(STEPS, number)
                    predicted = plan.main_ms.get((number, layer.index, main), 0.0) * N / main
                    why = unfit_reason(step, layer, N)
                    if why:
                        rec.skip(why, step=number, layer=layer.index, size=N)
                        continue
                    if _failed_on(rec, number, layer):
                        continue
                    if predicted > 4000:
                        rec.skip(f"about {predicted / 1e3:.0f} s per run: over the record's time budget",
                                 step=number, layer=layer.index, size=N)
                        continue
                    xs, ws = (x16, w16) if step.precision == "fp16" else (x32, w32)
                    measure(rec, plan, step, layer, N, xs[:N], ws, ref, "scaling")
                measure_cudnn(rec, plan, layer, N, x32[:N], w32, ref, "scaling", graphs=False, labels=fastest_cudnn)
                _free()
            del x32, w32, x16, w16
            _free()
    finally:
        _keep_checks(rec, plan)


def cpu(rec, plan: Plan) -> None:
    """The CPU baselines (:func:`cpu_baseline_rows`) at the ladder's batches."""
    rec.progress("CPU baselines")
    try:
        rec.add(cpu_baseline_rows(plan.batches))
    except KernelCompileError as exc:        # no g++ on the GPU machine: say so, keep the rest
        rec.skip(f"no CPU backend: {exc}", step="cpu", layer=0, size=0)


def ceilings(rec, plan: Plan) -> None:
    rec.add(roofline.measure_ceilings(repeats=10))


def resources_table() -> pd.DataFrame:
    """Registers, shared and local memory of every kernel of the ladder, as compiled here."""
    frames = []
    for step in STEPS:
        if step.launcher.refusal(step):
            continue                  # its sm_90a cubin does not load here
        table = resource_table(load_module(step.file, "gpu", options=step.launcher.gpu_options)).reset_index()
        frames.append(table.assign(step=step.number))
    return pd.concat(frames, ignore_index=True)


def resources(rec, plan: Plan) -> None:
    rec.table("resources", resources_table())


def profile(rec, plan: Plan) -> None:
    """Nsight Compute's counters (:func:`.profile.profile_table`), where ncu works."""
    rec.progress("profile")
    table = profile_table()
    if table is not None:
        rec.table("profile", table)


#: Every experiment of the chapter on the GPU. The scaling study and the profile, the long parts
#: the chapter can do without, are not started once the run's budget (300 s by default) is spent;
#: a part that fails or is not started is a row of the ``skipped`` table (its name as the step,
#: layer and size 0), the one table of what is missing that the chapter's views read.
benchmark_all = Recording(NAME, [
    Experiment("ladder", ladder), Experiment("transfers", copies), Experiment("scaling", scaling, optional=True),
    Experiment("cpu", cpu), Experiment("ceilings", ceilings), Experiment("resources", resources),
    Experiment("profile", profile, optional=True),
], setup=setup, skipped=SKIPPED_COLUMNS, budget_s=360.0, keep_going=True,
    problem_row=lambda experiment: {"step": experiment, "layer": 0, "size": 0}, variant_budget_ms=300.0,
    crosscheck=lambda row: row["experiment"] == "ladder" and row["size"] == MAIN_N)


def _free() -> None:
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    _torch_empty_cache()


def _device_launcher(step: Step, layer: Layer, N: int):
    """``launch(inputs, output)`` for :mod:`gpulab.transfers`, binding once per buffer set."""
    bound = {}

    def launch(inputs, output):
        key = (inputs[0].data.ptr, inputs[1].data.ptr, output.data.ptr)
        if key not in bound:
            bound[key] = step.launcher.bind(step, Conv(layer, N), {"x": inputs[0], "w": inputs[1], "y": output}, "gpu")
        bound[key]()
    return launch


def _torch_empty_cache() -> None:
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:
        pass
