"""What the notebook reads from a run: the ladder at a batch size, the vendor lines, the fastest
path per precision, the targets, the rates against the measured ceilings.

A live run on a smaller GPU lacks what that GPU cannot run (steps 7-8 on a T4, batch 32 where
memory is short: the run's ``skipped`` table says why). The readers here return NaN or None for a
missing value rather than raising, :func:`known` turns those into :data:`NOT_MEASURED` for the
prose, and :func:`caption` adds to a figure's or table's caption what the run skipped."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ... import baselines, paths, predictions, roofline
from ...ladder import find
from ...runs import gpu_comparison as compare_gpus
from ...sweep import best, point_row
from .record import WHOLE_BATCH
from .problem import LAYER
from .steps import BATCH_STEPS, PREDICTED, STEPS

#: The chapter's targets: (batch, precision) -> what our best kernel must at least match.
TARGETS = [(1, "fp32"), (1, "tf32"), (1, "fp16"), (32, "tf32"), (32, "fp16")]


def ladder(run, N: int, vendor: bool = True) -> pd.DataFrame:
    """The ladder experiment at batch ``N`` with achieved rates: our steps in ladder order, then
    (``vendor=True``) every cuDNN path, with ``gflops`` and ``tflops`` columns."""
    rows = run.experiment("ladder")
    rows = roofline.rates(rows[rows["size"] == N])
    rows = rows.assign(tflops=rows["gflops"] / 1e3)
    ours = rows[~baselines.is_vendor(rows)]
    order = {s.label: i for i, s in enumerate(STEPS)}
    ours = ours.assign(order=ours["variant"].map(order)).sort_values("order").drop(columns="order")
    if not vendor:
        return ours.reset_index(drop=True)
    return pd.concat([ours, rows[baselines.is_vendor(rows)]], ignore_index=True)


def vendor_lines(run, N: int, precisions=("fp32", "tf32", "fp16")) -> pd.DataFrame:
    """The fastest cuDNN path of each precision class at batch ``N`` (the dashed lines)."""
    rows = ladder(run, N)
    picks = [baselines.fastest(rows, p) for p in precisions]
    return pd.DataFrame([p for p in picks if p is not None]).reset_index(drop=True)


def best_step(run, N: int, precision: str) -> pd.Series | None:
    """Our fastest step of ``precision`` at batch ``N`` (None when the run timed none)."""
    ours = ladder(run, N, vendor=False)
    ours = ours[ours["precision"] == precision].sort_values("median_ms")
    return ours.iloc[0] if len(ours) else None


#: What the prose says in place of a number the run could not measure.
NOT_MEASURED = "not measured on this GPU"


def known(**values) -> dict:
    """``values`` for :func:`gpulab.prose.glue`, each missing number (None or NaN: a step or batch
    this run skipped) replaced by :data:`NOT_MEASURED`."""
    return {k: NOT_MEASURED if v is None or (isinstance(v, float) and np.isnan(v)) else v
            for k, v in values.items()}


def whole(value):
    """``value`` as an int, or NaN when it is missing."""
    return np.nan if value is None or pd.isna(value) else int(value)


def at(run, N: int, number: str, column: str = "median_ms") -> float:
    """One step's ``column`` at batch ``N`` (NaN when the run did not time it)."""
    rows = ladder(run, N, vendor=False)
    rows = rows[rows["step"].astype(str) == number]
    return float(rows[column].iloc[0]) if len(rows) else np.nan


def side(run, table: str, number: str, column: str) -> float:
    """A step's ``column`` in one of the run's side tables ("resources", "profile"; NaN when
    the table or the step is missing)."""
    frame = run.tables.get(table)
    if frame is None or not (frame["step"].astype(str) == number).any():
        return np.nan
    return float(frame[frame["step"].astype(str) == number][column].iloc[0])


def skip_note(run, sizes=None, steps=None) -> str:
    """What the run skipped among our ``steps`` (numbers; None: all) at batch ``sizes`` (None:
    any), whole batches included, with the reasons from its ``skipped`` table: "" when nothing."""
    table = run.tables.get("skipped")
    if table is None or not len(table):
        return ""
    names = {s.label: f"step {s.number}" for s in STEPS if steps is None or s.number in steps}
    names[WHOLE_BATCH] = WHOLE_BATCH
    rows = table[table["variant"].isin(names) & (table["size"].isin(sizes) if sizes is not None else True)]
    parts = []
    for (variant, reason), group in rows.groupby(["variant", "reason"], sort=False):
        at_n = ", ".join(str(int(n)) for n in group["size"])
        parts.append(f"N = {at_n}, {variant}: {reason}" if variant == WHOLE_BATCH
                     else f"{names[variant]} at N = {at_n}: {reason}")
    return "; ".join(parts)


def caption(run, sizes=None, steps=None) -> str:
    """``run.caption``, and what the run skipped among ``steps`` at ``sizes`` (see :func:`skip_note`)."""
    note = skip_note(run, sizes, steps)
    return run.caption + (f". Skipped in this run: {note}" if note else "")


def best_point(table: pd.DataFrame) -> pd.Series:
    """A sweep's best checked-and-timed point, or a row of NaN when it has none (every point
    invalid on this GPU)."""
    try:
        return best(table)
    except (ValueError, KeyError):
        return pd.Series(np.nan, index=table.columns)


def point(table: pd.DataFrame, **where) -> pd.Series:
    """The sweep point with these parameter values, or a row of NaN when the run lacks it."""
    try:
        row = point_row(table, **where)
    except KeyError:
        return pd.Series(np.nan, index=table.columns)
    return row if row["status"] == "ok" else pd.Series(np.nan, index=table.columns)


def measured_rates(run) -> dict:
    """The run's ceilings: copy GB/s, SGEMM, TF32 and FP16 GEMM TFLOP/s."""
    # A ceiling is the best rate measured for it (a run may hold a ceiling twice).
    # A ceiling the run lacks (its section failed) is NaN.
    rows = roofline.rates(run.experiment("ceilings")).groupby("variant")[["gbs", "gflops"]].max()
    out = {"copy_gbs": rows.loc["device copy", "gbs"] if "device copy" in rows.index else np.nan}
    for name, key in (("cuBLAS SGEMM", "fp32_tflops"), ("cuBLAS TF32 GEMM (PyTorch)", "tf32_tflops"),
                      ("cuBLAS HGEMM (fp16)", "fp16_tflops")):
        out[key] = rows.loc[name, "gflops"] / 1e3 if name in rows.index else np.nan
    return out


def floors(run, N: int = 1) -> pd.DataFrame:
    """The layer's floors at batch ``N`` on the run's measured ceilings: arithmetic at the SGEMM,
    TF32 and FP16 GEMM rates, memory at the copy bandwidth (fp32 and fp16 inputs)."""
    r = measured_rates(run)
    shape = LAYER.batch(N)
    return pd.DataFrame([
        {"floor": "arithmetic, FP32 (cuBLAS SGEMM rate)", "ms": shape.flops / (r["fp32_tflops"] * 1e9)},
        {"floor": "arithmetic, TF32 tensor cores (cuBLAS rate)", "ms": shape.flops / (r["tf32_tflops"] * 1e9)},
        {"floor": "arithmetic, FP16 tensor cores (cuBLAS rate)", "ms": shape.flops / (r["fp16_tflops"] * 1e9)},
        {"floor": "memory, fp32 inputs (copy bandwidth)", "ms": shape.bytes(4) / (r["copy_gbs"] * 1e6)},
        {"floor": "memory, fp16 inputs (copy bandwidth)", "ms": shape.bytes(2) / (r["copy_gbs"] * 1e6)},
    ]).set_index("floor")


def _met(ours_ms: float, vendor_ms: float, measured: bool) -> dict:
    """A target's ``met`` (None where not measured) and ``margin`` columns: at most cuDNN's time
    (:func:`gpulab.predictions.target_verdict`)."""
    if not measured:
        return {"met": None, "margin": predictions.NOT_MEASURED}
    met, margin = predictions.target_verdict(ours_ms, at_most=vendor_ms, unit="ms",
                                             bound=f"cuDNN's {vendor_ms:.4g} ms")
    return {"met": met, "margin": margin}


def targets(run) -> pd.DataFrame:
    """Each target: our fastest step of the precision against the fastest cuDNN path of matching
    precision (fp16 is matched with fp16 and bf16), at batch 1 or 32, from the run. A target the
    run could not measure has "skipped: <reason>" for its step (or path), NaN times and ``met``
    None."""
    out = []
    for N, precision in TARGETS:
        ours = best_step(run, N, precision)
        vendor = baselines.fastest(ladder(run, N), precision) if (run.experiment("ladder")["size"] == N).any() \
            else None
        why = "skipped: " + (skip_note(run, [N], [s.number for s in STEPS if s.precision == precision])
                             or "not in this run")
        ours_ms = ours["median_ms"] if ours is not None else np.nan
        vendor_ms = vendor["median_ms"] if vendor is not None else np.nan
        out.append({"N": N, "precision": precision, "our best step": ours["variant"] if ours is not None else why,
                    "ours (ms)": ours_ms, "fastest cuDNN path": vendor["variant"] if vendor is not None else why,
                    "cuDNN (ms)": vendor_ms, "cuDNN / ours": vendor_ms / ours_ms,
                    **_met(ours_ms, vendor_ms, ours is not None and vendor is not None)})
    return pd.DataFrame(out)


def fusion_bytes(batches=(1, 8, 32)) -> pd.DataFrame:
    """What fusing the pool saves: the pre-pool tensor, written once and read once, in MB, per
    batch size and storage precision, from the shapes."""
    return pd.DataFrame([{"N": N, "pre-pool tensor, fp32 (MB)": LAYER.batch(N).prepool_bytes(4) / 2e6,
                          "saved traffic, fp32 (MB)": LAYER.batch(N).prepool_bytes(4) / 1e6,
                          "saved traffic, fp16 (MB)": LAYER.batch(N).prepool_bytes(2) / 1e6,
                          "compulsory traffic, fp32 (MB)": LAYER.batch(N).bytes(4) / 1e6}
                         for N in batches]).set_index("N")


def step_label(number: str) -> str:
    return find(STEPS, number).label


def gpu_comparison_rows(run, N: int = 1) -> pd.DataFrame:
    """What :func:`gpu_comparison` compares from one run: every step timed at batch ``N`` and
    every eager cuDNN path (the CUDA-graph twins of a path take milliseconds too, and add
    nothing here)."""
    rows = ladder(run, N)
    if "mode" in rows:
        rows = rows[rows["mode"] != "graph"]
    return rows[["variant", "median_ms", "flops", "bytes", "precision"]].reset_index(drop=True)


def gpu_comparison(N: int = 1, root=None):
    """Per step and eager cuDNN path at batch ``N``, the H200's recorded time over the H100's
    against the roofline's prediction (:func:`gpulab.runs.gpu_comparison`): (table, figure),
    or None until both runs exist."""
    return compare_gpus("convpool", lambda run: gpu_comparison_rows(run, N), root=root,
                        title=f"Does each step gain what the roofline predicts on the H200? "
                              f"({'one image' if N == 1 else f'N = {N}'})")


def gpu_comparison_numbers(gpus: pd.DataFrame, gpus32: pd.DataFrame, h100_profile: pd.DataFrame | None) -> dict:
    """What the prose says of the H200 against the H100, for ``glue``: from :func:`gpu_comparison`'s
    tables at one image (``gpus``) and at 32 (``gpus32``), and the H100 run's profile of step 8
    (its tensor pipe and DRAM traffic; NaN without a profile)."""
    at32 = gpus32.set_index("variant")
    mine = gpus[~gpus["variant"].str.startswith("cuDNN")].set_index("variant")
    cudnn = gpus[gpus["variant"].str.startswith("cuDNN")]
    fp32_steps = mine[mine.index.str[:2].isin(["01", "02", "03", "04", "05", "06", "07"])]
    fp32_nchw = "cuDNN (PyTorch) fp32, NCHW, conv + ReLU + maxpool 2/2"
    step8, step9 = find(STEPS, "08").label, find(STEPS, "09").label
    p8 = h100_profile.set_index("step").loc["08"] if h100_profile is not None else None
    return dict(
        gpu2_max_memory_use=gpus["memory_use_a"].max(),
        gpu2_steps_spread=(fp32_steps["ratio"] - 1).abs().max(),
        gpu2_step8_1=mine.loc[step8, "ratio"], gpu2_step8_32=at32.loc[step8, "ratio"],
        gpu2_step9_1=mine.loc[step9, "ratio"], gpu2_step9_32=at32.loc[step9, "ratio"],
        gpu2_cudnn_low=cudnn[~cudnn["variant"].str.contains(" fp32,")]["ratio"].min(),
        gpu2_cudnn_fp32_1=cudnn[cudnn["variant"].str.contains(" fp32,")]["ratio"].min(),
        gpu2_cudnn_fp32_32=at32.loc[fp32_nchw, "ratio"], gpu2_cudnn_fp32_32_use=at32.loc[fp32_nchw, "compute_use_a"],
        gpu2_step8_tensor=p8["tensor_pipe_pct"] if p8 is not None else float("nan"),
        gpu2_step8_dram_gbs=((p8["dram_bytes_read"] + p8["dram_bytes_write"]) / p8["duration_ns"] if p8 is not None
                             else float("nan")))


def vendor_ms(run, N: int, precision: str, column: str = "median_ms") -> float:
    """The fastest cuDNN path of ``precision``'s class at batch ``N``, in ms (NaN when the run has
    none); ``column="rel_error"``: that path's error against the float64 reference."""
    rows = run.experiment("ladder")
    best = baselines.fastest(rows[rows["size"] == N], precision)
    return float(best[column]) if best is not None else np.nan


def batch_lines(run, precisions=("fp32", "tf32", "fp16")) -> pd.DataFrame:
    """The fused steps at every batch the run timed, and per precision class the fastest cuDNN
    path at each batch (variant "fastest cuDNN path, <precision>"): the batch figure's lines."""
    rows = run.experiment("ladder")
    fused = rows[rows["step"].astype(str).isin(list(BATCH_STEPS))]
    lines = [fused]
    for p in precisions:
        picks = [baselines.fastest(rows[rows["size"] == N], p) for N in sorted(rows["size"].unique())]
        picks = [pick for pick in picks if pick is not None]
        if picks:
            lines.append(pd.DataFrame(picks).assign(variant=f"fastest cuDNN path, {p}"))
    return pd.concat(lines)


def prediction_table(run, N: int = 1) -> pd.DataFrame:
    """Each step's prediction (from its kernel file) against its time at batch ``N`` in ``run``."""
    rows = ladder(run, N, vendor=False)
    return predictions.table([(s.number, s.title, s.file) for s in STEPS], rows[["step", "median_ms"]],
                             PREDICTED)


def input_loads(launches, kernels: dict) -> pd.DataFrame:
    """The global loads of the input ``x`` in CPU-backend launches counted by
    :func:`gpulab.cpu.counting`, per step: ``kernels`` maps a step to its kernel's name. The
    loads of x are the counted source lines that index ``x`` (or its row pointer ``x_c``)."""
    rows = {}
    for step, name in kernels.items():
        found = [launch for launch in launches if launch.kernel == name]
        if not found:
            raise ValueError(f"no counted launch of '{name}' (step {step}); counted: "
                             f"{sorted({launch.kernel for launch in launches})}")
        by_line = found[0].by_line
        keep = []
        for where in by_line.index:
            file, line = str(where).rsplit(":", 1)
            source = paths.REPO / file                   # an absolute path stays itself
            if not source.is_file():                     # the CPU backend's own header, not the kernel
                keep.append(False)
                continue
            text = source.read_text().splitlines()[int(line) - 1]
            keep.append(bool(re.search(r"\bx(_c)?\[", text)))
        lines = by_line[keep]
        requests, sectors = lines["global_load_requests"].sum(), lines["global_load_sectors"].sum()
        rows[step] = {"kernel": name, "requests": requests, "sectors": sectors,
                      "sectors per request": sectors / requests if requests else float("nan")}
    return pd.DataFrame.from_dict(rows, orient="index")
