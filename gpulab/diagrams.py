"""Pictures of which thread handles which data, drawn from a kernel's launch parameters.

A map is a 2-D integer array shaped like the data (an output plane, a tile in shared
memory, a register tile): each cell holds the id of the thread (or block) that handles it,
-1 where none does. :func:`ownership` colours the cells by owner, draws thin lines where the
owner changes and thick ones where the group (the block) changes, and paints chosen owners
in a strong colour; :func:`outline` draws the boundary of any set of cells (what one thread
reads, what one instruction touches). The chapters compute the maps from the same constants
their kernels are compiled with, so a picture cannot drift from the kernel it explains.

    fig, axes = diagrams.panels(3, title="Step 10: who computes what?", caption="...")
    diagrams.ownership(axes[0], owner, group=block, highlight={7: diagrams.HIGHLIGHT}, title="...")
    diagrams.outline(axes[0], owner == 7)
"""
from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import to_rgba

from . import plots

#: Light colours for neighbouring owners (any two owners whose ids differ by 1 to 5 differ).
PALETTE = ("#C6DBEF", "#FDD0A2", "#C7E9C0", "#DADAEB", "#FCBBA1", "#F2F0C4")
HIGHLIGHT = "#C44E52"
SECOND = "#4C72B0"
UNOWNED = "#FFFFFF"


def _as_map(name: str, array) -> np.ndarray:
    a = np.asarray(array)
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must be a 2-D integer array (one owner id per cell, -1 for none), "
                         f"got {a.dtype} with shape {a.shape}")
    return a


def ownership(ax, owner, *, title: str, group=None, highlight: dict | None = None, marks=(),
              xlabel: str = "column", ylabel: str = "row", labels: dict | None = None, aspect="equal",
              label_size: float = 8, label_color: str = "black"):
    """Draw ``owner`` (2-D ints, -1: nobody) on ``ax``: each owner's cells in a light colour,
    thin white lines between owners, thick dark lines between groups (``group``, same shape,
    e.g. the block of each cell), and the owners in ``highlight`` ({id: colour}) painted
    strongly; ``marks`` ((mask, colour) pairs) paints any cells the same way, e.g. one owner
    of one group only. ``labels`` ({(row, column): text}) writes text into cells (``label_size``
    points, ``label_color``: white reads on the strong colours); ``aspect="auto"``
    stretches cells to fill the panel (for long, thin arrays). Returns ``ax``."""
    owner = _as_map("owner", owner)
    rgba = np.array([to_rgba(c) for c in PALETTE])
    image = rgba[np.mod(owner, len(PALETTE))]
    image[owner < 0] = to_rgba(UNOWNED)
    for who, colour in (highlight or {}).items():
        image[owner == who] = to_rgba(colour)
    for mask, colour in marks:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != owner.shape:
            raise ValueError(f"a mark's mask must have owner's shape {owner.shape}, got {mask.shape}")
        image[mask] = to_rgba(colour)
    rows, cols = owner.shape
    ax.imshow(image, interpolation="nearest", extent=(-0.5, cols - 0.5, rows - 0.5, -0.5),
              aspect=aspect)
    _boundaries(ax, owner, color="white", lw=0.6)
    if group is not None:
        group = _as_map("group", group)
        if group.shape != owner.shape:
            raise ValueError(f"group must have owner's shape {owner.shape}, got {group.shape}")
        _boundaries(ax, group, color="#333333", lw=1.6)
    for (r, c), text in (labels or {}).items():
        ax.text(c, r, text, ha="center", va="center", fontsize=label_size, color=label_color,
                fontweight="bold" if label_color == "white" else "normal")
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(False)
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    # Wrapped to the panel's width (11-point bold: about 6.5 points a character), so that a title
    # never reaches past the figure's edge and widens the saved image.
    width_pt = ax.get_position().width * ax.figure.get_figwidth() * 72
    ax.set_title(textwrap.fill(title, max(20, min(32, int(width_pt / 6.5)))), loc="left", fontsize=11)
    return ax


def _boundaries(ax, ids: np.ndarray, color: str, lw: float) -> None:
    """Lines along every edge between two cells of different ids."""
    segments = []
    rows, cols = ids.shape
    for r, c in zip(*np.nonzero(ids[:, 1:] != ids[:, :-1])):
        segments.append(((c + 0.5, r - 0.5), (c + 0.5, r + 0.5)))
    for r, c in zip(*np.nonzero(ids[1:, :] != ids[:-1, :])):
        segments.append(((c - 0.5, r + 0.5), (c + 0.5, r + 0.5)))
    _draw(ax, segments, color, lw)


def outline(ax, mask, *, color: str = "black", lw: float = 2.0, linestyle="-", label: str | None = None):
    """Draw the boundary of the cells where ``mask`` (2-D booleans) is true."""
    mask = np.asarray(mask, dtype=bool)
    if mask.ndim != 2:
        raise ValueError(f"mask must be 2-D, got shape {mask.shape}")
    padded = np.pad(mask, 1)
    segments = []
    for r, c in zip(*np.nonzero(padded[1:-1, 1:] != padded[1:-1, :-1])):   # vertical edges
        segments.append(((c - 0.5, r - 0.5), (c - 0.5, r + 0.5)))
    for r, c in zip(*np.nonzero(padded[1:, 1:-1] != padded[:-1, 1:-1])):   # horizontal edges
        segments.append(((c - 0.5, r - 0.5), (c + 0.5, r - 0.5)))
    _draw(ax, segments, color, lw, linestyle, label)


def _draw(ax, segments, color, lw, linestyle="-", label=None) -> None:
    from matplotlib.collections import LineCollection
    if segments:
        ax.add_collection(LineCollection(segments, colors=color, linewidths=lw, linestyles=linestyle,
                                         label=label, capstyle="projecting"))


def panels(n: int, *, title: str, caption: str | None = None, rows: int = 1, size=None,
           width_ratios=None):
    """A figure of ``rows`` x ``n`` panels for maps, titled with the question it answers and
    with ``caption`` (the count that makes the prediction, the source) under it."""
    width, height = size or (3.4 * n, 3.6 * rows)
    width = min(width, plots.MAX_WIDTH_IN)      # drawn no wider than a book page shows near its size
    fig, axes = plt.subplots(rows, n, figsize=(width, height), squeeze=False,
                             gridspec_kw={"width_ratios": width_ratios} if width_ratios else None)
    fig.suptitle(textwrap.fill(title, int(fig.get_figwidth() * 9)), x=0.01, ha="left",
                 fontweight="bold", fontsize=12)
    if caption:
        fig.text(0.01, 0.0, textwrap.fill(caption, int(fig.get_figwidth() * 11)), ha="left", va="top",
                 fontsize=10)
    fig.tight_layout()
    return fig, axes if rows > 1 else axes[0]


def legend(fig, entries: dict) -> None:
    """A legend of coloured patches ({label: colour}) along the figure's bottom edge, above the
    caption; leave room for it with ``fig.tight_layout(rect=(0, 0.06, 1, 0.95))``."""
    from matplotlib.patches import Patch
    chars = int((fig.get_figwidth() - 0.6) * 72 / 5.8)     # 9.5-point labels, wrapped to the figure's width
    fig.legend(handles=[Patch(facecolor=c, edgecolor="#333333", label=textwrap.fill(l, chars))
                        for l, c in entries.items()],
               loc="lower left", bbox_to_anchor=(0.01, 0.0), fontsize=9.5, frameon=False, ncol=1)
