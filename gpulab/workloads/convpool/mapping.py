"""Steps 3 and 6's thread-to-data maps and load counts, from their kernels' constants.

Step 3 (``03_shared_tiles.cu``): block t computes strip t (TF = 16 outputs of one row) for
every filter, thread m filter m; the block stages CB channels x 5 rows x (TF + 4) columns in
shared memory and reads the weights transposed, wt[c][r][s][m]. Step 6
(``06_implicit_gemm_fused.cu``): a block computes a 128 (filters) x 128 (pixels) tile of
Y = A B; tile column j is window element j % 4 of the block's pooled output j / 4, and thread
(warp, lane) owns rows a + 0..3, a + 32..35 with a = (warp % 2) * 64 + (lane / 4) * 4 and
columns b + 0..3, b + 16..19 with b = (warp / 2) * 32 + (lane % 4) * 4.
"""
from __future__ import annotations

import re

import numpy as np

from ... import diagrams, predictions
from .problem import LAYER

#: The kernels' compile-time constants the maps and counts use (their #defines).
RS = 5                     # filter side
STEP2_OUT = 8              # step 2: outputs per thread along a row
STEP3_TF, STEP3_CB = 16, 8  # step 3: outputs per thread along a row; channels staged per pass
STEP5_TF = 16              # step 5 at Q = 8: sums per row, two rows per thread
TILE, BK = 128, 8          # step 6: block tile (filters and pixels), k per slice
THREADS = 256


def load_counts() -> dict:
    """Load instructions per FMA of one thread, from each kernel's inner loop (per input
    channel: steps 2, 3 and 5; per slice of BK taps: step 6), shared and global apart."""
    pitch3 = STEP3_TF + RS - 1                               # 20 floats: 5 float4 per staged row
    pitch5 = -(-(STEP5_TF + RS - 1) // 4) * 4
    rows = {
        "02": {"global loads": RS * (RS + STEP2_OUT + RS - 1), "shared loads": 0, "FMAs": RS * RS * STEP2_OUT},
        "03": {"global loads": RS * RS, "shared loads": RS * pitch3 // 4, "FMAs": RS * RS * STEP3_TF},
        "05": {"global loads": RS * RS, "shared loads": (RS + 1) * pitch5 // 4, "FMAs": 2 * RS * RS * STEP5_TF},
        # per slice of 8 taps: 8 x (2 float4 of A + 2 of B) from shared; one float4 of A, one int4
        # of offsets and 4 scalars of x from global (prefetching the next slice)
        "06": {"global loads": 1 + 1 + BK * TILE // THREADS, "shared loads": BK * 4, "FMAs": BK * 64},
    }
    for row in rows.values():
        row["loads per FMA"] = (row["global loads"] + row["shared loads"]) / row["FMAs"]
    return rows


def step3_maps(rows: int = 4, strips: int = 4, F: int = 224) -> dict:
    """Step 3's maps: ``outputs`` (a corner of one filter's output plane: the block, i.e. the
    strip, of each output), ``tile`` (one staged channel: its row r), ``weights`` (the first
    25 rows, one channel, of wt[c][r][s][m] for 64 filters: the warp that reads each)."""
    chunks = -(-F // STEP3_TF)
    e, f = np.mgrid[0:rows, 0:strips * STEP3_TF]
    outputs = e * chunks + f // STEP3_TF                    # block t = strip t (one block per strip)
    tile = np.repeat(np.arange(RS)[:, None], STEP3_TF + RS - 1, axis=1)
    weights = np.repeat((np.arange(64) // 32)[None, :], RS * RS, axis=0)
    return {"outputs": outputs, "tile": tile, "weights": weights}


def step6_maps(PF: int = 112) -> dict:
    """Step 6's maps: ``tile`` (the 128 x 128 tile of Y: the thread owning each sum, group =
    warp) and ``pixels`` (the pre-pool pixels of block 0's 32 windows: the column group --
    lane % 4 and warp / 2 -- that pools them)."""
    i, j = np.mgrid[0:TILE, 0:TILE]
    warp = (j // 32) * 2 + i // 64
    lane = ((i % 32) // 4) * 4 + (j % 16) // 4
    windows = TILE // 4
    rows, cols = 2 * -(-windows // PF), 2 * min(windows, PF)
    e, f = np.mgrid[0:rows, 0:cols]
    q = (e // 2) * PF + f // 2
    column = 4 * q + (e % 2) * 2 + f % 2                     # the pixel's column of the tile
    group = np.where(q < windows, (column // 32) * 4 + (column % 16) // 4, -1)
    return {"tile": warp * 32 + lane, "warp": warp, "pixels": group, "pixel_window": np.where(q < windows, q, -1)}


def step3_figure(caption: str | None = None):
    m, c = step3_maps(), load_counts()
    s3, s2 = c["03"], c["02"]
    text = (f"Per input channel a thread issues {s3['global loads']} coalesced weight loads and "
            f"{s3['shared loads']} broadcast 16-byte loads for {s3['FMAs']} FMAs: 1 load per "
            f"{1 / s3['loads per FMA']:.0f} FMAs (step 2: {s2['global loads']} scattered loads per {s2['FMAs']}, 1 per "
            f"{1 / s2['loads per FMA']:.1f})." + (f" {caption}" if caption else ""))
    fig, axes = diagrams.panels(3, size=(10.5, 5.2), width_ratios=(2.2, 1.2, 2.2), title=(
        "Step 3: a block per strip, a thread per filter -- which words does one warp read together?"), caption=text)
    labels = {(r, 8 + 16 * k): str(int(m["outputs"][r, 8 + 16 * k])) for r in range(4) for k in range(4)}
    diagrams.ownership(axes[0], m["outputs"], labels=labels, marks=[(m["outputs"] == 0, diagrams.HIGHLIGHT)],
                       title="output plane of filter m (a corner): block t computes strip t of 16 outputs, "
                             "for all 256 filters (thread m: filter m)", xlabel="column f", ylabel="row e", aspect="auto")
    word = np.zeros_like(m["tile"], dtype=bool)
    word[0, 0] = True
    diagrams.ownership(axes[1], m["tile"], marks=[(word, diagrams.HIGHLIGHT)],
                       title="block 0's shared tile, one of 8 channels (row r = colour)", xlabel="staged column",
                       ylabel="input row r", aspect="auto")
    window = np.zeros_like(word)
    window[:, 0:RS] = True
    diagrams.outline(axes[1], window, color="#333333", lw=1.5)
    taps = np.zeros_like(m["weights"], dtype=bool)
    taps[0, 0:32] = True
    diagrams.ownership(axes[2], m["weights"], marks=[(taps, diagrams.HIGHLIGHT)],
                       title="weights as wt[c][r][s][m] (channel 0's 25 taps, 64 filters; colour = warp)",
                       xlabel="filter m", ylabel="tap (r, s)", aspect="auto")
    diagrams.legend(fig, {"one instruction of warp 0: all 32 lanes read this one word (a broadcast),\n"
                              "and 32 consecutive weights (one 128-byte request)": diagrams.HIGHLIGHT,
                              "output 0's window": "white"})
    fig.tight_layout(rect=(0, 0.12, 1, 0.95))
    return fig


def step6_figure(caption: str | None = None):
    m, c = step6_maps(), load_counts()
    s6, s5 = c["06"], c["05"]
    text = (f"Per slice of {BK} taps a thread issues {s6['shared loads']} shared and {s6['global loads']} global "
            f"loads for {s6['FMAs']} FMAs: 1 load per {1 / s6['loads per FMA']:.1f} FMAs; step 5 (per channel: "
            f"{s5['shared loads']} shared, {s5['global loads']} global, {s5['FMAs']} FMAs): 1 per "
            f"{1 / s5['loads per FMA']:.1f}. The counts are close: fewer loads cannot explain step 6's gain."
            + (f" {caption}" if caption else ""))
    fig, axes = diagrams.panels(2, size=(10.5, 5.6), width_ratios=(1.0, 1.4), title=(
        "Step 6: which sums does one thread hold, and why can it pool them in registers?"), caption=text)
    one = m["tile"] == 0
    diagrams.ownership(axes[0], m["tile"], group=m["warp"], marks=[(one, diagrams.HIGHLIGHT)],
                       title="the block's 128 x 128 tile of Y (filters x pixels): 256 threads, 8 x 8 sums each "
                             "(thick lines: warps)", xlabel="tile column j (pixel)", ylabel="tile row (filter)")
    mine = (m["pixels"] == 0)
    diagrams.ownership(axes[1], m["pixels"], group=m["pixel_window"], marks=[(mine, diagrams.HIGHLIGHT)],
                       title="block 0's pixels in the image (2 rows x 64 columns, 32 pooling windows): columns "
                             "4q .. 4q + 3 of the tile are window q, so each thread holds whole windows",
                       xlabel="image column f", ylabel="image row e", aspect="auto")
    diagrams.legend(fig, {"thread 0: its 8 x 8 sums (4 pieces) and the two windows they pool": diagrams.HIGHLIGHT})
    fig.tight_layout(rect=(0, 0.12, 1, 0.95))
    return fig


# ----------------------------------------------------------------- steps 7-8: the cp.async ring
#: Steps 7 and 8's kernel, written once for both element types; its #defines are read, not retyped.
TC_HEADER = "convpool/implicit_gemm_tc.cuh"
#: Per element type: bytes of an element (a cp.async moves 16 bytes: 16 / size elements of k) and
#: the k of one wmma product (16 x 16 x 8 in tf32, 16 x 16 x 16 in fp16: CUDA's wmma shapes).
#: The colour of one warp's copies (the ring's two colours mean other things).
COPIED = "#55A868"
IN_FLIGHT = "#8C8C8C"
TC_TYPES = {"07 tf32": {"bytes": 4, "FK": 8}, "08 fp16": {"bytes": 2, "FK": 16}}


def tc_constants() -> dict:
    """The integer ``#define`` lines of steps 7-8's header (STAGES, TC_BN, TC_BM, TC_THREADS, TC_WM,
    TC_CHUNKS: the ring and tile as compiled by default), and TC_WN = TC_BN / 4 as it defines it."""
    path = predictions.kernel_path(TC_HEADER)
    found = {m.group(1): int(m.group(2))
             for m in re.finditer(r"^#define\s+(\w+)\s+(\d+)\b", path.read_text(), re.M)}
    missing = [k for k in ("STAGES", "TC_BN", "TC_BM", "TC_THREADS", "TC_WM", "TC_CHUNKS") if k not in found]
    if missing:
        raise ValueError(f"{path}: expected '#define {missing[0]} <number>' (the ring and tile the figure draws)")
    return {**found, "TC_WN": found["TC_BN"] // 4}


def tc_counts(K: int | None = None) -> dict:
    """Per element type: k per slice, slices to cover K (default: the chapter's layer, 25 C), and per
    warp and slice the fragment loads from shared memory and the ``mma_sync`` products, with each
    thread's 16-byte ``cp.async`` copies -- from the header's constants and its loops."""
    c = tc_constants()
    K = K or RS * RS * LAYER.C
    out = {}
    for name, t in TC_TYPES.items():
        bk = c["TC_CHUNKS"] * 16 // t["bytes"]           # k per slice: 4 chunks of 16 bytes a row
        steps = bk // t["FK"]                             # wmma products along k per slice
        frags_a, frags_b = c["TC_WM"] // 16, c["TC_WN"] // 16
        out[name] = {"k per slice": bk, "slices": -(-K // bk),
                     "copies per thread": (c["TC_BM"] + c["TC_BN"]) * c["TC_CHUNKS"] // c["TC_THREADS"],
                     "fragment loads per warp": (frags_a + frags_b) * steps,
                     "mma_sync per warp": frags_a * frags_b * steps}
    return out


def pipeline_maps(iterations: int = 6) -> dict:
    """The ring over the first ``iterations`` of the main loop: ``slice`` (ring slot x time: the slice
    a slot holds, -1: empty; column 0 is the prologue, column t + 1 iteration t), ``computed`` (the slot
    the tensor cores read), ``issued`` (the slot cp.async starts filling). ``copier`` (A's slice,
    rows x 16-byte chunks: the warp that copies each chunk, thread = 4 row + chunk for rows mod 64)
    and ``reader`` (the rows warp 0 reads: filters 0 .. TC_WM - 1)."""
    c = tc_constants()
    S = c["STAGES"]
    held = np.full((S, iterations + 1), -1)
    computed, issued = np.zeros_like(held, dtype=bool), np.zeros_like(held, dtype=bool)
    for s in range(S - 1):                       # prologue: slices 0 .. S - 2 into slots 0 .. S - 2
        held[s, 0], issued[s, 0] = s, True
    for t in range(iterations):
        col = held[:, t].copy()
        computed[t % S, t + 1] = True            # wait + barrier: slice t has landed in slot t % S
        col[(t + S - 1) % S] = t + S - 1         # the slot read in iteration t - 1 gets slice t + S - 1
        issued[(t + S - 1) % S, t + 1] = True
        held[:, t + 1] = col
    rows = np.arange(c["TC_BM"])[:, None]
    chunk = np.arange(c["TC_CHUNKS"])[None, :]
    thread = (rows % (c["TC_THREADS"] // c["TC_CHUNKS"])) * c["TC_CHUNKS"] + chunk
    reader = np.broadcast_to(rows < c["TC_WM"], thread.shape)
    return {"slice": held, "computed": computed, "issued": issued, "copier": thread // 32, "reader": reader,
            "stages": S}


def pipeline_figure(caption: str | None = None):
    """Steps 7-8's ``cp.async`` ring: which slice each slot holds over the first iterations (read by
    the tensor cores, being filled, in flight), and which warps copy the filter rows warp 0 reads;
    the caption counts the copies, fragment loads and products per slice, and the slices each type
    needs (the count behind step 8's prediction)."""
    c, m, n = tc_constants(), pipeline_maps(), tc_counts()
    tf, fp = n["07 tf32"], n["08 fp16"]
    text = (f"Per slice each thread issues {fp['copies per thread']} 16-byte cp.async copies, and each warp "
            f"{fp['fragment loads per warp']} fragment loads from shared memory for {fp['mma_sync per warp']} "
            f"mma_sync, in tf32 and in fp16 alike. A slice is {tf['k per slice']} k in tf32 and "
            f"{fp['k per slice']} in fp16: K = {RS * RS} C needs {tf['slices']} slices against {fp['slices']}, so "
            f"step 8 does half of step 7's copying, waiting and fragment loading for the same product -- "
            f"the count behind its prediction of 1.5-2x. Drawn from {TC_HEADER}'s #defines (STAGES {c['STAGES']}, "
            f"tile {c['TC_BM']} x {c['TC_BN']}, {c['TC_THREADS']} threads)." + (f" {caption}" if caption else ""))
    fig, axes = diagrams.panels(2, size=(9, 5.8), width_ratios=(2.2, 1.0), title=(
        f"Steps 7-8: what is each of the {m['stages']} ring slots doing while the tensor cores work, and "
        "who fills it?"), caption=text)
    held = m["slice"]
    labels = {(r, t): str(held[r, t]) for r in range(held.shape[0]) for t in range(held.shape[1]) if held[r, t] >= 0}
    diagrams.ownership(axes[0], held, labels=labels, label_size=12, label_color="white",
                       marks=[(held >= 0, IN_FLIGHT), (m["issued"], diagrams.SECOND),
                              (m["computed"], diagrams.HIGHLIGHT)],
                       title="the ring over time (numbers: the slice a slot holds)",
                       xlabel="prologue, then loop iteration t = 0, 1, ... (time)", ylabel="ring slot", aspect="auto")
    axes[0].set_xticks(range(held.shape[1]), ["pro."] + [str(t) for t in range(held.shape[1] - 1)])
    diagrams.ownership(axes[1], m["copier"], group=m["copier"],
                       marks=[(m["copier"] == 0, COPIED)],
                       title=f"one slot's A rows ({c['TC_BM']} filters x {c['TC_CHUNKS']} chunks): the warp that "
                             "copies each chunk", xlabel="16-byte chunk", ylabel="filter row", aspect="auto")
    diagrams.outline(axes[1], m["reader"], color="black", lw=2.5)
    diagrams.legend(fig, {"read by the tensor cores in this iteration (slice t)": diagrams.HIGHLIGHT,
                          f"cp.async issued in this iteration (slice t + {m['stages'] - 1})": diagrams.SECOND,
                          "issued in an earlier iteration: in flight, or landed and waiting": IN_FLIGHT,
                          "right: the chunks warp 0 copies": COPIED,
                          f"right, black outline: the rows warp 0 reads (filters 0-{c['TC_WM'] - 1}), mostly copied "
                          "by other warps -- hence the barrier after each wait": "white"})
    fig.tight_layout(rect=(0, 0.22, 1, 0.95))
    return fig
