"""What ``python -m gpulab record convpool`` measures, on the GPU, in one process: the chapter's
run as a :class:`gpulab.recorder.Recording` (:data:`benchmark_all`), its experiments in order:

* ``ladder``: every step at batch 1, and the fused steps at batches 8 and 32, each bound by its
  launcher and checked at full size against the float64 reference (computed on the GPU) before it
  is timed (:meth:`gpulab.recorder.Recorder.ladder`: a step that fails is a ``FAILED`` row of
  ``skipped``, never timed); beside them every cuDNN path of :mod:`.baselines`, checked and timed
  on the same inputs (:meth:`gpulab.recorder.Recorder.vendor`);
* ``cudnn_conv``: cuDNN's convolution alone (fp32 and fp16, channels-last);
* ``transfers``: copies in, kernel, copy out for the best fp32 and fp16 steps, one image and a batch;
* ``ceilings``: the device copy, cuBLAS SGEMM, and the tensor cores' tf32 and fp16 GEMM rates;
* side tables: ``checks``, ``skipped`` (steps, batches and vendor paths not measured, and why: a
  step this GPU cannot run, or a batch over its memory budget, see :func:`.launchers.unfit_reason`; a
  failed check; a later part that failed or that the run's budget left out), ``resources``
  (registers, shared memory, occupancy of each kernel), ``cudnn_kernels`` (which kernels cuDNN ran),
  the sweeps (:mod:`.sweeps`), and ``profile`` (Nsight Compute's counters) where ncu works.

A new step needs nothing here: the ladder checks and times whatever :data:`.steps.STEPS` lists.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ... import baselines, ladder, profiler, roofline, transfers
from ...check import compare
from ...device import limits
from ...errors import CheckFailed, KernelArgumentError
from ...kernels import load_module, occupancy, resource_table
from ...recorder import Experiment, Recording, Variant
from ...sweep import _message
from ...timing import benchmark
from . import baselines as vendor
from . import sweeps
from .launchers import MEMORY_FRACTION, config, footprint_bytes, input_name, unfit_reason
from .problem import BATCHES, LAYER, NAME, Conv, conv_reference, layer_arrays, make_inputs, pool_reference
from .steps import BATCH_STEPS, STEPS
#: cuDNN's fp32 channels-last path is not run from this batch size on (see the note).
SLOW_SEARCH_BATCH = 32
SLOW_SEARCH_NOTE = ("not run at N = 32: in a trial run on the H100 its algorithm search took 46 s and it ran "
                    "123 ms against 67 ms for fp32 NCHW (at N = 1 and 8 it was 2-4% slower than NCHW)")
#: The steps whose copies are timed: the best fp32 and the best fp16 kernel.
TRANSFER_STEPS = ("06", "08")
TRANSFER_BATCHES = (1, 32)


def step_bytes(step, shape) -> float:
    """Bytes a step moves at least: the compulsory ones, plus the pre-pool tensor written and
    read back by the unfused steps."""
    return float(shape.bytes(step.itemsize) + (0 if step.fused else shape.prepool_bytes()))


#: The ``skipped`` table's columns (a part of the record that failed or was not started: its name
#: as the variant, size 0).
SKIPPED_COLUMNS = ("variant", "library", "precision", "size", "reason")
#: The ``variant`` of a ``skipped`` row for a batch size not measured at all.
WHOLE_BATCH = "every step and cuDNN path"


def plan(batches, here) -> tuple[dict, list]:
    """What the record measures on a device with limits ``here`` (:func:`gpulab.device.limits`;
    None: no limits): ({N: the steps timed at N}, the ``skipped`` rows for the rest). A batch over
    the memory budget is skipped whole (cuDNN too); a step this device cannot run, alone."""
    planned, skipped = {}, []
    for N in batches:
        shape = LAYER.batch(N)
        too_large = here.memory_fits(footprint_bytes(shape), MEMORY_FRACTION) if here is not None else None
        if too_large:            # this GPU (or the simulated one) is too small for the batch: say so, go on
            skipped.append({"variant": WHOLE_BATCH, "library": "", "precision": "", "size": N, "reason": too_large})
            continue
        planned[N] = []
        for s in STEPS:
            if not (N == 1 or s.number in BATCH_STEPS):
                continue
            why = unfit_reason(s, shape, limits=here) if here is not None else None
            if why:
                skipped.append({"variant": s.label, "library": "", "precision": s.precision, "size": N, "reason": why})
            else:
                planned[N].append(s)
    return planned, skipped


def as_measured_on(run, here):
    """TEST HOOK, not a measurement: the recorded ``run`` cut down to what :func:`benchmark_all`
    would have measured on a device with limits ``here`` (e.g. ``gpulab.device.PROFILES["T4"]``),
    through the same :func:`plan` and :func:`.launchers.unfit_reason`: rows of skipped steps and
    batches removed and listed in ``skipped``, tile-sweep points that do not fit made invalid with
    the reason. The times are still the recorded GPU's. What tests/test_convpool.py executes the
    notebook against, to show it reads a small GPU's run without a GPU."""
    ladder_rows = run.experiment("ladder")
    planned, skipped = plan(sorted(ladder_rows["size"].unique()), here)
    timed = {(N, s.label) for N, chosen in planned.items() for s in chosen}
    keys = list(zip(run.timings["size"], run.timings["variant"]))
    experiment = run.timings["experiment"]
    keep = ~experiment.isin(["ladder", "cudnn_conv", "transfers"])
    vendor_kept = baselines.is_vendor(run.timings) & run.timings["size"].isin(planned)
    keep |= (experiment == "ladder") & (pd.Series([k in timed for k in keys], index=keep.index) | vendor_kept)
    keep |= (experiment == "cudnn_conv") & run.timings["size"].isin(planned)
    numbers = {s.number for s in STEPS}
    fits = [n in numbers and N in planned and unfit_reason(ladder.find(STEPS, n), LAYER.batch(N), limits=here) is None
            for n, N in zip(run.timings["step"].astype(str), run.timings["size"])]
    keep |= (experiment == "transfers") & pd.Series(fits, index=keep.index)
    tables = dict(run.tables)
    checks = tables["checks"]
    tables["checks"] = checks[[(N, ladder.find(STEPS, n).label) in timed for n, N in zip(checks["step"], checks["size"])]]
    fits_layer = {s.number for s in STEPS if unfit_reason(s, LAYER, limits=here) is None}
    tables["resources"] = tables["resources"][tables["resources"]["step"].isin(fits_layer)]
    if "profile" in tables:
        tables["profile"] = tables["profile"][tables["profile"]["step"].isin(fits_layer | {"pool"})]
    if "sweeps" in tables:
        sweeps = tables["sweeps"].copy()
        for i, row in sweeps.iterrows():
            if row["sweep"] == "tiles":
                shape = LAYER.batch(int(row["N"]))
                point = dataclasses.replace(ladder.find(STEPS, row["step"]), options=(
                    f"-DSTAGES={int(row['STAGES'])}", f"-DTC_BN={int(row['pixels'])}"))
                too_large = here.memory_fits(footprint_bytes(shape), MEMORY_FRACTION)
            else:
                point = dataclasses.replace(ladder.find(STEPS, "05"), options=(f"-DQ={int(row['Q'])}",))
                shape, too_large = LAYER, None
            why = too_large or (unfit_reason(point, shape, limits=here) and
                                _message(KernelArgumentError(unfit_reason(point, shape, limits=here))))
            if why:
                sweeps.loc[i, ["status", "reason", "timed"]] = ["invalid", why, False]
                sweeps.loc[i, ["median_ms", "q1_ms", "q3_ms", "gflops", "rel_error"]] = np.nan
        tables["sweeps"] = sweeps
    recorded = tables.get("skipped")
    if recorded is not None:          # the record's own skips at the batches still measured
        recorded = recorded[recorded["size"].isin(planned) | (recorded["size"] == 0)]
        skipped += recorded.to_dict("records")
    tables["skipped"] = pd.DataFrame(skipped, columns=list(SKIPPED_COLUMNS))
    return dataclasses.replace(run, timings=run.timings[keep].reset_index(drop=True), tables=tables)


#: The batches of a quick (smoke-test) record.
QUICK_BATCHES = (1, 8)
#: Milliseconds each timed variant may take (the stop rule usually ends it sooner), a quick
#: record's too: the recording's ``variant_budget_ms``.
VARIANT_BUDGET_MS = 400.0


@dataclass
class Planned:
    """What :func:`setup` decided: the batches of this record and the steps timed at each."""

    batches: tuple
    steps: dict


def setup(rec) -> Planned:
    """The batches this device can run, and the steps at each (see :func:`plan`); the rest are
    rows of the ``skipped`` table. (As before this was a Recording, the run always has a
    ``resources`` table.)"""
    batches = QUICK_BATCHES if rec.quick else BATCHES
    rec.table("resources", pd.DataFrame())      # empty if its experiment fails or is not started: readers index it
    planned, skipped = plan(batches, limits())
    for row in skipped:
        reason = row.pop("reason")
        rec.skip(reason, **row)
        rec.progress(f"N={row['size']} {row['variant']} skipped: {reason}")
    return Planned(tuple(batches), planned)


def ladder_experiment(rec, ctx: Planned) -> None:
    """Every planned step, checked at full size against the float64 reference before it is timed
    (a failed check is a ``FAILED`` row of ``skipped``, not timed), and cuDNN on the same inputs:
    the layer, then the convolution alone; which kernels cuDNN ran (``cudnn_kernels``)."""
    checks, kernels_seen = [], []
    try:
        for N, chosen in ctx.steps.items():
            _ladder_at(rec, N, chosen, checks, kernels_seen)
    finally:            # what was checked before a failure stays in the run
        rec.table("checks", pd.DataFrame(checks))
        rec.table("cudnn_kernels", pd.DataFrame(kernels_seen, columns=["variant", "precision", "layout", "kernel",
                                                                        "family"]))


def step_variant(step, shape, arrays: dict, ref, checks: list) -> Variant:
    """``step`` bound by its launcher to the layer at ``shape`` (the device ``arrays``, y among
    them): its check (y poisoned, one call, compared with ``ref``; a row of ``checks``) and its
    timed row."""
    import cupy

    N = shape.N
    launch = ladder.bind(step, Conv(shape), arrays, "gpu")
    y = arrays[Conv.output_name]

    def check() -> dict:
        y.fill(cupy.nan)
        launch()
        result = compare(y, ref, step.precision, name=f"{step.label} N={N}")
        checks.append({"step": step.number, "size": N, "precision": step.precision,
                       "rel_error": result.rel_error, "unwritten": result.unwritten, "passed": result.passed})
        if not result.passed:
            raise CheckFailed(str(result))
        return {"rel_error": result.rel_error}

    def row(timing, checked, _medians) -> dict:
        return timing.row("ladder", step.label, N, "kernel", flops=shape.flops, bytes=step_bytes(step, shape),
                          step=step.number, precision=step.precision, fused=step.fused,
                          rel_error=checked["rel_error"])
    return Variant(step.label, launch, check, row, where={"library": "", "precision": step.precision, "size": N})


def _channels_last(steps) -> list:
    """The element types of the channels-last inputs ``steps`` read."""
    return [s.dtype for s in steps if s.launcher.channels_last]


def _ladder_at(rec, N: int, chosen, checks: list, kernels_seen: list) -> None:
    import cupy

    shape = LAYER.batch(N)
    x, w, b = make_inputs(shape, seed=N, xp=cupy)
    conv64 = conv_reference(x, w, b, xp=cupy)
    ref = pool_reference(conv64, xp=cupy)
    arrays = layer_arrays(x, w, b, shape, _channels_last(chosen), xp=cupy)
    arrays[Conv.output_name] = cupy.empty(shape.y_shape, dtype=cupy.float32)
    rec.ladder([step_variant(step, shape, arrays, ref, checks) for step in chosen])
    # cuDNN on the same x, w, b: the layer, then the convolution alone. CUDA graphs only for one
    # image: at 8 and 32 a call takes milliseconds, so launches are noise, and capturing ten calls
    # of cuDNN's large batches failed on the H100 (an error that left later captures replaying
    # nothing: times of microseconds).
    paths = vendor.layer_paths(x, w, b, graphs=N == 1)
    if N >= SLOW_SEARCH_BATCH:
        paths = [p for p in paths if not (p.precision == "fp32" and p.layout == "NHWC")]
        rec.skip(SLOW_SEARCH_NOTE, variant="cuDNN (PyTorch) fp32, NHWC, conv + ReLU + maxpool 2/2",
                 library="cuDNN (PyTorch)", precision="fp32", size=N)
    rec.vendor(paths, skipped_as={}, reference=ref, experiment="ladder", size=N, flops=shape.flops,
               bytes=vendor.moved_bytes(shape), labels={"step": "cuDNN"}, log=rec.progress)
    baselines._release_memory()
    del ref
    rec.vendor(vendor.conv_only_paths(x, w, b, ("fp32", "fp16") if N == 1 else ("fp16",)), skipped_as={},
               reference=conv64, experiment="cudnn_conv", size=N, flops=shape.flops, labels={"step": "cuDNN"},
               log=rec.progress)
    if N == 1:
        for path in vendor.layer_paths(x, w, b, graphs=False, precisions=("fp32", "tf32", "fp16")):
            with baselines.precision_mode(path.precision):
                names = baselines.cudnn_kernels(path.setup())
            kernels_seen += [{"variant": path.label, "precision": path.precision, "layout": path.layout,
                              "kernel": name, "family": baselines.algorithm_family([name])} for name in names]
    del x, w, b, conv64, arrays
    _free()


def _free() -> None:
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    baselines._release_memory()


def ceilings(rec, ctx) -> None:
    """The device copy, cuBLAS SGEMM and the tensor cores' tf32 and fp16 GEMM rates."""
    rec.add(roofline.measure_ceilings(repeats=20) + tensor_ceilings())


def launch_sweeps(rec, ctx) -> None:
    """The launch-shape sweeps (:mod:`.sweeps`), each its side table."""
    for name, table in sweeps.record_sweeps(quick=rec.quick, log=rec.progress).items():
        rec.table(name, table)


def copies(rec, ctx: Planned) -> None:
    """The transfers of the steps whose checks passed (check before time)."""
    _free()
    rec.add(transfer_rows(ctx.batches, rec.repeats, failed={row["variant"] for row in rec.failed}))


def resources(rec, ctx) -> None:
    rec.table("resources", resources_table())


def profile(rec, ctx) -> None:
    """Nsight Compute's counters, where ncu works (else the run has no ``profile`` table)."""
    table = profile_table()
    if table is not None:
        rec.table("profile", table)


#: Every experiment of the chapter on the GPU: the ladder and the cuDNN paths, then the later
#: parts, each skipped once the run's budget (300 s by default) is spent. A part that fails or is
#: not started is a row of the ``skipped`` table (variant: the part's name, size 0), the one table
#: of what is missing that the chapter's views read.
benchmark_all = Recording(NAME, [
    Experiment("ladder", ladder_experiment),
    *(Experiment(name, fn, optional=True) for name, fn in (
        ("ceilings", ceilings), ("sweeps", launch_sweeps), ("transfers", copies), ("resources", resources),
        ("profile", profile))),
], setup=setup, skipped=SKIPPED_COLUMNS, budget_s=300.0, keep_going=True, variant_budget_ms=VARIANT_BUDGET_MS,
    problem_row=lambda experiment: {"variant": experiment, "library": "", "precision": "", "size": 0},
    crosscheck=lambda row: row["experiment"] in ("ladder", "cudnn_conv") and row["size"] in (1, 32))


def transfer_rows(batches, repeats: int, failed=()) -> list[dict]:
    """Copy in, kernel, copy out of the best fp32 and fp16 steps from pinned host memory (not of
    a step whose check ``failed``: its labels)."""
    import cupy

    out = []
    for N in [n for n in TRANSFER_BATCHES if n in batches]:
        shape = LAYER.batch(N)
        chosen = [s for s in (ladder.find(STEPS, n) for n in TRANSFER_STEPS)    # the ladder lists the rest
                  if unfit_reason(s, shape) is None and s.label not in failed]
        if not chosen:
            continue
        x, w, b = make_inputs(shape, seed=N, xp=cupy)
        arrays = layer_arrays(x, w, b, shape, _channels_last(chosen), xp=cupy)
        for step in chosen:
            host_x = cupy.asnumpy(arrays[input_name(step)])
            bound = {}

            def launch(inputs, output, step=step, shape=shape):
                key = (inputs[0].data.ptr, output.data.ptr)
                if key not in bound:      # the copied input and output in place of the layer's own
                    bound[key] = ladder.bind(step, Conv(shape), {**arrays, input_name(step): inputs[0],
                                                                 Conv.output_name: output}, "gpu")
                bound[key]()
            for row in transfers.transfer_breakdown(launch, [host_x], shape.y_shape, np.float32, memory="pinned",
                                                    repeats=max(5, repeats // 10), variant=step.label, size=N):
                out.append({**row, "step": step.number, "precision": step.precision})
            del host_x, bound
        del x, w, b, arrays
        cupy.get_default_memory_pool().free_all_blocks()
    return out


def tensor_ceilings(n: int = 8192, repeats: int = 20) -> list[dict]:
    """The tf32 tensor-core rate: a large tf32 GEMM through PyTorch (cuBLAS). The fp16 rate
    (cuBLAS HGEMM) is one of :func:`roofline.measure_ceilings`' rows already."""
    try:
        import torch
    except ImportError:
        return []
    rows = []
    for precision, dtype, label in (("tf32", torch.float32, "cuBLAS TF32 GEMM (PyTorch)"),):
        a = torch.rand((n, n), device="cuda").to(dtype)
        bm = torch.rand((n, n), device="cuda").to(dtype)
        c = torch.empty((n, n), device="cuda", dtype=dtype)
        with baselines.precision_mode(precision):
            t = benchmark(lambda: torch.matmul(a, bm, out=c), warmup=3, repeats=repeats)
        rows.append(t.row("ceilings", label, n, "kernel", flops=2.0 * n**3, precision=precision))
        del a, bm, c
    return rows


def resources_table() -> pd.DataFrame:
    """Registers, shared and local memory, and occupancy at the ladder's launch shape, per step."""
    out = []
    for step in STEPS:
        if unfit_reason(step, LAYER):          # not compiled for this GPU: the skipped table says why
            continue
        module = load_module(step.file, "gpu", options=step.options)
        res = resource_table(module).loc[step.kernel]
        cfg = config(step, LAYER)
        threads = int(np.prod(cfg["block"]))
        kernel = module.get_function(step.kernel)
        if cfg["shared"] > 48 * 1024:
            kernel.allow_shared_memory(cfg["shared"])
        occ = occupancy(kernel, threads, cfg["shared"])
        out.append({"step": step.number, "kernel": step.kernel, "threads_per_block": threads,
                    "registers": int(res["registers"]), "static_shared_bytes": int(res["static_shared_bytes"]),
                    "dynamic_shared_bytes": cfg["shared"], "local_bytes": int(res["local_bytes"]),
                    "blocks_per_sm": occ["blocks_per_sm"], "warps_per_sm": occ["warps_per_sm"],
                    "occupancy": occ["occupancy"]})
    return pd.DataFrame(out)


# --------------------------------------------------------------------------- the profiler's view
#: The counters the chapter's profile table reads (their short names: gpulab.profiler.SHORT_NAMES).
PROFILE_METRICS = [
    "gpu__time_duration.sum",
    "sm__inst_executed.sum",
    "sm__inst_issued.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "launch__registers_per_thread",
]
PROFILE_STEPS = ("03", "04", "05", "06", "07", "08", "09", "10", "11")


def profile_table() -> pd.DataFrame | None:
    """Nsight Compute's counters for :data:`PROFILE_STEPS` at batch 1, one row per kernel launch
    (the pool after steps 3-4 labelled "pool"); None (with the reason printed) where ncu is missing
    or fails."""
    table = profiler.profile_launches(NAME, profiler.driver(NAME), PROFILE_METRICS,
                                      kernel_regex="^(conv_|relu_maxpool)", timeout=80)
    if table is None:
        return None
    labels = []
    for kernel in table["kernel"]:
        match = [s.number for s in STEPS if s.kernel == kernel]
        labels.append(match[0] if match else "pool")
    table.insert(0, "step", labels)
    return table


def profile_driver() -> None:
    """Run each of :data:`PROFILE_STEPS` once at batch 1: the child process Nsight Compute
    watches (``python -m gpulab profile-driver convpool``)."""
    import cupy

    shape = LAYER
    x, w, b = make_inputs(shape, seed=1, xp=cupy)
    chosen = [s for s in (ladder.find(STEPS, n) for n in PROFILE_STEPS) if unfit_reason(s, shape) is None]
    arrays = layer_arrays(x, w, b, shape, _channels_last(chosen), xp=cupy)
    arrays[Conv.output_name] = cupy.empty(shape.y_shape, dtype=cupy.float32)
    for step in chosen:
        ladder.bind(step, Conv(shape), arrays, "gpu")()
    cupy.cuda.get_current_stream().synchronize()
