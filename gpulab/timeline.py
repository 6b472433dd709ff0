"""What ran when, on which stream: a timeline of copies and kernels from CUDA events.

:class:`Timeline` records a pair of CUDA events around each piece of work a
program enqueues (a copy in, a kernel, a copy out) on the stream it goes to;
once the work is done, :meth:`Timeline.rows` turns every pair into a tidy row
(``lane``, ``kind``, ``label``, ``start_ms``, ``end_ms``) measured from one
origin event that every stream waits for. :func:`plot` draws the rows as one
lane per stream with a bar per piece of work, so a reader sees whether copies
on one stream overlap kernels on another.

    tl = Timeline()
    for name in ("stream 0", "stream 1"):
        s = tl.stream(name)                  # waits for the origin event
        with tl.span(s, "h2d", "chunk 0"):
            d.set(h, stream=s)
        with tl.span(s, "kernel", "conv1"):
            launch()
    rows = tl.rows()                          # synchronizes, then reads the events

The rows can be saved with a recorded run as a side table (see
:func:`gpulab.runs.save_run`) and plotted anywhere, without a GPU. Events
have a resolution of about half a microsecond and their recording costs a
little GPU time, so a timeline explains a schedule; the timings a chapter
reports come from :mod:`gpulab.timing`.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pandas as pd

from .device import require_gpu

#: The columns of a timeline's rows.
COLUMNS = ["lane", "kind", "label", "start_ms", "end_ms"]
#: Kinds with a colour of their own (others are drawn grey): the book's phase colours.
KINDS = ("h2d", "kernel", "d2h")


class Timeline:
    """Events around enqueued work, on any number of streams, from one origin."""

    def __init__(self, stream=None):
        require_gpu("recording a timeline with CUDA events")
        import cupy

        self._cupy = cupy
        self.home = stream or cupy.cuda.Stream(non_blocking=True)
        self.origin = cupy.cuda.Event()
        self.origin.record(self.home)
        self._spans: list[tuple] = []
        self.lanes: dict[str, object] = {}

    def stream(self, name: str, stream=None):
        """A stream for lane ``name`` (a new non-blocking one unless given) that
        waits for the origin, so nothing on it starts before time zero."""
        s = stream or self._cupy.cuda.Stream(non_blocking=True)
        s.wait_event(self.origin)
        self.lanes[name] = s
        return s

    def _lane(self, stream) -> str:
        for name, s in self.lanes.items():
            if s is stream or getattr(s, "ptr", None) == getattr(stream, "ptr", -1):
                return name
        name = f"stream {len(self.lanes)}"
        self.stream(name, stream)
        return name

    @contextmanager
    def span(self, stream, kind: str, label: str = ""):
        """Record events on ``stream`` before and after the work enqueued inside
        the ``with`` block (which runs with ``stream`` as the current stream)."""
        start, end = self._cupy.cuda.Event(), self._cupy.cuda.Event()
        lane = self._lane(stream)
        start.record(stream)
        with stream:
            yield
        end.record(stream)
        self._spans.append((lane, kind, label, start, end))

    def join(self):
        """Make the home stream wait for every lane (e.g. before an end event)."""
        for s in self.lanes.values():
            self.home.wait_event(s.record())
        return self.home

    def rows(self) -> pd.DataFrame:
        """Every span as a row, times in ms from the origin (waits for the work)."""
        get = self._cupy.cuda.get_elapsed_time
        out = []
        for lane, kind, label, start, end in self._spans:
            end.synchronize()
            out.append({"lane": lane, "kind": kind, "label": label,
                        "start_ms": get(self.origin, start), "end_ms": get(self.origin, end)})
        return pd.DataFrame(out, columns=COLUMNS)


def check_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` if they have :data:`COLUMNS` and every span ends after it starts;
    otherwise a clear error."""
    missing = [c for c in COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"timeline rows need the columns {COLUMNS}; missing {missing}")
    if rows.empty:
        raise ValueError("timeline rows are empty: nothing was recorded")
    bad = rows[~(rows["end_ms"] >= rows["start_ms"])]
    if len(bad):
        raise ValueError(f"{len(bad)} timeline spans end before they start, e.g. {bad.iloc[0].to_dict()}")
    return rows


def busy_ms(rows: pd.DataFrame, kind: str | None = None) -> float:
    """Milliseconds during which at least one span (of ``kind``, if given) was running:
    the union of the intervals, so overlapping work is counted once."""
    rows = check_rows(rows) if kind is None else rows[rows["kind"] == kind]
    spans = sorted(zip(rows["start_ms"], rows["end_ms"]))
    total, current_start, current_end = 0.0, None, None
    for start, end in spans:
        if current_end is None or start > current_end:
            if current_end is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_end is not None:
        total += current_end - current_start
    return float(total)


def overlap_summary(rows: pd.DataFrame) -> dict:
    """The span of the whole timeline, the time some copy or some kernel ran, and how
    much of the copies' time was hidden under kernels (sum of each kind's busy time
    minus the time anything at all was busy)."""
    rows = check_rows(rows)
    wall = float(rows["end_ms"].max() - rows["start_ms"].min())
    copies = rows[rows["kind"].isin(["h2d", "d2h"])]
    kernels = rows[rows["kind"] == "kernel"]
    copy_ms = busy_ms(copies) if len(copies) else 0.0
    kernel_ms = busy_ms(kernels) if len(kernels) else 0.0
    anything = busy_ms(rows)
    return {"wall_ms": wall, "copy_busy_ms": copy_ms, "kernel_busy_ms": kernel_ms,
            "overlapped_ms": max(0.0, copy_ms + kernel_ms - anything)}


def plot(rows: pd.DataFrame, *, title: str, caption: str | None = None, ax=None, labels: bool = False):
    """One lane per stream (top to bottom in the order first seen), a bar per span,
    coloured by kind (h2d, kernel, d2h; anything else grey). ``labels`` writes each
    span's label inside its bar."""
    from . import plots

    rows = check_rows(rows).reset_index(drop=True)
    lanes = list(dict.fromkeys(rows["lane"]))
    fig, ax = plots._figure(ax, (9, 0.55 * len(lanes) + 1.9))
    y_of = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    for kind in list(KINDS) + sorted(set(rows["kind"]) - set(KINDS)):
        sel = rows[rows["kind"] == kind]
        if sel.empty:
            continue
        color = plots.PHASE_COLORS.get(kind, plots.PHASE_COLORS["other"])
        ax.barh([y_of[lane] for lane in sel["lane"]], sel["end_ms"] - sel["start_ms"], left=sel["start_ms"],
                height=0.6, color=color, edgecolor="white", linewidth=0.4, label=kind)
        if labels:
            for _, r in sel.iterrows():
                ax.text((r["start_ms"] + r["end_ms"]) / 2, y_of[r["lane"]], str(r["label"]),
                        ha="center", va="center", fontsize=6.5, color="white", clip_on=True)
    ax.set_yticks([y_of[lane] for lane in lanes], lanes)
    ax.set_xlabel("time from the first event (ms)")
    ax.set_xlim(0, float(np.nextafter(rows["end_ms"].max(), np.inf)) * 1.01)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)   # beside the lanes, clear of the title
    ax.grid(axis="y", visible=False)
    return plots._finish(fig, ax, title, caption)
