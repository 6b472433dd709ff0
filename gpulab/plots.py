"""The book's figures, in one style.

Every function takes tidy timing rows (see :mod:`gpulab.timing`), a title
phrased as the question the figure answers, and the run's caption (which GPU,
when, which software), which is printed under the plot. Each returns the
matplotlib Figure.
"""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter, NullFormatter, SymmetricalLogLocator
import numpy as np
import pandas as pd

PHASE_COLORS = {"h2d": "#4C72B0", "kernel": "#DD8452", "d2h": "#55A868", "other": "#8C8C8C"}
VENDOR_COLOR = "#C44E52"
STYLE = {
    "figure.figsize": (8, 4.5), "figure.dpi": 110, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "axes.titlesize": 12,
    "axes.titleweight": "bold", "font.size": 10, "legend.frameon": False,
}


#: The width, in pixels, of a cell's output in the book's pages in a 1,400-pixel window: a figure
#: wider is shown shrunk to it (tests/test_site.py measures it on every page).
COLUMN_PX = 772
#: The widest a figure is drawn, in inches (990 pixels at the style's 110 dpi): shown in COLUMN_PX,
#: at 78% of its size or more, its 10-point labels at 12 pixels (tests/test_site.py holds every
#: figure of every page to 75%).
MAX_WIDTH_IN = 9.0
#: Characters of the 7.5-point caption per inch of figure (DejaVu Sans averages ~4 points a character).
CAPTION_CHARS_PER_IN = 16


def caption_text(fig, caption: str, fontsize: float = 7.5) -> tuple[str, float]:
    """``caption`` wrapped to the figure's width, and the share of its height the lines take: an
    unwrapped run caption ran past the figure's right edge, and the saved image grew to hold it."""
    text = textwrap.fill(caption, max(40, int(fig.get_figwidth() * CAPTION_CHARS_PER_IN * 7.5 / fontsize)))
    lines = text.count("\n") + 1
    return text, (lines * fontsize * 1.3 + 4) / 72 / fig.get_figheight()


def shown_text_px(fig, column_px: int = COLUMN_PX) -> list[tuple[float, str, bool]]:
    """(height in screen pixels, text, is a figure-level note such as the caption) of each visible
    text of ``fig`` as a book page shows it: saved as the notebook saves it (its dpi, the tight
    box), then shrunk to ``column_px`` if wider. A label under about 10 pixels is read by zooming."""
    import io
    from matplotlib.text import Text
    from PIL import Image
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", bbox_inches="tight")
    buffer.seek(0)
    width = Image.open(buffer).size[0]
    scale = min(1.0, column_px / width)
    notes = {id(t) for t in fig.texts}

    def shown(t):
        return t.get_visible() and t.get_text().strip() and (t.axes is None or t.axes.get_visible())
    return [(t.get_fontsize() * fig.dpi / 72 * scale, t.get_text(), id(t) in notes)
            for t in fig.findobj(Text) if shown(t)]


# Applied once, globally, like any plotting style: a temporary rc_context
# would restore the backend setting on exit, and Jupyter's inline backend then
# stops showing figures after the first one.
plt.rcParams.update(STYLE)


def _figure(ax=None, size=None):
    if ax is not None:
        return ax.figure, ax
    return plt.subplots(figsize=size or STYLE["figure.figsize"])


def _log_axis(axis) -> None:
    """Log scale with plain numbers (0.1, 1, 10) and unlabelled minor ticks:
    over less than a decade matplotlib otherwise labels every minor tick."""
    def plain(value, _):
        if 1e-3 <= value < 1e4:
            return f"{value:g}"
        return f"$10^{{{int(round(np.log10(value)))}}}$"
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(NullFormatter())


def _finish(fig, ax, title: str, caption: str | None, whole_figure: bool | None = None):
    # A figure of one plot gets a figure-level title from the left edge (long
    # tick labels cannot push it off the right side, as they would an axes
    # title); a plot drawn into a panel of the caller's figure titles its panel.
    if whole_figure is None:
        whole_figure = len([a for a in fig.axes if a.get_label() != "<colorbar>"]) == 1
    if whole_figure:
        width = max(40, int(fig.get_figwidth() * 8.5))
        fig.suptitle(textwrap.fill(title, width), x=0.01, ha="left", fontweight="bold", fontsize=12)
    else:
        width = max(30, int(fig.get_figwidth() * ax.get_position().width * 8.5))
        ax.set_title(textwrap.fill(title, width), loc="left", fontweight="bold")
    if caption:
        text, height = caption_text(fig, caption)
        fig._gpulab_caption = (fig.text(0.01, 0.01, text, fontsize=7.5, color="#555555", ha="left", va="bottom"),
                               caption)
        fig.tight_layout(rect=(0, min(0.3, height + 0.01), 1, 1))
    else:
        fig.tight_layout()
    return fig


def resize(fig, width: float, height: float):
    """A finished figure (:func:`_finish`) at another size: its caption wrapped again to the new
    width and the layout redone."""
    fig.set_size_inches(min(width, MAX_WIDTH_IN), height)
    bottom = 0.0
    if getattr(fig, "_gpulab_caption", None):
        artist, caption = fig._gpulab_caption
        text, share = caption_text(fig, caption)
        artist.set_text(text)
        bottom = min(0.3, share + 0.01)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    return fig


def legend_beside(ax, fontsize: float = 7, width: int = 34):
    """The axes' legend to the right of the plot, each label wrapped to ``width`` characters (the
    figure stays within MAX_WIDTH_IN, the plot keeps most of it)."""
    handles, labels = ax.get_legend_handles_labels()
    ax.legend(handles, [textwrap.fill(label, width) for label in labels], fontsize=fontsize, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))


#: Markers for recorded runs drawn beside a live ladder (see speedup_ladder's ``others``).
OTHER_MARKERS = ("D", "s", "^", "v", "P")


#: Line styles of the vendor reference lines, fastest first (colour alone would not tell them apart).
VENDOR_STYLES = ("--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))


def fastest_vendor_lines(vendor: pd.DataFrame, label: str = "variant", most: int = 4) -> pd.DataFrame:
    """The vendor rows worth a reference line: all of them when there are at most ``most``,
    else the fastest of each precision class (fp32, tf32, fp16/bf16) and, where the rows say,
    of each mode (eager, CUDA graph); fastest first. The rest belong in the chapter's table."""
    vendor = vendor.sort_values("median_ms")
    if len(vendor) <= most or "precision" not in vendor.columns:
        return vendor.head(most).reset_index(drop=True)
    klass = vendor["precision"].replace({"bf16": "fp16"})
    keys = [klass] + ([vendor["mode"]] if "mode" in vendor.columns else [])
    return vendor.groupby(keys, sort=False).head(1).head(most).reset_index(drop=True)


def speedup_ladder(rows: pd.DataFrame, *, title: str, caption: str | None = None,
                   vendor: pd.DataFrame | None = None, label: str = "variant", ax=None,
                   others: dict | None = None, builds_on: dict | None = None):
    """Time per ladder step (rows in ladder order), with the speedup over the
    first step and over the previous one written right of the plot, beside each
    bar. ``vendor`` rows are drawn as reference lines with a legend entry each
    (at most four: :func:`fastest_vendor_lines` keeps the fastest per precision
    and mode), so no label overlaps another or a bar. ``others`` ({GPU name:
    rows}): recorded runs of the same steps, marked on each bar (a live run
    beside the recorded H100 and H200 runs). ``builds_on`` ({row label: label of the row it
    changes}) for a branching ladder: the last column compares each step with the step it
    builds on, named in the cell, instead of with the row above it."""
    from matplotlib.transforms import blended_transform_factory
    fig, ax = _figure(ax, (MAX_WIDTH_IN, 0.42 * len(rows) + 2.4))
    rows = rows.reset_index(drop=True)
    y = np.arange(len(rows))[::-1]
    med = rows["median_ms"].to_numpy()
    err = np.vstack([med - rows["q1_ms"].to_numpy(), rows["q3_ms"].to_numpy() - med]) \
        if {"q1_ms", "q3_ms"} <= set(rows.columns) else None
    ax.barh(y, med, xerr=err, color="#4C72B0", alpha=0.85, capsize=2)
    ax.set_yticks(y, rows[label])
    handles = []
    for k, (gpu, other) in enumerate((others or {}).items()):
        times = other.drop_duplicates(label).set_index(label)["median_ms"]
        shown = [(yy, times[v]) for yy, v in zip(y, rows[label]) if v in times.index]
        if shown:
            line, = ax.plot([t for _, t in shown], [yy for yy, _ in shown], OTHER_MARKERS[k % len(OTHER_MARKERS)],
                            ms=5, mfc="none", color="black", label=f"recorded: {gpu}")
            handles.append(line)
    ax.set_xscale("log")
    _log_axis(ax.xaxis)
    ax.set_xlabel("time per run (ms, median; whiskers: quartiles; log scale)")
    # The time and speedups as columns right of the plot, one line per bar: inside the axes they
    # would need two decades of empty log axis to fit, and would cross the vendor lines.
    from matplotlib.transforms import offset_copy
    right = blended_transform_factory(ax.transAxes, ax.transData)
    columns = [(48, "time (ms)", [f"{t:.3g}" for t in med]),
               (98, "vs first", [f"x{med[0] / t:.2f}" for t in med]),
               (150, "vs previous", [""] + [f"x{med[i - 1] / t:.2f}" for i, t in enumerate(med) if i])]
    if builds_on is not None:
        position = {v: i for i, v in enumerate(rows[label])}
        unknown = sorted(str(b) for b in builds_on.values() if b not in position)
        if unknown:
            raise ValueError(f"builds_on names rows {unknown} that are not in the ladder {list(position)}")

        def against(i, t):
            base = builds_on.get(rows[label].iloc[i])
            return "" if base is None else f"x{med[position[base]] / t:.2f} vs {str(base).split()[0].lstrip('0')}"
        columns[2] = (172, "vs its base step", [against(i, t) for i, t in enumerate(med)])
    for offset, header, cells in columns:
        at = offset_copy(right, fig=fig, x=offset, units="points")
        # Headers under the columns, level with the tick labels: above them, the legend may reach.
        ax.text(1.0, -0.75, header, fontsize=7.5, color="#555555", transform=at, clip_on=False,
                ha="right", va="top")
        for yy, cell in zip(y, cells):
            ax.text(1.0, yy, cell, va="center", ha="right", fontsize=8, transform=at, clip_on=False)
    lo, hi = med.min(), med.max()
    if vendor is not None and len(vendor):
        lines = fastest_vendor_lines(vendor, label)
        for k, (_, v) in enumerate(lines.iterrows()):
            handles.append(ax.axvline(v["median_ms"], color=VENDOR_COLOR, lw=1.4,
                                      ls=VENDOR_STYLES[k % len(VENDOR_STYLES)],
                                      label=textwrap.fill(f"{v[label]}: {v['median_ms']:.3g} ms", 75,
                                                          subsequent_indent="  ")))
        lo, hi = min(lo, lines["median_ms"].min()), max(hi, lines["median_ms"].max())
        if len(lines) < len(vendor):
            handles.append(plt.Line2D([], [], color="none",
                                      label=f"({len(vendor) - len(lines)} slower vendor paths: see the table)"))
    if handles:
        # Above the plot, under the title: one entry per line, so long names never overlap.
        ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), fontsize=7.5, ncol=1,
                  borderaxespad=0.3)
    ax.set_ylim(-0.6, y.max() + 0.6)
    ax.set_xlim(lo / 1.6, hi * 1.6)
    if hi / lo < 20:     # under about a decade the major ticks alone leave the axis nearly bare
        ax.xaxis.set_minor_formatter(FuncFormatter(
            lambda value, _: f"{value:g}" if f"{value:.1e}"[0] in "25" else ""))
        ax.tick_params(axis="x", which="minor", labelsize=8)
    return _finish(fig, ax, title, caption)


def time_breakdown(rows: pd.DataFrame, *, title: str, caption: str | None = None,
                   label: str = "variant", phases=("h2d", "kernel", "d2h"), ax=None):
    """Stacked bars: how each variant's time splits into phases."""
    table = rows[rows["phase"].isin(phases)].pivot_table(
        index=label, columns="phase", values="median_ms", sort=False)[list(phases)]
    fig, ax = _figure(ax, (8, 0.5 * len(table) + 1.8))
    left = np.zeros(len(table))
    y = np.arange(len(table))[::-1]
    for phase in phases:
        ax.barh(y, table[phase], left=left, color=PHASE_COLORS.get(phase, PHASE_COLORS["other"]),
                label=phase)
        left += table[phase].to_numpy()
    for yy, total in zip(y, left):
        ax.text(total, yy, f"  {total:.3g} ms", va="center", fontsize=8)
    ax.set_yticks(y, table.index)
    ax.set_xlabel("time (ms, medians stacked)")
    ax.set_xlim(0, left.max() * 1.2)
    # Above the bars, under the title: inside, it would cover the longest bar.
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=len(phases), fontsize=8)
    return _finish(fig, ax, title, caption)


def scaling(rows: pd.DataFrame, *, title: str, caption: str | None = None, x: str = "size",
            y: str = "median_ms", label: str = "variant", xlabel: str | None = None,
            ylabel: str = "time (ms, median)", logx: bool = True, logy: bool = True, ax=None):
    """One line per variant over ``x`` (batch size, problem size), with the
    quartiles shaded when ``y`` is the median time; the legend right of the plot."""
    fig, ax = _figure(ax, (MAX_WIDTH_IN, 4.8))
    for name, group in rows.groupby(label, sort=False):
        group = group.sort_values(x)
        color = VENDOR_COLOR if _is_vendor(name) else None
        line, = ax.plot(group[x], group[y], marker="o", ms=3, label=name, color=color)
        if y == "median_ms" and "q1_ms" in group:
            ax.fill_between(group[x], group["q1_ms"], group["q3_ms"], alpha=0.2, color=line.get_color())
    ax.set_xscale("log" if logx else "linear")
    ax.set_yscale("log" if logy else "linear")
    for axis, log in ((ax.xaxis, logx), (ax.yaxis, logy)):
        if log:
            _log_axis(axis)
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel)
    # Outside the plot, right of it: inside, a legend covers the lines it names.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _finish(fig, ax, title, caption)


def heatmap(rows: pd.DataFrame, *, x: str, y: str, value: str = "median_ms", title: str,
            caption: str | None = None, fmt: str = "{:.3g}", cmap: str = "viridis_r", ax=None):
    """A launch-configuration sweep: ``value`` for every (x, y) pair, the best cell outlined."""
    table = rows.pivot_table(index=y, columns=x, values=value)
    fig, ax = _figure(ax, (1.2 * table.shape[1] + 3, 0.8 * table.shape[0] + 2))
    image = ax.imshow(table.to_numpy(), cmap=cmap, aspect="auto")
    ax.grid(False)
    ax.set_xticks(range(table.shape[1]), table.columns)
    ax.set_yticks(range(table.shape[0]), table.index)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    best = np.unravel_index(np.nanargmin(table.to_numpy()), table.shape)
    for (i, j), v in np.ndenumerate(table.to_numpy()):
        ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=8,
                color="white" if (i, j) != best else "black",
                fontweight="bold" if (i, j) == best else "normal")
    ax.add_patch(plt.Rectangle((best[1] - 0.5, best[0] - 0.5), 1, 1, fill=False, lw=2, ec="red"))
    fig.colorbar(image, ax=ax, label=value)
    return _finish(fig, ax, title, caption)


def sweep_heatmap(table: pd.DataFrame, *, x: str, y: str, value: str = "gflops", title: str,
                  caption: str | None = None, note: str | None = None, note_fmt: str = "{:.0%}",
                  fmt: str = "{:,.0f}", largest: bool = True, cmap: str = "viridis", ax=None):
    """A sweep (:func:`gpulab.sweep.sweep`) as a grid: ``value`` of every checked and timed point
    coloured, with the ``note`` column (e.g. occupancy) under it; invalid points grey and
    labelled "invalid", wrong ones hatched red and labelled "wrong" -- never coloured as fast --
    and the best point outlined."""
    for column in (x, y, value, "status"):
        if column not in table.columns:
            raise ValueError(f"the sweep table has no column '{column}'; it has {list(table.columns)}")
    xs, ys = sorted(table[x].unique()), sorted(table[y].unique())
    grid = np.full((len(ys), len(xs)), np.nan)
    fig, ax = _figure(ax, (0.95 * len(xs) + 3.2, 0.6 * len(ys) + 2.2))
    timed = table["timed"].astype(bool) if "timed" in table.columns else table[value].notna()
    for _, row in table.iterrows():
        i, j = ys.index(row[y]), xs.index(row[x])
        if row["status"] == "ok" and timed.loc[row.name]:
            grid[i, j] = row[value]
    cm = plt.get_cmap(cmap).with_extremes(bad="#E8E8E8")
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=cm, aspect="auto")
    ax.grid(False)
    ax.set_xticks(range(len(xs)), xs)
    ax.set_yticks(range(len(ys)), ys)
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    finite = np.isfinite(grid)
    best = None
    if finite.any():
        flat = np.where(finite, grid, -np.inf if largest else np.inf)
        best = np.unravel_index(np.argmax(flat) if largest else np.argmin(flat), grid.shape)
        lo, hi = np.nanmin(grid), np.nanmax(grid)
    for _, row in table.iterrows():
        i, j = ys.index(row[y]), xs.index(row[x])
        if np.isfinite(grid[i, j]):
            share = (grid[i, j] - lo) / (hi - lo) if hi > lo else 1.0
            text = fmt.format(grid[i, j])
            if note and note in row and pd.notna(row[note]):
                text += "\n" + note_fmt.format(row[note])
            ax.text(j, i, text, ha="center", va="center", fontsize=7,
                    color="black" if share > 0.6 else "white", fontweight="bold" if (i, j) == best else "normal")
        elif row["status"] == "wrong":
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", ec=VENDOR_COLOR, lw=0))
            ax.text(j, i, "wrong", ha="center", va="center", fontsize=7, color=VENDOR_COLOR, fontweight="bold")
        else:
            ax.text(j, i, "invalid" if row["status"] == "invalid" else "untimed", ha="center", va="center",
                    fontsize=7, color="#555555")
    if best is not None:
        ax.add_patch(plt.Rectangle((best[1] - 0.5, best[0] - 0.5), 1, 1, fill=False, lw=2.2, ec="red"))
    fig.colorbar(image, ax=ax, label=value)
    return _finish(fig, ax, title, caption)


def roofline(points: pd.DataFrame, *, peak_gflops: float, peak_gbs: float, title: str,
             caption: str | None = None, label: str = "variant", datasheet_gflops: float | None = None,
             datasheet_gbs: float | None = None, ax=None):
    """Achieved GFLOP/s against arithmetic intensity, under the measured
    ceilings (solid) and the datasheet's (dotted)."""
    fig, ax = _figure(ax)
    finite = points[np.isfinite(points["intensity"]) & (points["gflops"] > 0)]
    lo = min(finite["intensity"].min() / 4 if len(finite) else 0.01, 0.01)
    hi = max(finite["intensity"].max() * 4 if len(finite) else 100, 100)
    xs = np.logspace(np.log10(lo), np.log10(hi), 200)
    if np.isfinite(peak_gflops) and np.isfinite(peak_gbs):
        ax.plot(xs, np.minimum(peak_gflops, xs * peak_gbs), color="black", lw=1.5,
                label=f"measured: {peak_gbs:,.0f} GB/s, {peak_gflops / 1e3:,.1f} TFLOP/s")
    else:                 # the run did not measure its ceilings: only the datasheet's roof is drawn
        ax.plot([], [], " ", label="measured ceilings: not in this run")
    if datasheet_gflops and datasheet_gbs:
        ax.plot(xs, np.minimum(datasheet_gflops, xs * datasheet_gbs), color="gray", ls=":",
                label=f"datasheet: {datasheet_gbs:,.0f} GB/s, {datasheet_gflops / 1e3:,.1f} TFLOP/s")
    for _, p in finite.iterrows():
        ax.plot(p["intensity"], p["gflops"], "o", ms=6,
                color=VENDOR_COLOR if _is_vendor(p[label]) else None, label=p[label])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of device memory)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.legend(fontsize=7.5, loc="lower right")
    return _finish(fig, ax, title, caption)


def profile_bars(table: pd.DataFrame, metrics, *, title: str, caption: str | None = None,
                 label: str = "variant", log=()):
    """Profiler figures side by side: one horizontal bar chart per metric
    (columns of :func:`gpulab.profiler.per_launch`'s table), rows in the
    table's order; ``log`` names the metrics drawn on a log scale."""
    missing = [m for m in metrics if m not in table.columns]
    if missing:
        raise ValueError(f"the profile table has no {missing}; it has {list(table.columns)}")
    # At most three charts a row (the figure no wider than MAX_WIDTH_IN), each row with the labels.
    cols = min(3, len(metrics))
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(MAX_WIDTH_IN, rows * (0.3 * len(table) + 1.2) + 0.6),
                             sharey=True, squeeze=False)
    for ax in axes.flat[len(metrics):]:
        ax.set_visible(False)
    y = np.arange(len(table))[::-1]
    for ax, metric in zip(axes.flat, metrics):
        ax.barh(y, table[metric].to_numpy(dtype=float), color="#4C72B0", alpha=0.85)
        if metric in log:   # counts spanning many decades; zero stays visible as zero
            ax.set_xscale("symlog", linthresh=1)
            ax.xaxis.set_major_locator(SymmetricalLogLocator(base=1000, linthresh=1))
        ax.set_xlabel(textwrap.fill(metric.replace("_", " "), 28))
    labels = [textwrap.fill(str(name), 36) for name in table[label]]    # a kernel's long name on two lines
    for row in axes:
        row[0].set_yticks(y, labels)
    return _finish(fig, axes[0][0], title, caption, whole_figure=True)


def _is_vendor(name) -> bool:
    text = str(name).lower()
    return any(k in text for k in ("cublas", "cudnn", "cupy", "vendor"))


def memory_hierarchy(facts: dict, *, title: str, caption: str | None = None):
    """The memory hierarchy of one GPU as boxes, fastest and smallest at the top:
    registers and L1/shared memory inside each SM, the L2 all SMs share, device
    memory. ``facts`` is :func:`gpulab.datasheet.h100` (or the same keys for
    another GPU); every number in the figure comes from it."""
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(8, 6.4))
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.axis("off")

    def box(x, y, w, h, color, text, size=9, weight="normal"):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.4,rounding_size=1.5",
                                    fc=color, ec="#333333", lw=1))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, fontweight=weight,
                wrap=True)

    # One SM drawn in full, the others as a stack behind it.
    for shift in (4, 2):
        ax.add_patch(FancyBboxPatch((6 + shift, 48 + shift), 66, 46, boxstyle="round,pad=0.4,rounding_size=1.5",
                                    fc="#EEEEEE", ec="#999999", lw=0.8))
    ax.add_patch(FancyBboxPatch((6, 48), 66, 46, boxstyle="round,pad=0.4,rounding_size=1.5",
                                fc="#F7F7F7", ec="#333333", lw=1.2))
    ax.text(8, 91, f"one SM (of {facts['sms']}): up to {facts['max_warps_per_sm']} warps of "
            f"{facts['warp_size']} threads, {facts['fp32_lanes_per_sm']} FP32 lanes",
            fontsize=9, fontweight="bold", va="top")
    box(9, 71, 60, 12, "#C6DBEF",
        f"registers: {facts['registers_per_sm']:,} x 32 bit per SM ({facts['register_file_kib_per_sm']} KiB),\n"
        f"at most {facts['max_registers_per_thread']} per thread; private to each thread")
    box(9, 52, 60, 13, "#FDD0A2",
        f"L1 cache + shared memory: {facts['l1_and_shared_per_sm_kib']} KiB per SM\n"
        f"shared: up to {facts['shared_per_sm_kib']} KiB per SM, {facts['shared_per_block_kib']} KiB per block "
        f"(opt-in; {facts['default_shared_per_block_kib']} by default),\n"
        f"{facts['shared_banks']} banks of {facts['bank_bytes']} bytes; shared by one block's threads")
    box(6, 28, 66, 11, "#C7E9C0", f"L2 cache: {facts['l2_mb']:g} MB, shared by all {facts['sms']} SMs", size=10)
    box(6, 6, 66, 13, "#D9D9D9",
        f"device memory (HBM): {facts['memory_gb']:g} GB, {facts['memory_gbs']:,.0f} GB/s\n"
        f"read and written in {facts['sector_bytes']}-byte sectors", size=10)
    for y0, y1 in ((47, 40), (27, 20)):
        ax.annotate("", xy=(39, y1), xytext=(39, y0), arrowprops=dict(arrowstyle="<->", color="#333333"))
    ax.annotate("", xy=(90, 92), xytext=(90, 8), arrowprops=dict(arrowstyle="->", color="#555555", lw=1.5))
    ax.text(92, 50, "closer to the threads:\nsmaller, faster,\nmore private", rotation=90, va="center",
            ha="left", fontsize=8.5, color="#555555")
    return _finish(fig, ax, title, caption)


PRECISION_COLORS = {"fp32": "#4C72B0", "tf32": "#8172B3", "fp16": "#DD8452", "bf16": "#C44E52"}


def vendor_paths(rows: pd.DataFrame, *, title: str, caption: str | None = None, ax=None):
    """Every vendor path of one workload: one bar each (colour: precision;
    hatched: in a CUDA graph), fastest first; the fastest of each precision
    class (fp32, tf32, fp16/bf16) is marked with a star: the baseline the
    chapter's kernels are judged by."""
    rows = rows.sort_values("median_ms").reset_index(drop=True)
    fig, ax = _figure(ax, (9, 0.3 * len(rows) + 1.8))
    y = np.arange(len(rows))[::-1]
    modes = rows["mode"] if "mode" in rows else pd.Series("eager", index=rows.index)
    for yy, (_, r), mode in zip(y, rows.iterrows(), modes):
        ax.barh(yy, r["median_ms"], color=PRECISION_COLORS.get(r["precision"], "#8C8C8C"),
                hatch="//" if mode == "graph" else None, edgecolor="white", alpha=0.9)
    classes = {"fp32": ("fp32",), "tf32": ("tf32",), "fp16": ("fp16", "bf16")}
    for members in classes.values():
        inside = rows[rows["precision"].isin(members)]
        if len(inside):
            best = inside["median_ms"].idxmin()
            ax.text(rows.loc[best, "median_ms"], y[best], "  ★ fastest " + "/".join(members), va="center",
                    fontsize=8, fontweight="bold")
    ax.set_yticks(y, rows["variant"], fontsize=7.5)
    ax.set_xscale("log")
    _log_axis(ax.xaxis)
    ax.set_xlabel("time per inference (ms, median)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in PRECISION_COLORS.values()]
    handles.append(plt.Rectangle((0, 0), 1, 1, fc="white", ec="gray", hatch="//"))
    ax.legend(handles, list(PRECISION_COLORS) + ["in a CUDA graph"], fontsize=7, loc="lower right")
    ax.set_xlim(rows["median_ms"].min() / 1.5, rows["median_ms"].max() * 4)
    return _finish(fig, ax, title, caption)


def gpu_ratio(table: pd.DataFrame, *, title: str, caption: str | None = None, label: str = "variant",
              ax=None):
    """Per step, the second GPU's time over the first's (bars) against what the
    roofline predicts (markers): about the bandwidth ratio for memory-bound
    steps, about 1 for compute-bound ones (see :func:`gpulab.runs.gpu_ratio_table`)."""
    fig, ax = _figure(ax, (8, 0.4 * len(table) + 1.8))
    table = table.reset_index(drop=True)
    y = np.arange(len(table))[::-1]
    palette = {"memory": "#55A868", "compute": "#4C72B0", "latency": "#8C8C8C"}
    colors = [palette.get(b, "#8C8C8C") for b in table["bound"]]
    ax.barh(y, table["ratio"], color=colors, alpha=0.85)
    ax.plot(table["predicted"], y, "k|", ms=14, mew=2, label="roofline prediction")
    ax.axvline(1.0, color="gray", lw=1)
    ax.set_yticks(y, table[label], fontsize=8)
    ax.set_xlabel(f"time on {table.attrs.get('b', 'GPU B')} / time on {table.attrs.get('a', 'GPU A')}")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in palette.values()] + [ax.lines[0]]
    ax.legend(handles, ["memory-bound (by the roofline)", "compute-bound", "latency-bound (far from both roofs)",
                        "roofline prediction"], fontsize=7, loc="lower right")
    ax.set_xlim(0, max(1.3, float(np.nanmax(table["ratio"])) * 1.1))
    return _finish(fig, ax, title, caption)
