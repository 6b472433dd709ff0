"""What ``python -m gpulab record fcnet`` measures on a GPU: every step and vendor path on both
cases (eager, in CUDA graphs, and cold on the small case), the copies when X starts on the host,
the device's ceilings, and the side tables (resources, skipped, the vendor paths' kernels, the
profile). Every kernel is checked at full size before it is timed."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import baselines, recorder, roofline, transfers
from ...check import check, compare
from ...kernels import get_backend, occupancy, resource_table
from ...recorder import Variant
from ...timing import benchmark, graph_benchmark
from .launchers import SEQUENCE, buffers, runnable_steps, step_kernels
from .problem import HID, NAME, OUT, RELU, SIZES, Vectors, make_inputs, make_weights, plan_sizes, reference, work
from .profile import profile_steps
from .steps import STEPS, Step
from .views import ladder


def _case(n: int) -> str:
    return next((name for name, size in SIZES.items() if size == n), "check")


def _row_labels(step_: Step, n: int) -> dict:
    return {"step": step_.ordinal, "case": _case(n), "precision": step_.precision,
            "kernel": ", ".join(step_.kernels)}


class _Run:
    """What every experiment of the run reads: the weights, the cases that fit this GPU, the steps
    it can run, each compiled once, and the vendor paths' kernel names gathered on the way."""

    def __init__(self, rec):
        self.weights = make_weights()
        self.matrices = [self.weights["W1"], self.weights["W2"], self.weights["W3"]]
        sizes = dict(SIZES)
        if rec.quick:
            sizes["large"] = SIZES["large"] // 10
        self.here, skipped = runnable_steps(STEPS)
        self.sizes, too_large = plan_sizes(sizes)
        for entry in skipped + too_large:   # not an error: the notebook shows the skipped table with the reasons
            rec.progress(f"skipping {entry['variant']}: {entry['reason']}")
            rec.skip(**entry)
        self.fns_by_step = {step_.label: step_kernels(step_, "gpu") for step_ in self.here}
        self.vendor_kernels = []


def time_ladder(rec, run: _Run):
    """Every step and vendor path on each case, eager and in CUDA graphs, and the small case cold
    (L2 flushed between repeats: ``ladder_cold`` and ``graph_cold``). Each kernel is checked
    against the float64 reference at full size before it is timed; every variant reads the same
    inputs; every vendor path (:func:`gpulab.baselines.matmul_chain_paths`) runs in the same process."""
    import cupy
    for case, n in run.sizes.items():
        _ladder_case(rec, run, case, n)
        cupy.get_default_memory_pool().free_all_blocks()      # the case's buffers went with the call


def _ladder_case(rec, run: _Run, case: str, n: int):
    import cupy

    repeats = rec.repeats
    bufs = buffers(get_backend("gpu"), make_inputs(n), run.weights, scratch=True)
    x32 = bufs["x"]
    ref = reference(x32, run.weights, cupy.float64, xp=cupy)
    ref32 = reference(x32, run.weights, cupy.float32, xp=cupy).get()

    def variant(step_: Step) -> Variant:
        inference = SEQUENCE.bind(step_, Vectors(n), bufs, "gpu", fns=run.fns_by_step[step_.label])

        def checked():
            bufs["y"].fill(cupy.nan)
            inference()
            result = check(bufs["y"], ref, step_.precision, name=f"{step_.label} n={n}")
            return {"rel_error": result.rel_error, "intended": case in step_.sizes,
                    "rel_error_vs_fp32": compare(bufs["y"], ref32, step_.precision).rel_error}

        def rows(timing, labels, medians):
            labels = {**_row_labels(step_, n), **labels}
            out = [timing.row("ladder", step_.label, n, **work(n), **labels)]
            if case == "small":
                out.append(graph_benchmark(inference, launches=20, repeats=repeats)
                           .row("graph", step_.label, n, **work(n), **labels))
                out += _cold_rows(inference, step_.label, n, labels, repeats)
            return out
        return Variant(step_.label, inference, checked, rows,
                       where={"step": step_.ordinal, "precision": step_.precision, "size": n})
    rec.ladder([variant(step_) for step_ in run.here], min_repeats=10)

    # Every vendor path, checked against the same reference, eager and in CUDA graphs.
    eager = baselines.matmul_chain_paths(x32, run.matrices, RELU)
    paths = eager + baselines.graph_paths(eager, launches=10)
    labels = {"step": np.nan, "case": case, "intended": True}
    w = work(n)
    half_bytes = lambda path: w["bytes"] / (2 if path.precision in ("fp16", "bf16") else 1)   # noqa: E731
    rec.vendor(paths, reference=ref, experiment="ladder", graph_experiment="graph", size=n, flops=w["flops"],
               bytes=half_bytes, labels=labels, skipped_as={"step": "vendor"})
    if case == "small":          # cold: L2 flushed before every call, eager and in one-call graphs
        capturable = [p for p in eager if p.capture != "none"]
        for experiment, chosen, flush in (("ladder_cold", eager, True),
                                          ("graph_cold", [baselines.in_graph(p, 1) for p in capturable], False),
                                          ("graph_cold", [baselines.in_graph(p, 1) for p in capturable], True)):
            rec.vendor(chosen, reference=ref, experiment=experiment, size=n, flops=w["flops"], bytes=half_bytes,
                       budget_ms=500, flush_l2=flush, labels=labels, log=lambda text: None)
    run.vendor_kernels += _vendor_kernel_names(eager, case)


def time_transfers(rec, run: _Run):
    """Where the time goes when X starts on the host: on each case, the kernel of steps 13, 14,
    15 and 17 that the ladder (just measured) shows, pinned memory."""
    measured = pd.DataFrame(rec.rows)
    for case, n in run.sizes.items():
        shown = set(ladder(measured, case)["variant"]) if n == SIZES[case] else set()
        x_host = make_inputs(n)
        for step_ in [s for s in run.here if s.number in ("13", "14", "15", "17")]:
            if step_.label in shown or (not shown and case in step_.sizes):
                rec.add(_transfer_rows(step_, run.fns_by_step[step_.label], x_host, run.weights, n, rec.repeats))


def time_ceilings(rec, run: _Run):
    rec.add(roofline.measure_ceilings(repeats=20))


def side_tables(rec, run: _Run):
    """Every kernel's resources as compiled for this GPU, and the kernels each PyTorch path launched."""
    rec.table("resources", resources(run.fns_by_step))
    rec.table("vendor_kernels", pd.DataFrame(run.vendor_kernels, columns=["case", "variant", "kernels"]))


def profile_counters(rec, run: _Run):
    """Nsight Compute's counters for every step on the large case, where it fits and ncu runs."""
    if "large" not in run.sizes:
        rec.progress("profiling skipped: the large case does not fit this GPU (the chapter shows the recorded profile)")
        return
    try:
        rec.table("profile", profile_steps(quick=rec.quick))
    except Exception as exc:   # no ncu here: the run still has its timings; say why
        rec.progress(f"profiling skipped: {exc}")


#: Every experiment of the chapter on the GPU, in order (``quick``: a tenth of the large case, a
#: smoke test, not for committing). Steps this GPU cannot run, and cases over its memory budget,
#: are listed with the reason in the ``skipped`` table.
benchmark_all = recorder.Recording(NAME, [
    recorder.Experiment("ladder", time_ladder),
    recorder.Experiment("transfers", time_transfers),
    recorder.Experiment("ceilings", time_ceilings),
    recorder.Experiment("side tables", side_tables),
    recorder.Experiment("profile", profile_counters),
], setup=_Run, skipped=("step", "variant", "library", "precision", "size", "reason"), variant_budget_ms=1500.0,
    crosscheck=lambda row: row["experiment"] in ("ladder", "graph"))


def _cold_rows(inference, label: str, n: int, labels: dict, repeats: int) -> list[dict]:
    """The small case cold: L2 flushed before every call, eager (``ladder_cold``)
    and in a one-call graph, with its unflushed twin (``graph_cold``)."""
    w = work(n)
    out = [benchmark(inference, repeats=repeats, budget_ms=500, flush_l2=True)
           .row("ladder_cold", label, n, **w, **labels)]
    for flush in (False, True):
        out.append(graph_benchmark(inference, launches=1, repeats=repeats, flush_l2=flush)
                   .row("graph_cold", label, n, **w, **labels))
    return out


def _vendor_kernel_names(paths, case: str) -> list[dict]:
    """The GPU kernels each eager PyTorch fp32/fp16 path launches, from the PyTorch
    profiler: whether cuBLASLt's fused ReLU epilogue really runs at this size."""
    out = []
    for path in paths:
        if "PyTorch" not in path.library or path.precision not in ("fp32", "fp16"):
            continue
        names = baselines.path_kernels(path)
        out.append({"case": case, "variant": path.label, "kernels": " | ".join(names)})
    return out


def _transfer_rows(step_: Step, fns, x_host, weights, n, repeats) -> list[dict]:

    be = get_backend("gpu")
    base = buffers(be, x_host[:, :1], weights)
    bound = {}

    def launch(inputs, output):
        key = (inputs[0].data.ptr, output.data.ptr)
        if key not in bound:   # bind once per buffer pair: no host work inside the timed region
            bound[key] = SEQUENCE.bind(step_, Vectors(n), {**base, "n": n, "hid_n": HID * n, "x": inputs[0],
                                                           "y": output}, be, fns=fns)
        bound[key]()

    memories = ("pinned",) if n > 1_000_000 else ("pageable", "pinned")
    out = []
    for memory in memories:
        for row in transfers.transfer_breakdown(launch, [x_host], (OUT, n), np.float32, memory=memory,
                                                repeats=max(5, repeats // 10), size=n):
            out.append({**row, **_row_labels(step_, n), "variant": step_.label})
    return out


def resources(fns_by_step: dict) -> pd.DataFrame:
    """Registers, shared memory, local (spilled) bytes and occupancy of every
    ladder kernel as compiled for this GPU, at the launch shape the ladder uses."""
    rows = []
    for step_ in [s for s in STEPS if s.label in fns_by_step]:
        fns = fns_by_step[step_.label]
        for launch in step_.launches:
            fn = fns[launch.kernel]
            res = resource_table(fn.module).loc[launch.kernel]
            threads = int(np.prod(launch.block))
            occ = occupancy(fn, threads, launch.shared_mem)
            rows.append({"step": step_.ordinal, "variant": step_.label, "kernel": launch.kernel,
                         "threads_per_block": threads, "registers": int(res["registers"]),
                         "static_shared_bytes": int(res["static_shared_bytes"]),
                         "dynamic_shared_bytes": launch.shared_mem, "local_bytes": int(res["local_bytes"]),
                         "blocks_per_sm": occ["blocks_per_sm"], "warps_per_sm": occ["warps_per_sm"],
                         "occupancy": occ["occupancy"]})
    return pd.DataFrame(rows).drop_duplicates(["variant", "kernel"])


#: The experiments whose rows belong to one case (a case :func:`plan_sizes` skips has none).
SIZED_EXPERIMENTS = ("ladder", "graph", "ladder_cold", "graph_cold", "transfers")


def as_measured_on(run, here):
    """TEST HOOK, not a measurement: the recorded ``run`` cut down to what :func:`benchmark_all`
    would have measured on a device with limits ``here`` (e.g. 8 GB: ``gpulab.device.PROFILES
    ["8GB"]``), through the same :func:`plan_sizes`: the rows of the cases that do not fit removed
    and listed in ``skipped`` with the reason, their PyTorch kernel lists removed, and no profile
    when the large case (the one profiled) does not fit. The times left are still the recorded
    GPU's. What tests/test_fcnet.py executes the notebook against."""
    import dataclasses
    sizes, skipped = plan_sizes(dict(SIZES), here)
    if not sizes:
        raise ValueError(f"no case of the run fits {here.name}")
    timings = run.timings
    gone = timings["experiment"].isin(SIZED_EXPERIMENTS) & ~timings["size"].isin(list(sizes.values()))
    tables = dict(run.tables)
    tables["skipped"] = pd.concat([tables.get("skipped", pd.DataFrame()), pd.DataFrame(skipped)], ignore_index=True)
    if "vendor_kernels" in tables:
        tables["vendor_kernels"] = tables["vendor_kernels"][tables["vendor_kernels"]["case"].isin(list(sizes))]
    if "large" not in sizes:
        tables.pop("profile", None)
    return dataclasses.replace(run, timings=timings[~gone].reset_index(drop=True), tables=tables,
                               meta={**run.meta, "gpu": here.name})
