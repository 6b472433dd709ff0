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
from ..training.data import VOCAB
from . import costmodel
from .replicas import Layout
from .workers import FIRST_PIECE, ONE_GPU_FORWARD, PEER_OP, PLAIN_FORMS, SPARE_SMS, Overlap

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
    plain step in any form and the bucketed configurations of ``workers.NCCL_SWEEP``; with
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
    """What the lean step (two streams; one, not overlapped; see ``workers.GpuStep.lean_step``) changed
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
