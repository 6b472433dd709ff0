"""What the fcnet notebook shows of a recorded run: each case's ladder, the vendor paths beside
it, the floors and the roofline, warm against cold L2, the profile, the targets and the
predictions judged."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ... import plots, predictions, roofline
from ...baselines import fastest, is_vendor
from ...prose import NOT_MEASURED
from ...roofline import ceilings_table, rates
from ...roofline import floors_ms as roofline_floors
from ...runs import gpu_comparison as compare_gpus
from ...runs import load_run, recorded_beside
from ...ladder import select
from .problem import NAME as CHAPTER
from .problem import SIZES, work
from .steps import PREDICTED, STEPS, Step


#: Why a vendor path has no ``rel_error_vs_fp32`` (the lab's fp16 steps are also compared with
#: the lab's own fp32 result; a vendor path only with the reference).
FP32_GAP = "vendor paths are checked against the float64 reference only"
#: Why :func:`warm_cold` has no graph times for CuPy's chain (see baselines.cupy_chain).
COLD_GAP = ("CuPy's matmul chain is not timed in a CUDA graph: it re-binds its cuBLAS handle to the stream "
            "on every call, which stream capture forbids")


def measured_rates(run) -> dict:
    """The run's measured ceilings: FP32 TFLOP/s (cuBLAS SGEMM), copy GB/s and,
    when recorded, the fp16 tensor-core TFLOP/s (cuBLAS HGEMM)."""
    rows = rates(run.timings[run.timings["experiment"] == "ceilings"]).set_index("variant")
    out = {"fp32_tflops": rows.loc["cuBLAS SGEMM", "gflops"] / 1e3, "copy_gbs": rows.loc["device copy", "gbs"]}
    if "cuBLAS HGEMM (fp16)" in rows.index:
        out["fp16_tensor_tflops"] = rows.loc["cuBLAS HGEMM (fp16)", "gflops"] / 1e3
    return out


#: The vendor rows of runs recorded before gpulab.baselines (kept so those runs still read).
VENDOR = ("cuBLAS fp32 chain", "cuBLAS fp16 chain")


def ladder(timings: pd.DataFrame, case: str, experiment: str = "ladder") -> pd.DataFrame:
    """The ladder for one case, in order: one kernel per step -- where a step
    has several (13, 14), the one measured fastest on this case, whichever
    case it was written for -- with its speedup over step 1 and over the
    previous step."""
    n = SIZES[case]
    rows = timings[(timings["experiment"] == experiment) & (timings["size"] == n)]
    times = rows.set_index("variant")["median_ms"]
    order = []
    for number in dict.fromkeys(s.number for s in STEPS):
        measured = [s.label for s in STEPS if s.number == number and s.label in times.index]
        if measured:
            order.append(min(measured, key=lambda label: times[label]))
    table = rows.set_index("variant").loc[order].reset_index()
    if table.empty:         # a case this run skipped (it did not fit the GPU): no rows, same columns
        return table.assign(vs_step_1=pd.Series(dtype=float), vs_previous=pd.Series(dtype=float))
    table["vs_step_1"] = table["median_ms"].iloc[0] / table["median_ms"]
    table["vs_previous"] = table["median_ms"].shift(1) / table["median_ms"]
    return table


def not_measured(run, case: str) -> str | None:
    """Why ``run`` has no times of ``case`` ("not measured on this GPU: " and the reason from
    its ``skipped`` table: the case did not fit this GPU's memory), or None when it has them."""
    n = SIZES[case]
    if ((run.timings["experiment"] == "ladder") & (run.timings["size"] == n)).any():
        return None
    skipped = run.tables.get("skipped")
    why = skipped[skipped["size"] == n]["reason"] if skipped is not None and "size" in skipped else []
    return f"{case} case {NOT_MEASURED}" + (f": {why.iloc[0]}" if len(why) else "")


def step_row(run, case: str, number: int, experiment: str = "ladder") -> pd.Series:
    """Step ``number``'s row of :func:`ladder` on ``case``; a row of NaN (same columns) when the
    run did not measure that case, so the numbers computed from it are NaN, which
    :func:`gpulab.prose.known` glues as "not measured on this GPU"."""
    table = ladder(run.timings, case, experiment)
    rows = table[table["step"] == number]
    return rows.iloc[0] if len(rows) else pd.Series(np.nan, index=table.columns, dtype=object)


def _unmeasured_figure(title: str, why: str, caption: str):
    """The figure of a case the run did not measure: its title, and why, in place of the plot."""
    fig, ax = plt.subplots(figsize=(8, 1.8))
    ax.axis("off")
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True, fontsize=10)
    return plots._finish(fig, ax, title, caption)


def vendor(timings: pd.DataFrame, case: str, experiment: str = "ladder") -> pd.DataFrame:
    """Every vendor path measured on one case: eager ("ladder") or in CUDA graphs ("graph")."""
    rows = timings[(timings["experiment"] == experiment) & (timings["size"] == SIZES[case])]
    return rows[is_vendor(rows)].sort_values("median_ms").reset_index(drop=True)


def best_vendor(timings: pd.DataFrame, case: str, precision: str, mode: str | None = None) -> pd.Series | None:
    """The fastest vendor path of matching precision on one case (see
    :func:`gpulab.baselines.fastest`): ``mode`` "eager", "graph" or None (either)."""
    rows = timings[(timings["size"] == SIZES[case]) & timings["experiment"].isin(["ladder", "graph"])]
    rows = rows[is_vendor(rows)]
    if "mode" not in rows.columns:          # a run recorded before the modes were labelled
        rows = rows.assign(mode=np.where(rows["experiment"] == "graph", "graph", "eager"))
    return fastest(rows, precision, mode=mode)


def vendor_lines(timings: pd.DataFrame, case: str, experiment: str = "ladder") -> pd.DataFrame:
    """The fastest vendor path per precision class (fp32 without tf32, tf32, fp16/bf16)
    among the rows of ``experiment``: the dashed lines of the ladder figures."""
    mode = "graph" if experiment == "graph" else ("eager" if case == "small" else None)
    picks = [best_vendor(timings, case, p, mode) for p in ("fp32", "tf32", "fp16")]
    return pd.DataFrame([p for p in picks if p is not None]).reset_index(drop=True)


def step_times(run, number: int):
    """One step's times on both cases (eager, and in a CUDA graph on the small
    case), with the speedups over step 1 and over the previous step."""
    out = []
    several = len(select(STEPS, number)) > 1
    notes = []
    for case, n in SIZES.items():
        table = ladder(run.timings, case)
        why = not_measured(run, case)
        if why:              # a case this GPU could not hold: one row saying so, the reason in the caption
            out.append({"case": case, "kernel": NOT_MEASURED})
            notes.append(why)
            continue
        first, previous = table["median_ms"].iloc[0], table["median_ms"].shift(1)[table["step"] == number]
        measured = run.timings[(run.timings["size"] == n) & (run.timings["step"] == number)]
        for step_ in select(STEPS, number):
            eager = measured[(measured["experiment"] == "ladder") & (measured["variant"] == step_.label)]
            if eager.empty:
                continue
            ms = eager["median_ms"].iloc[0]
            entry = {"case": case, "kernel": ", ".join(step_.kernels), "time (ms)": ms,
                     "vs step 1": first / ms, "vs previous step": previous.iloc[0] / ms if len(previous) else np.nan}
            if several:
                entry["on the ladder"] = "yes" if step_.label in set(table["variant"]) else "no (slower here)"
            graph = measured[(measured["experiment"] == "graph") & (measured["variant"] == step_.label)]
            if case == "small" and not graph.empty:
                entry["in a CUDA graph (ms)"] = graph["median_ms"].iloc[0]
            out.append(entry)
    table = pd.DataFrame(out)
    text = ("case", "kernel", "on the ladder")
    return (table.style.format({c: "{:.4g}" for c in table.columns if c not in text}, na_rep="")
            .hide(axis="index").set_caption("; ".join(notes + [run.caption])))


def tiles_per_block(run, step_: Step, case: str) -> float:
    """How many tiles (``vectors_per_block`` vectors) each block of ``step_``
    works through on ``case`` in ``run``: the grid is the run's SMs times the
    blocks per SM its resource table shows (persistent kernels), or one
    block per tile."""
    launch = step_.launches[0]
    tiles = -(-SIZES[case] // launch.vectors_per_block)
    if not launch.persistent:
        return 1.0
    resources = run.tables["resources"].set_index("variant")
    resident = int(run.meta["sms"]) * int(resources.loc[step_.label, "blocks_per_sm"])
    return tiles / min(tiles, resident)


def profile_run(run):
    """The run whose Nsight Compute figures the chapter shows: ``run`` itself,
    or, for a live run on a machine without a usable ``ncu``, the recorded one."""
    if "profile" in run.tables:
        return run
    return load_run(CHAPTER)


def profile_table(run) -> pd.DataFrame:
    """The Nsight Compute figures of :func:`profile_run` (large case)."""
    return profile_run(run).tables["profile"]


def profile_of(run, numbers):
    """The profiler's figures (large case) for the given steps, one row per
    kernel launch, captioned with the run they come from."""
    source = profile_run(run)
    table = source.tables["profile"]
    columns = ["step", "kernel", "duration_ns", "dram_bytes_read", "shared_load_bank_conflicts",
               "shared_store_bank_conflicts",
               "sectors_per_request", "achieved_occupancy_pct", "registers_per_thread"]
    shown = table[table["step"].isin(list(numbers))][[c for c in columns if c in table.columns]]
    why = not_measured(run, "large")
    note = ("" if source is run else f"this run has no profiler figures ({why}), so these are the recorded ones: "
            if why else "this run has no profiler figures (is ncu installed?), so these are the recorded ones: ")
    return (shown.style.format(precision=3, thousands=",").hide(axis="index")
            .set_caption(f"Nsight Compute, large case; {note}{source.caption}"))


def ladder_figure(run, case: str, experiment: str = "ladder", *, title: str, ax=None, caption: bool = True):
    """The speedup ladder of one case with the fastest vendor path per precision
    class as dashed lines (every path: :func:`vendor_figure`). When ``run`` is
    live, the recorded runs of the same steps (H100, H200) are marked beside
    each bar, so a step that is slower on the reader's GPU shows at once."""
    why = not_measured(run, case)
    if why:
        return _unmeasured_figure(title, why, run.caption if caption else None)
    others = {gpu: ladder(other.timings, case, experiment) for gpu, other in recorded_beside(run).items()}
    return plots.speedup_ladder(ladder(run.timings, case, experiment),
                                vendor=vendor_lines(run.timings, case, experiment), others=others,
                                title=title, ax=ax, caption=run.caption if caption else None)


def eager_vs_graph_figure(run, case: str = "small"):
    """One case's ladder timed both ways, eager launches and a CUDA graph, as
    pairs of bars per step (the fastest fp32 and fp16 vendor paths last): short labels and large
    type, so the figure reads at phone width as well as on a desktop."""

    eager, graph = ladder(run.timings, case), ladder(run.timings, case, "graph")
    names = [f"step {int(s):02d}" for s in eager["step"]]
    # Each step's fastest kernel each way: where a step has two (13, 14), eager launches and a
    # graph may favour different ones, so the pairs are matched by step, not by kernel.
    e_ms, g_ms = list(eager["median_ms"]), list(graph.set_index("step").loc[eager["step"], "median_ms"])
    for dtype in ("fp32", "fp16"):       # the fastest vendor path of each precision, each way
        eager_best, graph_best = best_vendor(run.timings, case, dtype, "eager"), best_vendor(run.timings, case, dtype, "graph")
        if eager_best is not None and graph_best is not None:
            names.append(f"vendor {dtype}")
            e_ms.append(eager_best["median_ms"])
            g_ms.append(graph_best["median_ms"])
    fig, ax = plt.subplots(figsize=(6.4, 0.42 * len(names) + 1.9))
    y = np.arange(len(names))[::-1]
    ax.barh(y + 0.2, np.array(e_ms) * 1e3, height=0.4, color="#A6BDDB", label="eager launches")
    ax.barh(y - 0.2, np.array(g_ms) * 1e3, height=0.4, color="#2B5C8A", label="in a CUDA graph")
    for yy, g in zip(y, g_ms):
        ax.text(g * 1e3, yy - 0.2, f" {g * 1e3:.0f}", va="center", fontsize=9, color="#2B5C8A")
    ax.set_yticks(y, names, fontsize=10)
    for tick, name in zip(ax.get_yticklabels(), names):
        if name.startswith("vendor"):
            tick.set_color(plots.VENDOR_COLOR)
    ax.set_xscale("log")
    plots._log_axis(ax.xaxis)
    ax.set_xlabel("time per inference (µs, median; numbers: in a graph)", fontsize=10)
    ax.legend(loc="lower right", fontsize=9.5, frameon=True)
    ax.set_xlim(min(g_ms) * 1e3 / 1.5, max(e_ms) * 1e3 * 1.6)
    return plots._finish(fig, ax, f"{case.capitalize()} case ({SIZES[case]:,} vectors): how much does a CUDA "
                         "graph save at each step?", run.caption)


def vendor_figure(run, case: str, *, title: str | None = None):
    """Every vendor path measured on one case (eager and in CUDA graphs), by
    precision class, with the fastest of each class marked."""
    rows = pd.concat([vendor(run.timings, case, "ladder"), vendor(run.timings, case, "graph")])
    title = title or f"Which vendor path is fastest? ({case} case, {SIZES[case]:,} vectors)"
    why = not_measured(run, case)
    if why:
        return _unmeasured_figure(title, why, run.caption)
    return plots.vendor_paths(rows, title=title, caption=run.caption)


def floor_ms(run, case: str, precision: str) -> dict:
    """The floor of one inference on this run's GPU: the FLOPs at the measured rate of
    the precision's units (FP32 CUDA cores for fp32, the fp16 tensor-core rate for
    reduced precision) or the bytes at the measured bandwidth, whichever is longer."""
    ceilings = ceilings_table(run.timings, run.gpu)
    key = "FP32 rate (GFLOP/s)" if precision == "fp32" else "fp16 tensor-core rate (GFLOP/s)"
    if key not in ceilings.index:
        key = "FP32 rate (GFLOP/s)"              # a run recorded before the fp16 rate was measured
    w = work(SIZES[case])
    return roofline_floors(w["flops"], w["bytes"], ceilings.loc[key, "measured"],
                           ceilings.loc["memory bandwidth (GB/s)", "measured"]) | {"rate": key}


def roofline_figure(run, case: str = "large"):
    """Every step of one case on the roofline: the measured FP32 roof, the
    datasheet's, and the tensor cores' measured fp16 matrix rate (dashed), the
    roof of the reduced-precision steps. All steps share one arithmetic
    intensity, so each point is labelled with its step number and the legend
    sits outside the plot."""
    ceilings = roofline.ceilings_table(run.timings, run.gpu)
    fp32, gbs = ceilings.loc["FP32 rate (GFLOP/s)", "measured"], ceilings.loc["memory bandwidth (GB/s)", "measured"]
    sheet = roofline.datasheet(run.gpu) or {}
    why = not_measured(run, case)
    shown = next((c for c in [case, *SIZES] if not not_measured(run, c)), case) if why else case
    points = roofline.rates(ladder(run.timings, shown))
    fig = plots.roofline(points, peak_gflops=fp32, peak_gbs=gbs, datasheet_gflops=sheet.get("fp32_tflops", 0) * 1e3,
                         datasheet_gbs=sheet.get("memory_gbs"),
                         caption=f"{why}; the {shown} case instead; {run.caption}" if why else run.caption,
                         title=f"How close is each step to the hardware's limits? ({shown} case)")
    ax = fig.axes[0]
    hgemm = roofline.rates(run.timings[(run.timings["experiment"] == "ceilings")
                                       & (run.timings["variant"] == "cuBLAS HGEMM (fp16)")])["gflops"]
    xs = np.logspace(0, 3.5, 100)
    if len(hgemm):
        ax.plot(xs, np.minimum(hgemm.iloc[0], xs * gbs), "k--", lw=1,
                label=f"fp16 tensor cores, measured (cuBLAS HGEMM): {hgemm.iloc[0] / 1e3:,.0f} TFLOP/s "
                      "(the roof of the fp16 steps)")
    for _, p in points.iterrows():
        ax.annotate(f"{int(p['step']):02d}", (p["intensity"], p["gflops"]), xytext=(6, -3),
                    textcoords="offset points", fontsize=7)
    ax.set_xlim(1, 10**3.5)
    ax.set_ylim(points["gflops"].min() / 3, None)
    plots.legend_beside(ax)
    return plots.resize(fig, plots.MAX_WIDTH_IN, 5.5)


def warm_cold(run, case: str = "small") -> pd.DataFrame | None:
    """Warm against cold L2 on one case: per kernel of the ladder and per vendor path,
    the eager time warm (``ladder``) and with L2 flushed between calls
    (``ladder_cold``), and a one-call CUDA graph warm and cold (``graph_cold``);
    None for a run recorded before the flush existed."""
    t = run.timings
    n = SIZES[case]
    if "ladder_cold" not in set(t["experiment"]):
        return None
    at = t[t["size"] == n]
    cold = at[at["experiment"] == "ladder_cold"].set_index("variant")["median_ms"]
    warm = at[at["experiment"] == "ladder"].set_index("variant")["median_ms"]
    graphs = at[at["experiment"] == "graph_cold"]
    g_warm = graphs[~graphs["l2_flushed"].astype(bool)].set_index("variant")["median_ms"]
    g_cold = graphs[graphs["l2_flushed"].astype(bool)].set_index("variant")["median_ms"]
    g_warm.index = g_warm.index.str.removesuffix(", CUDA graph")
    g_cold.index = g_cold.index.str.removesuffix(", CUDA graph")
    table = pd.DataFrame({"eager, warm (ms)": warm.reindex(cold.index), "eager, L2 flushed (ms)": cold,
                          "graph of 1 call, warm (ms)": g_warm.reindex(cold.index),
                          "graph of 1 call, L2 flushed (ms)": g_cold.reindex(cold.index)})
    table["flushed / warm (graph)"] = table["graph of 1 call, L2 flushed (ms)"] / table["graph of 1 call, warm (ms)"]
    return table.rename_axis("variant").reset_index()


def gpu_comparison(root=None):
    """Per step of the large case, the H200's recorded time over the H100's, against
    the roofline's prediction (:func:`gpulab.runs.gpu_comparison`); None until both
    GPUs' runs are recorded."""
    return compare_gpus(CHAPTER, lambda run: ladder(run.timings, "large"), root=root,
                        title="Does each step gain what the roofline predicts on the H200? (large case)")


#: The report's RTX 3080 Ti times on the large case (ms, from its tables), for the steps
#: where that GPU was faster than the lab's H100 versions.
REPORT_3080TI_LARGE_MS = {7: 8.632, 8: 6.029, 13: 3.932}


def report_gpu_table(run) -> pd.DataFrame:
    """The steps the report's RTX 3080 Ti ran faster than this run's GPU (large case):
    both times, and this run's registers, warps per SM and occupancy for the step."""
    table = ladder(run.timings, "large").set_index("step")
    table = table.reindex(sorted(set(table.index) | set(REPORT_3080TI_LARGE_MS)))   # NaN: large case not measured
    resources = run.tables.get("resources", pd.DataFrame()).set_index("variant") if "resources" in run.tables \
        else pd.DataFrame()
    rows = []
    for number, report_ms in REPORT_3080TI_LARGE_MS.items():
        ours = table.loc[number]
        res = resources.loc[ours["variant"]] if ours["variant"] in resources.index else {}
        kernel = ours["variant"] if isinstance(ours["variant"], str) else NOT_MEASURED
        rows.append({"step": number, "kernel": kernel, "RTX 3080 Ti, report (ms)": report_ms,
                     f"{run.gpu} (ms)": ours["median_ms"], "ratio": ours["median_ms"] / report_ms,
                     "registers": res.get("registers", np.nan), "warps per SM": res.get("warps_per_sm", np.nan),
                     "occupancy": res.get("occupancy", np.nan)})
    return pd.DataFrame(rows)


#: The chapter's targets for the best kernels, each judged against the fastest vendor path of
#: matching precision measured in the same run (issue 14): the large case against any mode
#: (eager or a CUDA graph: launch overhead is negligible there), the small case in a graph
#: against the vendor paths in graphs.
TARGETS = [
    # what, case, our kernels' precision, how ours are timed, vendor mode, max ms
    ("large, fp32 arithmetic", "large", "fp32", "ladder", None, 1.8),
    ("large, reduced precision", "large", "fp16", "ladder", None, 0.58),
    ("small, fp32, in a CUDA graph", "small", "fp32", "graph", "graph", 0.02),
    ("small, reduced precision, in a CUDA graph", "small", "fp16", "graph", "graph", 0.006),
]


def targets(run) -> pd.DataFrame:
    """The best kernel of the ladder for each target, its time, the fastest vendor
    path of matching precision and its time, the floor of that precision (the
    fp16 tensor-core rate for reduced precision), and whether the target was met:
    at most the target time and faster than the vendor path."""
    rows = []
    for what, case, precision, experiment, mode, max_ms in TARGETS:
        table = ladder(run.timings, case, experiment)
        why = not_measured(run, case)
        if why:
            rows.append({"target": what, "best kernel": why, "target (ms)": max_ms, "met": NOT_MEASURED})
            continue
        ours = table[table["precision"] == precision].sort_values("median_ms").iloc[0]
        best = best_vendor(run.timings, case, precision, mode)
        blas_ms = best["median_ms"] if best is not None else np.nan
        floor = floor_ms(run, case, precision)
        speedup = blas_ms / ours["median_ms"]
        in_time, time_margin = predictions.target_verdict(ours["median_ms"], at_most=max_ms, unit="ms")
        faster, vendor_margin = predictions.target_verdict(speedup, at_least=1.0, unit="x",
                                                           bound="1x (the vendor path's time)")
        rows.append({"target": what, "best kernel": ours["variant"], "time (ms)": ours["median_ms"],
                     "target (ms)": max_ms, "fastest vendor path": best["variant"] if best is not None else "none",
                     "vendor (ms)": blas_ms, "speedup": speedup, "floor (ms)": floor["floor_ms"],
                     "x floor": ours["median_ms"] / floor["floor_ms"],
                     "met": in_time and faster, "margin": f"time {time_margin}; speedup {vendor_margin}"})
    return pd.DataFrame(rows, columns=["target", "best kernel", "time (ms)", "target (ms)", "fastest vendor path",
                                       "vendor (ms)", "speedup", "floor (ms)", "x floor", "met", "margin"])


def prediction_table(run, case: str = "large"):
    """Each step's prediction (from its kernel file) against ``run``: times of ``case``, claims
    about the other case judged on it."""
    measured = pd.concat([ladder(run.timings, c)[["step", "median_ms"]].assign(case=c) for c in SIZES])
    measured["step"] = measured["step"].astype(int)
    return predictions.table(predictions.ladder_steps(STEPS, key=lambda s: s.ordinal), measured, PREDICTED,
                             main_case=case)
