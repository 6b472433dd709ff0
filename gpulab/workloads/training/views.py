"""Reading the recorded run: the tables and figures the notebook shows.

Every function takes a :class:`gpulab.runs.RecordedRun` of this chapter (live
or loaded) and returns a DataFrame or a matplotlib Figure captioned with the
run's GPU, date and software.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import baselines as vendor_mod
from ...runs import RecordedRun
from . import data
from .steps import STEPS, step

MAIN_BATCH = 1024


def _table(run: RecordedRun, name: str) -> pd.DataFrame:
    """A side table of the run, or a clear error naming what the run lacks."""
    from ...errors import RecordedRunError
    if name not in run.tables:
        problems = run.tables.get("problems")
        why = "" if problems is None else " Its problems table says:\n" + problems.to_string(index=False)
        raise RecordedRunError(f"the {run.chapter} run on {run.gpu} has no '{name}' table.{why}")
    return run.tables[name]
#: The issue's targets (batch 1,024, time per training step).
TARGETS = [
    # what, our steps (numbers), PyTorch path to beat, least speedup
    ("best dense fp32 step vs PyTorch eager fp32 (dense)", (1, 2, 3, 4, 5, 6, 7),
     "PyTorch eager fp32, dense X", 2.0),
    ("best dense fp32 step vs PyTorch's captured step (dense)", (1, 2, 3, 4, 5, 6, 7),
     "PyTorch eager fp32, dense X, CUDA graph", 1.0),
    ("best step overall vs PyTorch eager fp32 (dense)", tuple(s.number for s in STEPS),
     "PyTorch eager fp32, dense X", 10.0),
    ("best step overall vs PyTorch's fastest path on the same data", tuple(s.number for s in STEPS),
     None, 3.0),
]


def ladder(run: RecordedRun, batch: int = MAIN_BATCH) -> pd.DataFrame:
    """Every step at one batch size: eager and graph times, the step's own time
    (graph for step 10, eager otherwise), and its speedup over step 1 and the previous step."""
    rows = run.experiment("ladder")
    rows = rows[rows["size"] == batch]
    out = []
    for s in STEPS:
        mine = rows[rows["variant"] == s.label]
        if mine.empty:
            continue
        eager = mine.loc[mine["mode"] == "eager", "median_ms"]
        graph = mine.loc[mine["mode"] == "graph", "median_ms"]
        own = graph.iloc[0] if s.graph else eager.iloc[0]
        out.append({"step": s.number, "variant": s.label, "precision": s.precision, "input": s.input,
                    "kernels": int(mine["kernels"].iloc[0]), "eager (ms)": eager.iloc[0] if len(eager) else np.nan,
                    "in a CUDA graph (ms)": graph.iloc[0] if len(graph) else np.nan, "median_ms": own,
                    "q1_ms": mine.loc[mine["median_ms"] == own, "q1_ms"].iloc[0],
                    "q3_ms": mine.loc[mine["median_ms"] == own, "q3_ms"].iloc[0]})
    table = pd.DataFrame(out)
    table["vs step 1"] = table["median_ms"].iloc[0] / table["median_ms"]
    table["vs previous"] = table["median_ms"].shift(1) / table["median_ms"]
    return table


def vendor(run: RecordedRun, batch: int = MAIN_BATCH) -> pd.DataFrame:
    """PyTorch's paths at one batch size (eager and in a CUDA graph)."""
    rows = run.timings[(run.timings["experiment"] == "vendor") & (run.timings["size"] == batch)]
    return rows.sort_values("median_ms").reset_index(drop=True)


def step_times(run: RecordedRun, number: int) -> pd.DataFrame:
    """One step at every batch size: time per SGD step (eager, graph) and per
    epoch (the 40,960 training documents), styled with the run's caption."""
    s = step(number)
    rows = run.experiment("ladder")
    rows = rows[rows["variant"] == s.label]
    table = rows.pivot_table(index="size", columns="mode", values="median_ms").reset_index()
    table = table.rename(columns={"size": "batch", "eager": "step, eager (ms)", "graph": "step, CUDA graph (ms)"})
    best = table[[c for c in ("step, eager (ms)", "step, CUDA graph (ms)") if c in table]].min(axis=1)
    table["epoch, fastest (ms)"] = best * (data.TRAIN_DOCS // table["batch"])
    table["documents per second (millions)"] = table["batch"] / best / 1e3
    return (table.style.format({c: "{:.4g}" for c in table.columns if c != "batch"}, na_rep="")
            .hide(axis="index").set_caption(run.caption))


def epoch_times(run: RecordedRun) -> pd.DataFrame:
    """Time per epoch for every step and batch size (fastest of eager and graph)."""
    rows = run.experiment("ladder")
    best = rows.groupby(["variant", "size"], sort=False)["median_ms"].min().reset_index()
    best["epoch_ms"] = best["median_ms"] * (data.TRAIN_DOCS // best["size"])
    return best


def scaling_figure(run: RecordedRun):
    """Time per epoch against batch size, one line per step."""
    from ... import plots
    rows = epoch_times(run).rename(columns={"size": "batch"})
    return plots.scaling(rows, x="batch", y="epoch_ms", xlabel="batch size (documents per SGD step)",
                         ylabel="time per epoch (ms, 40,960 documents)", caption=run.caption,
                         title="How long does an epoch take, for each step and batch size?")


def ladder_figure(run: RecordedRun, batch: int = MAIN_BATCH):
    """The ladder at one batch size, with PyTorch's paths as dashed lines."""
    from ... import plots
    table = ladder(run, batch)
    v = vendor(run, batch)
    return plots.speedup_ladder(table, vendor=v[["variant", "median_ms"]], caption=run.caption,
                                title=f"How long does one SGD step take at batch {batch:,}?")


def breakdown(run: RecordedRun, number: int) -> pd.DataFrame:
    """Each kernel of one step at batch 1,024 (the report's nvprof table)."""
    rows = run.experiment("breakdown")
    rows = rows[rows["step"] == number].sort_values("order")
    total = rows["median_ms"].sum()
    table = rows[["op", "kernel", "stream", "median_ms"]].assign(share=rows["median_ms"] / total)
    return (table.style.format({"median_ms": "{:.4f}", "share": "{:.1%}"}).hide(axis="index")
            .set_caption(f"kernels of step {number} at batch {MAIN_BATCH:,}, timed inside the running step; "
                         + run.caption))


def breakdown_figure(run: RecordedRun, numbers=(1, 6, 7, 9)):
    """Where the time of a step goes, kernel by kernel, for a few steps."""
    import matplotlib.pyplot as plt
    from ... import plots
    rows = run.experiment("breakdown")
    fig, axes = plt.subplots(1, len(numbers), figsize=(4.2 * len(numbers), 5.5))
    for ax, n in zip(np.atleast_1d(axes), numbers):
        r = rows[rows["step"] == n].sort_values("median_ms").tail(8)
        ax.barh(r["op"], r["median_ms"], color="#DD8452")
        ax.set_xlabel("ms per step (median)")
        ax.set_title(f"step {n}", loc="left", fontsize=10)
        ax.tick_params(axis="y", labelsize=7)
    return plots._finish(fig, np.atleast_1d(axes)[0], "Which kernels take the time? (batch 1,024; the 8 largest "
                         "per step)", run.caption, whole_figure=True)


def timeline_figure(run: RecordedRun):
    """Steps 2 and 3 as timelines: the same kernels, on one stream and on three."""
    import matplotlib.pyplot as plt
    from ... import timeline
    t = _table(run, "timeline")
    fig, axes = plt.subplots(2, 1, figsize=(10, 5.2), sharex=True)
    for ax, n in zip(axes, (2, 3)):
        rows = t[t["step"] == n][timeline.COLUMNS]
        timeline.plot(rows, ax=ax, title=f"step {n}: {'one stream' if n == 2 else 'three streams'}")
    fig.text(0.01, 0.005, run.caption, fontsize=7.5, color="#555555")
    return fig


def overlap(run: RecordedRun) -> pd.DataFrame:
    """Steps 2 and 3 from their timelines: wall time, and the kernels' busy time."""
    from ... import timeline
    t = _table(run, "timeline")
    out = []
    for n in (2, 3):
        rows = t[t["step"] == n]
        out.append({"step": n, "wall (ms)": rows["end_ms"].max() - rows["start_ms"].min(),
                    "sum of kernel times (ms)": float((rows["end_ms"] - rows["start_ms"]).sum()),
                    "time some kernel ran (ms)": timeline.busy_ms(rows[timeline.COLUMNS])})
    return pd.DataFrame(out)


def sweep_table(run: RecordedRun) -> pd.DataFrame:
    return _table(run, "sweep")


def sweep_figure(run: RecordedRun):
    """The batch size x block shape sweep: test accuracy per point, our bounds
    test and the report's side by side, broken points marked."""
    import matplotlib.pyplot as plt
    from ... import plots
    sw = _table(run, "sweep")
    guards = list(dict.fromkeys(sw["guard"]))
    fig, axes = plt.subplots(1, len(guards), figsize=(7 * len(guards), 4.6))
    for ax, guard in zip(np.atleast_1d(axes), guards):
        part = sw[sw["guard"] == guard]
        table = part.pivot_table(index="block", columns="batch", values="test_accuracy", sort=False)
        broken = part.pivot_table(index="block", columns="batch", values="broken", sort=False, aggfunc="max")
        image = ax.imshow(table.to_numpy(dtype=float), cmap="viridis", vmin=0, vmax=1, aspect="auto")
        ax.grid(False)
        ax.set_xticks(range(table.shape[1]), table.columns)
        ax.set_yticks(range(table.shape[0]), table.index)
        ax.set_xlabel("batch size")
        ax.set_ylabel("block (x by y threads)")
        for (i, j), v in np.ndenumerate(table.to_numpy(dtype=float)):
            bad = bool(broken.to_numpy()[i, j])
            ax.text(j, i, ("BROKEN\n" if bad else "") + f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="red" if bad else "white", fontweight="bold" if bad else "normal")
        ax.set_title(f"{guard} bounds test", loc="left", fontsize=10)
        fig.colorbar(image, ax=ax, label="test accuracy after the same documents")
    return plots._finish(fig, np.atleast_1d(axes)[0], "Which launch configurations train, and which silently "
                         "break training? (step 6's kernels)", run.caption, whole_figure=True)


def curves(run: RecordedRun) -> pd.DataFrame:
    return _table(run, "curves")


def bayes(run: RecordedRun) -> dict:
    b = _table(run, "bayes").iloc[0]
    return {"accuracy": float(b["bayes_accuracy"]), "standard_error": float(b["standard_error"]),
            "on_test_set": float(b["bayes_on_test_set"])}


def accuracy_table(run: RecordedRun) -> pd.DataFrame:
    """Final test accuracy of each training run, against the Bayes-optimal accuracy."""
    c = _table(run, "curves")
    final = c[c["epoch"] == c["epoch"].max()].groupby("variant", sort=False)["test_accuracy"].first()
    b = bayes(run)
    table = final.rename("final test accuracy").to_frame()
    table["of Bayes-optimal"] = table["final test accuracy"] / b["accuracy"]
    torch = [v for v in table.index if v.startswith("PyTorch")]
    if torch:
        table["of the fp32 reference (PyTorch)"] = table["final test accuracy"] / table.loc[torch[0], "final test accuracy"]
    return table


def curves_figure(run: RecordedRun):
    """Loss per SGD step and test accuracy per epoch, against the Bayes-optimal accuracy."""
    import matplotlib.pyplot as plt
    from ... import plots
    c = _table(run, "curves")
    b = bayes(run)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.6))
    for name, g in c.groupby("variant", sort=False):
        per_epoch = g.groupby("epoch")["loss"].mean()
        ax1.plot(per_epoch.index, per_epoch.values, marker="o", ms=3, label=name)
        acc = g.groupby("epoch")["test_accuracy"].first()
        ax2.plot(acc.index, acc.values, marker="o", ms=3, label=name)
    ax2.axhline(b["accuracy"], color="black", ls="--", lw=1, label=f"Bayes-optimal: {b['accuracy']:.3f}")
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("mean training loss over the epoch")
    ax1.set_yscale("log")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("test accuracy (8,192 documents)")
    ax2.legend(fontsize=7.5, loc="lower right")
    return plots._finish(fig, ax1, "Does each step train the network as well, and how close does it get to the "
                         "best possible accuracy?", run.caption, whole_figure=True)


def targets(run: RecordedRun) -> pd.DataFrame:
    """The issue's targets at batch 1,024, each against PyTorch measured in the same run."""
    table = ladder(run, MAIN_BATCH)
    v = vendor(run, MAIN_BATCH)
    acc = accuracy_table(run) if "curves" in run.tables else None
    out = []
    for what, numbers, baseline, least in TARGETS:
        ours = table[table["step"].isin(numbers)].sort_values("median_ms").iloc[0]
        if baseline is None:
            row = vendor_mod.fastest(v, "fp32")
            baseline, base_ms = row["variant"], row["median_ms"]
        else:
            match = v[v["variant"] == baseline]
            base_ms = match["median_ms"].iloc[0] if len(match) else np.nan
        speedup = base_ms / ours["median_ms"]
        entry = {"target": what, "our step": ours["variant"], "ours (ms)": ours["median_ms"],
                 "PyTorch path": baseline, "PyTorch (ms)": base_ms, "speedup": speedup,
                 "target speedup": least, "met": bool(speedup >= least)}
        out.append(entry)
    frame = pd.DataFrame(out)
    if acc is not None:
        best = frame.loc[2, "our step"]
        if best not in acc.index:      # the record trains steps 7-10 to convergence: the fastest of those
            trained = table[table["variant"].isin(acc.index)].sort_values("median_ms")
            best = trained["variant"].iloc[0] if len(trained) else best
        ref = [i for i in acc.index if i.startswith("PyTorch")]
        if best in acc.index and ref:
            ratio = acc.loc[best, "final test accuracy"] / acc.loc[ref[0], "final test accuracy"]
            frame = pd.concat([frame, pd.DataFrame([{
                "target": "best step overall: final accuracy of the fp32 reference's", "our step": best,
                "ours (ms)": np.nan, "PyTorch path": ref[0], "PyTorch (ms)": np.nan, "speedup": ratio,
                "target speedup": 0.98, "met": bool(ratio >= 0.98)}])], ignore_index=True)
    return frame


def roofline_figure(run: RecordedRun):
    """Every step at batch 1,024 on the roofline (the dense steps' 17 GFLOP; the
    sparse steps' FLOPs are the gather's and scatter's)."""
    from ... import plots, roofline
    ceilings = roofline.ceilings_table(run.timings, run.gpu)
    fp32, gbs = ceilings.loc["FP32 rate (GFLOP/s)", "measured"], ceilings.loc["memory bandwidth (GB/s)", "measured"]
    rows = run.experiment("ladder")
    rows = rows[rows["size"] == MAIN_BATCH]
    best = rows.loc[rows.groupby("variant", sort=False)["median_ms"].idxmin()]
    points = roofline.rates(best)
    sheet = roofline.datasheet(run.gpu) or {}
    fig = plots.roofline(points, peak_gflops=fp32, peak_gbs=gbs, caption=run.caption,
                         datasheet_gflops=sheet.get("fp32_tflops", 0) * 1e3, datasheet_gbs=sheet.get("memory_gbs"),
                         title="How close is each step to the hardware's limits? (batch 1,024)")
    ax = fig.axes[0]
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.set_size_inches(11, 5)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


# ----------------------------------------------------------------- loading, with or without a recorded run
def load():
    """The chapter's run: measured now on a GPU, else the recorded one; None
    (with the reason printed) where neither exists yet."""
    from ...errors import RecordedRunError
    from ...runs import live_or_recorded
    from . import benchmark_all
    try:
        return live_or_recorded("training", benchmark_all)
    except RecordedRunError as exc:
        print(f"No run of this chapter to show: {exc}")
        return None


def show(fn, run, *args, **kwargs):
    """``fn(run, ...)``, or a note where there is no run to read or the run
    lacks the part ``fn`` reads (an experiment that failed or ran out of time)."""
    from ...errors import RecordedRunError
    if run is None:
        print("(no recorded run of this chapter yet: the timings and figures appear once one is recorded)")
        return None
    try:
        return fn(run, *args, **kwargs)
    except RecordedRunError as exc:
        print(f"(not in this run: {exc})")
        return None


def numbers(run) -> dict:
    """The measured numbers the chapter's prose quotes, formatted, by name
    (a dash for each where there is no run)."""
    out = {}
    if run is not None:
        table = ladder(run, MAIN_BATCH).set_index("step")
        for n, row in table.iterrows():
            out[f"t{n:02d}"] = f"{row['median_ms']:.3g}"
            out[f"x{n:02d}"] = f"{row['vs previous']:.2f}" if row["vs previous"] == row["vs previous"] else "-"
        v = vendor(run, MAIN_BATCH).set_index("variant")["median_ms"]
        for key, label in (("torch_eager", "PyTorch eager fp32, dense X"),
                           ("torch_graph", "PyTorch eager fp32, dense X, CUDA graph"),
                           ("torch_bag", "PyTorch eager fp32, sparse first layer (embedding_bag)"),
                           ("torch_bag_graph", "PyTorch eager fp32, sparse first layer (embedding_bag), CUDA graph")):
            out[key] = f"{v[label]:.3g}" if label in v else "-"
        if "curves" in run.tables:
            acc = accuracy_table(run)["final test accuracy"]
            for key, n in (("acc07", 7), ("acc08", 8), ("acc10", 10)):
                label = step(n).label
                out[key] = f"{acc[label]:.1%}" if label in acc else "-"
            ref = [i for i in acc.index if i.startswith("PyTorch")]
            out["acc_torch"] = f"{acc[ref[0]]:.1%}" if ref else "-"
        if "sweep" in run.tables:
            sw = _table(run, "sweep")
            for guard, key in (("ours", "broken_ours"), ("report's", "broken_report")):
                part = sw[sw["guard"] == guard]
                out[key] = f"{int(part['broken'].sum())} of {len(part)}"
    keys = [f"{p}{n:02d}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10) for p in ("t", "x")] + [
        "torch_eager", "torch_graph", "torch_bag", "torch_bag_graph", "acc07", "acc08", "acc10", "acc_torch",
        "broken_ours", "broken_report"]
    return {k: out.get(k, "-") for k in keys}


def profile(run: RecordedRun) -> pd.DataFrame:
    """Nsight Compute's figures for the kernels of steps 6-9 at batch 1,024: time,
    FMA-pipe instructions x 32 lanes x 2 FLOPs (the FP32 rate reached, an upper estimate:
    the pipe also runs FMUL, FADD and integer multiply-adds),
    occupancy, registers, device-memory reads, bank conflicts, sectors per request."""
    if "profile" not in run.tables:
        print("this run has no profiler figures (Nsight Compute's ncu was not available, or time ran out)")
        return pd.DataFrame()
    t = run.tables["profile"].copy()
    if "fma_pipe_instructions" in t and "duration_ns" in t:
        t["FMA pipe as FFMA (TFLOP/s)"] = t["fma_pipe_instructions"] * 32 * 2 / t["duration_ns"] / 1e3
    keep = ["step", "op", "kernel", "duration_ns", "FMA pipe as FFMA (TFLOP/s)", "achieved_occupancy_pct",
            "registers_per_thread", "dram_bytes_read", "shared_load_bank_conflicts", "sectors_per_request"]
    return t[[c for c in keep if c in t.columns]]
