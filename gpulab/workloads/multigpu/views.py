"""The recorded two-GPU run as the notebook shows it: tables and figures.

Every function takes the run (a :class:`gpulab.runs.RecordedRun`) so that the
notebook, the tests (on a run they build from synthetic rows) and a live run
go through the same code. :func:`recorded` returns the newest recorded run of
the chapter, or None when no machine with two GPUs has recorded one yet.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ... import plots
from ...errors import RecordedRunError
from ...runs import RecordedRun, load_run
from ..training.data import VOCAB
from . import costmodel
from .replicas import Layout

ONE_GPU = "1 GPU, step 9"
ONE_GPU_GRAPH = "1 GPU, step 10 (CUDA graph)"
PLAIN = "2 GPUs, one all-reduce"
BUCKETED = "2 GPUs, bucketed, overlapped"
COMPUTE_ONLY = "2 GPUs, compute only"
DDP = "PyTorch DDP (EmbeddingBag, 2 processes)"
#: The issue's targets: at the largest batch 2 GPUs take at most this share of
#: one GPU's step; the overlap must win wherever the all-reduce is more than
#: OVERLAP_SHARE of the step.
SCALING_TARGET, OVERLAP_SHARE = 0.55, 0.20
RECORD_COMMAND = "python -m gpulab record multigpu"


def recorded(root=None) -> RecordedRun | None:
    """The newest recorded run of the chapter, or None if there is none."""
    try:
        return load_run("multigpu", root=root)
    except RecordedRunError:
        return None


def problems(run: RecordedRun) -> pd.DataFrame | None:
    """What the run could not measure, and why (None when it measured everything)."""
    table = run.tables.get("problems")
    return None if table is None or len(table) == 0 else table


def step_table(run: RecordedRun) -> pd.DataFrame:
    """Median time per step (ms): one row per global batch, one column per
    variant (the lab's one- and two-GPU steps, and PyTorch DDP)."""
    rows = run.experiment("step")
    if "ddp" in set(run.timings["experiment"]):
        rows = pd.concat([rows, run.experiment("ddp")], ignore_index=True)
    return rows.pivot_table(index="size", columns="variant", values="median_ms", sort=False).rename_axis(
        index="batch", columns=None)


def scaling_table(run: RecordedRun) -> pd.DataFrame:
    """Per batch: the fastest one-GPU step, the two-GPU steps, their speed-up,
    scaling efficiency (speed-up / 2) and the all-reduce's share of the plain
    two-GPU step (from the compute-only timing)."""
    t = step_table(run)
    one = t[[c for c in (ONE_GPU, ONE_GPU_GRAPH) if c in t]].min(axis=1)
    out = pd.DataFrame({"1 GPU (fastest)": one, PLAIN: t[PLAIN], BUCKETED: t[BUCKETED]})
    two = out[[PLAIN, BUCKETED]].min(axis=1)
    out["2 GPUs / 1 GPU"] = two / one
    out["speed-up"] = one / two
    out["efficiency"] = costmodel.scaling_efficiency(one, two, 2)
    out["all-reduce share of plain step"] = (t[PLAIN] - t[COMPUTE_ONLY]) / t[PLAIN]
    out["overlap saves (ms)"] = t[PLAIN] - t[BUCKETED]
    if DDP in t:
        out["PyTorch DDP"] = t[DDP]
    return out


def targets(run: RecordedRun) -> pd.DataFrame:
    """The issue's targets, each with the measured value and met or not."""
    s = scaling_table(run)
    big = s.index.max()
    rows = [{"target": f"largest batch ({big:,}): 2 GPUs <= {SCALING_TARGET} x 1 GPU",
             "measured": s.loc[big, "2 GPUs / 1 GPU"], "met": bool(s.loc[big, "2 GPUs / 1 GPU"] <= SCALING_TARGET)}]
    heavy = s[s["all-reduce share of plain step"] > OVERLAP_SHARE]
    rows.append({"target": f"overlapped faster than plain where the all-reduce > {OVERLAP_SHARE:.0%} of the step "
                           f"({len(heavy)} batch sizes)",
                 "measured": float((heavy[BUCKETED] < heavy[PLAIN]).mean()) if len(heavy) else float("nan"),
                 "met": bool((heavy[BUCKETED] < heavy[PLAIN]).all())})
    if "PyTorch DDP" in s:
        ratio = s[BUCKETED] / s["PyTorch DDP"]
        rows.append({"target": "overlapped at least as fast as PyTorch DDP (worst batch: overlapped / DDP)",
                     "measured": float(ratio.max()), "met": bool((ratio <= 1.0).all())})
    return pd.DataFrame(rows)


def allreduce_table(run: RecordedRun) -> pd.DataFrame:
    """NCCL's all-reduce: bytes, median time, algorithm and bus bandwidth (GB/s)."""
    r = run.experiment("allreduce").sort_values("size")
    return pd.DataFrame({"bytes": r["size"].to_numpy(), "median_ms": r["median_ms"].to_numpy(),
                         "algbw_gbs": r["size"].to_numpy() / (r["median_ms"].to_numpy() * 1e-3) / 1e9,
                         "busbw_gbs": costmodel.bus_bandwidth_gbs(r["size"].to_numpy(), r["median_ms"].to_numpy(), 2)})


def fitted_model(run: RecordedRun) -> costmodel.RingModel:
    a = allreduce_table(run)
    return costmodel.fit(a["bytes"].to_numpy(), a["median_ms"].to_numpy(), 2)


def plot_steps(run: RecordedRun):
    """Time per step against the global batch, 1 GPU, 2 GPUs, DDP."""
    t = step_table(run).reset_index().melt(id_vars="batch", var_name="variant", value_name="median_ms")
    return plots.scaling(t.dropna(), x="batch", xlabel="global batch (documents per step)",
                         title="Does a second GPU halve the step? Time per SGD step against the batch",
                         caption=run.caption + " (two GPUs)")


def plot_efficiency(run: RecordedRun):
    s = scaling_table(run).reset_index()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(s["batch"], s["efficiency"], marker="o", label="scaling efficiency (speed-up / 2)")
    ax.plot(s["batch"], s["all-reduce share of plain step"], marker="s", label="all-reduce share of the plain step")
    ax.axhline(1 / (2 * SCALING_TARGET), color="#888888", ls="--", lw=1,
               label=f"target: 2 GPUs <= {SCALING_TARGET} x 1 GPU")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("global batch (documents per step)")
    ax.set_ylabel("fraction")
    ax.legend(fontsize=8)
    return plots._finish(fig, ax, "Where does scaling break? Efficiency and the all-reduce's share",
                         run.caption + " (two GPUs)")


def plot_allreduce(run: RecordedRun, model: costmodel.RingModel | None = None):
    """Bus bandwidth against message size, measured, with the fitted ring model."""
    a = allreduce_table(run)
    model = model or fitted_model(run)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(a["bytes"], a["busbw_gbs"], marker="o", label="NCCL all-reduce, measured")
    sizes = np.logspace(np.log10(a["bytes"].min()), np.log10(a["bytes"].max()), 100)
    ax.plot(sizes, costmodel.bus_bandwidth_gbs(sizes, model.time_ms(sizes, 2), 2), ls="--",
            label=f"ring model (fitted: {model.bw_gbs:.0f} GB/s, {model.alpha_us:.1f} µs per step)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.legend(fontsize=8)
    return plots._finish(fig, ax, "How fast is NCCL's all-reduce at each size? Bus bandwidth, two GPUs",
                         run.caption + " (two GPUs)")


def plot_predictions(model: costmodel.RingModel, caption: str):
    """The model's all-reduce time against size for 2 GPUs, 8 GPUs over NVLink,
    2 nodes over the network: a model, labelled as one."""
    sizes = np.logspace(3, 9, 100)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, (p, m, t) in costmodel.predictions(model, sizes).items():
        ax.plot(sizes, t, label=f"{label} (model)")
    grad = 4 * Layout(VOCAB).size
    ax.axvline(grad, color="#888888", ls=":", lw=1, label=f"the chapter's gradient ({grad / 1e6:.1f} MB)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("all-reduce time (ms), predicted")
    ax.legend(fontsize=8)
    return plots._finish(fig, ax, "MODEL: what would an all-reduce cost on 8 GPUs, or across 2 nodes?", caption)
