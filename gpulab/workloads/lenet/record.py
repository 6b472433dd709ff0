"""The recorded run: ``python -m gpulab record lenet`` (GPU only), declared as its experiments
(:class:`gpulab.recorder.Recording`).

Experiments (tidy rows; see :mod:`gpulab.timing`):

- ``ladder``: every step's two layers at N = 100, 1,000 and 10,000, phase ``layer``
  (convolution, ReLU and pool: the pooled output from the layer's input) and, for steps that
  write the pre-pool output, phase ``conv`` (the convolution kernel alone, the report's "op
  time"); cuDNN's paths (conv alone, and conv + ReLU + pool) beside them.
- ``forward``: each step's whole forward pass (device input to predictions), with its
  accuracy on the test images and its agreement with the reference's predictions; PyTorch's
  forward passes beside them (eager and in CUDA graphs).
- ``pipeline``: the forward pass from pinned host memory and back, on one stream and on 4
  chunks x 4 streams (step 2); the ``timeline`` side table holds one such run's events.
- ``transfers``: copy in, kernels, copy out of the best steps, pageable and pinned.
- ``ceilings``: the device's measured memory bandwidth and FP32 rate.

Every step's forward pass is checked against the float64 reference at the size it is timed at
before it is timed, by the recorder's ladder loop (:meth:`gpulab.recorder.Recorder.ladder`: a
failure is a ``FAILED`` row of the ``skipped`` table, not a timing); every variant reads the same
inputs. On a smaller GPU (or a simulated
one, :func:`gpulab.device.simulate`) the run fits itself to the device: a batch over the memory
budget is skipped (``skipped`` table, with the reason), and step 11 runs fewer warps per block where
a block may not have its 81,728 bytes of shared memory (``adaptations`` table).
"""
from __future__ import annotations

import functools
from contextlib import contextmanager

import numpy as np
import pandas as pd

from ... import baselines, recorder, timing
from ...check import check
from ...ladder import find
from ...recorder import Variant
from . import baselines as lenet_baselines
from .data import test_inputs
from .launchers import IM2COL_CHUNK, Forward, adaptations
from .network import CONV1, CONV2, LAYERS, flops, forward, load_weights
from .problem import BATCHES, NAME
from .steps import STEPS, Step

#: The most time one variant's timing may take (the stop rule usually ends it sooner).
TIMING_BUDGET_MS = 250.0
#: A graph step's forward passes per replayed graph.
GRAPH_LAUNCHES = 5
PIPELINE_STEPS = ("01", "12", "12h")
PIPELINE_CHUNKS = (1, 4)
PROFILE_STEPS = ("01", "03", "05", "07", "08", "09", "10", "11", "13")
PROFILE_N = 1000
#: cuDNN may use Winograd or FFT for fp32, which round differently from a direct sum.
CUDNN_FP32_TOLERANCE = 1e-4


#: The share of the device's memory one batch of the record may use (the rest: PyTorch's cache
#: and cuDNN's workspaces). A larger batch is skipped, and listed with the reason.
MEMORY_FRACTION = 0.5


def footprint_bytes(N: int) -> int:
    """Device memory the record holds at once at batch ``N``: the images, the float64 reference's
    pooled outputs, and the larger of an unfused step's buffers (pre-pool and pooled outputs, and
    step 4's unrolled inputs for up to 1,000 images) and the vendor section's float64 conv1 with
    its pool and PyTorch's float32 copies. About 5.6 GB at N = 10,000."""
    x = N * CONV1.C * CONV1.H * CONV1.W * 4
    ref = 8 * (sum(layer.M * layer.P ** 2 for layer in LAYERS)) * N
    steps_ = 4 * N * sum(layer.M * (layer.E ** 2 + layer.P ** 2) for layer in LAYERS) + \
        4 * min(N, IM2COL_CHUNK) * sum(layer.taps * layer.E ** 2 for layer in LAYERS)
    vendor_ = N * CONV1.M * (8 * CONV1.E ** 2 + 8 * CONV1.P ** 2 + 2 * 4 * CONV1.E ** 2)
    return int(x + ref + max(steps_, vendor_))


def runnable_batches(batches, limits=None) -> tuple[list[int], list[dict]]:
    """The batch sizes whose :func:`footprint_bytes` fits :data:`MEMORY_FRACTION` of this device's
    memory (or the simulated device's: :func:`gpulab.device.simulate`), and a ``skipped`` row,
    with the reason, for each that does not."""
    from ...device import limits as device_limits
    here = limits if limits is not None else device_limits()
    ok, skipped = [], []
    for N in batches:
        why = here.memory_fits(footprint_bytes(N), MEMORY_FRACTION) if here is not None else None
        if why:
            skipped.append({"variant": "every step and vendor path", "library": "", "precision": "", "size": N,
                            "reason": why})
        else:
            ok.append(N)
    return ok, skipped


def _layer_work(layer, N: int, step: Step, phase: str) -> dict:
    itemsize = 2 if step.precision == "fp16" else 4
    # conv1 reads the float32 images in every precision
    return {"flops": layer.flops(N), "bytes": layer.bytes(N, itemsize, fused=(phase == "layer"),
                                                          x_itemsize=4 if layer is CONV1 else None)}


class _Run:
    """What every experiment of the run reads: the batches that fit this GPU (the others skipped,
    with the reason), step 11's adaptations to it, the weights, the test images on the device and
    the float64 reference's outputs on them."""

    def __init__(self, rec):
        import cupy

        self.batches, skipped = runnable_batches(BATCHES[:2] if rec.quick else BATCHES)
        for entry in skipped:
            rec.progress(f"N={entry['size']} skipped: {entry['reason']}")
            rec.skip(**entry)
        changed = adaptations()
        for entry in changed:
            rec.progress(f"step {entry['step']}: {entry['change']} ({entry['reason']})")
        rec.table("adaptations", pd.DataFrame(changed, columns=["step", "change", "reason"]))
        self.weights = load_weights()
        self.x_host, self.labels = test_inputs(max(self.batches))
        self.ref_pred = self.weights["test_predictions"][:max(self.batches)]
        self.x_all = cupy.asarray(self.x_host)
        rec.progress("reference (float64 on the GPU)")
        self.ref = forward(self.x_all, self.weights, xp=cupy)               # pool1, pool2, logits in float64
        self.checks: list[dict] = []


def _check_forward(run: _Run, fwd: Forward, step: Step, N: int) -> dict:
    """Both layers' pooled outputs and the logits against the reference, each a row of the checks
    table (raising at the first that disagrees: the step is then not timed at N); the forward
    pass's quality, which its row holds."""
    import cupy
    for layer, key in ((CONV1, "pool1"), (CONV2, "pool2")):
        result = check(fwd.pooled[layer.name], run.ref[key][:N], step.precision, name=f"{step.label} {layer.name} N={N}")
        run.checks.append({"step": step.number, "layer": layer.name, "size": N, "rel_error": result.rel_error})
    result = check(fwd.logits, run.ref["logits"][:N], step.precision, name=f"{step.label} logits N={N}")
    pred = cupy.asnumpy(fwd.predictions)
    quality = {"accuracy": float((pred == run.labels[:N]).mean()),
               "agree_with_reference": float((pred == run.ref_pred[:N]).mean()),
               "rel_error": result.rel_error}
    run.checks.append({"step": step.number, "layer": "logits", "size": N, **quality})
    return quality


def forward_variant(rec, run: _Run, fwd: Forward, step: Step, N: int) -> Variant:
    """``step``'s forward pass at batch N as the ladder loop checks and times it: checked against
    the reference (:func:`_check_forward`), timed whole (``forward``; in a CUDA graph of
    :data:`GRAPH_LAUNCHES` passes for a graph step) and, for a step with kernels of its own, layer
    by layer (``ladder``: each layer, phase ``layer``, and its convolution alone, phase ``conv``,
    where the step writes the pre-pool output)."""
    import cupy
    common = {"step": step.number, "precision": step.precision}

    def checked() -> dict:
        fwd.run()
        cupy.cuda.get_current_stream().synchronize()
        return _check_forward(run, fwd, step, N)

    def rows(measured, quality, _medians) -> list[dict]:
        out = []
        for layer in () if step.graph else LAYERS:
            parts = [("layer", fwd.layers[layer.name])] + ([("conv", fwd.convs[layer.name])]
                                                           if layer.name in fwd.convs else [])
            for phase, launch in parts:
                layer_time = timing.benchmark(launch, repeats=rec.repeats, budget_ms=rec.variant_budget_ms)
                out.append(layer_time.row("ladder", step.label, N, phase, layer=layer.name, **common,
                                          **_layer_work(layer, N, step, phase)))
        out.append(measured.row("forward", step.label, N, "forward", layer="all", flops=sum(flops(N).values()),
                                mode="graph" if step.graph else "eager", **common, **quality))
        return out
    timer = functools.partial(timing.graph_benchmark, launches=GRAPH_LAUNCHES) if step.graph else None
    return Variant(step.label, fwd.run, checked, rows, where={"precision": step.precision, "size": N}, timer=timer)


def time_ladder(rec, run: _Run):
    """At each batch: every step's forward pass and its two layers (and its convolution alone,
    where it writes the pre-pool output), each step checked first; then cuDNN's and PyTorch's
    paths on the same inputs."""
    import cupy

    scratch: dict = {}
    for N in run.batches:
        x = run.x_all[:N]
        for step in STEPS:
            if step.streams:
                continue                                  # step 2's kernels are step 1's: see "pipeline"
            fwd = Forward(step, N, x, run.weights, "gpu", scratch)
            rec.ladder([forward_variant(rec, run, fwd, step, N)])
            del fwd
        scratch.clear()
        cupy.get_default_memory_pool().free_all_blocks()
        time_vendor(rec, run, N)


def time_vendor(rec, run: _Run, N: int):
    """cuDNN's paths (conv alone, and conv + ReLU + pool) and PyTorch's forward passes at batch N,
    the layers as given and with their channels padded for cuDNN's fp16 tensor-core kernels
    (:func:`.baselines.padded_layer_paths`: conv2's padded paths read the reference's pooled conv1
    output padded in setup, as the padded conv1 would write it)."""
    import cupy

    x, ref, weights = run.x_all[:N], run.ref, run.weights
    for layer, layer_in, w in _vendor_inputs(run, N):
        y64 = forward_conv64(layer_in, w)
        pooled64 = _pool_relu(y64)
        for pooled, reference, phase in ((False, y64, "conv"), (True, pooled64, "layer")):
            paths = (lenet_baselines.layer_paths(layer, layer_in, w, pooled=pooled)
                     + lenet_baselines.padded_layer_paths(layer, layer_in, w, pooled=pooled))
            rec.vendor(paths, skipped_as={}, reference=reference, experiment="ladder", size=N, flops=layer.flops(N),
                       phase=phase, labels={"layer": layer.name, "step": "cuDNN"}, log=rec.progress)
        del y64, pooled64
    forward_paths = lenet_baselines.forward_paths(x, weights) + lenet_baselines.padded_forward_paths(x, weights)
    rec.vendor(forward_paths, skipped_as={}, reference=ref["logits"][:N], experiment="forward", size=N,
               flops=sum(flops(N).values()), phase="forward", labels={"layer": "all", "step": "PyTorch"},
               log=rec.progress)
    _torch_empty_cache()
    cupy.get_default_memory_pool().free_all_blocks()


def _vendor_inputs(run: _Run, N: int) -> list:
    """(layer, its input, its filters) of the vendor paths at batch N: conv2 reads the
    reference's pooled conv1 output, so that both layers' paths start from the same input."""
    import cupy
    return [(CONV1, run.x_all[:N], run.weights["conv1"]),
            (CONV2, run.ref["pool1"][:N].astype(cupy.float32), run.weights["conv2"])]


def cudnn_kernels_table(run: _Run) -> pd.DataFrame:
    """The GPU kernels each fp16 convolution path (conv alone, eager; the layers as given and
    padded) runs at the largest batch, and the algorithm their names say (tensor cores or not)."""
    N = max(run.batches)
    rows = []
    for layer, layer_in, w in _vendor_inputs(run, N):
        paths = [p for p in lenet_baselines.layer_paths(layer, layer_in, w, pooled=False) if p.precision == "fp16"]
        paths += lenet_baselines.padded_layer_paths(layer, layer_in, w, pooled=False, graphs=False)
        for path in paths:
            names = baselines.path_kernels(path)
            rows.append({"layer": layer.name, "variant": path.label, "size": N,
                         "family": baselines.algorithm_family(names), "kernels": "; ".join(names)})
    _torch_empty_cache()
    return pd.DataFrame(rows, columns=["layer", "variant", "size", "family", "kernels"])


def time_copies(rec, run: _Run):
    """The forward pass from pinned host memory on one stream and on 4 (with one run's timeline),
    and copy in, kernels, copy out from pageable and pinned memory, at the largest batch."""
    import cupy

    rec.progress("pipeline and timeline")
    N = max(run.batches)
    logits64 = cupy.asnumpy(run.ref["logits"][:N])
    timeline_rows = []
    for number in PIPELINE_STEPS:
        step = find(STEPS, number)
        for chunks in PIPELINE_CHUNKS:
            total, tl = pipeline(step, run.x_host[:N], run.weights, chunks, reference=logits64,
                                 repeats=5 if number == "01" else 20)
            rec.add({**total, "step": number, "precision": step.precision, "layer": "all"})
            timeline_rows.append(tl.assign(variant=step.label, chunks=chunks, size=N))
            rec.progress(f"pipeline step {number}, {chunks} stream(s): {total['median_ms']:.3g} ms")
    rec.table("timeline", pd.concat(timeline_rows, ignore_index=True))
    rec.add(transfer_rows(find(STEPS, "12"), run.x_host[:N], run.weights, rec.repeats))


def time_ceilings(rec, run: _Run):
    from ... import roofline
    rec.progress("ceilings")
    rec.add(roofline.measure_ceilings(repeats=10))


def side_tables(rec, run: _Run):
    """Every check's error (and the forward passes' accuracy), every kernel's resources, and the
    kernels cuDNN runs for the fp16 convolutions."""
    rec.table("checks", pd.DataFrame(run.checks))
    rec.table("resources", resources_table())
    rec.progress("cuDNN's kernels")
    rec.table("cudnn_kernels", cudnn_kernels_table(run))


def profile_counters(rec, run: _Run):
    rec.progress("profile")
    profile = profile_table()
    if profile is not None:
        rec.table("profile", profile)
    rec.progress("done")


#: Every experiment of the chapter on the GPU, in order (see the module's docstring).
benchmark_all = recorder.Recording(NAME, [
    recorder.Experiment("ladder", time_ladder),
    recorder.Experiment("copies", time_copies),
    recorder.Experiment("ceilings", time_ceilings),
    recorder.Experiment("side tables", side_tables),
    recorder.Experiment("profile", profile_counters),
], setup=_Run, skipped=("variant", "library", "precision", "size", "reason"),
    crosscheck=lambda row: row["experiment"] in ("ladder", "forward") and row["size"] == BATCHES[-1],
    variant_budget_ms=TIMING_BUDGET_MS)


def forward_conv64(x, w):
    """The float64 pre-pool convolution on the GPU (CuPy), 100 images at a time."""
    import cupy

    from .network import conv
    return cupy.concatenate([conv(x[i:i + 100], w, xp=cupy) for i in range(0, len(x), 100)])


def _pool_relu(y):
    import cupy

    from .network import pool2
    return pool2(cupy.maximum(y, 0), cupy)


def _torch_empty_cache():
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:
        pass


def pipeline(step: Step, x_host: np.ndarray, weights: dict, chunks: int, reference: np.ndarray,
             repeats: int = 10):
    """The forward pass from pinned host memory: the batch in ``chunks`` pieces, each on its
    own stream (copy in, forward pass, copy the logits out). Returns the ``pipeline`` row
    (the lab's timing loop on a stream every chunk's stream forks from and joins: from the
    first copy in to the last copy out; the logits checked against ``reference``) and the
    timeline of one more run."""
    import cupy
    import cupyx

    from ...timeline import Timeline
    from ...timing import benchmark

    N = len(x_host)
    pinned = cupyx.empty_pinned(x_host.shape, np.float32)
    pinned[...] = x_host
    out = cupyx.empty_pinned((N, 10), np.float32)
    x_dev = cupy.empty(x_host.shape, cupy.float32)
    bounds = np.linspace(0, N, chunks + 1).astype(int)
    parts = [(lo, hi, Forward(step, hi - lo, x_dev[lo:hi], weights, "gpu")) for lo, hi in zip(bounds[:-1], bounds[1:])]
    streams = [cupy.cuda.Stream(non_blocking=True) for _ in parts]
    main = cupy.cuda.Stream(non_blocking=True)

    def enqueue(span):
        for s, (lo, hi, fwd) in zip(streams, parts):
            with span(s, "h2d", f"images {lo}-{hi}"):
                x_dev[lo:hi].set(pinned[lo:hi], stream=s)
            with span(s, "kernel", "forward"):
                fwd.run()
            with span(s, "d2h", "logits"):
                fwd.logits.get(stream=s, out=out[lo:hi], blocking=False)

    @contextmanager
    def plain(stream, kind, label):       # the same enqueueing, without events
        with stream:
            yield

    def forked():                         # every chunk's stream waits for main, and main for each
        fork = main.record()
        for s in streams:
            s.wait_event(fork)
        enqueue(plain)
        for s in streams:
            main.wait_event(s.record())

    # Timed on main by the lab's loop, queued: the copies are asynchronous (pinned memory), so
    # the host's enqueueing of the chunks is not what is measured.
    timing = benchmark(forked, stream=main, warmup=2, repeats=repeats, rel_ci=None)
    check(out, reference, step.precision, name=f"pipeline {step.label}, {chunks} stream(s)")
    tl = Timeline(main)
    for k, s in enumerate(streams):
        tl.stream(f"stream {k}", s)
    enqueue(tl.span)
    row = timing.row("pipeline", f"{step.label}, {chunks} stream(s)", N, "total",
                     bytes=float(x_host.nbytes + out.nbytes), chunks=chunks, memory="pinned")
    return row, tl.rows()


def transfer_rows(step: Step, x_host: np.ndarray, weights: dict, repeats: int) -> list[dict]:
    """Copy in, forward pass, copy out, on one stream, from pageable and from pinned memory."""
    import cupy

    from ... import transfers

    N = len(x_host)
    bound = {}

    def launch(inputs, output):
        key = (inputs[0].data.ptr, output.data.ptr)
        if key not in bound:              # built once per buffer pair, outside the timed region
            bound[key] = Forward(step, N, inputs[0], weights, "gpu")
        fwd = bound[key]
        fwd.run()
        cupy.copyto(output, fwd.logits)   # a device copy of 400 KB, inside "kernel"

    out = []
    for memory in ("pageable", "pinned"):
        for row in transfers.transfer_breakdown(launch, [x_host], (N, 10), np.float32, memory=memory,
                                                repeats=max(5, repeats // 10), size=N,
                                                variant=f"{step.label}, {memory}"):
            out.append({**row, "step": step.number, "precision": step.precision, "layer": "all"})
    return out


def resources_table() -> pd.DataFrame:
    """Registers, shared and local memory of the kernels each step launches for each layer, as
    compiled for this GPU (a file's other kernels, such as step 13's other layer, are left out)."""
    from ...kernels import get_backend, resource_table
    be = get_backend("gpu")
    frames = []
    for step in STEPS:
        if step.streams or step.graph:
            continue
        for layer in LAYERS:
            module = step.launcher.module(step, layer, be)
            table = resource_table(module).loc[list(step.launcher.kernels(step, layer))].reset_index()
            frames.append(table.assign(step=step.number, layer=layer.name))
    return pd.concat(frames, ignore_index=True)


def profile_table() -> pd.DataFrame | None:
    """Nsight Compute's counters for :data:`PROFILE_STEPS` at N = 1,000 (both layers), or
    None where ncu is missing or fails (the reason is printed)."""
    from ... import profiler
    table = profiler.profile_launches(NAME, profiler.driver(NAME),
                                      [*profiler.STANDARD_METRICS, *profiler.UTILISATION_METRICS],
                                      kernel_regex="^(conv|im2col|matmul)", timeout=200,
                                      stalls=list(profiler.STALL_METRICS))
    if table is None:
        return None
    launches = _profile_launches()
    if len(launches) != len(table):
        print(f"lenet: expected {len(launches)} profiled launches, got {len(table)}; labels left out")
        return table
    table.insert(0, "step", [s for s, _ in launches])
    table.insert(1, "layer", [layer for _, layer in launches])
    table["size"] = PROFILE_N
    return table


def _profile_launches() -> list[tuple[str, str]]:
    """(step, layer) of every kernel launch the profile target makes, in order."""
    out = []
    for number in PROFILE_STEPS:
        step = find(STEPS, number)
        for layer in LAYERS:
            out += [(number, layer.name)] * len(step.launcher.kernels(step, layer))
    return out


def profile_driver() -> None:
    """Each of :data:`PROFILE_STEPS` once at N = 1,000, layer by layer: the child process ncu
    watches (``python -m gpulab profile-driver lenet``)."""
    import cupy
    weights = load_weights()
    x, _ = test_inputs(PROFILE_N)
    x = cupy.asarray(x)
    for number in PROFILE_STEPS:
        fwd = Forward(find(STEPS, number), PROFILE_N, x, weights, "gpu")
        fwd.layers["conv1"]()
        fwd.layers["conv2"]()
    cupy.cuda.get_current_stream().synchronize()


def as_measured_on(run, here):
    """TEST HOOK, not a measurement: the recorded ``run`` cut down to what :func:`benchmark_all`
    would have measured on a device with limits ``here`` (e.g. 8 GB: ``gpulab.device.PROFILES
    ["8GB"]``), through the same :func:`runnable_batches`: the ladder and forward rows of batches
    that do not fit removed and listed in ``skipped``; the copies-and-streams rows, which the
    record runs at its largest batch that fits, relabelled to that batch (their times are still
    the recorded GPU's). What tests/test_lenet.py executes the notebook against."""
    import dataclasses
    timings = run.timings
    sized = timings["experiment"].isin(["ladder", "forward"])
    ok, skipped = runnable_batches(sorted(timings.loc[sized, "size"].unique()), here)
    if not ok:
        raise ValueError(f"no batch of the run fits {here.name}")
    largest = max(ok)
    timings = timings[~sized | timings["size"].isin(ok)].copy()
    copies = timings["experiment"].isin(["pipeline", "transfers"])
    timings.loc[copies, "size"] = largest
    tables = dict(run.tables)
    tables["skipped"] = pd.concat([tables.get("skipped", pd.DataFrame()), pd.DataFrame(skipped)], ignore_index=True)
    if "checks" in tables and "size" in tables["checks"]:
        tables["checks"] = tables["checks"][tables["checks"]["size"].isin(ok)]
    if "timeline" in tables and "size" in tables["timeline"]:
        tables["timeline"] = tables["timeline"].assign(size=largest)
    return dataclasses.replace(run, timings=timings.reset_index(drop=True), tables=tables,
                               meta={**run.meta, "gpu": here.name})
