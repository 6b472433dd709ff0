"""What the hopper notebook shows, each built from a run (recorded, or measured live on a Hopper
GPU): the ladder against cuBLAS, rates against the datasheet peak and the measured ceiling, the
roofline, the profile, the prediction table, the numbers the prose quotes, and the diagrams of the
128-byte swizzle and of the mbarrier ring.

    run = views.load(backend, "H100")
    views.ladder_figure(run); prose.glue(**views.numbers(run))
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ... import datasheet, plots, predictions, roofline, runs
from ...errors import RecordedRunError
from ...kernels import get_backend
from .launchers import needs_hopper
from .problem import MAIN_SIZE
from .problem import NAME as CHAPTER
from .record import SHAPES, SIZES, benchmark_all, gemm_bytes, gemm_flops
from .steps import BK, OTHER_PRECISIONS, PREDICTED, STEPS, TYPED_STEP, in_precision, prediction_steps, variant_key

#: Hopper's SM: 4 tensor cores, each 512 dense fp16 multiply-adds (1,024 FLOP) per clock
#: (NVIDIA H100 Tensor Core GPU Architecture whitepaper).
TENSOR_CORES_PER_SM = 4
FP16_FLOP_PER_CLOCK = 1024
EXPERIMENT = "hopper_gemm"
VENDOR = "vendor"
#: The second size the run times (n^3), where a kernel's tail and L2 reuse weigh differently.
LARGE_SIZE = SIZES[-1]


def load(backend=None, gpu: str = "H100"):
    """Measure now (every step and both cuBLAS paths at MAIN_SIZE^3, a minute or two) on a GPU that
    can run the kernels; else the run recorded on ``gpu`` (on the CPU backend, or on a GPU older
    than compute capability 9.0, whose reason :func:`needs_hopper` gives)."""
    be = get_backend(backend)
    if be.name == "gpu" and needs_hopper(be) is None:
        return runs.live_or_recorded(CHAPTER, benchmark_all.only("ladder"), gpu)
    return runs.load_run(CHAPTER, gpu)


def rows(run, size: int = MAIN_SIZE) -> pd.DataFrame:
    """The run's GEMM rows at ``size``^3 that were timed (steps in ladder order, then cuBLAS),
    with TFLOP/s from the median time."""
    t = run.experiment(EXPERIMENT)
    t = t[(t["size"] == size) & t["median_ms"].notna()].copy()
    if t.empty:
        raise RecordedRunError(f"the hopper run on {run.gpu} has no timed rows at {size}^3; it has sizes "
                               f"{sorted(run.experiment(EXPERIMENT)['size'].unique())}")
    t["step"] = t["step"].astype(str).map(lambda s: s.zfill(2) if s.isdigit() else s)
    t["tflops"] = t["flops"] / (t["median_ms"] * 1e-3) / 1e12
    order = {s.number: i for i, s in enumerate(STEPS)}
    t["order"] = t["step"].map(order).fillna(len(order))
    return t.sort_values(["order", "median_ms"]).drop(columns="order").reset_index(drop=True)


def ladder(run, size: int = MAIN_SIZE) -> pd.DataFrame:
    t = rows(run, size)
    return t[t["step"] != VENDOR].reset_index(drop=True)


def vendor(run, size: int = MAIN_SIZE) -> pd.DataFrame:
    t = rows(run, size)
    return t[t["step"] == VENDOR].reset_index(drop=True)


def best_vendor(run, size: int = MAIN_SIZE) -> pd.Series:
    """The fastest cuBLAS path of the run (fp16 in and out, float accumulation, as the steps)."""
    v = vendor(run, size)
    if v.empty:
        raise RecordedRunError(f"the hopper run on {run.gpu} timed no cuBLAS path at {size}^3")
    return v.loc[v["median_ms"].idxmin()]


def peak_tflops(run) -> float:
    """The datasheet's dense fp16 tensor-core rate (float accumulation) of the run's GPU."""
    gpu = datasheet.lookup(run.gpu)
    if gpu is None:
        raise RecordedRunError(f"gpulab.datasheet has no entry for {run.gpu}")
    return gpu.fp16_tensor_tflops


def summary(run, size: int = MAIN_SIZE) -> pd.DataFrame:
    """One row per step and cuBLAS path: time, TFLOP/s, the fraction of the fastest cuBLAS path's
    rate and of the datasheet peak."""
    t = rows(run, size)
    best = best_vendor(run, size)
    return pd.DataFrame({"variant": t["variant"], "median (ms)": t["median_ms"], "TFLOP/s": t["tflops"],
                         "of the fastest cuBLAS": t["tflops"] / best["tflops"],
                         "of the datasheet peak": t["tflops"] / peak_tflops(run)})


def summary_styled(run, size: int = MAIN_SIZE):
    return (summary(run, size).style.format({"median (ms)": "{:.4f}", "TFLOP/s": "{:.0f}",
                                             "of the fastest cuBLAS": "{:.1%}", "of the datasheet peak": "{:.1%}"})
            .hide(axis="index").set_caption(f"C = A B^T, {size}^3, fp16 in and out, float accumulation; "
                                            f"datasheet peak {peak_tflops(run):g} TFLOP/s; {run.caption}"))


def step_row(run, number: str, size: int = MAIN_SIZE):
    """One step's row next to the step before it and the fastest cuBLAS path (a notebook cell's table)."""
    s = summary(run, size)
    t = rows(run, size)
    keep = t["step"].isin([number, f"{int(number) - 1:02d}" if number.isdigit() else number]) | \
        (t["variant"] == best_vendor(run, size)["variant"])
    return (s[keep.to_numpy()].style.format({"median (ms)": "{:.4f}", "TFLOP/s": "{:.0f}",
                                             "of the fastest cuBLAS": "{:.1%}", "of the datasheet peak": "{:.1%}"})
            .hide(axis="index").set_caption(f"{size}^3; {run.caption}"))


def ladder_figure(run, size: int = MAIN_SIZE):
    return plots.speedup_ladder(ladder(run, size), vendor=vendor(run, size),
                                title=f"How close does each step come to cuBLAS? C = A B^T, {size}^3, fp16",
                                caption=run.caption)


def ceilings(run) -> dict:
    """The measured ceilings the roofline draws: the fastest cuBLAS rate of this run (the fastest
    fp16 GEMM this GPU ran), and the device-copy bandwidth of the measuring chapter's run on the
    same GPU (the datasheet's bandwidth if there is none)."""
    sheet = datasheet.lookup(run.gpu)
    out = {"tflops": float(best_vendor(run)["tflops"]), "gbs": sheet.memory_gbs, "gbs_source": "datasheet"}
    try:
        measured = roofline.ceilings_table(runs.load_run("measuring", run.gpu).timings, run.gpu)
        out.update(gbs=float(measured.loc["memory bandwidth (GB/s)", "measured"]),
                   gbs_source="device copy, measuring chapter's run on this GPU")
    except (RecordedRunError, KeyError, FileNotFoundError):
        pass
    return out


def roofline_figure(run, size: int = MAIN_SIZE):
    t = rows(run, size)
    points = pd.DataFrame({"variant": t["variant"], "intensity": t["flops"] / t["bytes"],
                           "gflops": t["tflops"] * 1e3})
    c = ceilings(run)
    sheet = datasheet.lookup(run.gpu)
    return plots.roofline(points, peak_gflops=c["tflops"] * 1e3, peak_gbs=c["gbs"],
                          datasheet_gflops=sheet.fp16_tensor_tflops * 1e3, datasheet_gbs=sheet.memory_gbs,
                          title=f"Is the GEMM bound by memory or by the tensor cores? ({size}^3, fp16)",
                          caption=f"{run.caption}. Compute roof measured: the fastest cuBLAS path of this run; "
                                  f"bandwidth: {c['gbs_source']}")


def side_table(run, name: str) -> tuple[pd.DataFrame, object]:
    """A side table of the run (``profile``, ``resources``, ``checks``) and the run it comes from: a
    live run has none, so the run recorded on an H100 (the GPU the kernels were profiled on)."""
    source = run if name in run.tables else runs.load_run(CHAPTER, "H100")
    return source.tables[name], source


# ---------------------------------------------------------------------------------- the profile
PROFILE_METRICS = ("SM Busy", "Issue Slots Busy", "DRAM Throughput", "L2 Cache Throughput")


def profile(run) -> pd.DataFrame:
    """The ncu profile of one launch of each kernel at MAIN_SIZE^3, one row per kernel (ladder
    order, cuBLAS's kernel last), the columns the prose reads. A live run has no profile: the
    recorded run's of the same GPU name is read instead (its caption says so)."""
    p, source = side_table(run, "profile")
    wide = p.pivot_table(index=["kernel", "grid"], columns="metric", values="value", aggfunc="first").reset_index()
    steps = dict(zip(source.tables["resources"]["kernel"], source.tables["resources"]["step"].astype(str)))
    wide["step"] = wide["kernel"].map(lambda k: steps.get(k, VENDOR)).map(lambda s: s.zfill(2) if s.isdigit() else s)
    wide["variant"] = [f"step {s}: {k}" if s != VENDOR else f"cuBLAS: {k}" for s, k in zip(wide["step"], wide["kernel"])]
    wide["duration (us)"] = wide["Duration"] / 1e3
    order = {s.number: i for i, s in enumerate(STEPS)}
    wide = wide.assign(order=wide["step"].map(order).fillna(len(order))).sort_values("order").drop(columns="order")
    wide.attrs["caption"] = (f"{source.meta.get('profile_note', 'ncu')}; {source.caption}"
                             + ("" if source is run else " (the live run has no profile: the recorded one)"))
    return wide.reset_index(drop=True)


def profile_figure(run):
    p = profile(run)
    return plots.profile_bars(p, [*PROFILE_METRICS, "duration (us)"],
                              title="Where does each step's time go? (Nsight Compute, one launch, %)",
                              caption=p.attrs["caption"])


def cluster_of(kernel: str) -> str | None:
    """The thread-block cluster a cuBLAS (nvjet) kernel's name states, e.g. "2x1" in
    ``nvjet_sm90_hsh_128x256_64x4_2x1_v_bz_coopA_TNN`` (tile 128x256, k 64 x 4 stages, cluster 2x1).
    A reading of an undocumented name, not a measurement: the run's profile records no launch
    shape (Nsight Compute's ``launch__cluster_dim_*`` would), and the prose says so."""
    parts = kernel.split("_")
    if not kernel.startswith("nvjet") or len(parts) < 6:
        return None
    return parts[5] if "x" in parts[5] else None


# ---------------------------------------------------------------------------------- predictions
def prediction_table(run, size: int = MAIN_SIZE) -> pd.DataFrame:
    """The ladder's predictions, then step 7's in bf16 and tf32 (rows "07 bf16", "07 tf32", judged
    against step 7 in fp16; not measured where the run timed only the fp16 ladder, as a live run does)."""
    lad = ladder(run, size)[["step", "median_ms"]]
    variants = [in_precision(TYPED_STEP, p) for p in OTHER_PRECISIONS]
    measured = [lad]
    for v in variants:
        experiment = TYPE_EXPERIMENT.format(v.precision)
        if experiment in set(run.timings["experiment"]):
            t = _timed(run, experiment)
            t = t[(t["size"] == size) & (t["step"] != VENDOR)]
            measured.append(pd.DataFrame({"step": variant_key(v), "median_ms": t["median_ms"].to_numpy()}))
    return predictions.table(prediction_steps(), pd.concat(measured, ignore_index=True), PREDICTED)


def prediction_styled(run, size: int = MAIN_SIZE):
    return predictions.styled(prediction_table(run, size), f"{size}^3; {run.caption}")


# ---------------------------------------------------------------------------------- the prose's numbers
def blocks_per_sm(run, number: str) -> int:
    """How many blocks of a step fit on one SM (its registers, threads and shared memory, from the
    run's resources table), by the architecture's limits (gpulab.datasheet)."""
    r, source = side_table(run, "resources")
    r = r[r["step"].astype(str).str.zfill(2) == number].iloc[0]
    arch = datasheet.architecture(source.meta["compute_capability"])
    fit = arch.blocks_per_sm(int(r["threads"]), int(r["registers"]),
                             int(r["static_shared_bytes"] + r["dynamic_shared_bytes"]))
    return int(fit["blocks"])


#: Within this share of the fastest cuBLAS path a step is "level with" it: each median's 95%
#: confidence interval is about ±1% (the stop rule), so two medians closer than 2% are not told apart.
LEVEL_WITHIN = 0.02


def standing(ratio: float) -> str:
    """'level with', 'past' or 'short of' the vendor, for a step at ``ratio`` of its speed."""
    if abs(ratio - 1.0) <= LEVEL_WITHIN:
        return "level with"
    return "past" if ratio > 1.0 else "short of"


def numbers(run, size: int = MAIN_SIZE) -> dict:
    """Every number the prose quotes, by name: ``tXX`` (ms), ``tflopsXX``, ``cublasXX`` (fraction
    of the fastest cuBLAS path), the best step, the vendor path, the peak, the profile's columns."""
    lad, best = ladder(run, size), best_vendor(run, size)
    peak = peak_tflops(run)
    out = {"size": size, "gpu": run.gpu, "date": run.meta["date"], "peak_tflops": peak,
           "vendor_name": best["variant"], "vendor_ms": float(best["median_ms"]),
           "vendor_tflops": float(best["tflops"]), "vendor_peak": float(best["tflops"]) / peak}
    for _, r in lad.iterrows():
        n = r["step"]
        out[f"t{n}"] = float(r["median_ms"])
        out[f"tflops{n}"] = float(r["tflops"])
        out[f"cublas{n}"] = float(r["tflops"] / best["tflops"])
        out[f"peak{n}"] = float(r["tflops"] / peak)
    top = lad.loc[lad["median_ms"].idxmin()]
    out.update(best_step=top["step"], best_ms=float(top["median_ms"]), best_tflops=float(top["tflops"]),
               best_cublas=float(top["tflops"] / best["tflops"]), best_peak=float(top["tflops"] / peak),
               speedup_ladder=float(lad["median_ms"].iloc[0] / top["median_ms"]),
               standing=standing(float(top["tflops"] / best["tflops"])))
    big_ladder, big_best = ladder(run, LARGE_SIZE), best_vendor(run, LARGE_SIZE)
    big_top = big_ladder.loc[big_ladder["median_ms"].idxmin()]
    out.update(large_size=LARGE_SIZE, large_best_step=big_top["step"],
               large_best_cublas=float(big_top["tflops"] / big_best["tflops"]),
               large_vendor_name=big_best["variant"])
    c = ceilings(run)
    out.update(ceiling_tflops=c["tflops"], ceiling_peak=c["tflops"] / peak, ridge=c["tflops"] * 1e3 / c["gbs"],
               intensity=gemm_flops(size, size, size) / gemm_bytes(size, size, size),
               floor_ms=gemm_flops(size, size, size) / (peak * 1e12) * 1e3,
               gflop=gemm_flops(size, size, size) / 1e9, mbytes=gemm_bytes(size, size, size) / 1e6)
    out.update(blocks02=blocks_per_sm(run, "02"), blocks03=blocks_per_sm(run, "03"))
    # The clock the datasheet's rate assumes: every SM's 4 tensor cores each do 1,024 dense fp16
    # FLOP (512 multiply-adds) per clock on Hopper; the clocks the card ran at come from the run.
    out["peak_clock_mhz"] = peak * 1e12 / (int(run.meta["sms"]) * TENSOR_CORES_PER_SM * FP16_FLOP_PER_CLOCK) / 1e6
    state = run.meta.get("gpu_state", {})
    if state.get("sm_clock_mhz_median"):
        out["run_clock_mhz"] = float(state["sm_clock_mhz_median"])
        out["clock_samples"] = int(state.get("samples", 0))
        out["clock_peak_tflops"] = peak * out["run_clock_mhz"] / out["peak_clock_mhz"]
    p = profile(run).set_index("step")
    for n in p.index:
        key = "cublas" if n == VENDOR else n
        out[f"smbusy_{key}"] = float(p.loc[n, "SM Busy"])
        out[f"issue_{key}"] = float(p.loc[n, "Issue Slots Busy"])
        out[f"l2_{key}"] = float(p.loc[n, "L2 Cache Throughput"])
        out[f"dram_{key}"] = float(p.loc[n, "DRAM Throughput"])
    out["smbusy_best"] = out.get(f"smbusy_{top['step']}", np.nan)
    if VENDOR in p.index:
        out["cublas_kernel"] = p.loc[VENDOR, "kernel"]
        out["cublas_cluster"] = cluster_of(p.loc[VENDOR, "kernel"]) or "none"
        parts = p.loc[VENDOR, "kernel"].split("_")
        if len(parts) > 4 and p.loc[VENDOR, "kernel"].startswith("nvjet"):
            out["cublas_tile"] = parts[3].replace("x", " x ")           # "128x256": the block's tile of C
            out["cublas_k_stages"] = parts[4].replace("x", " k x ") + " stages"   # "64x4": k per slice, stages
    last = TYPED_STEP
    out.update(our_tile=f"{last.bm} x {last.bn}", our_k_stages=f"{BK} k x {last.stages} stages")
    tiles = -(-size // TYPED_STEP.bm) * -(-size // TYPED_STEP.bn)
    out.update(tiles=tiles, sms=int(run.meta["sms"]), waves=tiles / int(run.meta["sms"]))
    for step in STEPS:
        if step.cluster > 1:
            n = step.number
            out[f"l2_gb_{n}"] = ring_bytes(step, size) / 1e9
            out[f"l2_gb_{TYPED_STEP.number}"] = ring_bytes(TYPED_STEP, size) / 1e9
            out.update(cluster_step=n, cluster_blocks=step.cluster)
            if f"t{n}" in out:
                out["cluster_speedup"] = out[f"t{TYPED_STEP.number}"] / out[f"t{n}"]
                out["cluster_pays"] = "pays" if out["cluster_speedup"] > 1 else "does not pay"
    return out


def ring_bytes(step, size: int) -> float:
    """Bytes a step's copies bring from L2 into shared memory for a size^3 GEMM: every tile's
    slices of A (bm rows) and B (bn rows, of which a cluster step's block loads bn / cluster for
    all the blocks of its cluster: one read from L2, multicast)."""
    tiles = -(-size // step.bm) * -(-size // step.bn)
    slices = -(-size // step.slice_k)
    return float(tiles * slices * (step.bm + step.bn // step.cluster) * 128)


# ---------------------------------------------------------------------------------- diagrams
def swizzle_chunk(row: int, chunk: int, swizzle: int = 128) -> int:
    """Where the 16-byte chunk ``chunk`` of row ``row`` of a tile with ``swizzle``-byte rows is
    stored (the chunk index in the same row): bits 4 and up of the byte offset XORed with bits 7
    and up, as many bits as the pattern has chunks (128 bytes: 3, chunk ^ (row % 8))."""
    bits = {128: 3, 64: 2, 32: 1, 0: 0}[swizzle]
    offset = row * max(swizzle, 16) + 16 * chunk
    return ((offset ^ ((offset >> 3) & (((1 << bits) - 1) << 4))) % max(swizzle, 16)) // 16


def swizzle_figure(swizzle: int = 128, rows: int = 8):
    """Which 16-byte chunk of each row lands where in shared memory with the 128-byte swizzle."""
    import matplotlib.pyplot as plt
    chunks = max(swizzle, 16) // 16
    fig, axes = plt.subplots(1, 2, figsize=(plots.MAX_WIDTH_IN, 4.0))
    cmap = plt.get_cmap("tab10")
    for ax, swizzled in zip(axes, (False, True)):
        for r in range(rows):
            for c in range(chunks):
                at = swizzle_chunk(r, c, swizzle) if swizzled else c
                ax.add_patch(plt.Rectangle((at, rows - 1 - r), 1, 1, facecolor=cmap(c), alpha=0.55,
                                           edgecolor="white"))
                ax.text(at + 0.5, rows - 0.5 - r, f"k{8 * c}", ha="center", va="center", fontsize=9)
        ax.set(xlim=(0, chunks), ylim=(0, rows), xticks=np.arange(chunks) + 0.5,
               xticklabels=[f"{16 * c}" for c in range(chunks)], yticks=np.arange(rows) + 0.5,
               yticklabels=[f"row {r}" for r in range(rows)][::-1], xlabel="byte offset in the row (bank group)")
        ax.set_title("as in global memory (no swizzle)" if not swizzled else
                     f"in shared memory, {swizzle}-byte swizzle:\nchunk c of row r at c ^ (r % 8)", fontsize=10,
                     loc="left")
    fig.suptitle("Where does each 16-byte chunk (8 halves: k = 8c .. 8c + 7) of a tile row land?",
                 x=0.01, ha="left", fontweight="bold")
    note, height = plots.caption_text(fig, "Colour: which chunk (k range) of the row. Reading one k range down 8 "
                                      "rows hits 8 different 16-byte bank groups after the swizzle, 1 before. "
                                      "Computed by views.swizzle_chunk, the same function of the address as "
                                      "kernels/common/hopper.h's CPU emulation.", fontsize=9)
    fig.text(0.01, 0.01, note, fontsize=9, ha="left", va="bottom")
    fig.tight_layout(rect=(0, height, 1, 1))
    return fig


def ring_schedule(slices: int, stages: int) -> pd.DataFrame:
    """Slice t of the k loop: its slot (t % stages), the parity of the ``full`` phase the consumer
    waits for ((t / stages) % 2), and the parity of the ``empty`` phase the producer waits for
    before refilling the slot (the other one: a fresh barrier counts the phase before its first as
    done, so round 0 does not wait)."""
    t = np.arange(slices)
    return pd.DataFrame({"slice": t, "slot": t % stages, "round": t // stages, "full parity": (t // stages) % 2,
                         "empty parity": ((t // stages) % 2) ^ 1})


def ring_figure(slices: int = 10, stages: int = 4):
    """The ring of a warp-specialized step: each slot's full/empty phases, round by round."""
    import matplotlib.pyplot as plt
    s = ring_schedule(slices, stages)
    fig, ax = plt.subplots(figsize=(plots.MAX_WIDTH_IN, 0.75 * stages + 2.4))
    for _, r in s.iterrows():
        y = stages - 1 - r["slot"]
        x = r["round"] * 3
        ax.add_patch(plt.Rectangle((x, y + 0.1), 1.4, 0.8, facecolor="#DD8452", alpha=0.6))
        ax.text(x + 0.7, y + 0.5, f"producer:\nwait empty {r['empty parity']}\nload t={r['slice']}",
                ha="center", va="center", fontsize=8.5)
        ax.add_patch(plt.Rectangle((x + 1.5, y + 0.1), 1.4, 0.8, facecolor="#4C72B0", alpha=0.6))
        ax.text(x + 2.2, y + 0.5, f"consumers:\nwait full {r['full parity']}\nwgmma t={r['slice']}",
                ha="center", va="center", fontsize=8.5)
    rounds = int(s["round"].max()) + 1
    ax.set(xlim=(0, 3 * rounds), ylim=(0, stages), yticks=np.arange(stages) + 0.5,
           yticklabels=[f"slot {k}" for k in range(stages)][::-1], xticks=np.arange(rounds) * 3 + 1.5,
           xticklabels=[f"round {k} (parity {k % 2})" for k in range(rounds)])
    fig.suptitle(f"Which phase does each wait name? A ring of {stages} slots, {slices} slices of k",
                 x=0.01, ha="left", fontweight="bold")
    note, height = plots.caption_text(fig, "The number after each wait is the parity of the phase it waits for. "
                                      "A slot's full barrier completes one phase per round (its bytes landed), "
                                      "its empty barrier one phase per round (every consumer warp arrived). "
                                      "mbar_wait(bar, p) returns once the phase of parity p has completed; a fresh "
                                      "barrier's phase 'before the first' (parity 1) counts as done, so the "
                                      "producer's round 0 does not wait.", fontsize=9)
    fig.text(0.01, 0.01, note, fontsize=9, ha="left", va="bottom")
    fig.tight_layout(rect=(0, height, 1, 1))
    return fig


def warpgroups_figure():
    """Step 4's block: one producer warpgroup, two consumer warpgroups, the ring between them."""
    import matplotlib.pyplot as plt
    from .steps import STEPS as _steps
    step = next(s for s in _steps if s.number == "04")
    fig, ax = plt.subplots(figsize=(plots.MAX_WIDTH_IN, 3.4))
    boxes = [(0.2, 1.2, "#DD8452", "producer warpgroup (warps 0-3)\nsetmaxnreg.dec 40\none thread: "
                                   "wait empty, expect_tx,\n2 TMA loads per slice"),
             (6.6, 2.1, "#4C72B0", "consumer warpgroup 1 (warps 4-7)\nsetmaxnreg.inc 232\nwait full, "
                                   f"wgmma 64 x {step.bn} x 16,\narrive empty; rows 0-63 of C"),
             (6.6, 0.2, "#4C72B0", "consumer warpgroup 2 (warps 8-11)\nsetmaxnreg.inc 232\nwait full, "
                                   f"wgmma 64 x {step.bn} x 16,\narrive empty; rows 64-127 of C")]
    for x, y, color, text in boxes:
        ax.add_patch(plt.Rectangle((x, y), 3.0, 1.6, facecolor=color, alpha=0.6))
        ax.text(x + 1.5, y + 0.8, text, ha="center", va="center", fontsize=8.5)
    for k in range(step.stages):
        ax.add_patch(plt.Rectangle((3.6 + 0.7 * k, 1.5), 0.6, 1.0, facecolor="#CCCCCC", edgecolor="black"))
        ax.text(3.9 + 0.7 * k, 2.0, f"slot\n{k}", ha="center", va="center", fontsize=8.5)
    ax.annotate("", xy=(3.6, 2.0), xytext=(3.2, 2.0), arrowprops=dict(arrowstyle="->"))
    ax.text(4.95, 2.85, "full: bytes landed (TMA) -> consumers", ha="center", fontsize=8.5)
    ax.text(4.95, 1.1, "empty: 8 consumer warps arrived -> producer", ha="center", fontsize=8.5)
    ax.annotate("", xy=(6.6, 2.9), xytext=(6.4, 2.2), arrowprops=dict(arrowstyle="->"))
    ax.annotate("", xy=(6.6, 1.0), xytext=(6.4, 1.8), arrowprops=dict(arrowstyle="->"))
    ax.set(xlim=(0, 9.8), ylim=(0, 4.0))
    ax.axis("off")
    fig.suptitle(f"Step 4's block: {step.threads} threads, a ring of {step.stages} slices of "
                 f"{step.bm} + {step.bn} rows x {BK} k", x=0.01, ha="left", fontweight="bold")
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------- bf16, tf32 and the book's shapes
#: The experiments of step 7 in other element types at n^3, and at the book's GEMM shapes.
TYPE_EXPERIMENT = "hopper_gemm_{}"
SHAPES_EXPERIMENT = "hopper_shapes"


def _with_experiment(run, experiment: str):
    """``run`` if it timed ``experiment``; else the run recorded on the same GPU, or on the H100
    where none was recorded on it (a live run times the fp16 ladder only), whose caption the views
    then show."""
    t = run.experiment(experiment) if experiment in set(run.timings["experiment"]) else None
    if t is not None and t["median_ms"].notna().any():
        return run
    try:
        recorded = runs.load_run(CHAPTER, run.gpu)
    except RecordedRunError:
        recorded = runs.load_run(CHAPTER, "H100")
    if experiment not in set(recorded.timings["experiment"]):
        raise RecordedRunError(f"neither this run nor the one recorded on {run.gpu} timed {experiment}")
    return recorded


def _timed(run, experiment: str) -> pd.DataFrame:
    t = run.experiment(experiment)
    t = t[t["median_ms"].notna()].copy()
    t["step"] = t["step"].astype(str).map(lambda s: s.zfill(2) if s.isdigit() else s)
    t["tflops"] = t["flops"] / (t["median_ms"] * 1e-3) / 1e12
    return t


def _standing(t: pd.DataFrame) -> dict:
    """Step 7's row of one GEMM against the faster cuBLAS path of the same GEMM."""
    ours = t[t["step"] != VENDOR].iloc[0]
    vendors = t[t["step"] == VENDOR]
    best = vendors.loc[vendors["median_ms"].idxmin()]
    return {"ms": float(ours["median_ms"]), "tflops": float(ours["tflops"]), "error": float(ours["rel_error"]),
            "vendor": best["variant"], "vendor_ms": float(best["median_ms"]), "vendor_tflops": float(best["tflops"]),
            "vendor_error": float(best["rel_error"]), "ratio": float(best["median_ms"] / ours["median_ms"])}


def precision_table(run, sizes=(MAIN_SIZE, LARGE_SIZE)) -> pd.DataFrame:
    """Step 7 against the faster cuBLAS path in fp16, bf16 and tf32 at each n^3: times, TFLOP/s,
    the ratio, and both errors against float64."""
    out, captions = [], {}
    for precision in ("fp16", *OTHER_PRECISIONS):
        experiment = EXPERIMENT if precision == "fp16" else TYPE_EXPERIMENT.format(precision)
        source = run if precision == "fp16" else _with_experiment(run, experiment)
        captions.setdefault(source.caption, []).append(precision)
        t = _timed(source, experiment)
        for n in sizes:
            here = t[t["size"] == n]
            if precision == "fp16":
                here = here[(here["step"] == TYPED_STEP.number) | (here["step"] == VENDOR)]
            s = _standing(here)
            out.append({"precision": precision, "size": f"{n}^3", "step 7 (ms)": s["ms"], "step 7 TFLOP/s": s["tflops"],
                        "fastest cuBLAS path": s["vendor"], "cuBLAS TFLOP/s": s["vendor_tflops"],
                        "step 7 / cuBLAS": s["ratio"], "step 7 error": s["error"], "cuBLAS error": s["vendor_error"]})
    table = pd.DataFrame(out)
    where = "; ".join(caption if len(captions) == 1 else f"{', '.join(p)}: {caption}"
                      for caption, p in captions.items())
    table.attrs["caption"] = (f"C = A B^T, A, B and C in each type, float accumulation; error: ||C - C64|| / ||C64|| "
                              f"against float64 products of the same inputs; {where}")
    return table


def precision_styled(run):
    t = precision_table(run)
    return (t.style.format({"step 7 (ms)": "{:.4f}", "step 7 TFLOP/s": "{:.0f}", "cuBLAS TFLOP/s": "{:.0f}",
                            "step 7 / cuBLAS": "{:.3f}", "step 7 error": "{:.1e}", "cuBLAS error": "{:.1e}"})
            .hide(axis="index").set_caption(t.attrs["caption"]))


def shape_notes() -> dict:
    """Where each of record.SHAPES comes from (name -> note)."""
    return {name: note for name, *_, note in SHAPES}


def shapes_table(run) -> pd.DataFrame:
    """Step 7 against the faster cuBLAS path at each of the book's GEMM shapes, per element type,
    with what the tile makes of the shape: tiles of 128 x 256, waves of them over the SMs, and the
    share of the tiles' columns that fall inside N."""
    source = _with_experiment(run, SHAPES_EXPERIMENT)
    t = _timed(source, SHAPES_EXPERIMENT)
    sms = int(source.meta["sms"])
    step = TYPED_STEP
    out = []
    for (shape, precision), here in t.groupby(["shape", "precision"], sort=False):
        M, N, K = (int(here[c].iloc[0]) for c in ("M", "N", "K"))
        s = _standing(here)
        tiles = -(-M // step.bm) * -(-N // step.bn)
        out.append({"shape": shape, "M": M, "N": N, "K": K, "precision": precision, "GFLOP": 2.0 * M * N * K / 1e9,
                    "tiles": tiles, "waves": tiles / sms, "N used of the tile": N / (-(-N // step.bn) * step.bn),
                    "step 7 TFLOP/s": s["tflops"], "cuBLAS TFLOP/s": s["vendor_tflops"],
                    "fastest cuBLAS path": s["vendor"], "step 7 / cuBLAS": s["ratio"], "step 7 error": s["error"]})
    table = pd.DataFrame(out)
    table.attrs["caption"] = (f"step 7 ({step.bm} x {step.bn} tiles, one block per SM) and cuBLAS on the GEMMs of the "
                              f"book's chapters; {source.caption}")
    return table


def shapes_styled(run, precision: str = "fp16"):
    t = shapes_table(run)
    t = t[t["precision"] == precision].drop(columns=["precision", "fastest cuBLAS path"])
    return (t.style.format({"GFLOP": "{:.1f}", "waves": "{:.2f}", "N used of the tile": "{:.0%}",
                            "step 7 TFLOP/s": "{:.0f}", "cuBLAS TFLOP/s": "{:.0f}", "step 7 / cuBLAS": "{:.3f}",
                            "step 7 error": "{:.1e}", "M": "{:,}", "N": "{:,}", "K": "{:,}"})
            .hide(axis="index").set_caption(f"{precision}; " + shapes_table(run).attrs["caption"]))


def shapes_figure(run):
    """Step 7's time over the faster cuBLAS path's, per shape and element type."""
    import matplotlib.pyplot as plt
    t = shapes_table(run)
    shapes = list(dict.fromkeys(t["shape"]))
    precisions = list(dict.fromkeys(t["precision"]))
    fig, ax = plt.subplots(figsize=(plots.MAX_WIDTH_IN, 4.0))
    width = 0.8 / len(precisions)
    for i, p in enumerate(precisions):
        rows = t[t["precision"] == p].set_index("shape").reindex(shapes)
        ax.bar(np.arange(len(shapes)) + (i - (len(precisions) - 1) / 2) * width, rows["step 7 / cuBLAS"], width,
               label=p, color=plots.PRECISION_COLORS.get(p))
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(np.arange(len(shapes)), shapes, rotation=15, fontsize=8)
    ax.set_ylabel("fastest cuBLAS path's time / step 7's")
    ax.legend(title="A, B, C in", fontsize=8)
    fig.suptitle("Does step 7 keep up with cuBLAS on the book's GEMMs? (above 1: faster)", x=0.01, ha="left",
                 fontweight="bold")
    note, height = plots.caption_text(fig, t.attrs["caption"])
    fig.text(0.01, 0.01, note, fontsize=7.5, color="#555555", ha="left", va="bottom")
    fig.tight_layout(rect=(0, height, 1, 1))
    return fig


#: The taps of convpool's 5 x 5 filter: the "convpool b32" shape's K is its channels times these.
CONVPOOL_TAPS = 5 * 5


def type_numbers(run) -> dict:
    """The numbers the prose of the bf16/tf32 and shapes sections quotes."""
    out = {}
    p = precision_table(run)
    for _, r in p.iterrows():
        key = f"{r['precision']}_{r['size'].split('^')[0]}"
        out[f"ratio_{key}"] = float(r["step 7 / cuBLAS"])
        out[f"tflops_{key}"] = float(r["step 7 TFLOP/s"])
        out[f"vendor_tflops_{key}"] = float(r["cuBLAS TFLOP/s"])
        out[f"error_{key}"] = float(r["step 7 error"])
        out[f"vendor_error_{key}"] = float(r["cuBLAS error"])
    out["tf32_error_ratio"] = out[f"error_tf32_{MAIN_SIZE}"] / out[f"vendor_error_tf32_{MAIN_SIZE}"]
    out["bf16_over_fp16"] = out[f"tflops_bf16_{MAIN_SIZE}"] / out[f"tflops_fp16_{MAIN_SIZE}"]
    out["vendor_bf16_over_fp16"] = out[f"vendor_tflops_bf16_{MAIN_SIZE}"] / out[f"vendor_tflops_fp16_{MAIN_SIZE}"]
    s = shapes_table(run)
    for _, r in s.iterrows():
        key = f"{r['shape'].replace(' ', '_')}_{r['precision']}"
        out[f"shape_ratio_{key}"] = float(r["step 7 / cuBLAS"])
        out[f"shape_tflops_{key}"] = float(r["step 7 TFLOP/s"])
        out[f"shape_tiles_{r['shape'].replace(' ', '_')}"] = int(r["tiles"])
        out[f"shape_waves_{r['shape'].replace(' ', '_')}"] = float(r["waves"])
        out[f"shape_nused_{r['shape'].replace(' ', '_')}"] = float(r["N used of the tile"])
    fp16 = s[s["precision"] == "fp16"]
    out["shapes_at_or_past"] = int((fp16["step 7 / cuBLAS"] >= 1.0).sum())
    out["shapes_count"] = int(len(fp16))
    worst = fp16.loc[fp16["step 7 / cuBLAS"].idxmin()]
    out.update(worst_shape=worst["shape"], worst_ratio=float(worst["step 7 / cuBLAS"]))
    conv = s[(s["shape"] == "convpool b32") & (s["precision"] == "fp16")].iloc[0]
    conv_bytes = gemm_bytes(int(conv["M"]), int(conv["N"]), int(conv["K"]))
    c = ceilings(run)
    # The shape's A is im2col made explicit (M x K halves of random data, each input value copied
    # once per filter tap): the convolution itself, as convpool's step 9 runs it, reads its
    # channels-last fp16 input, K / taps values per pixel, and never builds A.
    a_bytes = 2.0 * int(conv["M"]) * int(conv["K"])
    out.update(convpool_a_gbytes=a_bytes / 1e9, convpool_input_gbytes=a_bytes / CONVPOOL_TAPS / 1e9)
    out.update(convpool_intensity=float(conv["GFLOP"] * 1e9 / conv_bytes), convpool_gbytes=conv_bytes / 1e9,
               convpool_ms=float(conv["GFLOP"] / conv["step 7 TFLOP/s"]),
               convpool_memory_ms=conv_bytes / (c["gbs"] * 1e9) * 1e3,
               convpool_compute_ms=float(conv["GFLOP"] / c["tflops"]))
    out.update(tf32_operand_errors())
    return out


def tf32_operand_errors(m: int = 256, k: int = 4096, seed: int = 0) -> dict:
    """The error against float64 of A B^T (uniform [-1, 1) floats, m x k and m x k) when each
    operand is cut to tf32 by dropping its low 13 mantissa bits (``tf32_truncated_error``) or
    rounded to the nearest tf32 (``tf32_rounded_error``), the products and sums then exact:
    what each way of reading floats as tf32 costs, to set beside the run's errors."""
    rng = np.random.default_rng(seed)
    A = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    B = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    ref = A.astype(np.float64) @ B.astype(np.float64).T

    def truncated(x):
        return (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)

    def rounded(x):           # to nearest, ties to even, on the 13 dropped bits
        u = x.view(np.uint32).astype(np.uint64)
        return ((u + 0xFFF + ((u >> 13) & 1)) & 0xFFFFE000).astype(np.uint32).view(np.float32)

    def error(cut):
        C = cut(A).astype(np.float64) @ cut(B).astype(np.float64).T
        return float(np.linalg.norm(C - ref) / np.linalg.norm(ref))
    return {"tf32_truncated_error": error(truncated), "tf32_rounded_error": error(rounded)}


#: The first runs of this chapter with every call queued behind a guard kernel (the host's
#: dispatch not counted; see labdata/trials/2026-12-06-queued-timing/README.md).
EARLIER_METHOD = "2026-11-26-host-waits"


def earlier_method(gpu: str = "nvidia-h100-80gb-hbm3", size: int = MAIN_SIZE) -> dict | None:
    """The chapter's earlier run (labdata/trials/2026-11-26-host-waits: the host waited before each
    call, its dispatch inside the events): its best step against the fastest cuBLAS path at
    ``size``; None where that run is not in this checkout."""
    from ...paths import REPO
    path = REPO / "labdata" / "trials" / EARLIER_METHOD / gpu / "hopper.csv"
    if not path.is_file():
        return None
    earlier = runs.read_run(path)
    ours = ladder(earlier, size)
    best = ours.loc[ours["median_ms"].idxmin()]
    fastest = best_vendor(earlier, size)
    ratio = float(fastest["median_ms"] / best["median_ms"])
    return {"earlier_best_step": best["step"], "earlier_best_ms": float(best["median_ms"]),
            "earlier_vendor_ms": float(fastest["median_ms"]), "earlier_vendor_name": fastest["variant"],
            "earlier_best_cublas": ratio, "earlier_standing": standing(ratio), "earlier_caption": earlier.caption}


def crosschecked(run) -> pd.DataFrame | None:
    """The run's cross-check (its verdicts' rows timed again by do_bench and the profiler), with
    the best step's speed as a share of cuBLAS's by each timer; None for a run without one."""
    table = run.tables.get("crosscheck")
    if table is None:
        return None
    return table[["variant", "size", "precision", "side", "median_ms", "do_bench_ms", "profiler_ms"]].reset_index(drop=True)


def crosscheck_ratios(run) -> pd.DataFrame | None:
    """Per precision and size: the lab's best step over the fastest cuBLAS path (cuBLAS's time /
    the step's), by the lab's loop, by do_bench and by the profiler."""
    t = crosschecked(run)
    if t is None:
        return None
    rows = []
    for (precision, size), g in t.groupby(["precision", "size"], sort=False):
        lab, vendor = g[g["side"] == "lab"], g[g["side"] == "vendor"]
        if lab.empty or vendor.empty:
            continue
        lab, vendor = lab.iloc[0], vendor.iloc[0]
        rows.append({"precision": precision, "size": f"{size}^3", "step": lab["variant"].split(" ")[1],
                     "cuBLAS path": vendor["variant"],
                     **{f"step / cuBLAS ({name})": float(vendor[c] / lab[c])
                        for name, c in (("lab's loop", "median_ms"), ("do_bench", "do_bench_ms"),
                                        ("profiler", "profiler_ms"))}})
    return pd.DataFrame(rows)


def crosscheck_spread(ratios: pd.DataFrame | None) -> float | None:
    """The widest gap between the three timers' ratios on any row of :func:`crosscheck_ratios`
    (None without a cross-check): how far apart two timers may read the same comparison."""
    if ratios is None or ratios.empty:
        return None
    by_timer = ratios.filter(like="step / cuBLAS")
    return float((by_timer.max(axis=1) - by_timer.min(axis=1)).max())

