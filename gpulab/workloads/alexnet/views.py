"""What the AlexNet notebooks show of a recorded run: the five layers added up per step, the
targets, cuDNN's paths beside the ladder, the profile, the predictions judged, and why a cell
is empty; each Winograd and Hopper step's glued values with the table its cell shows; and, from
the declarations, which step runs each layer, the device memory each step needs and the Winograd
steps' accuracy measured now."""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import baselines, ladder, plots, predictions, runs
from ...check import compare
from ...kernels import get_backend
from . import tc, wgmma, wgmma32, winograd
from .launchers import fallback_step, footprint_bytes, scratch_bytes
from .problem import BATCHES, LAYERS, MAIN_N, NAME, SCALING_BATCHES, Conv, memory_limit
from .profile import PROFILE_N
from .steps import PREDICTED, PREDICTION_CASES, STEPS, WINOGRAD_STEPS


def layer_totals(rows: pd.DataFrame) -> pd.DataFrame:
    """The five layers added up per variant and batch size (and phase, memory where present),
    keeping only variants measured on all five. ``median_ms`` is the sum of the per-layer
    medians; ``q1_ms``/``q3_ms`` add the quartiles, an approximation of the sum's spread."""
    keys = [c for c in ("experiment", "variant", "size", "phase", "memory", "step", "precision")
            if c in rows.columns and rows[c].notna().any()]
    totals = (rows.groupby(keys, sort=False, dropna=False)
              .agg(median_ms=("median_ms", "sum"), q1_ms=("q1_ms", "sum"), q3_ms=("q3_ms", "sum"),
                   flops=("flops", "sum"), bytes=("bytes", "sum"), layers=("layer", "nunique"))
              .reset_index())
    return totals[totals["layers"] == len(LAYERS)].drop(columns="layers").reset_index(drop=True)


def totals_at(totals: pd.DataFrame, N: int, steps=None) -> pd.DataFrame:
    """The rows of :func:`layer_totals` at batch size ``N`` (for the given steps only)."""
    rows = totals[totals["size"] == N]
    return rows if steps is None else rows[rows["step"].isin(list(steps))]


def step_ms(totals: pd.DataFrame, step: str, N: int = MAIN_N) -> float:
    """One step's time for all five layers at batch size ``N``."""
    return float(totals_at(totals, N, [step])["median_ms"].iloc[0])


def target_verdict(totals: pd.DataFrame, step: str, cudnn_ms: float, factor: float = 1.0, N: int = MAIN_N) -> str:
    """Whether ``step`` meets a target of at most ``factor`` times cuDNN's ``cudnn_ms``, with the
    margin beside it: "met by 0.2%: 1.000 ms, under 0.95 x 1.054 = 1.001 ms". A pass by less than
    the run's spread says so: the step's layers' upper quartiles, added up, past the target."""
    row = totals_at(totals, N, [step]).iloc[0]
    t, upper, target = float(row["median_ms"]), float(row["q3_ms"]), factor * cudnn_ms
    bound = f"{factor:g} x {cudnn_ms:.3f} = {target:.3f} ms" if factor != 1 else f"cuDNN's {cudnn_ms:.3f} ms"
    j = predictions.judge(t, high=target)          # the book's one rule: met only inside the band
    if not j.held:
        return f"missed by {predictions.percent(j.margin)}: {t:.3f} ms against {bound}"
    text = f"met by {predictions.percent(j.margin)}: {t:.3f} ms, under {bound}"
    if upper > target:
        text += (f", a margin inside the run's own spread (the layers' upper quartiles add up to {upper:.3f} ms, "
                 "past the target)")
    return text


def fastest(totals: pd.DataFrame, N: int, steps, precision: str) -> pd.Series:
    """The fastest of ``steps`` in ``precision`` at batch size ``N``."""
    rows = totals_at(totals, N, steps)
    return rows[rows["precision"] == precision].sort_values("median_ms").iloc[0]


#: The chapter's targets for the five layers at N = 128, in ms (issue #14): fp32 computed as
#: fp32 (no tf32 rounding of the inputs), tf32, fp16. A target is met only by a step that is
#: also faster than cuDNN's fastest path of the same precision class in the same run.
TARGETS_MS = {"fp32": 3.25, "tf32": 1.46, "fp16": 1.18}


def targets_table(totals: pd.DataFrame, floor_ms: float, fp16_floor_ms: float | None = None,
                  tf32_floor_ms: float | None = None) -> pd.DataFrame:
    """The best step per precision against :data:`TARGETS_MS`, beside the fastest cuDNN
    path of matching precision (fp32 without tf32; tf32; fp16 or bf16) and the precision's own
    floor: ``floor_ms`` (the FLOPs at the measured FP32 rate) for fp32, ``tf32_floor_ms`` for
    tf32 and ``fp16_floor_ms`` (at the measured fp16 tensor-core rate) for fp16 (NaN when not
    given). A target is met when the step is within the target time and faster than that
    cuDNN path. The rows read whatever steps the run recorded: a step the run predates
    simply is not a candidate."""
    ours = [s.number for s in STEPS]
    floors = {"fp32": floor_ms, "tf32": tf32_floor_ms, "fp16": fp16_floor_ms}
    rows = []
    for precision, target in TARGETS_MS.items():
        mine = totals_at(totals, MAIN_N, ours)
        if not (mine["precision"] == precision).any():
            continue
        best = fastest(totals, MAIN_N, ours, precision)
        cudnn = vendor_best(totals, MAIN_N, precision)
        cudnn_ms = cudnn["median_ms"] if cudnn is not None else np.nan
        floor = floors[precision] if floors[precision] else np.nan
        in_time, time_margin = predictions.target_verdict(best["median_ms"], at_most=target, unit="ms")
        faster, cudnn_margin = predictions.target_verdict(best["median_ms"], at_most=cudnn_ms, unit="ms",
                                                          bound=f"cuDNN's {cudnn_ms:.4g} ms")
        rows.append({"precision": precision, "best step": best["variant"], "ms": best["median_ms"],
                     "target ms": target, "fastest cuDNN path": cudnn["variant"] if cudnn is not None else "none",
                     "cuDNN ms": cudnn_ms, "vs cuDNN": cudnn_ms / best["median_ms"],
                     "met": in_time and faster, "margin": f"target {time_margin}; cuDNN {cudnn_margin}",
                     "TFLOP/s": best["flops"] / best["median_ms"] / 1e9,
                     "floor ms": floor, "x floor": best["median_ms"] / floor})
    return pd.DataFrame(rows)


def unrecorded_steps(ladder: pd.DataFrame, steps=None) -> list[str]:
    """The ladder's steps (numbers) with no row in a run's ``ladder`` rows: steps added after
    the run was recorded, which every view shows as "not recorded yet"."""
    have = set(step_labels(ladder)["step"]) if not ladder.empty else set()
    return [s.number for s in (steps or STEPS) if s.number not in have]


def recorded_beside(run, N: int, steps=None) -> dict:
    """For a live run: each recorded run's totals at ``N`` for ``steps``, {GPU: rows}, to
    mark beside the live bars (:func:`gpulab.plots.speedup_ladder`'s ``others``); empty
    for a recorded run."""
    return {gpu: totals_at(layer_totals(other.experiment("ladder")), N, steps) for gpu, other in runs.recorded_beside(run).items()}


def gpu_comparison(root=None):
    """Per step (five layers at N = 128, and cuDNN's fastest paths), the H200's recorded
    time over the H100's against the roofline's prediction; None until both runs exist."""
    def select(run):
        totals = layer_totals(run.experiment("ladder"))
        ours = totals_at(totals, MAIN_N, [s.number for s in STEPS])
        return pd.concat([ours, vendor_lines(totals, MAIN_N)])[["variant", "median_ms", "flops", "bytes",
                                                                 "precision"]]
    return runs.gpu_comparison(NAME, select, root=root,
                        title=f"Does each step gain what the roofline predicts on the H200? (N = {MAIN_N})")


def beats_cudnn(totals_or_ladder: pd.DataFrame, N: int = MAIN_N) -> pd.DataFrame:
    """Per layer at batch size ``N``: the lab's fastest step and cuDNN's fastest path of
    each precision class, and where the lab's is faster."""
    rows = totals_or_ladder[totals_or_ladder["size"] == N]
    out = []
    for layer in LAYERS:
        at = rows[rows["layer"] == layer.index]
        for precision in ("fp32", "fp16"):
            members = ("fp16", "bf16") if precision == "fp16" else ("fp32",)
            ours = at[at["step"].isin([s.number for s in STEPS]) & (at["precision"] == precision)]
            cudnn = at[(at["step"] == "cuDNN") & at["precision"].isin(members)]
            if ours.empty or cudnn.empty:
                continue
            o, c = ours.loc[ours["median_ms"].idxmin()], cudnn.loc[cudnn["median_ms"].idxmin()]
            out.append({"layer": layer.name, "precision": precision, "lab's fastest": o["variant"],
                        "lab ms": o["median_ms"], "cuDNN's fastest": c["variant"], "cuDNN ms": c["median_ms"],
                        "lab faster": bool(o["median_ms"] < c["median_ms"])})
    return pd.DataFrame(out)


#: The profiler columns the chapter shows.
PROFILED_COLUMNS = ["step", "kernel", "duration_ns", "instructions_per_mac", "issue_slots_busy_pct",
                    "fma_pipe_pct", "stall_global_memory", "l2_bytes"]


def profiled(profile: pd.DataFrame, steps, caption: str, layer: int = 2, columns=PROFILED_COLUMNS):
    """The recorded profile of ``steps`` on one layer, with warp instructions per
    multiply-add (x 32 threads over the layer's MACs: the cost of one multiply-add)."""
    macs = LAYERS[layer - 1].flops(PROFILE_N) / 2
    rows = profile[(profile["layer"] == layer) & profile["step"].isin(list(steps))]
    rows = rows.assign(instructions_per_mac=rows["warp_instructions"] * 32 / macs)
    return rows[[c for c in columns if c in rows.columns]].style.format(precision=3, thousands=",").hide(
        axis="index").set_caption(f"layer {layer}, N = {PROFILE_N}; " + caption)


def step_labels(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its ``step`` column as the ladder writes it ("01", "cuDNN"): a side
    table whose steps are all numbers reads back from CSV as integers (1, 2, ...)."""
    def label(value):
        text = str(value)
        return f"{int(float(text)):02d}" if text.replace(".", "", 1).isdigit() else text
    return table.assign(step=table["step"].map(label))


def gap_reason(run, N: int, steps=None) -> str:
    """Why a per-layer table at batch ``N`` has empty cells: the reasons the run's ``skipped``
    table gives for ``steps`` (numbers; None: all) at ``N`` (on a GPU with less memory a large
    layer of a step is skipped, not crashed), or a plain "not timed in this run" when it has none."""
    table = run.tables.get("skipped")
    if table is not None and len(table):
        rows = step_labels(table)
        rows = rows[(pd.to_numeric(rows["size"], errors="coerce") == N)
                    & (rows["step"].isin(steps) | (rows["step"] == "all") if steps is not None else True)]
        parts = [f"step {r.step}, conv{int(r.layer)}: {r.reason}" if str(r.step)[:1].isdigit()
                 else f"{r.step}, conv{int(r.layer)}: {r.reason}" for r in rows.itertuples()]
        if parts:
            return "skipped in this run: " + "; ".join(dict.fromkeys(parts))
    return "not timed in this run"


def vendor_best(totals: pd.DataFrame, N: int, precision: str, mode: str | None = None) -> pd.Series | None:
    """The fastest cuDNN path of matching precision (fp32 without tf32; tf32; fp16 or
    bf16) for all five layers at batch size ``N``: the baseline the chapter quotes.
    ``mode``: "eager", "graph" or None (either)."""
    rows = totals_at(totals, N, ["cuDNN"])
    rows = rows.assign(mode=np.where(rows["variant"].str.endswith("CUDA graph"), "graph", "eager"))
    return baselines.fastest(rows, precision, mode=mode)


def vendor_lines(totals: pd.DataFrame, N: int) -> pd.DataFrame:
    """The fastest cuDNN path per precision class at ``N``: the dashed lines of the
    ladder figures (every path: :func:`vendor_figure`)."""
    picks = [vendor_best(totals, N, p) for p in ("fp32", "tf32", "fp16")]
    return pd.DataFrame([p for p in picks if p is not None]).reset_index(drop=True)


def vendor_figure(totals: pd.DataFrame, N: int, caption: str):
    """Every cuDNN path for all five layers at ``N``, fastest of each precision class starred."""
    rows = totals_at(totals, N, ["cuDNN"])
    rows = rows.assign(mode=np.where(rows["variant"].str.endswith("CUDA graph"), "graph", "eager"))
    return plots.vendor_paths(rows, title=f"Which cuDNN path is fastest? (all five layers, N = {N})",
                              caption=caption)


def cudnn_algorithms(run_or_table) -> pd.DataFrame:
    """Which algorithm cuDNN chose per layer and path at N = 128, read from the names of
    the kernels it launched (PyTorch profiler), as recorded in the run."""
    table = run_or_table.tables.get("cudnn_algorithms") if hasattr(run_or_table, "tables") else run_or_table
    if table is None:
        raise KeyError("this run has no cudnn_algorithms table: re-record it with `python -m gpulab record alexnet`")
    # Read the family again from the kernel names, so a better reading applies to older runs too.
    return table.assign(algorithm=[baselines.algorithm_family(str(k).split(" | ")) for k in table["kernels"]])


def prediction_table(run, steps=None):
    """Each step's prediction (from its kernel file) against ``run``: the five layers at
    :data:`MAIN_N`, claims about some layers (or one image) judged on those. ``steps``: the rows
    shown (step numbers, e.g. one chapter's :data:`CHAPTER_STEPS`), each judged as in the whole
    ladder's table (its "vs previous" is against the ladder's step before it); None: every step."""
    lad = run.experiment("ladder")
    lad = lad[~baselines.is_vendor(lad)]
    out = []
    for case, N, layers in PREDICTION_CASES:
        per = lad[lad["size"] == N].pivot_table(index="step", columns="layer", values="median_ms", aggfunc="first")
        per.index = [step_labels(pd.DataFrame({"step": [s]}))["step"].iloc[0] for s in per.index]
        if not set(layers) <= set(per.columns):
            continue
        sums = per[list(layers)].sum(axis=1, min_count=len(layers)).dropna()
        out.append(pd.DataFrame({"step": sums.index, "case": case, "median_ms": sums.to_numpy()}))
    measured = pd.concat(out, ignore_index=True)
    table = predictions.table([(s.number, s.title, s.file) for s in STEPS], measured, PREDICTED, main_case="all")
    if steps is None:
        return table
    unknown = sorted(set(steps) - set(table["step"]))
    if unknown:
        raise KeyError(f"no step {', '.join(unknown)} in the ladder; its steps are {', '.join(table['step'])}")
    return table[table["step"].isin(steps)].reset_index(drop=True)


#: The three ways of giving every fp16 variant its input, and the experiments each reads
#: (:mod:`.record`): (rule, experiment of the lab's steps, experiment(s) and layout of cuDNN's paths).
INPUT_RULES = (
    ("the ladder's: the steps get NCHW x and copy it inside the call; cuDNN's channels-last paths get "
     "x already channels-last", "ladder", ("ladder",), None),
    ("every variant gets NCHW x, its copy to channels-last timed", "ladder", ("ladder", "ladder_nchw_input"), "NCHW"),
    ("every variant gets x already channels-last (as a network keeping channels-last activations would)",
     "ladder_nhwc_input", ("ladder",), "NHWC"),
)


def channels_last_rule(run, step: str, precision: str, N: int = MAIN_N) -> dict:
    """The last rule of :data:`INPUT_RULES` for one step of any precision: ``step`` given x already
    channels-last (its call without the copy) and cuDNN's fastest channels-last path of ``precision``
    (x converted before timing), all five layers at ``N``. NaN times where the run lacks the rows."""
    _, ours_experiment, vendor_experiments, _ = INPUT_RULES[2]
    have = set(run.timings["experiment"])
    out = {"step ms": np.nan, "cuDNN's fastest": "", "cuDNN ms": np.nan}
    if ours_experiment in have:
        mine = totals_at(layer_totals(run.experiment(ours_experiment)), N, [step])
        out["step ms"] = float(mine["median_ms"].iloc[0]) if len(mine) else np.nan
    vendor = pd.concat([totals_at(layer_totals(run.experiment(e)), N, ["cuDNN"]) for e in vendor_experiments])
    members = ("fp16", "bf16") if precision == "fp16" else (precision,)      # as input_rules' classes
    vendor = vendor[vendor["variant"].str.contains(", NHWC,") & vendor["precision"].isin(members)]
    if len(vendor):
        best = vendor.loc[vendor["median_ms"].idxmin()]
        out.update({"cuDNN's fastest": best["variant"], "cuDNN ms": float(best["median_ms"])})
    return out


def per_layer(ladder: pd.DataFrame, steps, precision: str, N: int = MAIN_N) -> pd.DataFrame:
    """Per layer at ``N`` (index 1-5): the time of each of ``steps`` ("step NN (ms)") and of cuDNN's
    fastest path of ``precision`` over the five layers (:func:`vendor_best`; the column is its name).
    A step the run lacks is a column of NaN."""
    rows = ladder[ladder["size"] == N]
    table = pd.DataFrame(index=pd.Index([layer.index for layer in LAYERS], name="layer"))

    def times(selected):
        return selected.assign(layer=selected["layer"].astype(int)).set_index("layer")["median_ms"]
    for step in steps:
        table[f"step {step} (ms)"] = times(rows[rows["step"].astype(str) == step])
    best = vendor_best(layer_totals(ladder), N, precision)
    if best is not None:
        table[f"{best['variant']} (ms)"] = times(rows[(rows["step"].astype(str) == "cuDNN")
                                                     & (rows["variant"] == best["variant"])])
    return table


def input_rules(run, steps=("20", "25"), N: int = MAIN_N) -> pd.DataFrame:
    """Steps ``steps`` (fp16) and cuDNN's fastest fp16/bf16 path, all five layers at ``N``, under
    each rule of :data:`INPUT_RULES`. Under the NCHW rule cuDNN's candidates are its NCHW paths and
    its channels-last path with the copy timed; under the channels-last rule its channels-last
    paths and the steps timed without their copy. A rule whose experiments the run lacks (recorded
    before they existed) has NaN times and says so in ``note``."""
    have = set(run.timings["experiment"])
    rows = []
    for rule, ours_experiment, vendor_experiments, layout in INPUT_RULES:
        row = {"rule": rule}
        missing = [e for e in (ours_experiment, *vendor_experiments) if e not in have]
        if not missing:
            ours = totals_at(layer_totals(run.experiment(ours_experiment)), N, steps)
            vendor = pd.concat([totals_at(layer_totals(run.experiment(e)), N, ["cuDNN"]) for e in vendor_experiments])
            if layout == "NCHW":
                vendor = vendor[~vendor["variant"].str.contains(", NHWC, conv")]
            elif layout == "NHWC":
                vendor = vendor[vendor["variant"].str.contains(", NHWC,")]
            vendor = vendor[vendor["precision"].isin(["fp16", "bf16"])]
            for step in steps:
                mine = ours[ours["step"] == step]
                row[f"step {int(step)} ms"] = float(mine["median_ms"].iloc[0]) if len(mine) else np.nan
            best = vendor.loc[vendor["median_ms"].idxmin()] if len(vendor) else None
            row["cuDNN's fastest"] = best["variant"] if best is not None else "none"
            row["cuDNN ms"] = float(best["median_ms"]) if best is not None else np.nan
            absent = [str(int(s)) for s in steps if np.isnan(row[f"step {int(s)} ms"])]
            row["note"] = f"step(s) {', '.join(absent)} not recorded in this run" if absent else ""
        else:
            row.update({f"step {int(s)} ms": np.nan for s in steps})
            row.update({"cuDNN's fastest": "", "cuDNN ms": np.nan,
                        "note": f"not recorded in this run (no {', '.join(missing)} rows)"})
        last = f"step {int(steps[-1])} ms"
        row[f"step {int(steps[-1])} / cuDNN"] = row[last] / row["cuDNN ms"]
        rows.append(row)
    return pd.DataFrame(rows)


def copy_table(run, steps=("25", "28"), N: int = MAIN_N) -> pd.DataFrame:
    """Per layer at ``N``, each of ``steps``' time given NCHW x (the ladder's rule), given x
    already channels-last (``ladder_nhwc_input``: its GEMM alone), and the difference: the copy
    to channels-last that each call makes before its GEMM. NaN where the run has no row."""
    def times(experiment):
        rows = run.experiment(experiment) if experiment in set(run.timings["experiment"]) else None
        if rows is None or rows.empty:
            return pd.Series(dtype=float)
        rows = rows[(rows["size"] == N) & rows["step"].astype(str).isin(list(steps))]
        return rows.set_index([rows["layer"].astype(int), rows["step"].astype(str)])["median_ms"]
    given_nchw, given_nhwc = times("ladder"), times("ladder_nhwc_input")
    out = []
    for layer in LAYERS:
        for step in steps:
            nchw = float(given_nchw.get((layer.index, step), np.nan))
            nhwc = float(given_nhwc.get((layer.index, step), np.nan))
            out.append({"layer": layer.index, "step": step, "given NCHW x (ms)": nchw,
                        "given channels-last x (ms)": nhwc, "copy (ms)": nchw - nhwc})
    return pd.DataFrame(out)


def kernels_per_layer(steps=None, layers=None) -> pd.DataFrame:
    """Which step and kernel file run each layer for the Winograd steps."""
    out = []
    for number in steps or winograd.TILE:
        step = ladder.find(STEPS, number)
        for layer in layers or LAYERS:
            ran = fallback_step(step, layer)
            how = (f"Winograd F({winograd.TILE[number]}x{winograd.TILE[number]},3x3)" if ran is step
                   else f"step {ran.number} ({ran.title})")
            out.append({"step": number, "layer": layer.name, "runs": how, "file": ran.file})
    return pd.DataFrame(out)


def accuracy_table(backend=None, steps=("17", "23", "24"), layers=None, N: int = 1,
                   seed: int = 0) -> pd.DataFrame:
    """Each step's error against the float64 reference on the 3 x 3 layers (by default the
    full-size layers 3-5, one image: a few seconds on the CPU backend), measured now on
    ``backend``, on the same seeded inputs for every step: the relative error norm (what the
    checks compare with the tolerance) and the largest error of one output over the largest
    output (max |y - ref| / max |ref|)."""
    be = get_backend(backend)
    rows = []
    for layer in layers or [layer for layer in LAYERS if winograd.applies(layer)]:
        case = Conv(layer, N)
        for number in steps:
            step = ladder.find(STEPS, number)
            inputs = case.inputs(seed, step.precision)
            ref = case.reference(inputs, step.precision)
            result = compare(ladder.run(step, case, inputs, be), ref, step.precision, name=f"step {number} {layer.name}")
            rows.append({"step": number, "variant": step.label, "layer": layer.name,
                         "rel_error": result.rel_error,
                         "max_error_over_max_output": result.max_abs_error / float(np.abs(ref).max()),
                         "passed": result.passed})
    return pd.DataFrame(rows)


def memory_table(batches=None, total_bytes: float | None = None) -> pd.DataFrame:
    """Device memory per step, layer and batch size (x, w, y and scratch), from the shapes,
    and whether it fits the budget (:func:`.problem.memory_limit`) of this device, or of a device
    with ``total_bytes`` of memory."""
    limit = memory_limit(total_bytes)
    rows = []
    for N in batches or BATCHES + SCALING_BATCHES:
        for step in STEPS:
            for layer in LAYERS:
                need = footprint_bytes(step, layer, N)
                rows.append({"step": step.number, "variant": step.label, "layer": layer.index,
                             "size": N, "bytes": need, "scratch_bytes": scratch_bytes(step, layer, N),
                             "fits": need <= limit})
    return pd.DataFrame(rows)


def winograd_times(run, ladder: pd.DataFrame, totals: pd.DataFrame) -> tuple[dict, list]:
    """Steps 23 and 24 (Winograd) beside steps 17 and 22: the values the prose glues
    (``winograd_measured``, and what layers 1 and 2 cost where Winograd does not apply) and the
    tables to show (layers 3-5 per step; the filter transforms' times, when the run has them)."""
    main = ladder[ladder["size"] == MAIN_N]
    missing = unrecorded_steps(ladder, WINOGRAD_STEPS)
    shown = ["17", "22"] + [n for n in ("23", "24") if n not in missing]
    three = main[main["step"].isin(shown) & main["layer"].isin([3, 4, 5])]
    three_ms = three.groupby("step")["median_ms"].sum()
    fp32_cudnn = vendor_best(totals, MAIN_N, "fp32")
    if missing:
        print(f"not recorded yet: step(s) {', '.join(missing)} (this run predates them; "
              "`python -m gpulab record alexnet` on a GPU measures them)")
    setup = (run.timings[run.timings["experiment"] == "winograd_setup"]
             if "winograd_setup" in set(run.timings["experiment"]) else None)
    parts = []
    for n in ("23", "24"):
        if n in missing:
            continue
        text = (f"step {n} takes {three_ms[n]:.2f} ms on layers 3-5 and {step_ms(totals, n):.2f} ms for the five layers")
        if setup is not None and (setup["step"].astype(str) == n).any():
            text += f" (its filter transforms, once per model: {setup[setup['step'].astype(str) == n]['median_ms'].sum():.3f} ms)"
        parts.append(text)
    baseline = (f"step 17 takes {three_ms['17']:.2f} ms on layers 3-5 (every multiply on the FMA units) and step 22 "
                f"{three_ms['22']:.2f} ms (on the tensor cores); cuDNN's fastest fp32 path takes "
                f"{fp32_cudnn['median_ms']:.2f} ms for the five layers")
    values = {"winograd_measured": ("In this run " + "; ".join(parts) + "; " + baseline + "." if parts else
                                    "Steps 23 and 24 are not recorded yet in this run: " + baseline +
                                    ", and the Winograd steps' times will stand beside these once the chapter is re-recorded.")}
    # What layers 1 and 2 cost, where Winograd F(m x m, 3 x 3) does not apply.
    first_two = main[main["layer"].isin([1, 2])]
    values.update(fallback_12_ms=first_two[first_two["step"] == "22"]["median_ms"].sum(),
                  s22_layer2_ms=first_two[(first_two["step"] == "22") & (first_two["layer"] == 2)]["median_ms"].sum(),
                  cudnn_fp32_layer2_ms=first_two[(first_two["layer"] == 2) & (first_two["step"].astype(str) == "cuDNN")
                                                 & (first_two["precision"] == "fp32")]["median_ms"].min())
    table = three.pivot_table(index="layer", columns="step", values="median_ms")
    table.index = table.index.astype(int)
    table.columns = [f"step {c} (ms)" for c in table.columns]
    tables = [table.style.format(precision=3).set_caption(f"layers 3-5, N = {MAIN_N}; " + run.caption)]
    if setup is not None:
        tables.append(setup.pivot_table(index="layer", columns="variant", values="median_ms").style.format("{:.4f}")
                      .set_caption("filter transform, once per model (ms); " + run.caption))
    return values, tables


# The Hopper chapter's steps 25-28: each function returns the values its prose glues and the
# table the cell shows; ``fastest_cudnn`` is cuDNN's fastest path per precision ({precision: row}).

def _not_recorded(step: str, names, **texts) -> dict:
    """The values of a step the run predates: its sentence, NaN for ``names``, ``texts`` as given."""
    print(f"step {step} is not recorded in this run (it predates the step; `python -m gpulab record alexnet` "
          "on a Hopper GPU measures it)")
    return {f"s{step}_measured": f"Step {step} is not recorded in this run (it predates the step), so the numbers "
                                 "below are not measured", **{name: np.nan for name in names}, **texts}


def _measured(step: str, totals: pd.DataFrame) -> str:
    return f"Step {step} takes {step_ms(totals, step):.3f} ms for the five layers at N = {MAIN_N}"


def step25(run, ladder: pd.DataFrame, totals: pd.DataFrame, fastest_cudnn: dict) -> tuple[dict, object]:
    """Step 25 (fp16 ``wgmma``): its glued values and a per-layer table beside step 20 and cuDNN's
    fastest fp16 path."""
    main = ladder[ladder["size"] == MAIN_N]
    cudnn_name, cudnn_ms = fastest_cudnn["fp16"]["variant"], fastest_cudnn["fp16"]["median_ms"]

    def rows_used(i):              # the share of a tile's pixel rows that are real outputs (filter columns' divided out)
        layer, tile = LAYERS[i - 1], wgmma.DEFAULT_TILES[i]
        return wgmma.row_use(layer, tile) / (layer.M / (-(-layer.M // tile[1]) * tile[1]))
    values = {"cudnn_fp16_name": cudnn_name,          # as glued at step 20, in alexnet
              "s25_rows_l2": rows_used(2), "s25_rows_l3": rows_used(3)}
    cudnn16 = main[(main["step"].astype(str) == "cuDNN") & (main["variant"] == cudnn_name)]
    hopper = main[main["step"].isin(["20", "25"])].pivot_table(index="layer", columns="step", values="median_ms")
    hopper[cudnn_name] = cudnn16.set_index("layer")["median_ms"]
    hopper.index = hopper.index.astype(int)
    if "25" not in unrecorded_steps(ladder):
        s25_ms = step_ms(totals, "25")
        values.update(s25_measured=_measured("25", totals), s25_ms=s25_ms, s25_vs_20=step_ms(totals, "20") / s25_ms,
                      s25_vs_cudnn=s25_ms / cudnn_ms, s25_layers25_ms=hopper.loc[2:, "25"].sum(),
                      s20_layers25_ms=hopper.loc[2:, "20"].sum(), cudnn_layers25_ms=hopper.loc[2:, cudnn_name].sum(),
                      s25_layer1_ms=hopper.loc[1, "25"], cudnn_layer1_ms=hopper.loc[1, cudnn_name],
                      s25_target=target_verdict(totals, "25", cudnn_ms, 0.95))
    else:
        values.update(_not_recorded("25", ["s25_ms", "s25_vs_20", "s25_vs_cudnn", "s25_layers25_ms", "s20_layers25_ms",
                                           "cudnn_layers25_ms", "s25_layer1_ms", "cudnn_layer1_ms"],
                                    s25_target="not judged"))
    hopper.columns = [f"step {c} (ms)" if c in ("20", "25") else f"{c} (ms)" for c in hopper.columns]
    table = hopper.style.format(precision=3, na_rep=runs.NOT_MEASURED).set_caption(
        f"per layer, N = {MAIN_N}; " + runs.gap_note(hopper, gap_reason(run, MAIN_N, ["25"]), run.caption))
    return values, table


def step26(run, ladder: pd.DataFrame, totals: pd.DataFrame, checks: pd.DataFrame | None,
           fastest_cudnn: dict) -> tuple[dict, object]:
    """Step 26 (step 25 in tf32, flat tiles): its glued values and a per-layer table beside steps
    21 and 25 and cuDNN's fastest tf32 path."""
    tiles26 = wgmma32.DEFAULT_TILES["26"]
    tf32_layers = per_layer(ladder, ["21", "25", "26"], "tf32")
    cudnn_tf32 = tf32_layers.columns[-1]
    rule26 = channels_last_rule(run, "26", "tf32")
    cudnn_ms = fastest_cudnn["tf32"]["median_ms"]
    values = {"cudnn_tf32_name": fastest_cudnn["tf32"]["variant"],   # as glued at step 21, in alexnet
              "s26_tiles": ", ".join(wgmma32.tile_name(tile) for tile in tiles26.values()),
              "s26_rows_l2": wgmma32.row_use(LAYERS[1], MAIN_N, tiles26[2]),
              "s26_rows_l3": wgmma32.row_use(LAYERS[2], MAIN_N, tiles26[3])}
    if "26" not in unrecorded_steps(ladder):
        s26_ms, col = step_ms(totals, "26"), tf32_layers["step 26 (ms)"]
        values.update(
            s26_measured=_measured("26", totals), s26_ms=s26_ms, s26_vs_21=step_ms(totals, "21") / s26_ms,
            s26_vs_cudnn=s26_ms / cudnn_ms, s26_layers25_ms=col.loc[2:].sum(), s26_layers35_ms=col.loc[3:].sum(),
            cudnn_tf32_layers35_ms=tf32_layers.loc[3:, cudnn_tf32].sum(), s26_layer2_ms=col.loc[2],
            cudnn_tf32_layer2_ms=tf32_layers.loc[2, cudnn_tf32],
            s26_vs_25_layers25=col.loc[2:].sum() / tf32_layers.loc[2:, "step 25 (ms)"].sum(),
            cudnn_tf32_layers25_ms=tf32_layers.loc[2:, cudnn_tf32].sum(),
            cudnn_tf32_layer1_ms=tf32_layers.loc[1, cudnn_tf32], s26_layer1_ms=col.loc[1],
            s21_layer1_ms=tf32_layers.loc[1, "step 21 (ms)"],
            s26_error=checks[checks["step"] == "26"]["rel_error"].max() if checks is not None else np.nan,
            s26_nhwc_ms=rule26["step ms"], s26_nhwc_ratio=rule26["step ms"] / rule26["cuDNN ms"],
            s26_target=target_verdict(totals, "26", cudnn_ms))
    else:
        values.update(_not_recorded("26", ["s26_ms", "s26_vs_21", "s26_vs_cudnn", "s26_layers25_ms", "s26_vs_25_layers25",
                                           "s26_layers35_ms", "cudnn_tf32_layers35_ms", "s26_layer2_ms",
                                           "cudnn_tf32_layer2_ms", "cudnn_tf32_layers25_ms", "cudnn_tf32_layer1_ms",
                                           "s26_layer1_ms", "s21_layer1_ms", "s26_error", "s26_nhwc_ms", "s26_nhwc_ratio"],
                                    s26_target="not judged"))
    table = tf32_layers.style.format(precision=3, na_rep=runs.NOT_MEASURED).set_caption(
        f"per layer, N = {MAIN_N} (step 25: fp16, for the ratio); " + run.caption)
    return values, table


def step27(run, ladder: pd.DataFrame, totals: pd.DataFrame, checks: pd.DataFrame | None,
           fastest_cudnn: dict) -> tuple[dict, object]:
    """Step 27 (3xTF32 on ``wgmma``): its glued values and a per-layer table beside steps 22, 24
    and 26 and cuDNN's fastest fp32 path."""
    fp32_layers = per_layer(ladder, ["22", "24", "26", "27"], "fp32")
    cudnn_fp32 = fp32_layers.columns[-1]
    rule27 = channels_last_rule(run, "27", "fp32")
    cudnn_ms = fastest_cudnn["fp32"]["median_ms"]
    values = {"s27_tiles": ", ".join(wgmma32.tile_name(tile) for tile in wgmma32.DEFAULT_TILES["27"].values()),
              "cudnn_fp32_name": fastest_cudnn["fp32"]["variant"]}     # its time: cudnn_fp32_ms, glued at step 22
    at_main = checks[checks["size"] == MAIN_N] if checks is not None else None
    if "27" not in unrecorded_steps(ladder):
        s27_ms, col = step_ms(totals, "27"), fp32_layers["step 27 (ms)"]
        values.update(
            s27_measured=_measured("27", totals), s27_ms=s27_ms, s27_vs_24=step_ms(totals, "24") / s27_ms,
            s27_vs_cudnn=s27_ms / cudnn_ms,
            s27_vs_26_layers25=col.loc[2:].sum() / fp32_layers.loc[2:, "step 26 (ms)"].sum(),
            s27_layer1_ms=col.loc[1], cudnn_fp32_layer1_ms=fp32_layers.loc[1, cudnn_fp32],
            s27_layer2_ms=col.loc[2], cudnn_fp32_best_layer2_ms=fp32_layers.loc[2, cudnn_fp32],
            s27_layers35_ms=col.loc[3:].sum(), cudnn_fp32_layers35_ms=fp32_layers.loc[3:, cudnn_fp32].sum(),
            s27_layers35_verdict=("faster than cuDNN's" if col.loc[3:].sum() < fp32_layers.loc[3:, cudnn_fp32].sum()
                                  else "slower than cuDNN's"),
            s27_error=at_main[at_main["step"] == "27"]["rel_error"].max() if at_main is not None else np.nan,
            s27_cudnn_error=(at_main[at_main["step"] == fastest_cudnn["fp32"]["variant"]]["rel_error"].max()
                             if at_main is not None else np.nan),
            s27_nhwc_ms=rule27["step ms"], s27_nhwc_ratio=rule27["step ms"] / rule27["cuDNN ms"],
            s27_nhwc_cudnn=rule27["cuDNN's fastest"], s27_nhwc_cudnn_ms=rule27["cuDNN ms"],
            s27_target=target_verdict(totals, "27", cudnn_ms))
    else:
        values.update(_not_recorded("27", ["s27_ms", "s27_vs_24", "s27_vs_cudnn", "s27_vs_26_layers25", "s27_layer1_ms",
                                           "cudnn_fp32_layer1_ms", "s27_layer2_ms", "cudnn_fp32_best_layer2_ms",
                                           "s27_layers35_ms", "cudnn_fp32_layers35_ms", "s27_error", "s27_cudnn_error",
                                           "s27_nhwc_ms", "s27_nhwc_ratio", "s27_nhwc_cudnn_ms"],
                                    s27_layers35_verdict="not measured", s27_nhwc_cudnn="", s27_target="not judged"))
    table = fp32_layers.style.format(precision=3, na_rep=runs.NOT_MEASURED).set_caption(
        f"per layer, N = {MAIN_N} (step 26: tf32, for the ratio); " + run.caption)
    return values, table


def step28(run, ladder: pd.DataFrame, totals: pd.DataFrame, ceilings: pd.DataFrame,
           fastest_cudnn: dict) -> tuple[dict, object]:
    """Step 28 (layer 1's copy to channels-last in 16-byte chunks): its glued values and each call
    of steps 25 and 28 split into its copy and its GEMM, per layer. ``ceilings`` is
    :func:`gpulab.roofline.ceilings_table` of the run (the device copy's measured rate)."""
    calls = copy_table(run, steps=("25", "28")).pivot_table(index="layer", columns="step", sort=False,
                                                            values=["given NCHW x (ms)", "copy (ms)"])
    layer1 = LAYERS[0]
    geo = tc.geometry(layer1, 2)
    copy_bytes = 2 * MAIN_N * (layer1.C * layer1.H * layer1.W + geo.Hp * geo.Wp * geo.Cp)
    device_copy_tbs = ceilings.loc["memory bandwidth (GB/s)", "measured"] / 1e3
    values = {"s25_l1_copy_ms": calls.loc[1, ("copy (ms)", "25")],
              "s25_l25_copy_max_ms": calls.loc[2:, ("copy (ms)", "25")].max(),
              "s28_copy_mb": copy_bytes / 1e6, "s25_l1_copy_tbs": copy_bytes / calls.loc[1, ("copy (ms)", "25")] / 1e9,
              "device_copy_tbs": device_copy_tbs}
    if "28" not in unrecorded_steps(ladder):
        s28_ms, cudnn16_ms = step_ms(totals, "28"), fastest_cudnn["fp16"]["median_ms"]
        copy28_ms = calls.loc[1, ("copy (ms)", "28")]
        values.update(s28_measured=_measured("28", totals), s28_vs_25=step_ms(totals, "25") / s28_ms,
                      s28_vs_cudnn=s28_ms / cudnn16_ms, s28_layer1_ms=calls.loc[1, ("given NCHW x (ms)", "28")],
                      s28_l1_copy_ms=copy28_ms, s28_l1_copy_tbs=copy_bytes / copy28_ms / 1e9,
                      s28_l1_copy_share=copy_bytes / copy28_ms / 1e9 / device_copy_tbs,
                      s28_layers25_ms=calls.loc[2:, ("given NCHW x (ms)", "28")].sum(),
                      s28_target=target_verdict(totals, "28", cudnn16_ms, 0.95))
    else:
        values.update(_not_recorded("28", ["s28_vs_25", "s28_vs_cudnn", "s28_layer1_ms", "s28_l1_copy_ms",
                                           "s28_l1_copy_tbs", "s28_l1_copy_share", "s28_layers25_ms"],
                                    s28_target="not judged"))
    calls.columns = [f"step {step}: {what}" for what, step in calls.columns]
    table = calls.style.format(precision=3, na_rep=runs.NOT_MEASURED).set_caption(
        f"each call split into its copy and its GEMM, per layer, N = {MAIN_N}; " + run.caption)
    return values, table
