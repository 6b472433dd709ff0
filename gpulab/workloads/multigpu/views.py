"""The recorded two-GPU run as the notebook shows it: tables and figures.

Every function takes the run (a :class:`gpulab.runs.RecordedRun`) so that the
notebook, the tests (on a run they build from synthetic rows) and a live run
go through the same code. :func:`recorded` returns the newest recorded run of
the chapter, or None when no machine with two GPUs has recorded one yet.
"""
from __future__ import annotations

from dataclasses import replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ... import plots, predictions
from ...errors import RecordedRunError
from ...runs import RecordedRun, available_runs, load_run
from ..training import data as training_data
from ..training.data import VOCAB
from . import costmodel
from .replicas import Layout
from .configs import ONE_GPU_FORWARD, PEER_OP, PLAIN_FORMS, SPARE_SMS, Overlap
from .workers import FIRST_PIECE

ONE_GPU = "1 GPU, step 9"
ONE_GPU_GRAPH = "1 GPU, step 10 (CUDA graph)"
ONE_GPU_REPLICA = "1 GPU, gradient then update (CUDA graph)"
ONE_GPU_SPLIT = "1 GPU, split gradient then update (CUDA graph)"
#: Every one-GPU step the run times: the fastest at each batch is what two GPUs are measured against.
ONE_GPU_STEPS = (ONE_GPU, ONE_GPU_GRAPH, ONE_GPU_REPLICA, ONE_GPU_SPLIT, ONE_GPU_FORWARD)
PLAIN = "2 GPUs, one all-reduce"
PLAIN_EAGER = "2 GPUs, one all-reduce, eager"
BUCKETED = "2 GPUs, bucketed, overlapped"
BUCKETED_EAGER = "2 GPUs, bucketed, overlapped, eager"
COMPUTE_ONLY = "2 GPUs, compute only"
DDP = "PyTorch DDP (EmbeddingBag, 2 processes)"
LAB_ALLREDUCE = "NCCL all-reduce, lab (CuPy), 1 process per GPU"
TORCH_ALLREDUCE = "torch.distributed all_reduce (NCCL), 1 process per GPU"
ALLREDUCE_TARGET = 1.15
#: The issue's targets: at the largest batch 2 GPUs take at most this share of
#: one GPU's step; the overlap must win wherever the all-reduce is more than
#: OVERLAP_SHARE of the step.
SCALING_TARGET, OVERLAP_SHARE = 0.55, 0.20
RECORD_COMMAND = "python -m gpulab record multigpu"
#: What the sweep's labels of the steps with the peer update (06_peer_update.cu) contain.
PEER = "over NVLink"


#: A column only runs of the parameter-averaging record and later have (the form of each swept step).
CURRENT_FORMAT = "form"


def current(run: RecordedRun) -> bool:
    """Whether ``run`` was made by the current record: it has the parameter form's rows
    (:data:`CURRENT_FORMAT`) and times the first bucket with the small gradients in one launch
    (:data:`~.workers.FIRST_PIECE`), which came with W1 at the start of the replicas' buffers."""
    return CURRENT_FORMAT in run.timings and bool(run.timings["variant"].str.endswith(FIRST_PIECE).any())


def recorded(root=None) -> RecordedRun | None:
    """The run the chapter reads, or None if there is none: the book's GPU's
    (:func:`gpulab.runs.load_run`) when it was made by the current record
    (:func:`current`), else the newest run that was, else the book's GPU's
    older run."""
    try:
        default = load_run("multigpu", root=root)
    except RecordedRunError:
        return None
    if current(default):
        return default
    runs = available_runs(root) if root is not None else available_runs()
    for folder in runs[runs["chapter"] == "multigpu"].sort_values("date", ascending=False)["folder"]:
        run = load_run("multigpu", gpu=folder, root=root)
        if current(run):
            return run
    return default


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
    # Columns in the order recorded; rows by batch (a record's workers may finish batches out of order).
    return rows.pivot_table(index="size", columns="variant", values="median_ms", sort=False).rename_axis(
        index="batch", columns=None).sort_index()


def scaling_table(run: RecordedRun) -> pd.DataFrame:
    """Per batch: the fastest one-GPU step, the two-GPU steps, their speed-up,
    scaling efficiency (speed-up / 2) and the all-reduce's share of the plain
    two-GPU step (from the compute-only timing)."""
    t = step_table(run)
    one = t[[c for c in ONE_GPU_STEPS if c in t]].min(axis=1)
    # Each two-GPU step at the faster of its CUDA-graph and eager timings, the same rule for both.
    plain = t[[c for c in (PLAIN, PLAIN_EAGER) if c in t]].min(axis=1)
    bucketed = t[[c for c in (BUCKETED, BUCKETED_EAGER) if c in t]].min(axis=1)
    out = pd.DataFrame({"1 GPU (fastest)": one, PLAIN: plain, BUCKETED: bucketed})
    two = out[[PLAIN, BUCKETED]].min(axis=1)
    out["2 GPUs / 1 GPU"] = two / one
    out["speed-up"] = one / two
    out["efficiency"] = costmodel.scaling_efficiency(one, two, 2)
    out["all-reduce share of plain step"] = (plain - t[COMPUTE_ONLY]) / plain
    out["overlap saves (ms)"] = out[PLAIN] - out[BUCKETED]
    if DDP in t:
        out["PyTorch DDP"] = t[DDP]
    return out


def _met(value: float, unit: str = "x", **target) -> dict:
    """A target's ``met`` and ``margin`` columns (:func:`gpulab.predictions.target_verdict`)."""
    met, margin = predictions.target_verdict(value, unit=unit, **target)
    return {"met": met, "margin": margin}


def targets(run: RecordedRun) -> pd.DataFrame:
    """The issue's targets, each with the measured value and met or not."""
    s = scaling_table(run)
    big = s.index.max()
    rows = [{"target": f"largest batch ({big:,}): 2 GPUs <= {SCALING_TARGET} x 1 GPU",
             "measured": s.loc[big, "2 GPUs / 1 GPU"], **_met(s.loc[big, "2 GPUs / 1 GPU"], at_most=SCALING_TARGET)}]
    heavy = s[s["all-reduce share of plain step"] > OVERLAP_SHARE]
    rows.append({"target": f"overlapped faster than plain where the all-reduce > {OVERLAP_SHARE:.0%} of the step "
                           f"({len(heavy)} batch sizes)",
                 "measured": float((heavy[BUCKETED] < heavy[PLAIN]).mean()) if len(heavy) else float("nan"),
                 **(_met(float((heavy[PLAIN] / heavy[BUCKETED]).min()), at_least=1.0,
                         bound="1x, the plain step's time (worst batch: plain / overlapped)") if len(heavy)
                    else {"met": True, "margin": "no batch size has that share"})})
    if "PyTorch DDP" in s:
        ratio = s[[PLAIN, BUCKETED]].min(axis=1) / s["PyTorch DDP"]
        rows.append({"target": "faster than PyTorch DDP at every batch (worst batch: lab / DDP)",
                     "measured": float(ratio.max()), **_met(float(ratio.max()), at_most=1.0)})
    a = allreduce_comparison(run)
    if a is not None:
        big = a[a["bytes"] >= 2 ** 20]
        rows.append({"target": f"lab's all-reduce within {ALLREDUCE_TARGET}x of torch.distributed's from 1 MiB up "
                               "(worst size: lab / torch)",
                     "measured": float(big["lab / torch"].max()),
                     **_met(float(big["lab / torch"].max()), at_most=ALLREDUCE_TARGET)})
    p = predicted_steps(run)
    if p is not None:
        worst = float(p["error"].abs().max())
        rows.append({"target": "the cost model predicts the plain two-GPU step through NCCL within 15% (worst batch: "
                               "|error|)",
                     "measured": worst, **_met(worst, at_most=0.15, unit="")})
    return pd.DataFrame(rows)


def _short(variant: str) -> str:
    """A sweep row's variant without its "2 GPUs, " and "; NCCL ..." parts."""
    v = variant.split("; ")[0]
    return v.split(", ", 1)[1] if v.startswith(("2 GPUs", "1 GPU")) else v


def overlap_table(run: RecordedRun) -> pd.DataFrame | None:
    """The record's sweep (experiment ``overlap``): per batch, the plain step
    in its two forms and the bucketed step in every launch configuration,
    each the slower GPU's median (ms), with the configuration the run kept."""
    if "overlap" not in set(run.timings["experiment"]):
        return None
    r = run.experiment("overlap").copy()
    col = "slowest_rank_ms" if "slowest_rank_ms" in r else "median_ms"
    r["configuration"] = r["variant"].map(_short)
    t = r.pivot_table(index="configuration", columns="size", values=col, sort=False).rename_axis(columns="batch")
    return t


def kept(run: RecordedRun) -> pd.DataFrame | None:
    """Per batch, the configuration the run kept for its bucketed step and its plain step's form."""
    c = run.tables.get("choices")
    return None if c is None or len(c) == 0 else c.set_index("batch")[["label", "plain", "nccl"]]


def nccl_table(run: RecordedRun) -> pd.DataFrame | None:
    """The NCCL settings the run tried at its largest batch (each in fresh
    processes): the plain step (step 9's kernel) and the fastest bucketed
    configuration, the slower GPU's median (ms)."""
    if "nccl settings" not in set(run.timings["experiment"]):
        return None
    r = run.experiment("nccl settings").copy()
    col = "slowest_rank_ms" if "slowest_rank_ms" in r else "median_ms"
    r["nccl"] = r["variant"].str.split("; ").str[-1]
    r = r[(r["size"] == r["size"].max()) & ~r["variant"].str.contains(PEER)]       # the steps that call NCCL
    rows = []
    for nccl, g in r.groupby("nccl", sort=False):
        plain = g[g["variant"].str.contains("one all-reduce")]       # the plain step's fastest form
        bucketed = g[g["variant"].str.contains("bucketed") & ~g["variant"].str.contains("not overlapped")]
        best = bucketed.loc[bucketed[col].idxmin()]
        rows.append({"NCCL settings": nccl, "plain step (ms)": float(plain[col].min()),
                     "fastest bucketed step (ms)": float(best[col]), "its configuration": _short(best["variant"])})
    return pd.DataFrame(rows)


def nccl_by_batch(run: RecordedRun, plain_only: bool = False) -> pd.DataFrame | None:
    """Per batch (rows) and NCCL setting (columns): the fastest two-GPU step through NCCL (the
    plain step in any form and the bucketed configurations of ``configs.NCCL_SWEEP``; with
    ``plain_only`` the plain step's forms alone), the slower GPU's median (ms); None for a run
    that tried the settings at its largest batch only."""
    if "nccl settings" not in set(run.timings["experiment"]):
        return None
    r = run.experiment("nccl settings").copy()
    if r["size"].nunique() < 2:
        return None
    col = "slowest_rank_ms" if "slowest_rank_ms" in r else "median_ms"
    r["nccl"] = r["variant"].str.split("; ").str[-1]
    r = r[~r["variant"].str.contains(PEER) & ~r["variant"].str.contains("not overlapped")]
    if plain_only:
        r = r[r["variant"].str.contains("one all-reduce")]
    return r.pivot_table(index="size", columns="nccl", values=col, aggfunc="min", sort=False).rename_axis(
        index="batch", columns="NCCL settings")


def forms_table(run: RecordedRun) -> pd.DataFrame | None:
    """Per batch, from the sweep: the plain step (one all-reduce) with the
    gradient summed (step 9's kernel in gradient mode, then the update) and with
    the parameters averaged (step 9's kernels straight into each copy), each in
    its faster launch form, the slower GPU's median (ms); None for a run
    recorded before the parameter form existed."""
    t = overlap_table(run)
    if t is None or not any("parameter average" in i for i in t.index):
        return None
    plain = t[t.index.str.startswith("one all-reduce")]
    peer = plain[plain.index.str.contains(PEER)]
    plain = plain[~plain.index.str.contains(PEER)]
    params = plain[plain.index.str.contains("parameter average")]
    grads = plain[~plain.index.str.contains("parameter average")]
    out = pd.DataFrame({"gradient summed (ms)": grads.min(), "parameters averaged (ms)": params.min()})
    out.index.name = "batch"
    out["saved (µs)"] = (out["gradient summed (ms)"] - out["parameters averaged (ms)"]) * 1e3
    if len(peer):
        out[FUSED] = peer.min()
    return out


#: forms_table's column of the plain step with the all-reduce fused with the update over NVLink.
FUSED = "all-reduce fused with the update over NVLink (ms)"


BUCKET_PIECE = "1 GPU, one GPU's share: "
SHARE = "rare bucket's share of the work"


def overlap_bound(run: RecordedRun) -> pd.DataFrame | None:
    """What the bucketed step (2 buckets, parameter form) could save at most,
    from pieces measured alone, against what it saved, at each batch the run
    timed bucket by bucket (experiment ``bucket pieces``); None for a run
    without them.

    The first all-reduce can start only when the rare-word bucket's scatter
    ends (and, in a run that times :data:`~.workers.FIRST_PIECE`, the small
    gradients formed beside it: the small parameters travel with the rare
    rows, and the first all-reduce waits for that launch, ``first
    all-reduce after``), so the overlap can hide at most W1's whole scatter
    less that (``hideable``); the step then sends two all-reduces instead of
    one, which costs ``A(first) + A(last) - A(whole)`` more, each from the
    lab's all-reduce curve in a CUDA graph (interpolated at the buckets'
    sizes). (In a run without that piece the small parameters travelled with
    the frequent rows, and the lean steps formed their gradient beside the
    all-reduce: it counts among what can be hidden there.)
    ``ideal saving`` = hideable (or the first all-reduce's time, if shorter) -
    that cost: the saving with perfect overlap
    and nothing shared between the all-reduce and the scatter. ``measured
    saving``: the plain step through NCCL (its fastest form) less that bucketed
    configuration, both from the sweep (the slower GPU's median). Where the
    sweep also timed the configuration not overlapped (every all-reduce after
    the whole scatter): ``split, not overlapped`` = plain less that step (what
    splitting alone costs, negative), and ``the overlap's own gain`` = that
    step less the overlapped one."""
    if "bucket pieces" not in set(run.timings["experiment"]):
        return None
    pieces = run.experiment("bucket pieces")
    curve = allreduce_table(run, LAB_ALLREDUCE + ", CUDA graph")
    a_us = lambda nbytes: float(np.interp(nbytes, curve["bytes"], curve["median_ms"])) * 1e3   # noqa: E731
    sweep = overlap_table(run)
    layout = Layout(VOCAB)
    rows = []
    for b in sorted(set(pieces["size"])):
        at = pieces[pieces["size"] == b]
        us = lambda name, per_sm, share: float(at[(at["variant"] == BUCKET_PIECE + name) & (at["blocks_per_sm"] == per_sm)  # noqa: E731
                                                  & np.isclose(at["rare_share"], share)]["median_ms"].iloc[0]) * 1e3
        # the plain step through NCCL: the bound is the NCCL steps' (the peer update's forms are not cut this way)
        plain = sweep.loc[sweep.index.str.startswith("one all-reduce") & ~sweep.index.str.contains(PEER), b].min() \
            if sweep is not None else np.nan
        timed_small = at[at["variant"] == BUCKET_PIECE + "small gradients, coalesced"]["median_ms"]
        small = float(timed_small.iloc[0]) * 1e3 if len(timed_small) else np.nan
        fused = (at["variant"] == BUCKET_PIECE + FIRST_PIECE).any()
        for per_sm in sorted(set(at["blocks_per_sm"])):
            for share in sorted(set(at["rare_share"]), reverse=True):
                whole = us("W1's scatter, every row", per_sm, 0.5)
                rare = us("W1's scatter, rare-word bucket", per_sm, share)
                freq = us("W1's scatter, frequent-word bucket", per_sm, share)
                first_name = FIRST_PIECE if fused else "W1's scatter, rare-word bucket"
                first = us(first_name, per_sm, share)
                first_bytes = float(at[(at["variant"] == BUCKET_PIECE + first_name)
                                       & (at["blocks_per_sm"] == per_sm) & np.isclose(at["rare_share"], share)]["bytes"].iloc[0])
                all_bytes = 4.0 * layout.size     # the rest goes in the last all-reduce
                extra = a_us(first_bytes) + a_us(all_bytes - first_bytes) - a_us(all_bytes)
                timed = lambda c: (sweep.loc["bucketed: " + c.label, b]                 # noqa: E731
                                   if sweep is not None and "bucketed: " + c.label in sweep.index else np.nan)
                config = Overlap(2, int(per_sm) or None, True, "parameters", None if share == 0.5 else float(share))
                # The lean steps (two streams; one, not overlapped) have the same kernels and all-reduces, but
                # run the small parameters' gradient beside the all-reduce (the four-stream step runs it beside
                # the rare bucket's scatter, before the all-reduce), so it counts among what can be hidden.
                lean = [c for c in (replace(config, lean=True), replace(config, lean=True, comm_first=True))
                        if not np.isnan(timed(c))]
                for config in [config] + lean:
                    beside = small if config.lean and not fused else 0.0
                    measured, serial = plain - timed(config), timed(replace(config, overlapped=False))
                    rows.append({"batch": int(b), "configuration": config.label,
                                 "streams": ("two, all-reduce first" if config.comm_first else "two (lean)")
                                 if config.lean else "four",
                                 "scatter grid": "one block per document" if per_sm == 0 else
                                 f"{int(per_sm)} blocks per SM", SHARE: float(share),
                                 "last all-reduce (MB)": (all_bytes - first_bytes) / 1e6,
                                 "whole scatter (µs)": whole, "rare bucket (µs)": rare, "frequent bucket (µs)": freq,
                                 "first all-reduce after (µs)": first, "small gradients beside it (µs)": beside,
                                 # nothing is left to hide where the launch the first all-reduce waits for
                                 # takes as long as the whole scatter alone
                                 "hideable (µs)": max(0.0, whole - first + beside), "second all-reduce costs (µs)": extra,
                                 "ideal saving (µs)": min(max(0.0, whole - first + beside), a_us(first_bytes)) - extra,
                                 "measured saving (µs)": measured * 1e3,
                                 "split, not overlapped (µs)": (plain - serial) * 1e3,
                                 "the overlap's own gain (µs)": (serial - timed(config)) * 1e3})
    return pd.DataFrame(rows)


def _bound_row(bound: pd.DataFrame, batch: int, kept_label: str | None) -> pd.Series:
    """The bound's row at ``batch`` for the configuration the run kept there, or, if the
    kept one was not timed piece by piece, the equal cut on 8 blocks per SM."""
    at = bound[bound["batch"] == batch]
    same = at[at["configuration"] == kept_label]
    if len(same):
        return same.iloc[0]
    return at[(at["scatter grid"] == "8 blocks per SM") & (at[SHARE] == 0.5)].iloc[0]


def bound_text(bound: pd.DataFrame, kept_table: pd.DataFrame | None) -> str:
    """The chapter's sentences on :func:`overlap_bound` at its smallest batch."""
    b = int(bound["batch"].min())
    row = _bound_row(bound, b, None if kept_table is None or b not in kept_table.index else kept_table.loc[b, "label"])
    at = bound[(bound["batch"] == b) & (bound["scatter grid"] == row["scatter grid"])]
    at = at[at["streams"] == row["streams"]] if "streams" in at else at
    quarter = at[at[SHARE] < 0.5]
    ideal, m = float(row["ideal saving (µs)"]), float(row["measured saving (µs)"])
    beside = float(row.get("small gradients beside it (µs)", 0.0))
    first = float(row.get("first all-reduce after (µs)", row["rare bucket (µs)"]))
    with_small = first != float(row["rare bucket (µs)"])
    text = (f"At B = {b:,}, with the scatter on {row['scatter grid']}, one GPU's share of the whole scatter takes "
            f"{row['whole scatter (µs)']:.1f} µs alone and the rare-word bucket, with "
            f"{row[SHARE]:.0%} of the non-zeros, "
            f"{row['rare bucket (µs)']:.1f} µs" +
            (f" ({first:.1f} µs with the small parameters' gradient in the same launch, which the first all-reduce "
             f"waits for)" if with_small else "") +
            (f", leaving at most {row['hideable (µs)']:.1f} µs of " +
             (f"work to hide the all-reduce under (the rest of the scatter, and the small parameters' gradient, "
              f"{beside:.1f} µs alone, which the {row['streams']} step runs beside the all-reduce)" if beside else
              "scatter to hide the all-reduce under") if row["hideable (µs)"] > 0 else
             ", leaving no scatter to hide the all-reduce under (what the first all-reduce waits for takes as long "
             "as the whole scatter alone)") +
            f". Sending the gradient as two all-reduces instead of one costs "
            f"{row['second all-reduce costs (µs)']:.1f} µs more (the lab's all-reduce curve in a CUDA graph, at the two "
            "buckets' sizes against one of the whole). With perfect overlap and nothing shared between the all-reduce "
            "and the scatter, the bucketed step " +
            (f"could therefore save at most {ideal:.1f} µs there" if ideal > 0 else
             f"would therefore still lose {-ideal:.1f} µs there") +
            ("" if np.isnan(m) else f"; the sweep measured a {'saving' if m >= 0 else 'loss'} of {abs(m):.1f} µs") + ".")
    if len(quarter):
        q = quarter.iloc[0]
        text += (f" A rare-word bucket with {q[SHARE]:.0%} "
                 f"of the work starts the large all-reduce after "
                 f"{float(q.get('first all-reduce after (µs)', q['rare bucket (µs)'])):.1f} µs instead, but "
                 f"leaves {q['last all-reduce (MB)']:.2f} MB to the second all-reduce, which then costs "
                 f"{q['second all-reduce costs (µs)']:.1f} µs more than one (ideal saving "
                 f"{q['ideal saving (µs)']:+.1f} µs).")
    return text


def bound_verdict(bound: pd.DataFrame, kept_table: pd.DataFrame | None = None) -> str:
    """Per batch of :func:`overlap_bound`, for the configuration the run kept (or the equal cut on
    8 blocks per SM): the ideal saving against the measured one, the difference split into what
    the split step costs beyond its kernels (timed without the overlap) and what the all-reduce and
    the frequent words' scatter cost each other side by side; and the best ideal saving of any cut."""
    out = []
    for b, at in bound.groupby("batch"):
        b = int(b)
        row = _bound_row(bound, b, None if kept_table is None or b not in kept_table.index
                         else kept_table.loc[b, "label"])
        ideal, m = float(row["ideal saving (µs)"]), float(row["measured saving (µs)"])
        split, gain = float(row["split, not overlapped (µs)"]), float(row["the overlap's own gain (µs)"])
        beside = float(row.get("small gradients beside it (µs)", 0.0))
        work = float(row["frequent bucket (µs)"]) + beside          # what runs beside the first all-reduce
        hide = min(work, work + ideal - float(row["hideable (µs)"]) + float(row["second all-reduce costs (µs)"]))
        # min(S_f (+ small), A(first)). The pieces' prediction of the split step not overlapped: the second
        # all-reduce, the buckets' scatter (the first with the small gradients, where it has them) less the
        # whole, and (lean steps of a run without that launch: on one stream) the small gradients after it.
        first = float(row.get("first all-reduce after (µs)", row["rare bucket (µs)"]))
        predicted = float(row["second all-reduce costs (µs)"]) + float(
            first + row["frequent bucket (µs)"] - row["whole scatter (µs)"]) + beside
        text = (f"At B = {b:,} ({row['configuration']}) the bucketed step could save {ideal:.1f} µs with perfect "
                f"overlap" if ideal > 0 else f"At B = {b:,} ({row['configuration']}) the bucketed step would lose "
                f"{-ideal:.1f} µs even with perfect overlap")
        if np.isnan(m) or np.isnan(split) or np.isnan(gain):
            out.append(text + ".")
            continue
        text += (f"; measured, it {'saved' if m >= 0 else 'lost'} {abs(m):.1f} µs. Of the difference, "
                 f"{-split - predicted:.1f} µs is the split step's own cost beyond its kernels' (timed with every "
                 f"all-reduce after the whole scatter it is {-split:.1f} µs slower than the plain step, where the "
                 f"pieces add up to {predicted:.1f}), and {hide - gain:.1f} µs is what the all-reduce and the "
                 f"frequent words' scatter{' and the small gradients' if beside else ''} cost each other side by "
                 f"side (the overlap gained {gain:.1f} µs of the {hide:.1f} µs of "
                 f"{'work' if beside else 'scatter'} it could hide).")
        best = at.loc[at["ideal saving (µs)"].idxmax()]
        if best["ideal saving (µs)"] <= 0:
            text += (" No cut timed piece by piece could save anything even ideally (the best, "
                     f"{best['configuration']}, would lose {-best['ideal saving (µs)']:.1f} µs).")
        elif best["configuration"] != row["configuration"]:
            text += (f" The best cut timed piece by piece ({best['configuration']}) could save "
                     f"{best['ideal saving (µs)']:.1f} µs ideally; the sweep measured {best['measured saving (µs)']:+.1f} µs.")
        out.append(text)
    return " ".join(out)


LEAN_MARKS = (", two streams", ", one stream")


def streams_verdict(run: RecordedRun) -> str:
    """What the lean step (two streams; one, not overlapped; see ``gpustep.GpuStep.lean_step``) changed
    against the four-stream step, from the sweep: per batch, the fastest overlapped configuration of
    each kind, and the split step not overlapped on one stream against four."""
    sweep = overlap_table(run)
    if sweep is None or not sweep.index.str.contains("|".join(LEAN_MARKS)).any():
        return ("This run does not time the lean step, so what the four streams' events and dependencies cost "
                "is not measured here.")
    lean = sweep.index.str.contains("|".join(LEAN_MARKS))
    bucketed = sweep.index.str.startswith("bucketed") & ~sweep.index.str.contains("not overlapped")
    serial = sweep.index.str.contains("not overlapped")
    gain = (sweep[bucketed & ~lean].min() - sweep[bucketed & lean].min()) * 1e3          # µs, > 0: lean faster
    serial_gain = (sweep[serial & ~lean].min() - sweep[serial & lean].min()) * 1e3
    fmt = lambda b: f"{int(b):,}"       # noqa: E731
    first = sweep[bucketed & sweep.index.str.contains("all-reduce first")].min()
    spare = sweep[bucketed & sweep.index.str.contains("on all but")].min()
    other = sweep[bucketed & ~sweep.index.str.contains("all-reduce first|on all but")].min()
    text = (f"The lean step (two streams, two cross-stream dependencies) was faster than the fastest four-stream "
            f"configuration at {int((gain > 0).sum())} of {len(gain)} batch sizes (by {gain.min():+.1f} to "
            f"{gain.max():+.1f} µs; at B = {fmt(gain.index[0])}, {gain.iloc[0]:+.1f} µs). Not overlapped, the split "
            f"step on one stream took {serial_gain.iloc[0]:+.1f} µs less than on four at B = {fmt(gain.index[0])}, "
            f"{serial_gain.iloc[-1]:+.1f} µs at {fmt(gain.index[-1])}")
    if first.notna().any() and spare.notna().any():
        def at(series):
            return ", ".join(f"{fmt(b)} ({(other[b] - series[b]) * 1e3:+.1f} µs)" for b in series.index
                             if series[b] < other[b]) or "no batch"
        text += (f". Against every other overlapped configuration, launching the all-reduce first won at B = "
                 f"{at(first)}, and leaving NCCL {SPARE_SMS} empty SMs at {at(spare)}")
    return text + "."


def split_verdict(run: RecordedRun) -> str:
    """Where the split plain step's extra time on two GPUs comes from: the two GPUs'
    computation alone in both launch forms (experiment ``compute forms``), against one
    GPU on the same documents and against the plain step with its all-reduce."""
    if "compute forms" not in set(run.timings["experiment"]):
        return ("This run does not time the two GPUs' computation alone in each form, so where that difference "
                "comes from is not measured here.")
    c = run.experiment("compute forms")
    big = int(c["size"].max())
    at = c[c["size"] == big].set_index("variant")["median_ms"]
    name = lambda key: f"2 GPUs, compute only, {PLAIN_FORMS[key]}"      # noqa: E731
    r2c = float(at[name(("gradient", True))] / at[name(("gradient", False))])
    t = step_table(run)
    half = big // 2 if big // 2 in t.index else big
    r1 = float(t.loc[half, ONE_GPU_SPLIT] / t.loc[half, ONE_GPU_REPLICA])
    sweep = overlap_table(run)
    r2 = float(sweep.loc["one all-reduce, split gradient", big] / sweep.loc["one all-reduce, step 9's gradient kernel", big])
    where = ("comes with the all-reduce, not from the computation" if abs(r2c - r1) <= abs(r2 - r2c) else
             "is already there without the all-reduce")
    return (f"With no all-reduce at all, the two GPUs' computation in the split form takes {r2c:.2f}x that of the "
            f"single launch (one GPU on the same {half:,} documents: {r1:.2f}x; with the all-reduce: {r2:.2f}x), so "
            f"the split form's extra time on two GPUs {where}.")


def scaling_budget(run: RecordedRun) -> pd.DataFrame:
    """At the largest batch, what separates the two-GPU step from half of one
    GPU's: the measured steps, each against the previous line (ms)."""
    t, s = step_table(run), scaling_table(run)
    b = int(t.index.max())
    one = float(s.loc[b, "1 GPU (fastest)"])
    lines = [("half of the fastest one-GPU step", one / 2),
             ("1 GPU, step 10, on half the batch (measured)",
              float(t.loc[b // 2, ONE_GPU_GRAPH]) if b // 2 in t.index else float("nan")),
             ("2 GPUs, compute only (each GPU: half the batch in the plain step's kept form; no all-reduce)",
              float(t.loc[b, COMPUTE_ONLY])),
             ("2 GPUs, one all-reduce", float(t.loc[b, PLAIN])),
             ("2 GPUs, bucketed, overlapped", float(t.loc[b, BUCKETED])),
             (f"target: {SCALING_TARGET} x the fastest one-GPU step", SCALING_TARGET * one)]
    out = pd.DataFrame(lines, columns=["step", "ms"])
    out["vs one GPU"] = out["ms"] / one
    return out


def allreduce_comparison(run: RecordedRun) -> pd.DataFrame | None:
    """Per size: the lab's all-reduce (one process per GPU, eager and CUDA graph),
    torch.distributed's, one process driving both GPUs; lab / torch."""
    r = run.experiment("allreduce")
    t = r.pivot_table(index="size", columns="variant", values="median_ms").rename_axis(index="bytes", columns=None)
    if LAB_ALLREDUCE not in t or TORCH_ALLREDUCE not in t:
        return None
    t = t.reset_index()
    t["lab / torch"] = t[LAB_ALLREDUCE] / t[TORCH_ALLREDUCE]
    return t


def predicted_steps(run: RecordedRun, model: costmodel.RingModel | None = None) -> pd.DataFrame | None:
    """The cost model's two-GPU plain step: the fastest one-GPU step (step 9,
    step 10, or the replicas' gradient-then-update forms, :data:`ONE_GPU_STEPS`: the plain step keeps
    whichever form is fastest) on half the batch, measured, plus the fitted
    all-reduce of the whole gradient (or parameters: the same bytes); against
    the measured plain step through NCCL (:func:`nccl_plain`): the model is NCCL's ring, fitted
    to the curve NCCL measured under one setting, so it predicts the step that calls that
    all-reduce, not the peer update's (06_peer_update.cu), which sends nothing through NCCL."""
    t = step_table(run)
    if ONE_GPU_REPLICA not in t or PLAIN not in t:
        return None
    measured = nccl_plain(run)
    replica = t[[c for c in ONE_GPU_STEPS if c in t]].min(axis=1)
    model = model or fitted_model(run)
    grad = 4 * Layout(VOCAB).size
    rows = []
    for b in t.index:
        if b // 2 in t.index and not np.isnan(replica.loc[b // 2]):
            comm = model.time_ms(grad, 2)
            lo, hi = costmodel.prediction_range(model, grad, 2)
            pred = replica.loc[b // 2] + comm
            rows.append({"batch": b, "1 GPU on B/2 (ms)": replica.loc[b // 2], "all-reduce, model (ms)": comm,
                         "predicted (ms)": pred, "predicted range (ms)": f"{pred - comm + lo:.3f}-{pred - comm + hi:.3f}",
                         "measured (ms)": measured.loc[b], "error": pred / measured.loc[b] - 1})
    return pd.DataFrame(rows) if rows else None


def curve_setting(run: RecordedRun) -> str:
    """The NCCL setting the run's all-reduce curves were measured under: the one kept at its
    largest batch (the curves run in that batch's processes)."""
    k = kept(run)
    return str(k.loc[k.index.max(), "nccl"]) if k is not None and "nccl" in k else "NCCL defaults"


def nccl_plain(run: RecordedRun) -> pd.Series:
    """Per batch, the fastest plain step through NCCL (any of its forms without the peer update)
    under :func:`curve_setting`, the slower GPU's median (ms), from the NCCL-settings sweep; a run
    without a per-batch sweep: its plain step (the ``step`` rows), which then always called NCCL."""
    by = nccl_by_batch(run, plain_only=True)
    setting = curve_setting(run)
    if by is not None and setting in by:
        return by[setting]
    return step_table(run)[PLAIN]


def allreduce_table(run: RecordedRun, variant: str | None = None) -> pd.DataFrame:
    """One all-reduce curve (the lab's, one process per GPU, when the run has it):
    bytes, median time, algorithm and bus bandwidth (GB/s)."""
    r = run.experiment("allreduce")
    if variant is None and LAB_ALLREDUCE in set(r["variant"]):
        variant = LAB_ALLREDUCE
    if variant is not None:
        r = r[r["variant"] == variant]
    r = r.sort_values("size")
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
    """Bus bandwidth against message size, every measured curve, with the ring model fitted to the lab's."""
    a = allreduce_table(run)
    model = model or fitted_model(run)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for v in sorted(set(run.experiment("allreduce")["variant"])):
        c = allreduce_table(run, v)
        ax.plot(c["bytes"], c["busbw_gbs"], marker="o", ms=3, label=v)
    sizes = np.logspace(np.log10(a["bytes"].min()), np.log10(a["bytes"].max()), 100)
    ax.plot(sizes, costmodel.bus_bandwidth_gbs(sizes, model.time_ms(sizes, 2), 2), ls="--",
            label=f"ring model fitted to the lab's curve: {model.bw_gbs:.0f} ± {model.bw_err:.0f} GB/s, "
                  f"{model.alpha_us:.1f} ± {model.alpha_err:.1f} µs per step")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.legend(fontsize=7)
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


LANES = ("compute", "compute (small)", "compute (second stream)", "communication", "update")
COLOURS = {"forward": "#4c72b0", "gradient": "#55a868", "all-reduce": "#c44e52", "update": "#8172b2"}


def timeline(run: RecordedRun) -> pd.DataFrame:
    """The run's timeline side table, the parameter form's "all-reduce (average): X" and the
    peer update's "all-reduce and update over NVLink: X" named "all-reduce: X" like the gradient
    form's NCCL all-reduce (``averaged`` and ``fused`` say which)."""
    t = run.tables["timeline"].copy()
    t["averaged"] = t["operation"].str.contains(" (average)", regex=False)
    t["fused"] = t["operation"].str.startswith(PEER_OP + ": ")
    t["operation"] = t["operation"].str.replace(" (average)", "", regex=False).str.replace(
        PEER_OP + ": ", "all-reduce: ", regex=False)
    return t


def timeline_span(run: RecordedRun, batch: int, mode: str, operation: str, gpu: int | None = None,
                  edge: str = "duration") -> float:
    """From the timeline: the longest duration (µs), or the latest ``"end"``,
    of the operations of ``mode`` at ``batch`` whose name starts with
    ``operation`` (on ``gpu``, or on any GPU)."""
    t = timeline(run)
    r = t[(t["batch"] == batch) & (t["mode"] == mode) & t["operation"].str.startswith(operation)]
    if gpu is not None:
        r = r[r["gpu"] == gpu]
    if len(r) == 0:
        raise KeyError(f"no operation starting with {operation!r} in the {mode} timeline at B = {batch}")
    return float((r["end_us"] - r["start_us"]).max() if edge == "duration" else r["end_us"].max())


def plot_timeline(run: RecordedRun, batch: int):
    """One eager step of each mode at ``batch``, every operation on its GPU's
    streams (each GPU's times from its own first event)."""
    t = run.tables["timeline"]
    t = t[t["batch"] == batch]
    modes = [m for m in ("plain", "bucketed") if m in set(t["mode"])]
    fig, axes = plt.subplots(len(modes), 1, figsize=(9, 2.2 + 1.4 * len(modes)), sharex=True, squeeze=False)
    for ax, mode in zip(axes[:, 0], modes):
        m = t[t["mode"] == mode]
        lanes = [(g, lane) for g in sorted(set(m["gpu"])) for lane in LANES if ((m["gpu"] == g) & (m["lane"] == lane)).any()]
        for y, (g, lane) in enumerate(lanes):
            for r in m[(m["gpu"] == g) & (m["lane"] == lane)].itertuples():
                kind = next(k for k in COLOURS if r.operation.startswith(k))
                ax.barh(y, r.end_us - r.start_us, left=r.start_us, color=COLOURS[kind], edgecolor="white", height=0.7)
        ax.set_yticks(range(len(lanes)), [f"GPU {g}: {lane}" for g, lane in lanes], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{mode}: {m['end_us'].max():.0f} µs", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("time from the step's first operation (µs)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    axes[0, 0].legend(handles, list(COLOURS), fontsize=7, ncol=4, loc="lower right", bbox_to_anchor=(1.0, 1.0),
                      frameon=False)
    # One title for the whole figure (each panel keeps its own "mode: time" title).
    return plots._finish(fig, axes[-1, 0], f"Where does the all-reduce run? One step at B = {batch:,}, both GPUs",
                         run.caption + " (two GPUs, eager steps)", whole_figure=True)


def ring_steps(model: costmodel.RingModel, nbytes: int, p: int) -> pd.DataFrame:
    """The ring all-reduce of ``nbytes`` over ``p`` GPUs step by step, as the
    model counts it: 2 (p - 1) steps (reduce-scatter, then all-gather), in
    each of which every GPU sends one chunk of nbytes / p to its neighbour,
    taking alpha + chunk / beta. Columns: phase, step, bytes sent per GPU,
    start and end (µs)."""
    if p < 2:
        raise ValueError(f"a ring needs at least 2 GPUs, got {p}")
    chunk = nbytes / p
    each_us = model.alpha_us + chunk / (model.bw_gbs * 1e9) * 1e6
    rows = [{"phase": phase, "step": k + 1, "bytes per GPU": chunk,
             "start_us": (i * (p - 1) + k) * each_us, "end_us": (i * (p - 1) + k + 1) * each_us}
            for i, phase in enumerate(("reduce-scatter", "all-gather")) for k in range(p - 1)]
    return pd.DataFrame(rows)


def plot_ring(model: costmodel.RingModel, nbytes: int, p: int, caption: str, measured_us: float | None = None):
    """The ring all-reduce of the chapter's buffer on ``p`` GPUs: who sends to
    whom and how many bytes per step (left), and the steps in time as the
    fitted model predicts them, against the measured all-reduce (right)."""
    steps = ring_steps(model, nbytes, p)
    fig, (ring, sched) = plt.subplots(1, 2, figsize=(plots.MAX_WIDTH_IN, 3.8), gridspec_kw={"width_ratios": [1, 1.6]})
    angles = np.pi / 2 - 2 * np.pi * np.arange(p) / p
    xy = np.c_[np.cos(angles), np.sin(angles)]
    chunk_mb = nbytes / p / 1e6
    for r in range(p):
        a, b = xy[r], xy[(r + 1) % p]
        if p == 2:       # two GPUs: the ring is one link used in both directions
            off = np.array([0.12, 0.0]) * (1 if r == 0 else -1)
            a, b = a + off, b + off
        ring.annotate("", xy=a + 0.78 * (b - a), xytext=a + 0.22 * (b - a),
                      arrowprops={"arrowstyle": "->", "lw": 1.6, "color": COLOURS["all-reduce"]})
        mid = (a + b) / 2
        if p <= 4:           # more GPUs: the title gives the bytes per step
            ring.text(*(mid * (1.25 if p > 2 else 1) + (np.array([0.35, 0]) if p == 2 and r == 0 else
                                                        np.array([-0.35, 0]) if p == 2 else 0)),
                      f"{chunk_mb:.2f} MB\nper step", ha="center", va="center", fontsize=7)
    for r, (x, y) in enumerate(xy):
        ring.add_patch(plt.Circle((x, y), 0.2, color="#dddddd", zorder=3))
        ring.text(x, y, f"GPU {r}", ha="center", va="center", fontsize=8, zorder=4)
    ring.set_xlim(-1.6, 1.6)
    ring.set_ylim(-1.4, 1.4)
    ring.set_aspect("equal")
    ring.axis("off")
    ring.set_title(f"{p} GPUs: each sends S/p = {chunk_mb:.2f} MB per step,\n"
                   f"2(p-1) = {2 * (p - 1)} steps, {2 * (p - 1) / p * nbytes / 1e6:.1f} MB in all", fontsize=8)
    colours = {"reduce-scatter": "#c44e52", "all-gather": "#dd8452"}
    for y, r in enumerate(steps.itertuples()):
        sched.barh(y, r.end_us - r.start_us, left=r.start_us, color=colours[r.phase], edgecolor="white")
        if p <= 4:
            sched.text(r.start_us + (r.end_us - r.start_us) / 2, y, f"{r.phase} {r.step}", ha="center",
                       va="center", fontsize=7, color="white")
    total = float(steps["end_us"].iloc[-1])
    for phase, c in colours.items():
        sched.barh(0, 0, color=c, label=f"{phase} ({p - 1} steps)")
    sched.axvline(total, color="#333333", ls="--", lw=1, label=f"model: {total:.0f} µs")
    if measured_us is not None:
        sched.axvline(measured_us, color="#4c72b0", lw=1.5, label=f"measured alone: {measured_us:.0f} µs")
    sched.set_yticks([])
    sched.invert_yaxis()
    sched.set_xlabel(f"µs (each step: alpha {model.alpha_us:.1f} µs + {chunk_mb:.2f} MB at {model.bw_gbs:.0f} GB/s)")
    sched.legend(fontsize=7, loc="upper right")
    fig.subplots_adjust(top=0.78)
    return plots._finish(fig, sched, f"The ring all-reduce of {nbytes / 1e6:.1f} MB on {p} GPUs, step by step",
                         caption, whole_figure=True)


# What the prose quotes. Each ``show_*`` function displays a section's tables (and figures) of a
# run; each ``*_numbers`` function returns the values that section's prose quotes, by name, for
# ``gpulab.prose.glue(**...)``: the notebook's cells stay a few lines, and every sentence the run
# decides is built here, where a test can call it on a synthetic run.

#: The all-reduce's per-step latency the cost model assumes while no two-GPU run is recorded.
ASSUMED_ALPHA_US = 5.0


def _display(*objects):
    from IPython.display import display
    display(*objects)


def show_sweep(run: RecordedRun) -> None:
    """The overlap sweep's tables: every configuration's time, what the run kept, the NCCL settings
    (at the largest batch and per batch) and the plain step's two forms."""
    sweep, nccl, nccl_by = overlap_table(run), nccl_table(run), nccl_by_batch(run)
    _display(sweep.style.format(precision=4).highlight_min(axis=0, props="font-weight: bold")
             .set_caption("The sweep: time per step (ms, the slower GPU's median) of the plain step in both forms "
                          "and of the bucketed step in every configuration, " + run.caption))
    _display(kept(run).style.set_caption("What the run kept at each batch"))
    _display(nccl.style.format(precision=4).hide(axis="index")
             .set_caption("NCCL settings at the largest batch, each in fresh processes, " + run.caption))
    if nccl_by is not None:
        _display(nccl_by.style.format(precision=4).highlight_min(axis=1, props="font-weight: bold")
                 .set_caption("The fastest two-GPU step through NCCL (ms, the slower GPU's median) under each NCCL "
                              "setting, at every batch, each setting in fresh processes; the run keeps each batch's "
                              "fastest setting, " + run.caption))
    forms = forms_table(run)
    if forms is not None:
        _display(forms.style.format({**{c: "{:.4f}" for c in forms.select_dtypes("floating").columns},
                                     "saved (µs)": "{:.1f}"})
                 .set_caption("The plain step with the gradient summed or the parameters averaged (each in its faster "
                              "launch form; ms, the slower GPU's median in the sweep), " + run.caption))


def _param_numbers(forms: pd.DataFrame | None) -> dict:
    """What averaging the parameters did to the plain step (the sweep's forms table)."""
    if forms is None:
        return dict(param_saved_min_us=float("nan"), param_saved_max_us=float("nan"),
                    param_verdict="this run was recorded before the parameter-averaging form existed, so it does "
                                  "not time it")
    won, lost = forms["saved (µs)"][forms["saved (µs)"] > 0], forms["saved (µs)"][forms["saved (µs)"] <= 0]
    return dict(param_saved_min_us=float(forms["saved (µs)"].min()), param_saved_max_us=float(forms["saved (µs)"].max()),
                param_verdict=f"averaging the parameters made the plain step faster at {len(won)} of {len(forms)} batch "
                              f"sizes" + (f" (B = {', '.join(f'{b:,}' for b in won.index)}, by {won.min():.0f} to "
                                          f"{won.max():.0f} µs)" if len(won) else "") +
                              (f" and slower at B = {', '.join(f'{b:,}' for b in lost.index)} (by {-lost.max():.0f} to "
                               f"{-lost.min():.0f} µs), where the gradient form's fastest plain step "
                               "was faster" if len(lost) else ""))


def _nccl_verdict(k: pd.DataFrame, nccl: pd.DataFrame, nccl_by: pd.DataFrame | None) -> str:
    """Which NCCL setting the run kept, and what the largest batch's would have cost a small batch."""
    if nccl_by is not None:
        small, big_b = int(k.index.min()), int(k.index.max())
        mine, theirs = nccl_by.loc[small, k.loc[small, "nccl"]], nccl_by.loc[small, k.loc[big_b, "nccl"]]
        return ("of NCCL's settings the run kept " + "; ".join(
                    f"{setting} at B = {', '.join(f'{b:,}' for b in k.index[k['nccl'] == setting])}"
                    for setting in dict.fromkeys(k["nccl"]))
                + f" (at each batch the fastest step through NCCL; the table above the timeline): at B = {small:,} the "
                f"largest batch's setting ({k.loc[big_b, 'nccl']}) would have made that step "
                f"{(theirs - mine) * 1e3:.1f} µs slower ({theirs:.4f} against {mine:.4f} ms)")
    chosen = k["nccl"].iloc[0]
    plain = nccl.set_index("NCCL settings")["plain step (ms)"]
    if chosen == "NCCL defaults":
        return (f"NCCL's channel and thread settings did not help: the run kept {chosen}, and the slowest setting "
                f"made the plain step {nccl['plain step (ms)'].max() / nccl['plain step (ms)'].min():.2f}x slower")
    return (f"of NCCL's settings the run kept {chosen}, whose plain step took {plain.loc[chosen]:.4f} ms at the "
            f"largest batch against {plain.loc['NCCL defaults']:.4f} ms with NCCL's defaults (a difference of "
            f"{abs(plain.loc[chosen] - plain.loc['NCCL defaults']) * 1e3:.1f} µs, to be set against the run's own "
            "spread, below); the record keeps the setting whose fastest bucketed step is fastest there "
            f"({nccl['fastest bucketed step (ms)'].min():.4f} ms, against "
            f"{nccl.set_index('NCCL settings').loc['NCCL defaults', 'fastest bucketed step (ms)']:.4f} ms with the "
            "defaults), and uses it at every batch: what it does to the smaller batches' steps, where the overlap "
            "target is judged, this run does not measure")


def sweep_numbers(run: RecordedRun) -> dict:
    """What the prose says of the sweep: the parameter form, the persistent grids, the priorities,
    NCCL's settings and the plain step's split form."""
    sweep, k = overlap_table(run), kept(run)
    # configurations swept at both priorities (the parameter form's only at high priority)
    high = sweep[sweep.index.str.endswith("high priority")
                 & sweep.index.str.replace("high priority", "equal priority").isin(sweep.index)]
    equal = sweep.rename(index=lambda v: v.replace("equal priority", "high priority")).loc[high.index]
    pairs = (high / equal - 1).stack()        # high against equal priority, every configuration and batch
    split = sweep.loc["one all-reduce, split gradient"] / sweep.loc["one all-reduce, step 9's gradient kernel"]
    steps = step_table(run)
    split_one = steps[ONE_GPU_SPLIT] / steps[ONE_GPU_REPLICA]
    persistent = int(k["label"].str.contains("per SM").sum())     # a persistent grid beside the all-reduce
    bucketed = sweep[sweep.index.str.startswith("bucketed") & ~sweep.index.str.contains("not overlapped")]
    per_doc = bucketed[~bucketed.index.str.contains("per SM")].min()
    persistent_best = bucketed[bucketed.index.str.contains("per SM")].min()
    return dict(
        **_param_numbers(forms_table(run)),
        kept_persistent=f"{persistent} of {len(k)}", persistent_gain=float((1 - persistent_best / per_doc).max()),
        priority_verdict=(("stream and node priorities made no consistent difference" if pairs.abs().median() < 0.01
                           else "stream and node priorities made a difference") +
                          f": over every configuration and batch, high priority and equal priority differ by a median "
                          f"of {pairs.abs().median():.2%} (at most {pairs.abs().max():.1%}), and high priority is the "
                          f"faster in {int((pairs < 0).sum())} of {len(pairs)} pairs"),
        nccl_verdict=_nccl_verdict(k, nccl_table(run), nccl_by_batch(run)),
        split_big=float(split.loc[split.index.max()]), split_one_big=float(split_one.loc[split_one.index.max()]),
        split_where=split_verdict(run), streams_verdict=streams_verdict(run),
        split_kept="the plain step keeps " + "; ".join(
            f"{form} at B = {', '.join(f'{b:,}' for b in k.index[k['plain'] == form])}"
            for form in dict.fromkeys(k["plain"])))


def _timeline_batches(run: RecordedRun) -> tuple[int, int, list[int]]:
    """The timeline's largest and smallest batch, and those between (where the all-reduce is a large
    share of the step)."""
    batches = set(run.tables["timeline"]["batch"])
    big, small = int(max(batches)), int(min(batches))
    return big, small, sorted(batches - {big, small})


def show_timelines(run: RecordedRun) -> None:
    """One step on both GPUs at the largest batch and at those between, and what separates two GPUs
    from half of one at the largest batch."""
    big, _, mids = _timeline_batches(run)
    for b in [big, *mids]:
        plot_timeline(run, b)
        plt.show()
    _display(scaling_budget(run).style.format({"ms": "{:.4f}", "vs one GPU": "{:.3f}"}).hide(axis="index")
             .set_caption(f"What separates two GPUs from half of one at B = {big:,}, " + run.caption))


def _run_spread(run: RecordedRun, big: int, s: pd.DataFrame, k: pd.DataFrame) -> list[float]:
    """The run's own spread at the largest batch: the kept plain step (its form, NCCL setting) timed in the
    NCCL-settings pass, in the sweep and in the final timing, three timings of the same configuration."""
    plain_kept, nccl_kept = k.loc[big, "plain"], k.loc[big, "nccl"]
    same = run.timings[(run.timings["size"] == big) & run.timings["experiment"].isin(["nccl settings", "overlap"])
                       & run.timings["variant"].str.endswith(f"one all-reduce, {plain_kept}; {nccl_kept}")]
    col = "slowest_rank_ms" if "slowest_rank_ms" in same else "median_ms"
    return list(same[col]) + [float(s.loc[big, PLAIN])]


def _room_verdict(label: str, fused: bool, ar_beside: float, ar_ref: float, ar_alone_us: float) -> str:
    """Why the all-reduce beside the scatter takes longer than alone, as far as the run can say."""
    if fused:
        return (f"The peer update beside the scatter ({label}, the timeline's configuration) takes "
                f"{ar_beside / ar_ref:.1f} times the plain step's peer update: it runs on fewer SMs, shares L2 and "
                "memory bandwidth with the scatter's atomics, and each of its blocks waits at its flags for the other "
                "GPU's (the timeline does not separate these); what the step gains depends only on how much of it "
                "ends inside the scatter.")
    if "per SM" not in label:
        return ("The timeline's configuration fills every SM with the scatter's blocks, so it cannot tell whether "
                "NCCL's blocks wait for SMs or for L2 and memory.")
    return (f"Even with {'SMs left to NCCL' if 'on all but' in label else 'room left on every SM'} ({label}, the "
            f"timeline's configuration), the all-reduce beside the scatter takes {ar_beside / ar_alone_us:.1f} times "
            "its time alone" + (": this points to what the two share, L2 and memory bandwidth under the scatter's "
                                "atomics, rather than to NCCL's blocks waiting for SMs."
                                if ar_beside > 1.5 * ar_alone_us else "."))


def timeline_numbers(run: RecordedRun) -> dict:
    """What the prose says of the timelines and the largest batch: where the two-GPU step's time goes,
    the scaling target's verdict and margin, and the overlap target's."""
    big, small_b, mids = _timeline_batches(run)
    s, budget, k = scaling_table(run), scaling_budget(run), kept(run)
    gpus = sorted(set(run.tables["timeline"]["gpu"]))

    def span(*a, **kw):
        return timeline_span(run, *a, **kw)

    tl = timeline(run)      # the parameter form's "all-reduce (average): X" named "all-reduce: X"
    big_tl = tl[tl["batch"] == big]
    last = big_tl[(big_tl["mode"] == "bucketed") & big_tl["operation"].str.startswith("gradient: W1 rows 0-")]
    alone = allreduce_table(run)
    grad_row = alone.iloc[(alone["bytes"] - 4 * Layout(VOCAB).size).abs().argsort().iloc[0]]

    def ms(name):
        return float(budget.set_index("step").loc[name, "ms"])

    one_big, target_ms = s.loc[big, "1 GPU (fastest)"], SCALING_TARGET * s.loc[big, "1 GPU (fastest)"]
    best_two = min(s.loc[big, PLAIN], s.loc[big, BUCKETED])
    ratio = best_two / one_big
    heavy = s[s["all-reduce share of plain step"] > OVERLAP_SHARE]
    wins = [int(b) for b in heavy.index if heavy.loc[b, BUCKETED] < heavy.loc[b, PLAIN]]
    losses = [int(b) for b in heavy.index if int(b) not in wins]

    def fmt(bs):
        return ", ".join(f"{b:,}" for b in bs) or "none"

    def by(bs):
        return ", ".join(f"{b:,} ({abs(heavy.loc[b, BUCKETED] - heavy.loc[b, PLAIN]) * 1e3:.1f} µs)" for b in bs) or "none"

    pieces = run.experiment("pieces")

    def piece(name, b):
        return float(pieces[(pieces["variant"] == f"1 GPU: {name}") & (pieces["size"] == b)]["median_ms"].iloc[0]) * 1e3

    # The all-reduces of every bucket but the last (the frequent words, W1's rows from 0):
    early = big_tl[(big_tl["mode"] == "bucketed") & big_tl["operation"].str.startswith("all-reduce: W1 rows")
                   & ~big_tl["operation"].str.startswith("all-reduce: W1 rows 0-")]
    big_ar_end = float(early["end_us"].max())
    plain_kept, nccl_kept = k.loc[big, "plain"], k.loc[big, "nccl"]
    timings_big = _run_spread(run, big, s, k)
    spread_us = (max(timings_big) - min(timings_big)) * 1e3
    # What a sparse all-reduce could save: the share of W1's rows a batch touches (this corpus, no GPU needed).
    sample = training_data.sample(max(s.index), VOCAB, stream=400)
    touched = {int(b): float(np.unique(sample.rows(0, int(b)).indices).size / VOCAB) for b in s.index}
    replica_us = (ms(budget["step"].iloc[2]) - ms(budget["step"].iloc[1])) * 1e3
    ar_beside = max(span(big, "bucketed", "all-reduce: W1 rows", gpu=g) for g in gpus)
    # The bucketed step kept at the largest batch: NCCL's all-reduce, or the peer update (06_peer_update.cu),
    # whose time alone is the plain step's peer update of the whole buffer (nothing beside it).
    fused = PEER in k.loc[big, "label"]
    ar_plain = min(span(big, "plain", "all-reduce", gpu=g) for g in gpus)
    ar_alone_us = grad_row["median_ms"] * 1e3
    ar_ref = ar_plain if fused else ar_alone_us
    mid_timeline = " ".join(
        f"The second timeline is one step at B = {b:,}, where the all-reduce is "
        f"{s.loc[b, 'all-reduce share of plain step']:.0%} of the plain step: there the rare-word bucket's all-reduce "
        f"takes {max(span(b, 'bucketed', 'all-reduce: W1 rows', gpu=g) for g in gpus):.0f} µs beside the scatter, and "
        f"the bucketed step ends at {max(span(b, 'bucketed', '', gpu=g, edge='end') for g in gpus):.0f} µs against the "
        f"plain step's {max(span(b, 'plain', '', gpu=g, edge='end') for g in gpus):.0f} µs (eager steps, each operation "
        "between two events, which the CUDA-graph timings above do not carry)." for b in mids)
    bucketed_over_compute_us = (s.loc[big, BUCKETED] - ms(budget["step"].iloc[2])) * 1e3
    if bucketed_over_compute_us >= 0.5:
        bucketed_vs_compute = f"costs {bucketed_over_compute_us:.0f} µs more than the computation alone"
    elif fused:
        bucketed_vs_compute = (f"takes {-bucketed_over_compute_us:.0f} µs less than the computation alone, which "
                               "includes the update pass (02_update_and_zero.cu) that the fused kernels do not need")
    else:
        bucketed_vs_compute = f"takes {-bucketed_over_compute_us:.0f} µs less than the computation alone"
    # W1's scatter in the plain step: "gradient: whole" (step 9's one launch), "gradient: W1" (split), or
    # inside "forward + backward to dZ1, gradient: W1" (the gradient in the forward kernel)
    scatters = ["gradient: whole", "gradient: W1", "forward + backward to dZ1, gradient: W1"]
    plain_tl = big_tl[big_tl["mode"] == "plain"]
    whole_us = max(float((lambda o: (o["end_us"] - o["start_us"]).max())(
        plain_tl[(plain_tl["gpu"] == g) & plain_tl["operation"].isin(scatters)])) for g in gpus)
    bucketed_tl = big_tl[big_tl["mode"] == "bucketed"]
    small_ops = bucketed_tl[bucketed_tl["operation"].str.startswith("gradient")
                            & bucketed_tl["operation"].str.contains("W2")]
    small_us = float((small_ops["end_us"] - small_ops["start_us"]).max())
    small_with_bucket = bool((bucketed_tl["operation"].str.startswith("gradient: W1 rows")
                              & bucketed_tl["operation"].str.contains("W2")).any())
    replica_verdict = (f"costs {replica_us:.0f} µs more than step 10 on half the batch" if replica_us >= 0.5 else
                       f"takes {-replica_us:.0f} µs less than step 10 on half the batch (the two GPUs lose nothing "
                       "to the replicas' own form of the step)" if replica_us <= -0.5 else
                       "takes as long as step 10 on half the batch")
    overlap_saves = s.loc[big, "overlap saves (ms)"]
    overlap_summary = (f"the bucketed step beat the plain one wherever the all-reduce is more than {OVERLAP_SHARE:.0%} "
                       "of the step, meeting the chapter's overlap target" if not losses else
                       (f"the bucketed step beat the plain one at B = {fmt(wins)} and lost at B = {fmt(losses)}"
                        if wins else f"the bucketed step lost to the plain one at B = {fmt(losses)}")
                       + f", where the all-reduce is more than {OVERLAP_SHARE:.0%} of the step: the chapter's "
                       "overlap target is missed there, for the reasons measured above")
    spread_verdict = (f"The margin is smaller than the run's own spread: the kept plain step ({plain_kept}, "
                      f"{nccl_kept}) timed {len(timings_big)} times in this run (the NCCL-settings pass in fresh "
                      f"processes, the sweep, the final timing) took {', '.join(f'{t:.4f}' for t in sorted(timings_big))} "
                      f"ms, a spread of {spread_us:.0f} µs, so this run can neither claim nor rule out the target."
                      if abs(best_two - target_ms) * 1e3 < spread_us else
                      f"The margin is larger than the run's own spread ({spread_us:.0f} µs over {len(timings_big)} "
                      "timings of the kept plain step).")
    hidden_verdict = (f"ends at {big_ar_end:.0f} µs, before the frequent words' scatter ends at "
                      f"{float(last['end_us'].max()):.0f} µs: it is hidden" if big_ar_end <= float(last["end_us"].max())
                      else f"ends at {big_ar_end:.0f} µs, after the frequent words' scatter ends at "
                           f"{float(last['end_us'].max()):.0f} µs: part of it is still exposed")
    step_table_ = step_table(run)
    return dict(
        tl_batch=big, tl_small_batch=small_b, mid_timeline=mid_timeline, ar_alone_us=ar_alone_us,
        ar_beside_ratio=ar_beside / ar_ref, ar_plain_us=ar_plain, ar_beside_us=ar_beside,
        ar_plain_text=(f"In the plain step ({plain_kept}) the all-reduce fused with the update takes {ar_plain:.0f} µs "
                       "after the backward pass, with nothing beside it (NCCL's all-reduce of the same bytes alone, "
                       f"the lab's curve below: {ar_alone_us:.0f} µs, before an update pass of its own)."
                       if fused else
                       f"In the plain step the all-reduce of the gradient takes {ar_plain:.0f} µs after the backward "
                       f"pass (the lab's curve below: {ar_alone_us:.0f} µs alone)."),
        ar_beside_text=(f"beside it the rare-word bucket's peer update (the all-reduce fused with its update, "
                        f"{ar_beside:.0f} µs) takes {ar_beside / ar_ref:.1f} times the plain step's peer update of the "
                        "whole buffer on every SM" if fused else
                        f"beside it the same all-reduce takes {ar_beside:.0f} µs, {ar_beside / ar_ref:.1f} times its "
                        "time alone"),
        bucketed_vs_compute=bucketed_vs_compute, whole_us=whole_us,
        whole_where=("with the forward pass, in one kernel"
                     if (plain_tl["operation"] == "forward + backward to dZ1, gradient: W1").any() else "one kernel"),
        freq_us=max(span(big, "bucketed", "gradient: W1 rows 0-", gpu=g) for g in gpus),
        last_scatter_end_us=float(last["end_us"].max()),
        small_beside=(f"in the bucketed step kept here it runs in the same launch as one W1 bucket's scatter "
                      f"(kernels/multigpu/04_first_bucket_and_small.cu), which takes {small_us:.0f} µs"
                      if small_with_bucket else f"beside W1's scatter in the bucketed step it runs for {small_us:.0f} µs"),
        layout_verdict=(f"Step 9's own scatter-add kernel, in gradient mode into the replica's buffer ("
                        # runs with the first-bucket-and-small launch hold W1 first; earlier ones after W2, b1, b2
                        + ("W1 at the buffer's start" if run.timings["variant"].str.endswith(FIRST_PIECE).any() else
                           "W1 after the small parameters, 2,688 bytes into the buffer")
                        + f"), takes {piece('gradient (scatter-add)', big // 2):.0f} µs on "
                        f"{big // 2:,} documents, against {piece('step 9: sparse_update (scatter into W1)', big // 2):.0f} "
                        "µs into step 9's own W1."),
        small9_us=piece("small gradients, step 9's H blocks", big // 2),
        small_coalesced_us=piece("small gradients, coalesced", big // 2),
        one_big_which=(f"{step_table_.loc[big, [c for c in ONE_GPU_STEPS if c in step_table_]].astype(float).idxmin()}"
                       f"; step 10 takes {step_table_.loc[big, ONE_GPU_GRAPH]:.4f} ms"),
        ratio_big=ratio, speedup_big=one_big / best_two, plain_big=s.loc[big, PLAIN],
        bucketed_big=s.loc[big, BUCKETED], one_big=one_big, target_ms=target_ms,
        miss_us=max(0.0, (best_two - target_ms) * 1e3), overlap_saves_us=overlap_saves * 1e3,
        replica_cost_us=replica_us, plain_form_big=plain_kept,
        spread_us=spread_us, timings_big=", ".join(f"{t:.4f}" for t in sorted(timings_big)),
        touched_small=touched[small_b], touched_8k=touched.get(8192, float("nan")),
        replica_verdict=replica_verdict,
        overlap_big_verdict=(f"The overlap saves {overlap_saves * 1e3:.0f} µs per step at this batch"
                             if overlap_saves > 0 else
                             f"The overlapped step is {-overlap_saves * 1e3:.1f} µs slower than the plain one at "
                             "this batch"),
        bucketed_over_compute_us=bucketed_over_compute_us,
        heavy_batches=fmt([int(b) for b in heavy.index]), overlap_wins=by(wins), overlap_losses=by(losses),
        overlap_target="met" if not losses else "missed", overlap_summary=overlap_summary, kept_big=k.loc[big, "label"],
        ddp_worst=float((s[[PLAIN, BUCKETED]].min(axis=1) / s["PyTorch DDP"]).max()),
        scaling_verdict=(f"meeting the target of at most {SCALING_TARGET}" if ratio <= SCALING_TARGET else
                         f"short of the target ({SCALING_TARGET}) by {ratio - SCALING_TARGET:.4f}, "
                         f"{max(0.0, (best_two - target_ms) * 1e3):.0f} µs per step"),
        spread_verdict=spread_verdict,
        room_verdict=_room_verdict(k.loc[big, "label"], fused, ar_beside, ar_ref, ar_alone_us),
        big_buckets=int(run.tables["choices"].set_index("batch").loc[big, "buckets"]),
        hidden_verdict=hidden_verdict)


def show_bound(run: RecordedRun) -> None:
    """The table of what the bucketed step could save at best, against what the sweep measured."""
    shown = overlap_bound(run).drop(columns="configuration")
    # One format call for every float column: a second .format() call lost the first one's precision
    # and na_rep on the GPU image's pandas (its live run printed "nan" where the sweep timed nothing).
    formats = {column: "{:.1f}" for column in shown.select_dtypes("floating").columns}
    formats.update({SHARE: "{:.0%}", "last all-reduce (MB)": "{:.2f}"})
    _display(shown.style.format(formats, na_rep="not timed").hide(axis="index")
             .set_caption("What the bucketed step (2 buckets, parameters averaged) could save at best, µs: one GPU's "
                          "share of the scatter, each piece alone in a CUDA graph, and the all-reduce curve in a graph; "
                          "against what the sweep measured (plain less bucketed); not timed: the sweep timed that "
                          "configuration only overlapped. " + run.caption))


def bound_numbers(run: RecordedRun | None) -> dict:
    """The prose's reading of :func:`overlap_bound` (or what it says without one)."""
    bound = overlap_bound(run) if run is not None else None
    if bound is None:
        return dict(bound_text="This run does not time the scatter bucket by bucket, so what the overlap could save "
                               "at best is not measured here.", bound_verdict="")
    return dict(bound_text=bound_text(bound, kept(run)), bound_verdict=bound_verdict(bound, kept(run)))


def peer_numbers(run: RecordedRun | None) -> dict:
    """The peer update (06_peer_update.cu) against NCCL at the batches where the overlap target is judged:
    the fastest plain and overlapped steps of each kind in the same sweep (the slower GPU's median)."""
    sweep = overlap_table(run) if run is not None else None
    peer_rows = sweep.index.str.contains(PEER) if sweep is not None else None
    if sweep is None or not peer_rows.any():
        return dict(peer_text="", peer_summary="This run does not time it.")
    st = scaling_table(run)
    heavy_b = [int(b) for b in st.index if st.loc[b, "all-reduce share of plain step"] > OVERLAP_SHARE]
    one = sweep.index.str.startswith("one all-reduce")
    over = sweep.index.str.startswith("bucketed") & ~sweep.index.str.contains("not overlapped")

    def best(rows):
        return sweep[rows].min()[heavy_b] * 1e3      # µs per batch

    plain_gain = best(one & ~peer_rows) - best(one & peer_rows)
    over_gain = best(over & ~peer_rows) - best(over & peer_rows)
    nccl_wins = [b for b in heavy_b if best(over & ~peer_rows)[b] < best(one & ~peer_rows)[b]]

    def bs(xs):
        return ", ".join(f"{b:,}" for b in xs) or "none"

    return dict(
        peer_text=(f"At these batches the steps the run kept use the all-reduce fused with the update over NVLink, the "
                   f"plain step and the overlapped one alike. Against the fastest steps through NCCL in the same sweep "
                   f"it shortened the plain step by {plain_gain.min():.0f} to {plain_gain.max():.0f} µs and the "
                   f"overlapped step by {over_gain.min():.0f} to {over_gain.max():.0f} µs; through NCCL alone, the "
                   f"overlapped step would have beaten the plain one at B = {bs(nccl_wins)} of {bs(heavy_b)}, for the "
                   "reasons measured next."),
        peer_summary=("Here it made both the plain and the overlapped step faster at every batch where the overlap "
                      "target is judged, and with it the overlap pays where a second NCCL collective did not."
                      if plain_gain.min() > 0 and over_gain.min() > 0 else
                      f"Here it shortened the plain step by {plain_gain.min():.0f} to {plain_gain.max():.0f} µs and "
                      f"the overlapped step by {over_gain.min():.0f} to {over_gain.max():.0f} µs against NCCL's, where "
                      "the overlap target is judged."))


def ring_model(run: RecordedRun | None) -> tuple[costmodel.RingModel, str]:
    """The ring model the chapter's predictions use, and its caption: fitted to the run's all-reduce, or,
    without a run, NVLink 4's datasheet bandwidth with :data:`ASSUMED_ALPHA_US`."""
    if run is not None:
        return fitted_model(run), f"MODEL fitted to the all-reduce recorded on two GPUs ({run.caption})"
    from ... import datasheet
    return (costmodel.datasheet_model("nvlink4", alpha_us=ASSUMED_ALPHA_US),
            f"MODEL, not fitted (no two-GPU run recorded yet): NVLink 4's datasheet bandwidth, "
            f"{datasheet.LINKS['nvlink4'].gbs_per_direction:g} GB/s each way, and alpha = {ASSUMED_ALPHA_US:g} us assumed")


def model_table(model: costmodel.RingModel, grad_bytes: int) -> pd.DataFrame:
    """The model's all-reduce of ``grad_bytes`` in each setting it predicts (2 and 8 GPUs, two nodes)."""
    return pd.DataFrame([{"setting (model)": label, "GPUs": p, "beta (GB/s)": m.bw_gbs, "alpha (us)": m.alpha_us,
                          "all-reduce of the gradient (ms)": t, "where the numbers come from": m.source}
                         for label, (p, m, t) in costmodel.predictions(model, grad_bytes).items()])


def model_numbers(run: RecordedRun | None, model: costmodel.RingModel, grad_bytes: int) -> dict:
    """What the prose quotes of the model: its basis, the datasheet links, its predictions for 2, 8 and
    16 GPUs, the 8-GPU time's two terms, and how well it predicts the measured plain step."""
    from ... import datasheet
    pred = costmodel.predictions(model, grad_bytes)
    t8 = pred["8 GPUs, NVLink"][2]
    # The 8-GPU time's two terms: the bytes at this model's beta, and 2 (p - 1) = 14 steps of its alpha.
    t8_bw_ms = costmodel.allreduce_time_ms(grad_bytes, 8, model.bw_gbs, 0.0)
    out = dict(
        model_basis=("beta and alpha fitted to the recorded two-GPU all-reduce" if run is not None else
                     "not fitted yet: NVLink's datasheet bandwidth and an assumed alpha, see the table's caption"),
        nvlink_gbs=datasheet.LINKS["nvlink4"].gbs_per_direction, nvlink_bidir=datasheet.LINKS["nvlink4"].bidirectional_gbs,
        ndr_gbs=datasheet.LINKS["ndr400"].gbs_per_direction, net_step_us=costmodel.NETWORK_STEP_US,
        t8_ms=t8, t16_ms=pred["2 nodes x 8 GPUs, one NIC per GPU"][2], t2_ms=pred["2 GPUs (the model itself)"][2],
        one_ring_ms=costmodel.allreduce_time_ms(grad_bytes, 16, datasheet.LINKS["ndr400"].gbs_per_direction,
                                                costmodel.NETWORK_STEP_US),
        bw_fit=model.bw_gbs, bw_fit_err=model.bw_err, alpha_fit=model.alpha_us, alpha_fit_err=model.alpha_err,
        t8_bw_us=t8_bw_ms * 1e3, t8_alpha_us=t8 * 1e3 - t8_bw_ms * 1e3, t8_alpha_share=1 - t8_bw_ms / t8)
    steps = predicted_steps(run) if run is not None else None
    out.update(step_pred_worst=float(steps["error"].abs().max()) if steps is not None else float("nan"),
               curve_setting=curve_setting(run) if run is not None else "no run")
    return out


def show_predicted_steps(run: RecordedRun) -> None:
    """The model against the measured plain two-GPU step through NCCL, batch by batch."""
    steps = predicted_steps(run)
    _display(steps.style.format({**{c: "{:.3f}" for c in steps.select_dtypes("floating").columns}, "error": "{:+.1%}"})
             .hide(axis="index")
             .set_caption("MODEL against measurement: the plain two-GPU step through NCCL (its fastest form under "
                          f"{curve_setting(run)}, the setting the all-reduce curve was measured under, from the "
                          "NCCL-settings sweep) predicted from one GPU on half the batch plus the fitted all-reduce, "
                          + run.caption))


# ------------------------------------------------------------------------------ the notebook's cells
def run_status(run: RecordedRun | None) -> dict:
    """The chapter's opening status line (``run_status``) and the GPUs its summary names (``run_gpus``)."""
    status = (f"The two-GPU figures below come from the run recorded on {run.gpu} ({run.caption})."
              if run is not None else
              "No two-GPU run has been recorded yet: the cells below that need one say so and print the command "
              f"that records it on a machine with two GPUs ({RECORD_COMMAND}). Everything else here (the "
              "correctness checks, the cost model) runs on any machine.")
    return dict(run_status=status, run_gpus=f"two {run.gpu}s" if run is not None else "two GPUs (no run recorded yet)")


#: The data-parallel forms the correctness check trains: {name: (replicas, bucketed, form)}.
CHECK_FORMS = {"1 replica, whole batch": (1, False, "gradient"), "2 replicas, one all-reduce": (2, False, "gradient"),
               "2 replicas, bucketed all-reduce": (2, True, "gradient"),
               "2 replicas, parameters averaged": (2, False, "parameters")}
#: The check's tolerances (relative): each form's total update against one replica's, and against float64's;
#: the parameter form rounds each atomic add at W's float32 spacing, not the gradient's (as step 9 does).
REPLICA_TOLERANCE, REFERENCE_TOLERANCE, PARAMETER_TOLERANCE = 1e-5, 1e-4, 5e-5
AVERAGED = "2 replicas, parameters averaged"


def replica_check(backend, vocab: int = 1001, batch: int = 74, steps: int = 3, lr: float = 0.1) -> dict:
    """Train every form of :data:`CHECK_FORMS` ``steps`` steps from one start and show the table
    (:func:`.replicas.compare_forms`); raise :class:`gpulab.errors.CheckFailed` naming the form
    and the number where a form is outside its tolerance or its replicas differ. Returns what the
    prose glues (the tolerances and the largest differences)."""
    from ...errors import CheckFailed
    from .replicas import compare_forms
    table = compare_forms(CHECK_FORMS, backend, vocab=vocab, batch=batch, steps=steps, lr=lr)
    averaged = table["variant"] == AVERAGED
    limits = np.where(averaged, PARAMETER_TOLERANCE, REPLICA_TOLERANCE)
    bad = [f"{r['variant']}: update vs 1 replica {r['update vs 1 replica']:.2e} > {lim:.0e}"
           for (_, r), lim in zip(table.iterrows(), limits) if not r["update vs 1 replica"] <= lim]
    bad += [f"{r['variant']}: update vs float64 {r['update vs float64 reference']:.2e} > {REFERENCE_TOLERANCE:.0e}"
            for _, r in table.iterrows() if not r["update vs float64 reference"] <= REFERENCE_TOLERANCE]
    bad += [f"{r['variant']}: the replicas' parameters differ" for _, r in table.iterrows()
            if not r["replicas bit-identical"]]
    if bad:
        raise CheckFailed("the data-parallel step does not reproduce one replica: " + "; ".join(bad))
    _display(table.style.format({"loss after 3 steps": "{:.6f}", "update vs float64 reference": "{:.2e}",
                                 "update vs 1 replica": "{:.2e}"}).hide(axis="index")
             .set_caption(f"Data-parallel SGD against one replica and float64, {backend.caption}"))
    return dict(replica_tol=REPLICA_TOLERANCE, reference_tol=REFERENCE_TOLERANCE, param_tol=PARAMETER_TOLERANCE,
                worst_replica=float(table.loc[~averaged, "update vs 1 replica"].max()),
                param_worst=float(table.loc[averaged, "update vs 1 replica"].max()))


def show_steps(run: RecordedRun) -> None:
    """Every step at every batch: the figure, the scaling table, the targets and what the run could
    not measure."""
    plot_steps(run)
    plt.show()
    _display(scaling_table(run).style.format(precision=4).set_caption(run.caption + " (two GPUs)"))
    _display(targets(run).style.hide(axis="index").set_caption("The chapter's targets, " + run.caption))
    if problems(run) is not None:
        _display(problems(run).style.hide(axis="index").set_caption("What this run could not measure, and why"))


def crossover_numbers(run: RecordedRun | None) -> dict:
    """Exercise 2's question answered by the run: the smallest batch at which two GPUs take at most
    :data:`SCALING_TARGET` of one GPU's step (``crossover``), in words."""
    if run is None:
        return dict(crossover="no two-GPU run has been recorded yet to answer it")
    s = scaling_table(run)
    paying = [int(b) for b in s.index if s.loc[b, "2 GPUs / 1 GPU"] <= SCALING_TARGET]
    if not paying:
        return dict(crossover=f"no batch of this run reaches {SCALING_TARGET} (at B = {int(s.index.max()):,}: "
                              f"{s['2 GPUs / 1 GPU'].iloc[-1]:.3f})")
    b = min(paying)
    before = [int(x) for x in s.index if x < b]
    return dict(crossover=f"B = {b:,} ({s.loc[b, '2 GPUs / 1 GPU']:.3f} of one GPU's step" +
                          (f"; at B = {before[-1]:,}, {s.loc[before[-1], '2 GPUs / 1 GPU']:.3f})" if before else ")"))


def show_allreduce(run: RecordedRun | None) -> dict:
    """The all-reduce alone against its size, the lab's against torch.distributed's; returns the
    worst ratio from 1 MiB up (``lab_vs_torch_worst``) and the link the peer update's bandwidth
    implies (``link_text``)."""
    if run is None:
        print("No two-GPU run recorded yet: the all-reduce's time and bus bandwidth against its size (1 KiB to "
              f"256 MiB) appear here once `{RECORD_COMMAND}` has run on two GPUs.")
        return dict(lab_vs_torch_worst=float("nan"), link_text="")
    plot_allreduce(run)
    plt.show()
    comp = allreduce_comparison(run)
    _display(comp.style.format(precision=4).hide(axis="index")
             .set_caption("All-reduce time (ms) per size: the lab's and torch.distributed's, " + run.caption))
    big = comp[comp["bytes"] >= 2 ** 20]
    return dict(lab_vs_torch_worst=float(big["lab / torch"].max()), **link_numbers(run))


def link_numbers(run: RecordedRun) -> dict:
    """What the run says of the link between the GPUs (``link_text``): the link ``nvidia-smi topo -m``
    named, where the run recorded it; in runs whose topology table records peer access only, the
    link inferred from the bytes the plain step's peer update reads from the other GPU in its
    timeline span."""
    from ... import datasheet
    pcie = datasheet.LINKS["pcie5"]
    topo = run.tables.get("topology")
    if topo is not None and "link" in topo and topo["link"].astype(str).str.fullmatch(r"NV\d+").all():
        return dict(link_text=f"The run records the GPUs' link as {', '.join(sorted(set(topo['link'])))} "
                              "(nvidia-smi topo -m: NVLink, the number of links).")
    peer = topo is not None and len(topo) and bool(topo["peer_access"].astype(bool).all())
    if "timeline" not in run.tables or not peer:
        return dict(link_text="")
    tl = timeline(run)
    big = int(tl["batch"].max())
    span_us = min(timeline_span(run, big, "plain", "all-reduce", gpu=g) for g in sorted(set(tl["gpu"])))
    gbs = 4 * Layout(VOCAB).size / (span_us * 1e-6) / 1e9
    if not np.isfinite(gbs) or PEER not in str(kept(run).loc[big, "plain"]):
        return dict(link_text="")
    return dict(link_text=(
        f"The run's topology table records peer access between the two GPUs but not the link itself; the plain step's "
        f"peer update reads the other GPU's {4 * Layout(VOCAB).size / 1e6:.1f} MB gradient in {span_us:.0f} µs, "
        f"at least {gbs:.0f} GB/s, above {pcie.name}'s {pcie.gbs_per_direction:g} GB/s each way (the fastest other "
        "link two GPUs of one host can have): the link is NVLink."))


def show_ring(run: RecordedRun | None, model: costmodel.RingModel, caption: str) -> dict:
    """The ring, step by step, for the chapter's gradient on 2 GPUs (against the lab's all-reduce of
    that size alone, in a CUDA graph, when there is a run) and on 8; returns what the prose quotes."""
    grad_bytes = 4 * Layout(VOCAB).size
    measured_us = None
    if run is not None:
        lab_graph = allreduce_table(run, LAB_ALLREDUCE + ", CUDA graph")
        measured_us = float(lab_graph.iloc[(lab_graph["bytes"] - grad_bytes).abs().argsort().iloc[0]]["median_ms"]) * 1e3
    plot_ring(model, grad_bytes, 2, caption, measured_us=measured_us)
    plt.show()
    plot_ring(model, grad_bytes, 8, caption)
    plt.show()
    ring2, ring8 = ring_steps(model, grad_bytes, 2), ring_steps(model, grad_bytes, 8)
    return dict(ring_chunk_mb=grad_bytes / 2 / 1e6, ring_sent_mb=float(ring2["bytes per GPU"].sum()) / 1e6,
                ring_step_us=float(ring2["end_us"].iloc[0]), ring_pred_us=float(ring2["end_us"].iloc[-1]),
                ring_measured=(f"against {measured_us:.0f} µs measured (the lab's all-reduce of that size alone, in a "
                               "CUDA graph)" if measured_us is not None else
                               "(no two-GPU run recorded yet to compare it with)"),
                ring8_chunk_mb=grad_bytes / 8 / 1e6, ring8_sent_mb=float(ring8["bytes per GPU"].sum()) / 1e6,
                ring8_pred_us=float(ring8["end_us"].iloc[-1]))


def host_step_source() -> str:
    """The host code of the bucketed step the recorded runs keep (first bucket in the forward kernel):
    ``GpuStep._in_forward``, as :mod:`.gpustep` defines it, its streams, events and launches."""
    import inspect
    import textwrap
    from .gpustep import GpuStep
    return textwrap.dedent(inspect.getsource(GpuStep._in_forward))


def show_host_step() -> None:
    """:func:`host_step_source`, rendered as a listing."""
    from IPython.display import Markdown
    _display(Markdown("`gpulab/workloads/multigpu/gpustep.py`, `GpuStep._in_forward` (one GPU's process runs it; "
                      "`main` is the caller's stream, `self.side` the communication stream):\n\n```python\n"
                      + host_step_source() + "```"))
