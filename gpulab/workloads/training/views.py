"""Reading the recorded run: the tables and figures the notebook shows.

Every function takes a :class:`gpulab.runs.RecordedRun` of this chapter (live
or loaded) and returns a DataFrame or a matplotlib Figure captioned with the
run's GPU, date and software.
"""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import NullFormatter

from ... import baselines as vendor_mod
from ... import plots, predictions, roofline, runs, timeline
from ...errors import RecordedRunError
from ...ladder import find
from ...runs import RecordedRun
from . import data
from .record import benchmark_all
from .problem import Dims
from .steps import PREDICTED, STEPS

MAIN_BATCH = 1024


def _table(run: RecordedRun, name: str) -> pd.DataFrame:
    """A side table of the run, or a clear error naming what the run lacks."""
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
    ("best step overall vs PyTorch eager fp32 (dense)", tuple(s.ordinal for s in STEPS),
     "PyTorch eager fp32, dense X", 10.0),
    ("best step overall vs PyTorch's fastest path on the same data", tuple(s.ordinal for s in STEPS),
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
        out.append({"step": s.ordinal, "variant": s.label, "precision": s.precision, "input": s.input,
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


def vendor_table(run: RecordedRun, batch: int = MAIN_BATCH):
    """PyTorch's paths at one batch size, fastest first, styled: time per step,
    and for the ``torch.compile`` paths the seconds their compilation took (not in
    their time)."""
    v = vendor(run, batch)
    keep = [c for c in ("variant", "library", "mode", "median_ms", "q1_ms", "q3_ms", "rel_error", "compile_s")
            if c in v.columns]
    table = v[keep].rename(columns={"compile_s": "compile + warm-up (s)"})
    return (table.style.format(precision=4, na_rep="").hide(axis="index")
            .set_caption(f"PyTorch at batch {batch:,}, checked then timed; " + run.caption))


def vendor_skipped(run: RecordedRun) -> pd.DataFrame:
    """The PyTorch paths the run did not time, with the reason (a capture PyTorch
    refused, a missing library, a check that failed)."""
    if "vendor_skipped" not in run.tables:
        return pd.DataFrame(columns=["variant", "reason"])
    t = run.tables["vendor_skipped"]
    return t[[c for c in ("variant", "library", "reason") if c in t.columns]]


def step_times(run: RecordedRun, number: int) -> pd.DataFrame:
    """One step at every batch size, in the mode the ladder times it in (captured in a CUDA graph
    for step 10, eager before it): time per SGD step and per epoch (the 40,960 training documents),
    styled with the run's caption. The run also timed steps 1-9 captured; :func:`graph_gain` shows
    those at step 10, the step about graphs, rather than in every table before it."""
    s = find(STEPS, number)
    mode = "graph" if s.graph else "eager"
    rows = run.experiment("ladder")
    rows = rows[(rows["variant"] == s.label) & (rows["mode"] == mode)]
    column = "step, CUDA graph (ms)" if s.graph else "step, eager (ms)"
    table = rows[["size", "median_ms"]].rename(columns={"size": "batch", "median_ms": column})
    table = table.sort_values("batch").reset_index(drop=True)
    table["epoch (ms)"] = table[column] * (data.TRAIN_DOCS // table["batch"])
    table["documents per second (millions)"] = table["batch"] / table[column] / 1e3
    return (table.style.format({c: "{:.4g}" for c in table.columns if c != "batch"}, na_rep="")
            .hide(axis="index").set_caption(run.caption))


def graph_gain(run: RecordedRun, batch: int = MAIN_BATCH) -> pd.DataFrame:
    """What capturing each step in a CUDA graph saves at one batch size: eager and captured time,
    the time saved (µs) and its share of the eager step. The record times a step captured only when
    its eager step takes under 5 ms (steps 3 and 4 on the H100 did not): those are left out."""
    table = ladder(run, batch)
    table = table[table["eager (ms)"].notna() & table["in a CUDA graph (ms)"].notna()]
    saved = table["eager (ms)"] - table["in a CUDA graph (ms)"]
    return pd.DataFrame({"step": table["step"], "variant": table["variant"], "kernels": table["kernels"],
                         "eager (ms)": table["eager (ms)"], "in a CUDA graph (ms)": table["in a CUDA graph (ms)"],
                         "saved (µs)": 1e3 * saved, "saved, share of the step": saved / table["eager (ms)"]}
                        ).reset_index(drop=True)


def graph_gain_numbers(run) -> dict:
    """The graph's saving for the first and the last step it captured, its range over the steps,
    and the steps not timed captured, for the prose ("-" without a run)."""
    keys = ("graph_first_us", "graph_first_pct", "graph_last_us", "graph_last_pct", "graph_last_step",
            "graph_min_us", "graph_max_us", "graph_not_timed", "graph_first_text", "graph_last_text")
    if run is None:
        return dict.fromkeys(keys, "-")
    gain, every = graph_gain(run), ladder(run)
    first, last = gain.iloc[0], gain.iloc[-1]
    skipped = [int(n) for n in every["step"] if n < last["step"] and n not in set(gain["step"])]
    return {"graph_first_text": _saving_text(first), "graph_last_text": _saving_text(last),"graph_first_us": f"{first['saved (µs)']:.0f}", "graph_first_pct": f"{100 * first['saved, share of the step']:.1f}",
            "graph_last_us": f"{last['saved (µs)']:.0f}", "graph_last_pct": f"{100 * last['saved, share of the step']:.0f}",
            "graph_last_step": int(last["step"]), "graph_min_us": f"{gain['saved (µs)'].min():.0f}",
            "graph_max_us": f"{gain['saved (µs)'].max():.0f}",
            "graph_not_timed": (" and ".join(", ".join(map(str, skipped)).rsplit(", ", 1)) if skipped else "none")}


def _saving_text(row) -> str:
    """What capturing one step in a graph did, in words that hold whichever way it went (a live run
    on a busy GPU can time the captured step slower than the eager one)."""
    us, share, eager_ms = row["saved (µs)"], 100 * row["saved, share of the step"], row["eager (ms)"]
    step = f"{eager_ms:.3g} ms" if eager_ms >= 1 else f"{1e3 * eager_ms:.0f} µs"
    if us >= 0:
        return f"saves {us:.0f} µs, {share:.1f}% of its {step}"
    return f"made it {-us:.0f} µs slower in this run ({-share:.1f}% of its {step})"


def graph_gain_figure(run: RecordedRun, batch: int = MAIN_BATCH):
    """:func:`graph_gain` drawn: the share of each step that the graph saves, each bar labelled
    with the microseconds saved."""
    gain = graph_gain(run, batch)
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(gain) + 1.6))
    labels = [f"{textwrap.shorten(v, 40, placeholder='...')} ({k} kernels)" for v, k in zip(gain["variant"], gain["kernels"])]
    y = np.arange(len(gain))
    ax.barh(y, 100 * gain["saved, share of the step"], color="#4C72B0", alpha=0.85)
    for yi, share, us, eager in zip(y, gain["saved, share of the step"], gain["saved (µs)"], gain["eager (ms)"]):
        ax.text(100 * share, yi, f"  {us:.0f} µs of {1e3 * eager:,.0f} µs", va="center", fontsize=9)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    shares = 100 * gain["saved, share of the step"]
    ax.set_xlim(min(0.0, 1.6 * shares.min()), max(1.0, 1.6 * shares.max()))   # a live run can save < 0
    ax.set_xlabel("time the graph saves, % of the eager step")
    fig.suptitle(f"Which steps does capturing them in a CUDA graph speed up, and by how much? (batch {batch:,})",
                 x=0.01, ha="left", fontweight="bold", fontsize=11)
    fig.text(0.01, 0.0, run.caption, fontsize=7.5, color="#555555", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def epoch_times(run: RecordedRun) -> pd.DataFrame:
    """Time per epoch for every step and batch size (fastest of eager and graph)."""
    rows = run.experiment("ladder")
    best = rows.groupby(["variant", "size"], sort=False)["median_ms"].min().reset_index()
    best["epoch_ms"] = best["median_ms"] * (data.TRAIN_DOCS // best["size"])
    return best


#: The steps the epoch-time figure draws: the first, the report's last, our best dense fp32, and
#: the last (ten lines hide each other; each step's own table has its times at every batch).
SCALING_STEPS = (1, 6, 7, 10)


def scaling_figure(run: RecordedRun, steps=SCALING_STEPS):
    """Time per epoch against batch size for a few steps (:data:`SCALING_STEPS`), and PyTorch's
    fastest path where the run timed it at several batch sizes."""
    rows = epoch_times(run).rename(columns={"size": "batch"})
    labels = [find(STEPS, n).label for n in steps]
    rows = rows[rows["variant"].isin(labels)]
    rows = rows.assign(order=rows["variant"].map(labels.index)).sort_values("order").drop(columns="order")
    v = run.timings[run.timings["experiment"] == "vendor"]
    if len(v) and v["size"].nunique() > 1:
        best = v.loc[v[v["size"] == MAIN_BATCH]["median_ms"].idxmin(), "variant"]
        torch = v[v["variant"] == best].groupby("size")["median_ms"].min().reset_index()
        torch = torch.assign(variant=best, epoch_ms=torch["median_ms"] * (data.TRAIN_DOCS // torch["size"]))
        rows = pd.concat([rows, torch.rename(columns={"size": "batch"})], ignore_index=True)
    shown = ", ".join(str(n) for n in steps)
    fig = plots.scaling(rows, x="batch", y="epoch_ms", xlabel="batch size (documents per SGD step)",
                         ylabel="time per epoch (ms, 40,960 documents)", caption=run.caption,
                         title=f"How does the batch size change the time of an epoch? (steps {shown}; each "
                               "step's table above has its times at every batch size)")
    # a tick at every batch size measured (a log axis from 32 to 2,048 would label only 100 and 1,000)
    sizes = sorted(int(b) for b in rows["batch"].unique())
    fig.axes[0].set_xticks(sizes, [f"{b:,}" for b in sizes])
    fig.axes[0].xaxis.set_minor_formatter(NullFormatter())
    return fig


def ladder_figure(run: RecordedRun, batch: int = MAIN_BATCH):
    """The ladder at one batch size, with PyTorch's fastest eager path and fastest path in a CUDA
    graph as reference lines (every path: :func:`vendor_table`)."""
    table = ladder(run, batch)
    v = vendor(run, batch)
    # "PyTorch eager fp32, ..., CUDA graph" names the eager code, captured: in a legend beside
    # an eager line, "eager ... CUDA graph" reads as a contradiction
    graph = v["mode"] == "graph"
    v = v.assign(variant=v["variant"].where(~graph, v["variant"].str.replace("PyTorch eager ", "PyTorch ",
                                                                             regex=False)))
    return plots.speedup_ladder(table, vendor=v[["variant", "median_ms", "precision", "mode"]],
                                caption=run.caption,
                                title=f"How long does one SGD step take at batch {batch:,}, "
                                      "against PyTorch's fastest paths?")


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
    rows = run.experiment("breakdown")
    # Two panels a row, about 1,050 pixels wide: four in a row were shown at 40% on a book page,
    # their kernel names at 4 pixels.
    cols = min(2, len(numbers))
    nrows = -(-len(numbers) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(plots.MAX_WIDTH_IN, 3.3 * nrows), squeeze=False)
    for ax, n in zip(axes.ravel(), numbers):
        r = rows[rows["step"] == n].sort_values("median_ms").tail(6)
        ax.barh([textwrap.fill(op, 28) for op in r["op"]], r["median_ms"], color="#DD8452")
        ax.set_xlabel("ms per step (median)")
        ax.set_title(f"step {n}", loc="left", fontsize=10)
        ax.tick_params(axis="y", labelsize=8.5)
    for ax in axes.ravel()[len(numbers):]:
        ax.axis("off")
    return plots._finish(fig, axes.ravel()[0], "Which kernels take the time? (batch 1,024; the 6 largest "
                         "per step)", run.caption, whole_figure=True)


def timeline_figure(run: RecordedRun):
    """Steps 2 and 3 as timelines: the same kernels, on one stream and on three."""
    t = _table(run, "timeline")
    fig, axes = plt.subplots(2, 1, figsize=(plots.MAX_WIDTH_IN, 5.2), sharex=True)
    for ax, n in zip(axes, (2, 3)):
        rows = t[t["step"] == n][timeline.COLUMNS]
        timeline.plot(rows, ax=ax, title=f"step {n}: {'one stream' if n == 2 else 'three streams'}")
    text, height = plots.caption_text(fig, run.caption)
    fig.text(0.01, 0.005, text, fontsize=7.5, color="#555555")
    fig.tight_layout(rect=(0, height, 1, 1))
    return fig


def overlap(run: RecordedRun) -> pd.DataFrame:
    """Steps 2 and 3 from their timelines: wall time, and the kernels' busy time."""
    t = _table(run, "timeline")
    out = []
    for n in (2, 3):
        rows = t[t["step"] == n]
        out.append({"step": n, "wall (ms)": rows["end_ms"].max() - rows["start_ms"].min(),
                    "sum of kernel times (ms)": float((rows["end_ms"] - rows["start_ms"]).sum()),
                    "time some kernel ran (ms)": timeline.busy_ms(rows[timeline.COLUMNS])})
    return pd.DataFrame(out)


def overlap_styled(run: RecordedRun):
    """:func:`overlap` as the notebook shows it: no index, times to three decimals (the timeline's
    events resolve microseconds), the run's caption."""
    return (overlap(run).style.hide(axis="index").format("{:.3f}", subset=pd.IndexSlice[:, ["wall (ms)",
            "sum of kernel times (ms)", "time some kernel ran (ms)"]])
            .set_caption("steps 2 and 3 from their timelines: the wall time, the kernels' times added up, "
                         "and the time at least one kernel ran; " + run.caption))


def sweep_table(run: RecordedRun) -> pd.DataFrame:
    return _table(run, "sweep")


def sweep_figure(run: RecordedRun):
    """The batch size x block shape sweep: test accuracy per point, our bounds
    test and the report's side by side, broken points marked."""
    sw = _table(run, "sweep")
    guards = list(dict.fromkeys(sw["guard"]))
    # One heat map a row: side by side, two were drawn 14 inches wide and shown at half size.
    fig, axes = plt.subplots(len(guards), 1, figsize=(plots.MAX_WIDTH_IN, 4.2 * len(guards)))
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
    c = _table(run, "curves")
    b = bayes(run)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(plots.MAX_WIDTH_IN, 4.4))
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


def _reference_curve(run: RecordedRun) -> tuple[str, pd.DataFrame]:
    """The fp32 reference's training run (PyTorch eager fp32), else the first one recorded."""
    c = _table(run, "curves")
    names = list(dict.fromkeys(c["variant"]))
    name = next((v for v in names if v.startswith("PyTorch")), names[0])
    return name, c[c["variant"] == name]


def overfitting(run: RecordedRun) -> pd.DataFrame:
    """Per epoch of the fp32 reference's training run: the mean training loss
    over the epoch (each batch's loss before its update) and the test accuracy;
    where the run recorded them, also the test loss and the accuracy and loss
    on 8,192 training documents, evaluated after the epoch like the test set."""
    _, g = _reference_curve(run)
    per = g.groupby("epoch")
    table = pd.DataFrame({"training loss (mean over the epoch)": per["loss"].mean(),
                          "test accuracy": per["test_accuracy"].first()})
    for column, name in (("train_accuracy", "training accuracy (8,192 documents)"),
                         ("train_eval_loss", "training loss (8,192 documents)"), ("test_loss", "test loss")):
        if column in g.columns and g[column].notna().any():
            table[name] = per[column].first()
    return table.reset_index()


def overfitting_numbers(run: RecordedRun | None, bayes_loss: float = 0.0) -> dict:
    """What the over-fitting discussion quotes from the recorded curves, by glue name
    (``of_cross_epoch``: the first epoch whose mean training loss is below ``bayes_loss``)."""
    keys = ("of_peak_acc", "of_peak_epoch", "of_final_acc", "of_epochs", "of_final_loss", "of_peak_loss",
            "of_drop", "of_variant", "of_cross_epoch")
    if run is None or "curves" not in run.tables:
        return {k: "-" for k in keys}
    name, _ = _reference_curve(run)
    t = overfitting(run)
    peak = t.loc[t["test accuracy"].idxmax()]
    last = t.iloc[-1]
    below = t[t["training loss (mean over the epoch)"] < bayes_loss]
    return {"of_peak_acc": f"{peak['test accuracy']:.1%}", "of_peak_epoch": int(peak["epoch"]),
            "of_final_acc": f"{last['test accuracy']:.1%}", "of_epochs": int(last["epoch"]),
            "of_final_loss": f"{last['training loss (mean over the epoch)']:.3f}",
            "of_peak_loss": f"{peak['training loss (mean over the epoch)']:.3f}",
            "of_drop": f"{(peak['test accuracy'] - last['test accuracy']) * 100:.1f}", "of_variant": name,
            "of_cross_epoch": int(below["epoch"].iloc[0]) if len(below) else "-"}


def overfitting_figure(run: RecordedRun, bayes_loss: float):
    """Training loss against the Bayes-optimal cross-entropy (``bayes_loss``, the
    least expected loss on unseen documents), and test accuracy per epoch with
    its peak marked (the training figures too, where the run recorded them)."""
    name, _ = _reference_curve(run)
    t = overfitting(run)
    b = bayes(run)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(plots.MAX_WIDTH_IN, 4.4))
    ax1.plot(t["epoch"], t["training loss (mean over the epoch)"], marker="o", ms=3,
             label="training loss (batches, before each update)")
    for column, style in (("training loss (8,192 documents)", "--"), ("test loss", "-")):
        if column in t:
            ax1.plot(t["epoch"], t[column], marker="s", ms=3, ls=style, label=column)
    ax1.axhline(bayes_loss, color="black", ls="--", lw=1,
                label=f"Bayes posterior's loss: {bayes_loss:.3f} (least possible on unseen documents)")
    ax1.set(xlabel="epoch", ylabel="cross-entropy (nats)", yscale="log")
    ax1.legend(fontsize=7.5)
    ax2.plot(t["epoch"], t["test accuracy"], marker="o", ms=3, label="test accuracy (8,192 documents)")
    if "training accuracy (8,192 documents)" in t:
        ax2.plot(t["epoch"], t["training accuracy (8,192 documents)"], marker="s", ms=3, ls="--",
                 label="training accuracy (8,192 documents)")
    peak = t.loc[t["test accuracy"].idxmax()]
    ax2.plot([peak["epoch"]], [peak["test accuracy"]], "r*", ms=12,
             label=f"best test accuracy: {peak['test accuracy']:.3f} (epoch {int(peak['epoch'])})")
    ax2.axhline(b["accuracy"], color="black", ls="--", lw=1, label=f"Bayes-optimal: {b['accuracy']:.3f}")
    ax2.set(xlabel="epoch", ylabel="accuracy")
    ax2.legend(fontsize=7.5, loc="lower right")
    return plots._finish(fig, ax1, f"Does the network keep improving on unseen documents? ({name})",
                         run.caption, whole_figure=True)


def _met(value: float, least: float) -> dict:
    """A target's ``met`` and ``margin`` columns (:func:`gpulab.predictions.target_verdict`)."""
    met, margin = predictions.target_verdict(value, at_least=least, unit="x")
    return {"met": met, "margin": margin}


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
                 "target speedup": least, **_met(speedup, least)}
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
                "target speedup": 0.98, **_met(ratio, 0.98)}])], ignore_index=True)
    return frame


def roofline_figure(run: RecordedRun):
    """Every step at batch 1,024 on the roofline (the dense steps' 17 GFLOP; the
    sparse steps' FLOPs are the gather's and scatter's)."""
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
    plots.legend_beside(ax)
    return plots.resize(fig, plots.MAX_WIDTH_IN, 5)


# ----------------------------------------------------------------- a second GPU
def _comparison_rows(run: RecordedRun) -> pd.DataFrame:
    """Each step at batch 1,024 in its own mode (graph for step 10, eager otherwise),
    and PyTorch's paths, with the FLOPs and bytes the roofline reads."""
    rows = run.experiment("ladder")
    rows = rows[rows["size"] == MAIN_BATCH]
    ours = []
    for s in STEPS:
        mine = rows[(rows["variant"] == s.label) & (rows["mode"] == ("graph" if s.graph else "eager"))]
        if len(mine):
            ours.append(mine.iloc[0])
    keep = ["variant", "median_ms", "flops", "bytes", "precision"]
    v = vendor(run, MAIN_BATCH)
    return pd.concat([pd.DataFrame(ours)[keep], v[[c for c in keep if c in v.columns]]], ignore_index=True)


def gpu_comparison(root=None):
    """Per step at batch 1,024 (and PyTorch's paths), the H200's recorded time over
    the H100's against the roofline's prediction (:func:`gpulab.runs.gpu_comparison`):
    (table, figure), or None until both GPUs' runs are recorded."""
    return runs.gpu_comparison("training", _comparison_rows, root=root,
                        title=f"Does each step gain what the roofline predicts on the H200? (batch {MAIN_BATCH:,})")


def gpu_comparison_numbers(table: pd.DataFrame | None) -> dict:
    """What the second-GPU section quotes from the comparison table, by glue name."""
    keys = ("g2_s8_ratio", "g2_s8_pred", "g2_s8_bound", "g2_s8_mem", "g2_s7_ratio", "g2_s7_bound",
            "g2_s10_ratio", "g2_s10_bound", "g2_lab_min", "g2_lab_max", "g2_torch_eager")
    if table is None or table.empty:
        return {k: "-" for k in keys}
    out = {}
    by = table.set_index("variant")
    for n in (7, 8, 10):
        label = find(STEPS, n).label
        if label in by.index:
            out[f"g2_s{n}_ratio"] = f"{by.loc[label, 'ratio']:.2f}"
            out[f"g2_s{n}_bound"] = str(by.loc[label, "bound"])
            out[f"g2_s{n}_pred"] = f"{by.loc[label, 'predicted']:.2f}"
            out[f"g2_s{n}_mem"] = f"{by.loc[label, 'memory_use_a']:.0%}"
    if "PyTorch eager fp32, dense X" in by.index:
        out["g2_torch_eager"] = f"{by.loc['PyTorch eager fp32, dense X', 'ratio']:.2f}"
    lab = table[table["variant"].isin([s.label for s in STEPS])]
    if len(lab):
        out["g2_lab_min"], out["g2_lab_max"] = f"{lab['ratio'].min():.2f}", f"{lab['ratio'].max():.2f}"
    return {k: out.get(k, "-") for k in keys}


# ----------------------------------------------------------------- loading, with or without a recorded run
def load(gpu: str | None = None):
    """The chapter's run: measured now on a GPU, else the recorded one (``gpu``:
    whose, "H100" or "H200"; None: the book's GPU, the H100); None (with the
    reason printed) where neither exists yet."""
    try:
        return runs.live_or_recorded("training", benchmark_all, gpu=gpu)
    except RecordedRunError as exc:
        print(f"No run of this chapter to show: {exc}")
        return None


def show(fn, run, *args, **kwargs):
    """``fn(run, ...)``, or a note where there is no run to read or the run
    lacks the part ``fn`` reads (an experiment that failed or ran out of time)."""
    if run is None:
        print("(no recorded run of this chapter yet: the timings and figures appear once one is recorded)")
        return None
    try:
        return fn(run, *args, **kwargs)
    except RecordedRunError as exc:
        print(f"(not in this run: {exc})")
        return None


def checks(run):
    """The run's full-size checks as a table to show: every step's relative errors against the
    float64 reference (norm of the error over norm of the reference, three significant digits),
    and in ``error`` why a check failed -- a dash where it passed."""
    table = _table(run, "checks").copy()
    table["error"] = table["error"].fillna("").astype(str).str.strip().replace("", "\u2014")
    errors = [c for c in table.columns if c.startswith("rel_error")]
    return table.style.hide(axis="index").format({c: "{:.2e}" for c in errors}, na_rep="\u2014").set_caption(
        f"{run.caption}; rel_error: the error's norm over the float64 reference's norm; "
        "error: why a check failed (\u2014: it passed, or, in a rel_error column, was not measured)")


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
        fastest = vendor(run, MAIN_BATCH)
        if len(fastest):
            out.update(torch_fastest_name=str(fastest.iloc[0]["variant"]), torch_fastest=f"{fastest.iloc[0]['median_ms']:.3g}")
        if "curves" in run.tables:
            acc = accuracy_table(run)["final test accuracy"]
            for key, n in (("acc07", 7), ("acc08", 8), ("acc10", 10)):
                label = find(STEPS, n).label
                out[key] = f"{acc[label]:.1%}" if label in acc else "-"
            ref = [i for i in acc.index if i.startswith("PyTorch")]
            out["acc_torch"] = f"{acc[ref[0]]:.1%}" if ref else "-"
        if "sweep" in run.tables:
            sw = _table(run, "sweep")
            for guard, key in (("ours", "broken_ours"), ("report's", "broken_report")):
                part = sw[sw["guard"] == guard]
                out[key] = f"{int(part['broken'].sum())} of {len(part)}"
    keys = [f"{p}{n:02d}" for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10) for p in ("t", "x")] + [
        "torch_eager", "torch_graph", "torch_bag", "torch_bag_graph", "torch_fastest_name", "torch_fastest", "acc07", "acc08", "acc10", "acc_torch",
        "broken_ours", "broken_report"]
    return {k: out.get(k, "-") for k in keys}


#: The profiler's stall columns (cycles a warp waited per issued instruction, by reason),
#: in runs that recorded them.
STALL_COLUMNS = ["stall_global_memory", "stall_shared_memory", "stall_barrier", "stall_mio_throttle",
                 "stall_lg_throttle", "stall_math_pipe", "stall_fixed_latency"]


def profile(run: RecordedRun) -> pd.DataFrame:
    """Nsight Compute's figures for the kernels of steps 6-9 at batch 1,024: time and
    share of the step's kernel time, FMA-pipe instructions x 32 lanes x 2 FLOPs (the
    FP32 rate reached, an upper estimate: the pipe also runs FMUL, FADD and integer
    multiply-adds), device-memory bandwidth reached (bytes read, and written where
    recorded, over the kernel's time), occupancy, registers, bank conflicts, sectors
    per request, and the stall reasons where the run recorded them."""
    if "profile" not in run.tables:
        print("this run has no profiler figures (Nsight Compute's ncu was not available, or time ran out)")
        return pd.DataFrame()
    t = run.tables["profile"].copy()
    if "fma_pipe_instructions" in t and "duration_ns" in t:
        t["FMA pipe as FFMA (TFLOP/s)"] = t["fma_pipe_instructions"] * 32 * 2 / t["duration_ns"] / 1e3
    if "dram_bytes_read" in t and "duration_ns" in t:
        moved = t["dram_bytes_read"] + (t["dram_bytes_write"] if "dram_bytes_write" in t else 0.0)
        t["DRAM (GB/s)"] = moved / t["duration_ns"]
    if "step" in t and "duration_ns" in t:
        t["share of step"] = t["duration_ns"] / t.groupby("step")["duration_ns"].transform("sum")
    keep = ["step", "op", "kernel", "duration_ns", "share of step", "FMA pipe as FFMA (TFLOP/s)", "DRAM (GB/s)",
            "achieved_occupancy_pct", "registers_per_thread", "dram_bytes_read", "shared_load_bank_conflicts",
            "sectors_per_request", "issue_slots_busy_pct"] + STALL_COLUMNS
    return t[[c for c in keep if c in t.columns]]


#: Kernels under this share of their step's kernel time are left out of :func:`profile_table`.
PROFILE_MIN_SHARE = 0.02


def profile_table(run: RecordedRun, min_share: float = PROFILE_MIN_SHARE):
    """:func:`profile` cut to what the prose below it reads: each kernel's time and share of
    its step, the FP32 rate of its FMA-pipe instructions, its DRAM bandwidth, occupancy,
    registers and bank conflicts, and the stall reasons the prose names (each step-9
    kernel's longest waits); kernels under ``min_share`` of their step left out. Styled,
    with a caption saying what was left out."""
    t = profile(run)
    if t.empty:
        return t
    names = {"duration_ns": "time (µs)", "achieved_occupancy_pct": "occupancy (%)", "DRAM (GB/s)": "DRAM (GB/s)",
             "FMA pipe as FFMA (TFLOP/s)": "FMA pipe (TFLOP/s)",
             "registers_per_thread": "registers", "shared_load_bank_conflicts": "bank conflicts"}
    stalls = [c for c in STALL_COLUMNS if c in t.columns]
    quoted = []
    for kernel, top in (("sparse_forward_backward", 1), ("sparse_update", 2)):
        rows = t[(t["step"] == 9) & (t["kernel"] == kernel)]
        if stalls and len(rows):
            quoted += list(rows.iloc[0][stalls].astype(float).sort_values(ascending=False).index[:top])
    quoted = [c for c in stalls if c in quoted]
    keep = [c for c in ["step", "op", "duration_ns", "share of step", "FMA pipe as FFMA (TFLOP/s)", "DRAM (GB/s)",
                        "achieved_occupancy_pct", "registers_per_thread", "shared_load_bank_conflicts"] + quoted
            if c in t.columns]
    shown = t[t["share of step"] >= min_share] if "share of step" in t else t
    out = shown[keep].copy()
    if "duration_ns" in out:
        out["duration_ns"] = out["duration_ns"] / 1e3
    out = out.rename(columns={**names, **{c: "stall: " + c.removeprefix("stall_").replace("_", " ")
                                          for c in quoted}})
    left = len(t) - len(shown)
    caption = (f"Nsight Compute, batch 1,024; {left} kernels under {min_share:.0%} of their step's kernel time "
               f"left out, and the counters the text does not read; " + run.caption)
    fmt = {c: "{:,.1f}" for c in out.columns if c not in ("step", "op", "share of step")}
    fmt.update({"share of step": "{:.0%}", "registers": "{:.0f}", "bank conflicts": "{:,.0f}",
                "time (µs)": "{:,.0f}", "DRAM (GB/s)": "{:,.0f}", "occupancy (%)": "{:.0f}"})
    return out.style.format({k: v for k, v in fmt.items() if k in out.columns}).hide(axis="index").set_caption(
        caption)


def profile_numbers(run: RecordedRun | None) -> dict:
    """What the profiler section quotes, by glue name: per step, its two largest
    kernels' share of its kernel time, and their FP32 rate, bandwidth and
    occupancy against the datasheet's peaks for the run's GPU."""
    keys = ["pr_s6_share", "pr_s6_fwd_tflops", "pr_s6_bwd_conflicts", "pr_s6_xt_gbs", "pr_s7_share",
            "pr_s7_fwd_tflops", "pr_s7_bwd_tflops", "pr_s7_fp32_pct", "pr_s7_occ", "pr_s7_regs", "pr_s7_gbs",
            "pr_s8_share", "pr_s8_fwd_us", "pr_s8_bwd_us", "pr_s8_fwd_gbs", "pr_s8_bwd_gbs", "pr_s8_mem_pct",
            "pr_s8_x16_mb", "pr_s8_floor_us",
            "pr_s9_us", "pr_s9_gbs", "pr_s9_mem_pct", "pr_s9_occ", "pr_fp32_tflops", "pr_mem_gbs", "pr_stalls",
            "pr_s9_fb_stall", "pr_s9_fb_stall_cycles", "pr_s9_up_stall", "pr_s9_up_stall_cycles",
            "pr_s9_up_stall2", "pr_s9_up_stall2_cycles"]
    out = {k: "-" for k in keys}
    if run is None or "profile" not in run.tables:
        return out
    t = profile(run)
    if not {"step", "kernel", "duration_ns"} <= set(t.columns):
        return out
    sheet = roofline.datasheet(run.gpu) or {}
    peak, gbs = sheet.get("fp32_tflops", float("nan")), sheet.get("memory_gbs", float("nan"))
    out.update(pr_fp32_tflops=f"{peak:g}", pr_mem_gbs=f"{gbs:,.0f}",
               pr_stalls="recorded" if any(c in t for c in STALL_COLUMNS) else "not recorded")

    def kernel(step_, name):
        rows = t[(t["step"] == step_) & (t["kernel"] == name)]
        return None if rows.empty else rows.iloc[0]

    def share(step_, names):
        return f"{t[(t['step'] == step_) & t['kernel'].isin(names)]['share of step'].sum():.0%}"

    if (t["step"] == 6).any():
        fwd, bwd = t[(t["step"] == 6) & (t["op"] == "Z1 = X W1")], t[(t["step"] == 6) & (t["op"] == "dW1 = X^T dZ1")]
        xt = t[(t["step"] == 6) & (t["op"] == "X^T")]
        big = t[(t["step"] == 6) & t["op"].isin(["Z1 = X W1", "dW1 = X^T dZ1"])]["share of step"].sum()
        out["pr_s6_share"] = f"{big:.0%}"
        if len(fwd):
            out["pr_s6_fwd_tflops"] = f"{fwd['FMA pipe as FFMA (TFLOP/s)'].iloc[0]:.1f}"
        if len(bwd):
            out["pr_s6_bwd_conflicts"] = f"{bwd['shared_load_bank_conflicts'].iloc[0]:,.0f}"
        if len(xt):
            out["pr_s6_xt_gbs"] = f"{xt['DRAM (GB/s)'].iloc[0]:,.0f}"
    f7, b7 = kernel(7, "forward_product"), kernel(7, "w1_gradient_step")
    if f7 is not None and b7 is not None:
        out.update(pr_s7_share=share(7, ["forward_product", "w1_gradient_step"]),
                   pr_s7_fwd_tflops=f"{f7['FMA pipe as FFMA (TFLOP/s)']:.1f}",
                   pr_s7_bwd_tflops=f"{b7['FMA pipe as FFMA (TFLOP/s)']:.1f}",
                   pr_s7_fp32_pct=f"{max(f7['FMA pipe as FFMA (TFLOP/s)'], b7['FMA pipe as FFMA (TFLOP/s)']) / peak:.0%}",
                   pr_s7_occ=f"{f7['achieved_occupancy_pct']:.0f}%", pr_s7_regs=int(f7["registers_per_thread"]),
                   pr_s7_gbs=f"{max(f7['DRAM (GB/s)'], b7['DRAM (GB/s)']):,.0f}")
    f8, b8 = kernel(8, "forward_product_tc"), kernel(8, "w1_gradient_step_tc")
    if f8 is not None and b8 is not None:
        out.update(pr_s8_share=share(8, ["forward_product_tc", "w1_gradient_step_tc"]),
                   pr_s8_fwd_us=f"{f8['duration_ns'] / 1e3:.0f}", pr_s8_bwd_us=f"{b8['duration_ns'] / 1e3:.0f}",
                   pr_s8_fwd_gbs=f"{f8['DRAM (GB/s)']:,.0f}", pr_s8_bwd_gbs=f"{b8['DRAM (GB/s)']:,.0f}",
                   pr_s8_mem_pct=f"{max(f8['DRAM (GB/s)'], b8['DRAM (GB/s)']) / gbs:.0%}")
        x16 = MAIN_BATCH * Dims(MAIN_BATCH, data.VOCAB).Vp * 2          # the dense fp16 batch, bytes
        out.update(pr_s8_x16_mb=f"{x16 / 1e6:.0f}", pr_s8_floor_us=f"{x16 / (gbs * 1e9) * 1e6:.0f}")
    s9 = t[t["step"] == 9]
    if len(s9):
        out.update(pr_s9_us=f"{s9['duration_ns'].sum() / 1e3:.0f}", pr_s9_gbs=f"{s9['DRAM (GB/s)'].max():,.0f}",
                   pr_s9_mem_pct=f"{s9['DRAM (GB/s)'].max() / gbs:.0%}",
                   pr_s9_occ=f"{s9['achieved_occupancy_pct'].min():.0f}-{s9['achieved_occupancy_pct'].max():.0f}%")
    stalls = [c for c in STALL_COLUMNS if c in t.columns]
    fb, up = kernel(9, "sparse_forward_backward"), kernel(9, "sparse_update")
    if stalls and fb is not None and up is not None:
        def ranked(row):     # (reason in words, cycles per issued instruction), the longest wait first
            waits = row[stalls].astype(float).sort_values(ascending=False)
            return [(name.removeprefix("stall_").replace("_", " "), f"{cycles:.1f}") for name, cycles in waits.items()]
        (fb_name, fb_cycles), (up_name, up_cycles), (up2_name, up2_cycles) = ranked(fb)[0], *ranked(up)[:2]
        out.update(pr_s9_fb_stall=fb_name, pr_s9_fb_stall_cycles=fb_cycles, pr_s9_up_stall=up_name,
                   pr_s9_up_stall_cycles=up_cycles, pr_s9_up_stall2=up2_name, pr_s9_up_stall2_cycles=up2_cycles)
    return out


def prediction_table(run: RecordedRun, batch: int = MAIN_BATCH) -> pd.DataFrame:
    """Each step's prediction (from its kernel file) against its time in ``run`` at ``batch``,
    with the verdict (see :mod:`gpulab.predictions`)."""
    measured = ladder(run, batch)[["step", "median_ms"]]
    steps = [(s.ordinal, s.title, s.file) for s in STEPS]
    return predictions.table(steps, measured, PREDICTED)


def prediction_styled(run: RecordedRun, batch: int = MAIN_BATCH):
    """:func:`prediction_table` as the notebook shows it (see :func:`gpulab.predictions.styled`)."""
    return predictions.styled(prediction_table(run, batch), f"Batch {batch:,}; " + run.caption)


def prediction_numbers(run) -> dict:
    """Each step's verdict line (``verdict_NN``) and the counts of held and failed predictions,
    for the prose (a dash for each where there is no run)."""
    keys = [f"verdict_{n:02d}" for n in range(1, len(STEPS) + 1)] + ["predictions_held", "predictions_failed",
                                                                      "predictions_judged"]
    if run is None:
        return dict.fromkeys(keys, "-")
    table = prediction_table(run)
    out = {f"verdict_{int(k):02d}": v for k, v in zip(table["step"], table["verdict"])}
    counts = predictions.summary(table)
    out.update(predictions_held=counts["held"], predictions_failed=counts["did_not_hold"],
               predictions_judged=counts["judged"])
    return {k: out.get(k, "-") for k in keys}


def breakdown_pair(run: RecordedRun, a: int = 2, b: int = 3) -> pd.DataFrame:
    """Step ``a``'s and step ``b``'s kernels side by side, matched by operation, with the stream
    each ran on in step ``b``: which kernels got slower when they ran beside others."""
    rows = run.experiment("breakdown")
    pick = lambda n: rows[rows["step"] == n].set_index("op")  # noqa: E731
    left, right = pick(a), pick(b)
    table = pd.DataFrame({f"step {a} (ms)": left["median_ms"], f"step {b} (ms)": right["median_ms"],
                          f"stream in step {b}": right["stream"]})
    table = table.loc[[op for op in right.sort_values("order").index if op in table.index]]
    table[f"step {b} / step {a}"] = table[f"step {b} (ms)"] / table[f"step {a} (ms)"]
    table.loc["sum of the kernels"] = [left["median_ms"].sum(), right["median_ms"].sum(), np.nan,
                                       right["median_ms"].sum() / left["median_ms"].sum()]
    return table


def streams_numbers(run) -> dict:
    """The numbers of step 3's lesson (streams made the step slower): the forward product's time
    alone (step 2) and beside the other streams' kernels (step 3), the transpose the streams were
    to hide, and the step's wall time against the sum of its kernels (from the timeline)."""
    keys = ("z1_alone", "z1_beside", "z1_lost", "xt_alone", "streams_wall", "streams_kernel_sum", "slower_pct")
    if run is None:
        return dict.fromkeys(keys, "-")
    try:
        pair = breakdown_pair(run, 2, 3)
        product = [op for op in pair.index if op.startswith("Z1 = X W1")][0]
        transpose = [op for op in pair.index if op == "X^T"][0]
        lad = ladder(run).set_index("step")["median_ms"]
        over = overlap(run).set_index("step")
    except (KeyError, IndexError, RecordedRunError):     # a run without the breakdown or timeline
        return dict.fromkeys(keys, "-")
    return {"z1_alone": f"{pair.loc[product, 'step 2 (ms)']:.2f}",
            "z1_beside": f"{pair.loc[product, 'step 3 (ms)']:.2f}",
            "z1_lost": f"{pair.loc[product, 'step 3 (ms)'] - pair.loc[product, 'step 2 (ms)']:.2f}",
            "xt_alone": f"{pair.loc[transpose, 'step 2 (ms)']:.2f}",
            "streams_wall": f"{over.loc[3, 'wall (ms)']:.2f}",
            "streams_kernel_sum": f"{over.loc[3, 'sum of kernel times (ms)']:.2f}",
            "slower_pct": f"{(lad[3] / lad[2] - 1):.0%}"}


def breakdown_pair_table(run: RecordedRun, a: int = 2, b: int = 3):
    """:func:`breakdown_pair`, styled: ms to four digits, the ratio to two, with the run's caption."""
    table = breakdown_pair(run, a, b)
    ratio = f"step {b} / step {a}"
    return (table.style.format({f"step {a} (ms)": "{:.4f}", f"step {b} (ms)": "{:.4f}", ratio: "x{:.2f}",
                                f"stream in step {b}": "{:.0f}"}, na_rep="")
            .set_caption(f"each kernel of steps {a} and {b} at batch {MAIN_BATCH:,}, timed inside the running "
                         f"step (CUDA events on its stream); " + run.caption))
