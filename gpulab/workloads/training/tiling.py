"""Step 7's register tiles: which thread computes which part of a product, drawn
and counted from the kernel file and the step's own launch.

Nothing here is typed twice: the tile sizes are read from the ``#define`` lines of
``kernels/training/07_register_tiles.cu`` (and step 6's ``TILE`` from its file), the
rows and columns a thread owns from the epilogue's index expressions in the same
file, and the grid from :mod:`.steps`. If the kernel changes, the picture and the
counts change with it -- or :func:`geometry` says what it could no longer read.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pandas as pd

from ... import datasheet, paths
from ...ladder import find
from .problem import Dims
from .steps import STEPS

#: The product the figure draws: step 7's forward product, Z1 (+)= X W1.
FORWARD = "forward_product"


@dataclass(frozen=True)
class Tiling:
    """One register-tiled product: the block's tile BM x BN, its k-slice BK, each
    thread's TM x TN accumulators, and where they sit in the tile."""

    BM: int
    BN: int
    BK: int
    TM: int
    TN: int
    vector: int            # each run of a thread's rows (columns) is one float4: 4 consecutive
    half: int              # the second run starts this far into the tile (64: BM / 2)
    threads: int           # per block, from the launch
    grid: tuple            # the forward product's grid (x: H tiles, y: B tiles, z: split-K slices)
    dims: Dims

    @property
    def threads_x(self) -> int:
        return self.BN // self.TN

    def rows(self, ty: int) -> list[int]:
        """The tile rows thread row ``ty`` owns (the kernel's ``i < 4 ? ty*4 + i : 64 + ty*4 + i - 4``)."""
        return [run * self.half + ty * self.vector + i for run in range(self.TM // self.vector)
                for i in range(self.vector)]

    def cols(self, tx: int) -> list[int]:
        return [run * self.half + tx * self.vector + j for run in range(self.TN // self.vector)
                for j in range(self.vector)]

    def owner(self) -> np.ndarray:
        """BM x BN array: the thread index (``ty * 16 + tx``) that computes each element of
        the tile; -1 where no thread does (which :func:`geometry` refuses)."""
        own = np.full((self.BM, self.BN), -1)
        for ty in range(self.BM // self.TM):
            for tx in range(self.threads_x):
                own[np.ix_(self.rows(ty), self.cols(tx))] = ty * self.threads_x + tx
        return own


def _defines(text: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^#define\s+(\w+)\s+(\d+)\s*$", text, re.M)}


#: The epilogue's row index in step 7's file: m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4).
_ROW = re.compile(r"int m = m0 \+ \(i < (\d+) \? ty \* (\d+) \+ i : (\d+) \+ ty \* (\d+) \+ i - (\d+)\)")
_COL = re.compile(r"int n = n0 \+ \(j < (\d+) \? tx \* (\d+) \+ j : (\d+) \+ tx \* (\d+) \+ j - (\d+)\)")


def geometry(dims: Dims | None = None) -> Tiling:
    """Step 7's tiling as its kernel file and launch have it, at ``dims`` (default: the
    chapter's batch of 1,024 over the whole vocabulary)."""
    from .data import VOCAB
    dims = dims or Dims(1024, VOCAB)
    path = paths.kernel_path(find(STEPS, 7).file)
    text = path.read_text()
    d = _defines(text)
    missing = [k for k in ("BM", "BN", "BK", "TM", "TN") if k not in d]
    if missing:
        raise ValueError(f"{path}: expected '#define {missing[0]} <number>' (the tile sizes the figure draws)")
    found = []
    for what, pattern in (("row", _ROW), ("column", _COL)):
        m = pattern.search(text)
        if m is None:
            raise ValueError(f"{path}: the epilogue's {what} index is not in the form the figure reads "
                             f"({pattern.pattern!r}); update gpulab/workloads/training/tiling.py with the kernel")
        first, vec, half, vec2, first2 = map(int, m.groups())
        if not (first == vec == vec2 == first2):
            raise ValueError(f"{path}: the {what} index uses runs of {vec} and {vec2}; the figure expects one width")
        found.append((vec, half))
    if found[0] != found[1]:
        raise ValueError(f"{path}: rows are cut in runs {found[0]}, columns {found[1]}; the figure expects the same")
    op = next(o for o in find(STEPS, 7).ops(dims) if o.kernel == FORWARD)
    t = Tiling(d["BM"], d["BN"], d["BK"], d["TM"], d["TN"], found[0][0], found[0][1], int(np.prod(op.block)),
               tuple(op.grid), dims)
    if (t.BM // t.TM) * (t.BN // t.TN) != t.threads:
        raise ValueError(f"{path}: a {t.BM} x {t.BN} tile in {t.TM} x {t.TN} pieces needs "
                         f"{(t.BM // t.TM) * (t.BN // t.TN)} threads, but the step launches {t.threads}")
    if (t.owner() < 0).any():
        raise ValueError(f"{path}: the epilogue's indices leave part of the {t.BM} x {t.BN} tile to no thread")
    return t


#: The kernels whose machine code the counts read: step 6's tiled product and step 7's forward one.
SASS_KERNELS = {6: "matmul_tiled_ro", 7: FORWARD}


def sass_counts() -> pd.DataFrame:
    """Per step (6, 7): the shared-memory load instructions (LDS, any width) and FFMA
    instructions in its product kernel's SASS for sm_90 (live where NVRTC and cuobjdump
    are installed, else the listing recorded under labdata/sass/). Each kernel's only
    loop is its k loop, unrolled, so the ratio is the loop's."""
    from ... import sass
    rows = []
    for number, kernel in SASS_KERNELS.items():
        listing = sass.listing(find(STEPS, number).file)
        if kernel not in listing.kernels:
            raise ValueError(f"{listing.file}: no kernel {kernel!r} in its SASS (found {sorted(listing.kernels)})")
        ops = [text.split()[0] for _, text in listing.kernels[kernel]]
        rows.append({"step": number, "kernel": kernel, "LDS": sum(o.startswith("LDS") for o in ops),
                     "LDS.128": sum(o == "LDS.128" for o in ops), "FFMA": sum(o == "FFMA" for o in ops),
                     "source": f"{listing.arch}, {listing.tools}, "
                               + (f"recorded {listing.made}" if listing.recorded else "disassembled live")})
    return pd.DataFrame(rows).set_index("step")


def loads_per_fma(t: Tiling | None = None, counts: pd.DataFrame | None = None) -> pd.DataFrame:
    """For the products of steps 1, 6 and 7: the values a thread reads from shared memory
    per FMA (from the source), the shared-memory load instructions per FMA instruction
    (from the SASS, :func:`sass_counts`), the values a block reads from global memory per
    FMA, and the share of the FP32 rate shared memory lets the FMAs reach.

    The last column is the prediction. An SM's shared memory serves 32 banks x 4 bytes per
    clock; a warp's load instruction takes at least one of those clocks, and a 16-byte
    (LDS.128) one at most four (32 lanes x 16 bytes). The SM issues ``fp32_lanes_per_sm / 32``
    FFMA instructions per clock. Step 6's bound counts one clock per load (its best case:
    the FMAs can go no faster); step 7's counts four (its worst case: shared memory cannot
    hold the FMAs back)."""
    t = t or geometry()
    counts = sass_counts() if counts is None else counts
    tile6 = _defines(paths.kernel_path(find(STEPS, 6).file).read_text()).get("TILE")
    if tile6 is None:
        raise ValueError(f"{find(STEPS, 6).file}: expected '#define TILE <number>'")
    arch = datasheet.lookup("H100 80GB HBM3").architecture
    ffma_per_clock = Fraction(arch.fp32_lanes_per_sm, datasheet.WARP_SIZE)
    wide = datasheet.WARP_SIZE * 16 // (datasheet.SHARED_BANKS * datasheet.BANK_BYTES)   # clocks per LDS.128, at most
    per_instr = {n: Fraction(int(counts.loc[n, "LDS"]), int(counts.loc[n, "FFMA"])) for n in (6, 7)}
    clocks = {6: per_instr[6],
              7: Fraction(int(counts.loc[7, "LDS"]) - int(counts.loc[7, "LDS.128"])
                          + wide * int(counts.loc[7, "LDS.128"]), int(counts.loc[7, "FFMA"]))}
    rows = [
        {"step": 1, "each thread computes": "1 output", "values from shared memory per FMA": None,
         "shared-memory load instructions per FMA instruction": None,
         "values from global memory per FMA": Fraction(2), "share of the FP32 rate shared memory allows": None},
        {"step": 6, "each thread computes": "1 output", "values from shared memory per FMA": Fraction(2),
         "shared-memory load instructions per FMA instruction": per_instr[6],
         "values from global memory per FMA": Fraction(2 * tile6 * tile6, tile6 ** 3)},
        {"step": 7, "each thread computes": f"{t.TM} x {t.TN} outputs",
         "values from shared memory per FMA": Fraction(t.TM + t.TN, t.TM * t.TN),
         "shared-memory load instructions per FMA instruction": per_instr[7],
         "values from global memory per FMA": Fraction((t.BM + t.BN) * t.BK, t.BM * t.BN * t.BK)},
    ]
    for row in rows[1:]:
        row["share of the FP32 rate shared memory allows"] = min(Fraction(1),
                                                                 1 / (clocks[row["step"]] * ffma_per_clock))
    table = pd.DataFrame(rows)
    table.attrs["caption"] = (
        f"values: counted in the kernel files (step 6: {tile6} x {tile6} shared tiles; step 7: {t.BM} x {t.BN} "
        f"block tiles, k-slices of {t.BK}, {t.TM} x {t.TN} per thread); instructions: "
        f"the kernels' SASS ({counts['source'].iloc[0]}); an H100 SM's shared memory serves {datasheet.SHARED_BANKS} banks x "
        f"{datasheet.BANK_BYTES} bytes per clock and it issues {ffma_per_clock} FFMA instructions per clock "
        f"({arch.fp32_lanes_per_sm} FP32 lanes)")
    return table


def loads_table(t: Tiling | None = None):
    """:func:`loads_per_fma`, styled for the notebook (fractions as fractions)."""
    table = loads_per_fma(t)
    fmt = lambda v: "—" if v is None or v != v else str(v)   # noqa: E731
    share = "share of the FP32 rate shared memory allows"
    formats = {c: fmt for c in table.columns[2:]}
    formats[share] = lambda v: "all of it" if v == 1 else fmt(v)
    return table.style.format(formats).hide(axis="index").set_caption(table.attrs["caption"])


def _chunk(t: Tiling) -> int:
    """The k values one block of the forward product covers (the kernel's ``chunk``)."""
    return -(-(-(-t.dims.V // t.grid[2])) // t.BK) * t.BK


def numbers(t: Tiling | None = None) -> dict:
    """What the prose quotes, by glue name."""
    t = t or geometry()
    table = loads_per_fma(t).set_index("step")
    sheet = datasheet.lookup("H100 80GB HBM3")
    share6 = table.loc[6, "share of the FP32 rate shared memory allows"]
    chunk = _chunk(t)
    return {"rt_bm": t.BM, "rt_bn": t.BN, "rt_bk": t.BK, "rt_tm": t.TM, "rt_tn": t.TN, "rt_threads": t.threads,
            "rt_grid": " x ".join(str(g) for g in t.grid), "rt_tiles": t.grid[0] * t.grid[1],
            "rt_v": f"{t.dims.V:,}", "rt_sms": sheet.sms, "rt_splits": t.grid[2], "rt_chunk": f"{chunk:,}",
            "rt_blocks": int(np.prod(t.grid)), "rt_s6_shared": str(table.loc[6, "values from shared memory per FMA"]),
            "rt_s7_shared": str(table.loc[7, "values from shared memory per FMA"]),
            "rt_s6_dram": str(table.loc[6, "values from global memory per FMA"]),
            "rt_s7_dram": str(table.loc[7, "values from global memory per FMA"]),
            "rt_s6_instr": str(table.loc[6, "shared-memory load instructions per FMA instruction"]),
            "rt_s7_instr": str(table.loc[7, "shared-memory load instructions per FMA instruction"]),
            "rt_s6_share": str(share6), "rt_s6_bound_tflops": f"{float(share6) * sheet.fp32_tflops:.1f}",
            "rt_fp32_tflops": f"{sheet.fp32_tflops:g}"}


def figure(t: Tiling | None = None, highlight=((0, 0), (5, 2))):
    """Three panels: the grid over Z1 = X W1 (split-K), one block's tile with the pieces two
    threads own, and one thread's outer product per k. ``highlight``: (tx, ty) of the
    threads drawn in colour."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle
    from ... import plots   # noqa: F401  (the book's style)

    t = t or geometry()
    FS = 10                               # the labels' font size, points
    colors = ["#C44E52", "#4C72B0"]
    # Two rows, plots.MAX_WIDTH_IN wide: a book page shows it at about 78% of its size, where
    # 10-point labels still read (three panels side by side would be halved, to 6-pixel text).
    fig = plt.figure(figsize=(plots.MAX_WIDTH_IN, plots.MAX_WIDTH_IN))
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 1.3], width_ratios=[1.35, 1])
    axes = [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[1, :]), fig.add_subplot(grid[0, 1])]
    for ax in axes:
        ax.set_aspect("equal")
        ax.axis("off")

    # (a) the grid: X (B x V) times W1 (V x H) into Z1 (B x H), drawn schematically (V is 32x B)
    ax = axes[0]
    B, V, H = t.dims.B, t.dims.V, t.dims.H
    rows_b, splits = t.grid[1], t.grid[2]
    xw, xh = 6.0, 3.0                      # X drawn 6 wide, 3 tall (not to scale)
    # the classic layout: X at the bottom left, W1 above Z1, Z1 at the bottom right
    X0, Z0 = (0.0, 0.0), (xw + 0.6, 0.0)
    zw = xh * H / B * 2                   # Z1 drawn a little wider than to scale, to fit its label
    ax.add_patch(Rectangle(X0, xw, xh, fc="#F2F2F2", ec="k"))
    for s in range(1, splits):
        ax.plot([s * xw / splits] * 2, [0, xh], color="#999999", lw=0.4)
    for r in range(1, rows_b):
        ax.plot([0, xw], [r * xh / rows_b] * 2, color="#999999", lw=0.4)
        ax.plot([Z0[0], Z0[0] + zw], [r * xh / rows_b] * 2, color="#999999", lw=0.6)
    blk_y, blk_z = rows_b - 3, 2          # the block highlighted: tile row 2 from the top, k-slice 2
    by = blk_y * xh / rows_b
    ax.add_patch(Rectangle((blk_z * xw / splits, by), xw / splits, xh / rows_b, fc=colors[0], alpha=0.8))
    ax.add_patch(Rectangle(Z0, zw, xh, fc="#F2F2F2", ec="k"))
    ax.add_patch(Rectangle((Z0[0], by), zw, xh / rows_b, fc=colors[0], alpha=0.8))
    W0 = (xw + 0.6, xh + 0.6)
    wh = xw * 0.5
    ax.add_patch(Rectangle(W0, zw, wh, fc="#F2F2F2", ec="k"))
    for s in range(1, splits):
        ax.plot([W0[0], W0[0] + zw], [W0[1] + wh - s * wh / splits] * 2, color="#999999", lw=0.4)
    ax.add_patch(Rectangle((W0[0], W0[1] + wh - (blk_z + 1) * wh / splits), zw, wh / splits, fc=colors[0],
                           alpha=0.8))
    ax.text(xw / 2, -0.3, f"X: {B:,} x {V:,}, its columns\ncut into {splits} k-slices", ha="center",
            va="top", fontsize=FS)
    ax.text(Z0[0] + zw + 0.25, xh / 2, f"Z1:\n{B:,} x {H},\n{rows_b} tiles of\n{t.BM} x {t.BN}", ha="left",
            va="center", fontsize=FS)
    ax.text(W0[0] + zw + 0.25, W0[1] + wh / 2, f"W1:\n{V:,}\nx {H}", ha="left", va="center", fontsize=FS)
    chunk = _chunk(t)
    ax.text(0, xh + 0.4, f"grid {' x '.join(map(str, t.grid))}\n= {int(np.prod(t.grid)):,} blocks, one per\n"
            f"(tile of Z1, k-slice). The red\none: a {t.BM} x {chunk:,} piece of X\ntimes a {chunk:,} x {t.BN} "
            f"piece\nof W1, added into Z1's tile\n(atomicAdd)", fontsize=FS, va="bottom")
    ax.set_xlim(-0.2, Z0[0] + zw + 2.2)
    ax.set_ylim(-1.6, W0[1] + wh + 0.2)
    ax.set_title("(a) the grid: a block per tile and k-slice", loc="left", fontsize=FS + 1.5)

    # (b) one block: the BM x BN tile, BK-deep slices of A and B in shared memory
    ax = axes[1]
    own = t.owner()
    strip = t.BK * 2.0                    # shared tiles drawn BK x BM, each k a 2-unit band
    ax.add_patch(Rectangle((0, 0), t.BN, t.BM, fc="#F7F7F7", ec="k"))
    for g in range(0, t.BM + 1, t.vector):
        ax.plot([0, t.BN], [g, g], color="#DDDDDD", lw=0.3)
        ax.plot([g, g], [0, t.BM], color="#DDDDDD", lw=0.3)
    ax.plot([t.half, t.half], [0, t.BM], color="#888888", lw=0.8, ls="--")
    ax.plot([0, t.BN], [t.BM - t.half] * 2, color="#888888", lw=0.8, ls="--")
    # X's slice (stored k-major as As[k][m]) left of the tile, row m level with the tile's row m
    ax.add_patch(Rectangle((-strip - 4, 0), strip, t.BM, fc="#F2F2F2", ec="k"))
    ax.add_patch(Rectangle((0, t.BM + 4), t.BN, strip, fc="#F2F2F2", ec="k"))
    for (tx, ty), c in zip(highlight, colors):
        ys = np.where((own == ty * t.threads_x + tx).any(axis=1))[0]
        xs = np.where((own == ty * t.threads_x + tx).any(axis=0))[0]
        for r0 in ys[::t.vector]:
            for c0 in xs[::t.vector]:
                ax.add_patch(Rectangle((c0, t.BM - r0 - t.vector), t.vector, t.vector, fc=c, ec=c))
            ax.add_patch(Rectangle((-strip - 4, t.BM - r0 - t.vector), strip, t.vector, fc=c, alpha=0.85))
        for c0 in xs[::t.vector]:
            ax.add_patch(Rectangle((c0, t.BM + 4), t.vector, strip, fc=c, alpha=0.85))
        ax.annotate(f"thread (tx={tx}, ty={ty})", xy=(xs[-1] + t.vector, t.BM - ys[-1] - 1), xytext=(t.BN + 3, t.BM - ys[-1] - 6 - 12 * (ty > 0)),
                    fontsize=FS, color=c, va="center", arrowprops=dict(arrowstyle="-", color=c, lw=0.8))
    ax.text(-strip - 7, t.BM / 2, f"X's slice\n(shared):\n{t.BM} x {t.BK}", ha="right", va="center", fontsize=FS)
    ax.text(t.BN / 2, t.BM + strip + 6, f"W1's slice (shared): {t.BK} x {t.BN}", ha="center", va="bottom",
            fontsize=FS)
    ax.text(t.BN / 2, -3, f"the block's {t.BM} x {t.BN} tile of Z1: {t.threads} threads,\n"
            f"each {t.TM} x {t.TN} outputs in four {t.vector} x {t.vector} pieces, {t.half} apart",
            ha="center", va="top", fontsize=FS)
    ax.set_xlim(-strip - 48, t.BN + 50)
    ax.set_ylim(-26, t.BM + strip + 18)
    ax.set_title("(b) one block: who computes what", loc="left", fontsize=FS + 1.5)

    # (c) one thread, one k: TM values of A times TN values of B, TM x TN FMAs
    ax = axes[2]
    c = colors[0]
    ax.add_patch(Rectangle((0, 0), t.TN, t.TM, fc="#FBE3E3", ec="k"))
    for i in range(1, t.TN):
        ax.plot([i, i], [0, t.TM], color="white", lw=1)
    for i in range(1, t.TM):
        ax.plot([0, t.TN], [i, i], color="white", lw=1)
    ax.add_patch(Rectangle((-1.6, 0), 1, t.TM, fc=c, alpha=0.85))
    ax.add_patch(Rectangle((0, t.TM + 0.6), t.TN, 1, fc=c, alpha=0.85))
    for g in range(t.vector, t.TM, t.vector):
        ax.plot([-1.6, -0.6], [g, g], color="white", lw=2)
        ax.plot([g, g], [t.TM + 0.6, t.TM + 1.6], color="white", lw=2)
    ax.text(-1.9, t.TM / 2, f"{t.TM} values of X\n({t.TM // t.vector} float4\nloads)", ha="right", va="center",
            fontsize=FS)
    ax.text(t.TN / 2, t.TM + 1.9, f"{t.TN} values of W1 ({t.TN // t.vector} float4 loads)", ha="center",
            va="bottom", fontsize=FS)
    ax.text(t.TN / 2, t.TM / 2, f"{t.TM * t.TN} FMAs\ninto {t.TM * t.TN}\nregisters", ha="center", va="center",
            fontsize=FS + 1, fontweight="bold")
    ax.text(t.TN / 2, -0.6, f"per k: {t.TM + t.TN} values loaded from\nshared memory, {t.TM * t.TN} FMAs: "
            f"{Fraction(t.TM + t.TN, t.TM * t.TN)} value per FMA\n(step 6: 2 values per FMA)", ha="center",
            va="top", fontsize=FS)
    ax.set_xlim(-6.5, t.TN + 0.8)
    ax.set_ylim(-4.2, t.TM + 4.4)
    ax.set_title("(c) one thread, one k: an outer product", loc="left", fontsize=FS + 1.5)

    fig.suptitle(f"Step 7: which thread computes which part of Z1 = X W1,\nand how many loads feed each FMA? "
                 f"(B = {B:,})", x=0.01, ha="left", fontweight="bold", fontsize=13)
    fig.text(0.01, 0.01, f"drawn from {find(STEPS, 7).file} (#define BM {t.BM}, BN {t.BN}, BK {t.BK}, TM {t.TM}, "
             f"TN {t.TN}; the epilogue's indices)\nand the step's launch of {FORWARD}: grid "
             f"{t.grid}, {t.threads} threads. Panel (a) is not to scale.", fontsize=8.5, color="#555555")
    fig.tight_layout(rect=(0, 0.04, 1, 0.93))
    return fig
