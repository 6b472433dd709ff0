"""Reading the recorded run: the tables the chapter shows, computed from its rows.

The run's ``ladder`` rows hold one time per step, layer, batch size and phase
(``layer``: conv + ReLU + pool; ``conv``: the convolution kernel alone), the
``forward`` rows one per step and batch size with the accuracy; vendor rows
(cuDNN, PyTorch) have a ``library``. These helpers add the two layers up,
pick the fastest step or vendor path of a precision, and state the targets.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ... import baselines, predictions
from ...ladder import find
from .launchers import MMA_FLOPS, MMA_PER_IMAGE
from .network import CONV1, CONV2, LAYERS
from .steps import PREDICTED, STEPS

#: The chapter's targets at N = 10,000 (the issue's): ms for conv1 + conv2, and speedups.
TARGETS = {"fp32_convs_ms": 2.5, "fp16_convs_ms": 1.2, "fp16_accuracy_points": 0.5, "forward_speedup": 3.0}
OUR_FP32, OUR_FP16 = "fp32", "fp16"


#: The report's own "op times" at batch 10,000 (ms: conv1, conv2), on its GPU, by our step number:
#: quoted from the report (its milestone tables), not measured here. Its streams row timed the
#: copies too, so it is left out.
REPORT_OP_TIMES_MS = {
    "01": (11.5888, 53.6658), "03": (13.0311, 68.7664), "04": (82.477, 56.9284), "05": (57.4412, 33.0359),
    "06": (10.0485, 43.2677), "07": (11.5396, 51.7928), "08": (12.8414, 101.913), "09": (11.9356, 92.0994),
}


def report_comparison(ladder: pd.DataFrame, N: int = 10_000) -> pd.DataFrame:
    """Steps 1 and 3-9, the report's op times next to this run's convolution kernels (columns
    "this run ..."), each relative to its own step 1 (below 1: faster than step 1)."""
    rows = []
    for step, (c1, c2) in REPORT_OP_TIMES_MS.items():
        ours_ = ladder[(ladder["step"] == step) & (ladder["size"] == N) & (ladder["phase"] == "conv")]
        ms = ours_.set_index("layer")["median_ms"]
        # A run without batch N (a smaller GPU skips it) has NaN in its columns, not an error.
        rows.append({"step": step, "variant": find(STEPS, step).label, "report conv1": c1, "report conv2": c2,
                     "this run conv1": float(ms.get("conv1", np.nan)), "this run conv2": float(ms.get("conv2", np.nan))})
    table = pd.DataFrame(rows).set_index("step")
    for who in ("report", "this run"):
        for layer in ("conv1", "conv2"):
            table[f"{who} {layer} / step 1"] = table[f"{who} {layer}"] / table.loc["01", f"{who} {layer}"]
    return table


def step_labels(table: pd.DataFrame) -> pd.DataFrame:
    """``step`` as text ("01", "12h", "cuDNN"): CSV reading turns "01" into 1 where it can."""
    def label(value):
        text = str(value)
        return f"{int(float(text)):02d}" if text.replace(".", "", 1).isdigit() else text
    return table.assign(step=table["step"].map(label)) if "step" in table.columns else table


def both_layers(ladder: pd.DataFrame, phase: str = "layer") -> pd.DataFrame:
    """conv1 + conv2 per variant and batch size in ``phase``: the sum of the two medians
    (and of the quartiles, an approximation of the sum's spread); variants measured on
    both layers only."""
    rows = ladder[ladder["phase"] == phase]
    keys = [c for c in ("variant", "size", "phase", "step", "precision", "library") if c in rows.columns]
    totals = (rows.groupby(keys, sort=False, dropna=False)
              .agg(median_ms=("median_ms", "sum"), q1_ms=("q1_ms", "sum"), q3_ms=("q3_ms", "sum"),
                   flops=("flops", "sum"), bytes=("bytes", "sum"), layers=("layer", "nunique"))
              .reset_index())
    return totals[totals["layers"] == 2].drop(columns="layers").reset_index(drop=True)


def builds_on(rows: pd.DataFrame) -> dict:
    """{variant: variant of the step it changes} for the steps in ``rows`` (columns ``step`` and
    ``variant``), from each kernel file's "What changed from step N" (steps 3, 4 and 6 each change
    step 1, not the step before them): the comparison :func:`gpulab.plots.speedup_ladder` draws
    for a branching ladder. A step whose base is not in ``rows`` is left out."""
    files = {s.number: s.file for s in STEPS}
    variant = dict(zip(rows["step"], rows["variant"]))
    out = {}
    for key, label in variant.items():
        base = predictions.builds_on(predictions.kernel_path(files[key])) if key in files else None
        if base is not None and f"{base:02d}" in variant:
            out[label] = variant[f"{base:02d}"]
    return out


def ours(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[~baselines.is_vendor(rows)]


def per_layer(ladder: pd.DataFrame, N: int, phase: str = "layer") -> pd.DataFrame:
    """Time per step and layer at batch size N (ms): one row per variant, conv1 and conv2 columns."""
    rows = ladder[(ladder["size"] == N) & (ladder["phase"] == phase)]
    table = rows.pivot_table(index="variant", columns="layer", values="median_ms", sort=False)
    table["conv1 + conv2"] = table.sum(axis=1, min_count=2)
    return table


def fastest_step(totals: pd.DataFrame, N: int, precision: str) -> pd.Series:
    """Our fastest step of ``precision`` at batch size N."""
    rows = ours(totals)
    rows = rows[(rows["size"] == N) & (rows["precision"] == precision)]
    return rows.loc[rows["median_ms"].idxmin()]


def is_padded(rows: pd.DataFrame) -> pd.Series:
    """Which rows are vendor paths with the channels padded for cuDNN's tensor-core kernels
    (:func:`.baselines.padded_layer_paths`; a run recorded before them has none)."""
    return rows["variant"].astype(str).str.contains(", padded to ", regex=False)


def vendor_convs_ms(ladder: pd.DataFrame, N: int, precision: str, phase: str,
                    padded: bool = True) -> tuple[float, str]:
    """The fastest vendor path of matching precision for each layer at N, summed over the
    two layers (ms), and the paths' names; ``padded=False``: of the paths on the layers as
    given (no channel padding)."""
    total, names = 0.0, []
    rows = ladder if padded else ladder[~is_padded(ladder)]
    for layer in ("conv1", "conv2"):
        best = baselines.fastest(rows, precision, size=N, layer=layer, phase=phase)
        if best is None:
            return np.nan, "none recorded"
        total += float(best["median_ms"])
        names.append(f"{layer}: {best['variant']}")
    return total, "; ".join(names)


def _short_kernel_name(name: str) -> str:
    """A library kernel's name without its namespaces and template arguments (the cast PyTorch
    runs is named after the copy it makes)."""
    copy = re.search(r"\w+_copy_kernel\w*", name)
    if copy:
        return copy.group(0)
    return re.sub(r"^void\s+", "", name).split("<")[0].split("(")[0].split("::")[-1]


def cudnn_kernel_table(kernels: pd.DataFrame) -> pd.DataFrame:
    """The run's ``cudnn_kernels`` table for reading: per fp16 path (conv alone), the convolution
    kernel cuDNN ran, whose name says the algorithm, the GPU generation it was built for and its
    tile (pixels x filters x reduction), and the other kernels of the call by short name (layout
    transposes, the cast of the images)."""
    rows = []
    for _, row in kernels.iterrows():
        names = [n.strip() for n in str(row["kernels"]).split(";") if n.strip()]
        conv = [n for n in names if "fprop" in n or "implicit_gemm" in n]
        rows.append({"layer": row["layer"], "variant": row["variant"], "convolution kernel": "; ".join(conv),
                     "other kernels": "; ".join(_short_kernel_name(n) for n in names if n not in conv)})
    return pd.DataFrame(rows, columns=["layer", "variant", "convolution kernel", "other kernels"])


def forward_table(forward: pd.DataFrame, N: int) -> pd.DataFrame:
    """Every forward pass at batch size N: ours with accuracy and agreement with the
    reference's predictions, the vendor's with their precision and mode."""
    rows = forward[forward["size"] == N].copy()
    columns = [c for c in ("variant", "precision", "mode", "median_ms", "q1_ms", "q3_ms", "accuracy",
                           "agree_with_reference") if c in rows.columns]
    return rows[columns].sort_values("median_ms").reset_index(drop=True)


def _met(value: float, **target) -> dict:
    """A target's ``met`` and ``margin`` columns (:func:`gpulab.predictions.target_verdict`)."""
    met, margin = predictions.target_verdict(value, **target)
    return {"met": met, "margin": margin}


def targets_table(ladder: pd.DataFrame, forward: pd.DataFrame, N: int = 10_000) -> pd.DataFrame:
    """The chapter's targets at batch size N against the run: what was reached, and how it
    compares with the fastest vendor path of matching precision in the same run."""
    if not (ladder["size"] == N).any():
        # A smaller GPU skips batch N: every target is listed, none judged.
        from ...prose import NOT_MEASURED
        names = [(f"best {p} steps, conv1 + conv2 (with ReLU and pool)", f"<= {TARGETS[k]} ms")
                 for p, k in ((OUR_FP32, "fp32_convs_ms"), (OUR_FP16, "fp16_convs_ms"))]
        names += [("reduced precision: accuracy change against fp32", f"within {TARGETS['fp16_accuracy_points']} points")]
        names += [(f"whole forward pass, {p}", f">= {TARGETS['forward_speedup']}x PyTorch's fastest")
                  for p in (OUR_FP32, OUR_FP16)]
        return pd.DataFrame([{"target": t, "limit": lim, "reached": NOT_MEASURED, "met": NOT_MEASURED, "margin": NOT_MEASURED,
                              "x vendor conv only": np.nan, "x vendor conv + ReLU + pool": np.nan}
                             for t, lim in names])
    totals = both_layers(ladder, "layer")
    out = []
    for precision, key in ((OUR_FP32, "fp32_convs_ms"), (OUR_FP16, "fp16_convs_ms")):
        best = fastest_step(totals, N, precision)
        conv_only, conv_names = vendor_convs_ms(ladder, N, precision, "conv")
        layer_ms, _ = vendor_convs_ms(ladder, N, precision, "layer")
        out.append({"target": f"best {precision} steps, conv1 + conv2 (with ReLU and pool)",
                    "limit": f"<= {TARGETS[key]} ms", "reached": f"{best['median_ms']:.3f} ms ({best['variant']})",
                    **_met(best["median_ms"], at_most=TARGETS[key], unit="ms"),
                    "vendor, conv only": f"{conv_only:.3f} ms", "x vendor conv only": conv_only / best["median_ms"],
                    "vendor, conv + ReLU + pool": f"{layer_ms:.3f} ms",
                    "x vendor conv + ReLU + pool": layer_ms / best["median_ms"]})
    ours_fwd = ours(forward[forward["size"] == N])
    fp32_acc = float(ours_fwd[ours_fwd["precision"] == "fp32"]["accuracy"].iloc[0])
    fp16 = ours_fwd[ours_fwd["precision"] == "fp16"]
    change = 100 * (float(fp16["accuracy"].min()) - fp32_acc) if len(fp16) else np.nan
    out.append({"target": "reduced precision: accuracy change against fp32",
                "limit": f"within {TARGETS['fp16_accuracy_points']} points",
                "reached": f"{change:+.2f} points",
                **_met(abs(change), at_most=TARGETS["fp16_accuracy_points"], bound=f"{TARGETS['fp16_accuracy_points']} points",
                       unit="points")})
    for precision in (OUR_FP32, OUR_FP16):
        mine = ours_fwd[ours_fwd["precision"] == precision]
        best = mine.loc[mine["median_ms"].idxmin()]
        vendor = baselines.fastest(forward, precision, size=N)
        vendor_ms = float(vendor["median_ms"]) if vendor is not None else np.nan
        speedup = vendor_ms / float(best["median_ms"])
        out.append({"target": f"whole forward pass, {precision}", "limit": f">= {TARGETS['forward_speedup']}x PyTorch's fastest",
                    "reached": f"{best['median_ms']:.3f} ms ({best['variant']}); x{speedup:.2f} vs "
                               f"{vendor_ms:.3f} ms ({vendor['variant'] if vendor is not None else 'none'})",
                    **_met(speedup, at_least=TARGETS["forward_speedup"], unit="x")})
    return pd.DataFrame(out)


def accuracy_table(forward: pd.DataFrame, N: int = 10_000) -> pd.DataFrame:
    """Each step's accuracy on the N test images and its agreement with the float64 reference."""
    rows = ours(forward[forward["size"] == N])
    return rows[["variant", "precision", "accuracy", "agree_with_reference"]].reset_index(drop=True)


# ----------------------------------------------------------------- a second GPU
def gpu_comparison_rows(run, N: int = 10_000) -> pd.DataFrame:
    """What :func:`gpu_comparison` compares from one run: conv1 + conv2 (each with ReLU and
    pool) per step and vendor path at batch size ``N``. The vendor rows were recorded without
    bytes; they get the layers' compulsory ones (pooled output only; 2 bytes an element in
    fp16/bf16) so that the roofline can place them."""
    totals = both_layers(step_labels(run.experiment("ladder")), "layer")
    rows = totals[totals["size"] == N].copy()
    vendor = baselines.is_vendor(rows) & ~(rows["bytes"] > 0)
    itemsize = rows["precision"].map({"fp16": 2, "bf16": 2}).fillna(4)
    rows.loc[vendor, "bytes"] = [sum(layer.bytes(N, int(size), fused=True) for layer in LAYERS)
                                 for size in itemsize[vendor]]
    return rows[["variant", "median_ms", "flops", "bytes", "precision"]].reset_index(drop=True)


def gpu_comparison(N: int = 10_000, root=None):
    """Per step (conv1 + conv2 with ReLU and pool, at batch size ``N``) and vendor path, the
    H200's recorded time over the H100's against the roofline's prediction
    (:func:`gpulab.runs.gpu_comparison`): (table, figure), or None until both runs exist."""
    from ...runs import gpu_comparison as compare_gpus
    return compare_gpus("lenet", lambda run: gpu_comparison_rows(run, N), root=root,
                        title=f"Does each step gain what the roofline predicts on the H200? "
                              f"(conv1 + conv2, N = {N:,})")


def prediction_table(ladder: pd.DataFrame, N: int = 10_000) -> pd.DataFrame:
    """Each step's prediction (from its kernel file) against the run at batch N: both layers'
    time (conv + ReLU + pool, the "layer" phase), judged per layer where the claim names one."""
    table = per_layer(ours(ladder), N, "layer")
    steps = [(s.number, s.title, s.file) for s in STEPS if not s.graph]
    number = {s.label: s.number for s in STEPS}
    measured = pd.concat([pd.DataFrame({"step": [number.get(v) for v in table.index], "case": case,
                                        "median_ms": table[column].to_numpy()})
                          for case, column in (("both", "conv1 + conv2"), ("conv1", "conv1"), ("conv2", "conv2"))])
    measured = measured.dropna(subset=["step", "median_ms"])
    return predictions.table(steps, measured, PREDICTED, main_case="both")


def batch_note(run, N: int) -> str:
    """"" when ``run`` measured batch ``N``; else what a view says in its place: "N = ...: not
    measured on this GPU" and the reason from the run's ``skipped`` table (a smaller GPU skips
    a batch whose footprint does not fit its memory)."""
    from ...prose import NOT_MEASURED
    ladder = run.timings[run.timings["experiment"] == "ladder"]
    if (ladder["size"] == N).any():
        return ""
    skipped = run.tables.get("skipped")
    why = [] if skipped is None or not len(skipped) else list(skipped[skipped["size"] == N]["reason"].unique())
    return f"N = {N:,}: {NOT_MEASURED}" + (f" ({'; '.join(why)})" if why else "")


def one_stream_ms(lanes: pd.DataFrame, step: str) -> dict:
    """Step ``step``'s one-stream copy-in, forward-pass and copy-out times (ms) from the run's
    timeline rows (``lanes``): what a model of several streams starts from."""
    rows = lanes[lanes["variant"].str.startswith(step + " ") & (lanes["chunks"] == 1)]
    if rows.empty:
        raise ValueError(f"the timeline has no one-stream rows of step {step}; it has "
                         f"{sorted(lanes['variant'].unique())}")
    busy = (rows["end_ms"] - rows["start_ms"]).groupby(rows["kind"]).sum()
    return {"h2d_ms": float(busy.get("h2d", 0.0)), "kernel_ms": float(busy.get("kernel", 0.0)),
            "d2h_ms": float(busy.get("d2h", 0.0))}


def layer_ms(ladder: pd.DataFrame, step: str, layer: str, n: int = 10_000, phase: str = "layer") -> float:
    """One step's median time (ms) for one layer, batch and phase; NaN where the run skipped it."""
    from ...prose import first
    row = ladder[(ladder["step"] == step) & (ladder["layer"] == layer) & (ladder["size"] == n)
                 & (ladder["phase"] == phase)]
    return first(row, "median_ms")


def counter(profile: pd.DataFrame | None, step: str, layer: str, name: str) -> float:
    """One profiler counter of the run (NaN for a run made without Nsight Compute, or without that counter)."""
    if profile is None or name not in profile:
        return float("nan")
    return float(profile[(profile["step"] == step) & (profile["layer"] == layer)][name].iloc[0])


def cudnn_convs(ladder: pd.DataFrame) -> pd.DataFrame:
    """cuDNN's rows of the convolution alone (phase ``conv``), every precision and layout."""
    return ladder[baselines.is_vendor(ladder) & (ladder["phase"] == "conv")]


def step13_numbers(run, ladder: pd.DataFrame, forward: pd.DataFrame, profile: pd.DataFrame | None,
                   bandwidth: float, N: int = 10_000) -> dict:
    """What the prose says of step 13 (both layers on the tensor cores), for ``glue``: its times against
    step 11, the target and cuDNN's fp16 paths (padded and as given), the whole forward pass against
    PyTorch's, its floors (tensor cores, memory, a fused conv1-conv2), the profile's counters and the
    accuracy change; a number the run did not measure is :data:`gpulab.prose.NOT_MEASURED`."""
    from ... import datasheet
    from ...prose import first, known, whole
    fp16_bytes = {"conv1": CONV1.bytes(N, 2, fused=True, x_itemsize=4), "conv2": CONV2.bytes(N, 2, fused=True)}
    # conv1 -> conv2 in one kernel: images in, pool2 out
    fused_bytes = (CONV1.bytes(N, 2, fused=True, x_itemsize=4) - 2 * np.prod(CONV1.pooled_shape(N))
                   + 2 * np.prod(CONV2.pooled_shape(N)))
    sheet = datasheet.lookup(run.gpu)
    tensor_tflops = sheet.fp16_tensor_tflops if sheet else float("nan")
    mma_flops = {k: v * N * MMA_FLOPS for k, v in MMA_PER_IMAGE.items()}

    def ms(step, layer):
        return layer_ms(ladder, step, layer, N)

    s13 = {layer: ms("13", layer) for layer in ("conv1", "conv2")}
    s13_total = s13["conv1"] + s13["conv2"]
    at_n = (ladder["size"] == N).any()
    vendor16_conv, vendor16_paths = vendor_convs_ms(ladder, N, "fp16", "conv") if at_n else (float("nan"), "")
    vendor16_given, _ = vendor_convs_ms(ladder, N, "fp16", "conv", padded=False) if at_n else (float("nan"), "")
    cudnn16_conv = cudnn_convs(ladder)

    def cudnn16(layer, padded, n=N):      # the fastest fp16 cuDNN path of one layer, padded or as given (ms)
        rows = cudnn16_conv[is_padded(cudnn16_conv) == padded]
        return first(baselines.fastest(rows, "fp16", size=n, layer=layer), "median_ms")

    def count(step, layer, name):
        return counter(profile, step, layer, name)

    memory_floor = sum(fp16_bytes.values()) / (bandwidth * 1e9) * 1e3
    conv2_floor = max(fp16_bytes["conv2"] / (bandwidth * 1e9), mma_flops["conv2"] / (tensor_tflops * 1e12)) * 1e3
    fwd = {step: forward[(forward["step"] == step) & (forward["size"] == N)] for step in ("12", "13", "13g")}
    pytorch16 = baselines.fastest(forward, "fp16", size=N)
    return dict(
        pytorch16_path=pytorch16["variant"] if pytorch16 is not None else "not measured",
        cudnn16_paths=vendor16_paths or "not measured",
        **known(s13_conv1=s13["conv1"], s13_conv2=s13["conv2"], s13_total=s13_total,
                s13_vs_s11=(ms("11", "conv1") + ms("11", "conv2")) / s13_total,
                s13_conv1_vs_s11=ms("11", "conv1") / s13["conv1"], s13_conv2_vs_s11=ms("11", "conv2") / s13["conv2"],
                s13_under_target=TARGETS["fp16_convs_ms"] / s13_total, s13_x_cudnn=vendor16_conv / s13_total,
                cudnn_fp16_convs=vendor16_conv, cudnn_fp16_convs_given=vendor16_given,
                cudnn_padded_conv1=cudnn16("conv1", True), cudnn_given_conv1=cudnn16("conv1", False),
                cudnn_padded_conv2=cudnn16("conv2", True), cudnn_given_conv2=cudnn16("conv2", False),
                cudnn_padded_conv1_1k=cudnn16("conv1", True, 1_000), cudnn_given_conv1_1k=cudnn16("conv1", False, 1_000),
                s13_forward=first(fwd["13"], "median_ms"), s13g_forward=first(fwd["13g"], "median_ms"),
                pytorch16_forward=first(pytorch16, "median_ms"),
                s13g_x_pytorch=first(pytorch16, "median_ms") / first(fwd["13g"], "median_ms"),
                s13_tensor_floor=sum(mma_flops.values()) / (tensor_tflops * 1e12) * 1e3, s13_memory_floor=memory_floor,
                s13_fused_floor=fused_bytes / (bandwidth * 1e9) * 1e3,
                s13_conv1_bw=fp16_bytes["conv1"] / (s13["conv1"] * 1e-3) / (bandwidth * 1e9),
                s13_conv2_bw=fp16_bytes["conv2"] / (s13["conv2"] * 1e-3) / (bandwidth * 1e9),
                s13_conv2_floor=conv2_floor, s13_wgmma_gain=s13["conv2"] - conv2_floor,
                s13_wgmma_share=(s13["conv2"] - conv2_floor) / s13_total,
                s13_image_share=4 * np.prod(CONV1.x_shape(N)) / fp16_bytes["conv1"],
                s13_accuracy_change=100 * (first(fwd["13"], "accuracy") - first(fwd["12"], "accuracy")),
                s13_changed=whole((1 - first(fwd["13"], "agree_with_reference")) * N),
                p13_tensor_conv1=count("13", "conv1", "tensor_pipe_pct"),
                p13_tensor_conv2=count("13", "conv2", "tensor_pipe_pct"),
                p13_issue_conv1=count("13", "conv1", "issue_slots_busy_pct"),
                p13_instr_conv2=count("13", "conv2", "warp_instructions") / count("11", "conv2", "warp_instructions")))
