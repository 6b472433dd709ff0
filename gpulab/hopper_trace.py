"""What the hopper chapter's warps wait for, and when: a record of one block's run on the CPU
backend, laid out as lanes (the copy engine, and each warpgroup or warp) over the order of events.

The CPU backend runs a block's threads as fibers, one at a time, and completes a copy or a
``wgmma`` when it is issued (a legal schedule of them), so it has no clock to give: a faithful
time axis cannot come from it. What it does record faithfully is the order of events and who
waited for whom. :func:`record` builds a step's kernel with ``-DGPULAB_HOPPER_TRACE`` (which makes
``gpulab_hopper_cpu.h`` print every mbarrier, copy, ``wgmma`` and store event of each warp's
first lane), runs one block of it on small inputs, checks its C against the float64 reference,
and returns the events in the order they ran. :func:`actions` groups them into what a lane does
(wait for a phase, issue a slice's copy, issue its products, wait for products, release a slot,
write C) and places each one column after whatever it had to follow: the lane's previous action,
and for a wait the arrival or landed copy that completed the phase it named. :func:`figure` draws
that: a step is as far right as its dependencies push it, which is an order, not a duration.

    events = hopper_trace.record(hopper.STEPS[4])
    hopper_trace.figure(events, step)
"""
from __future__ import annotations

import contextlib
import io
import sys
import textwrap
from dataclasses import replace

import numpy as np
import pandas as pd

from . import plots, tensormap
from .check import compare
from .errors import GpulabError
from .kernels import load_module

#: The macro that turns the CPU backend's trace on (gpulab/cpu/include/gpulab_hopper_cpu.h).
TRACE_OPTION = "-DGPULAB_HOPPER_TRACE"
#: The columns of a record: the event's place in the run, its kind, the block and thread that
#: ran it (a copy's landing: the thread that issued it), and up to three values (a barrier's
#: address, a parity, bytes, coordinates).
COLUMNS = ["seq", "kind", "block", "thread", "a", "b", "c"]
#: The shapes the figures record, per step number: M, N and K (one block; the persistent steps
#: walk two tiles, so the producer's run into the next tile shows).
SHAPES = {"01": (128, 128, 4 * 64), "02": (128, 128, 8 * 64), "03": (128, 128, 8 * 64), "04": (128, 256, 8 * 64),
          "05": (256, 256, 5 * 64), "06": (256, 256, 5 * 64), "07": (256, 256, 5 * 64)}


@contextlib.contextmanager
def _printed():
    """What the launch prints, through Python's sys.stdout or straight to file descriptor 1: on the
    GPU machine of 2026-12-07 the CPU backend's kernel printed to the descriptor (the trace went
    to the notebook's stream and the record found no events), here through sys.stdout."""
    import os
    import tempfile

    text = io.StringIO()
    sys.stdout.flush()
    with tempfile.TemporaryFile(mode="w+b") as raw:
        saved = os.dup(1)
        try:
            os.dup2(raw.fileno(), 1)
            with contextlib.redirect_stdout(text):
                yield text
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            raw.seek(0)
            text.write(raw.read().decode(errors="replace"))


def record(step, M: int | None = None, N: int | None = None, K: int | None = None, seed: int = 0) -> pd.DataFrame:
    """Run one block of ``step`` (a hopper ladder step from 2 on, not the cluster step) on the CPU
    backend with tracing on, on random inputs of M x N x K (default :data:`SHAPES`), and return
    its events in the order they ran (:data:`COLUMNS`). The run's C is checked first: a record
    of a wrong product is an error, never a figure."""
    from .workloads import hopper
    if not step.tma or step.cluster != 1:
        raise GpulabError(f"step {step.number}: the trace covers the steps whose copies complete on one block's "
                          "mbarriers (1 to 7), not step 0's cp.async or the cluster step")
    M, N, K = (v if v is not None else d for v, d in zip((M, N, K), SHAPES.get(step.number, (128, 256, 512))))
    if (not step.persistent and (M > step.bm or N > step.bn)):
        raise GpulabError(f"step {step.number}: one block computes {step.bm} x {step.bn}; M x N = {M} x {N} "
                          "would need more blocks than the record follows")
    A, B = hopper.make_inputs(M, N, K, seed)
    C = np.full((M, N), np.nan, np.float16)
    module = load_module(step.file, "cpu", options=(TRACE_OPTION,))
    kernel = module.get_function(step.kernel)
    kernel.allow_shared_memory(step.shared_bytes)
    maps = (tensormap.encode_2d(A, (step.slice_k, step.bm)), tensormap.encode_2d(B, (step.slice_k, step.bn)))
    if step.tma_store:
        maps += (tensormap.encode_2d(C, (64, hopper.steps.STORE_BOX)),)
    with _printed() as printed:
        kernel((1,), (step.threads,), (*maps, C, np.int32(M), np.int32(N), np.int32(K)),
               shared_mem=step.shared_bytes)
    result = compare(C.astype(np.float32), hopper.reference(A, B), precision="fp16",
                     name=f"step {step.number}'s traced run")
    if not result.passed:
        raise GpulabError(f"step {step.number}'s traced run computed a wrong C: {result}")
    rows = [line.split()[1:] for line in printed.getvalue().splitlines() if line.startswith("@T ")]
    if not rows:
        raise GpulabError(f"step {step.number}: the traced build printed no events (is {TRACE_OPTION} "
                          "still read by gpulab_hopper_cpu.h?)")
    frame = pd.DataFrame(rows, columns=COLUMNS[1:])
    for column in COLUMNS[2:]:
        frame[column] = frame[column].astype(np.int64)
    frame.insert(0, "seq", np.arange(len(frame)))
    frame.attrs.update(step=step.number, M=M, N=N, K=K, stages=step.stages, threads=step.threads,
                       slices=-(-K // step.slice_k), tiles=step.tiles(M, N) if step.persistent else 1)
    return frame


def barrier_names(events: pd.DataFrame) -> dict[int, tuple[str, int]]:
    """Barrier address -> (name, slot), from the order the block initialised them: a barrier of
    one arrival is a slot's ``full`` (the producer's arrival and the bytes), one of more arrivals
    its ``empty`` (the consumer warps'); slots are numbered in initialisation order."""
    names, counts = {}, {"full": 0, "empty": 0}
    for _, e in events[events["kind"] == "init"].iterrows():
        name = "full" if e["b"] == 1 else "empty"
        names[int(e["a"])] = (name, counts[name])
        counts[name] += 1
    return names


def lane_of(step_threads: int, thread: int) -> str:
    """The lane a thread's events are drawn in: each warp of a one-warpgroup block (its thread 0
    also issues the copies); the producer warpgroup and each consumer's first warp of a
    warp-specialized block (the other consumer warps do the same; their arrivals still count)."""
    if step_threads <= 128:
        return f"warp {thread // 32}" + (" (thread 0 issues the copies)" if thread == 0 else "")
    group = thread // 128
    if group == 0:
        return "producer (thread 0)" if thread == 0 else f"producer warpgroup, warp {thread // 32}"
    return f"consumer {group}" + (f" (warp {thread // 32})" if thread % 128 == 0 else f" warp {thread // 32}")


#: Events of a consumer's epilogue (step 7: C staged in shared memory and stored by the copy engine).
EPILOGUE_EVENTS = ("bwaitr", "bwait", "nbar", "nbarp", "fence", "store", "bcommit")
#: The columns of :func:`actions`.
ACTION_COLUMNS = ["lane", "kind", "label", "slot", "start", "end", "blocked", "fresh"]


def actions(events: pd.DataFrame) -> pd.DataFrame:
    """The record grouped into what each lane does, each placed at the earliest column its
    dependencies allow: one column after the lane's previous action, and a wait's end one column
    after the arrival or landed copy that completed the phase it named (a barrier's phase flips
    in the column of its last arrival or landing; a copy lands one column after its issue).
    Rows of :data:`ACTION_COLUMNS` (``end`` inclusive), kinds:

    ``wait``      for a barrier's phase (label "full[s] p"), or ``__syncthreads``; ``blocked`` where
                  a dependency held it past its first column, ``fresh`` where it named parity 1 of a
                  barrier that had completed no phase (it returns at once)
    ``issue``     the producer announcing a slice's bytes and issuing its two copies (label: slice)
    ``copy``      the copy engine's: the slice's copies, issue to landing
    ``products``  a committed group of wgmma: issued, to the wait_group that retired it
    ``release``   an arrival on a slot's empty barrier (label: slot)
    ``epilogue``  C leaving a consumer: from registers (steps 2-6: plain stores, which the record
                  does not hold, placed after the tile's last products) or staged in shared
                  memory (step 7's events)
    ``store``     the copy engine's TMA store of C: issue, to the bulk wait that retired it"""
    names = barrier_names(events)
    threads = int(events.attrs.get("threads", events["thread"].max() + 1))
    stages = int(events.attrs.get("stages", len(names) or 1))
    slices = int(events.attrs.get("slices", 0)) or None
    out, col = [], {}
    last_flip = {}          # (barrier, parity of the completed phase) -> column
    phase_cols = {}         # barrier -> columns of its current phase's arrivals and landings
    issued = {}             # barrier of the copies being issued -> column
    produced = {}           # producer thread -> slices issued
    group, groups, retired = {}, {}, {}
    waiting = {}            # thread -> (first column, what it waits for)
    arrived = {}            # (barrier kind, generation) -> columns of its arrivals
    syncs = {}              # thread -> __syncthreads met
    in_epilogue, due = {}, set()
    stores = []             # (thread, column issued) of TMA stores not yet retired

    def add(lane, kind, label, start, end, slot=-1, blocked=False, fresh=False):
        out.append(dict(lane=lane, kind=kind, label=str(label), slot=int(slot), start=int(start), end=int(end),
                        blocked=bool(blocked), fresh=bool(fresh)))

    def nxt(t):
        return col.get(t, -1) + 1

    def epilogue_from_registers(t):
        c = nxt(t)
        col[t] = c
        add(lane_of(threads, t), "epilogue", "C", c, c)

    for e in events.itertuples(index=False):
        t, kind, lane = int(e.thread), e.kind, lane_of(threads, int(e.thread))
        if kind == "init":
            continue
        if t in due and kind not in ("arrive",) + EPILOGUE_EVENTS:
            due.discard(t)                            # C from registers, before the next tile's first event
            epilogue_from_registers(t)
        if kind in EPILOGUE_EVENTS:
            due.discard(t)
            if not in_epilogue.get(t):
                in_epilogue[t] = True
                col[t] = nxt(t)
                add(lane, "epilogue", "C", col[t], col[t])
            here = col[t]
            if kind == "nbar":
                waiting[t] = (here, ("nbar", int(e.a), int(e.b)))
                arrived.setdefault(("nbar", int(e.a), int(e.b)), []).append(here)
            elif kind == "nbarp":
                _, key = waiting.pop(t)
                col[t] = max(here, *arrived[key])
                out[-1 if out[-1]["lane"] == lane else _last(out, lane)]["end"] = col[t]
            elif kind == "store":
                stores.append((t, here))
            elif kind in ("bwaitr", "bwait"):
                for s in [s for s in stores if s[0] == t and s[1] < here]:
                    stores.remove(s)
                    add("copy engine: C", "store", f"{s[0] // 128}", s[1], here)
            continue
        in_epilogue[t] = False
        if kind == "arrive":
            name, slot = names.get(int(e.a), ("?", -1))
            if int(e.b) > 0:                          # expect_tx: the producer starts a slice's copies
                c = nxt(t)
                n = produced.get(t, 0)
                produced[t] = n + 1
                add(lane, "issue", n, c, c, n % stages)
                add("copy engine", "copy", n, c, c + 1, n % stages)
                issued[int(e.a)] = c
            else:
                c = nxt(t)
                add(lane, "release", slot, c, c, slot)
            col[t] = c
            phase_cols.setdefault(int(e.a), []).append(c)
        elif kind == "landed":
            phase_cols.setdefault(int(e.a), []).append(issued.get(int(e.a), nxt(t)) + 1)
        elif kind == "load":
            continue
        elif kind == "flip":
            last_flip[(int(e.a), 1 - int(e.b))] = max(phase_cols.pop(int(e.a), [nxt(t)]))
        elif kind == "wait":
            waiting[t] = (nxt(t), ("mbar", int(e.a), int(e.b)))
        elif kind == "pass":
            start, (_, bar, parity) = waiting.pop(t)
            name, slot = names.get(bar, ("?", -1))
            done = last_flip.get((bar, parity))
            end = start if done is None else max(start, done + 1)
            col[t] = end
            add(lane, "wait", f"{name}[{slot}] {parity}", start, end, slot, blocked=end > start, fresh=done is None)
        elif kind == "mma":
            if t not in group:
                col[t] = nxt(t)
                group[t] = (col[t], groups.get(("count", t), 0))
                groups[("count", t)] = group[t][1] + 1
        elif kind == "commit":
            groups.setdefault(t, []).append(group.pop(t))
        elif kind == "waitg":
            c = col[t] = nxt(t)
            while len(groups.get(t, [])) > int(e.a):
                first, n = groups[t].pop(0)
                add(lane, "products", n, first, c, n % stages)
                retired[t] = retired.get(t, 0) + 1
                if slices and retired[t] % slices == 0:
                    due.add(t)                        # the tile's last products: then its C
        elif kind == "sync":
            k = syncs[t] = syncs.get(t, 0) + 1
            waiting[t] = (nxt(t), ("sync", k))
            arrived.setdefault(("sync", k), []).append(nxt(t))
        elif kind == "syncp":
            start, key = waiting.pop(t)
            end = col[t] = max(start, *arrived[key])
            add(lane, "wait", "__syncthreads", start, end, blocked=end > start)
    for t in sorted(due):
        epilogue_from_registers(t)
    for t, c in stores:                               # retired by the block's last bulk wait
        add("copy engine: C", "store", f"{t // 128}", c, c + 1)
    frame = pd.DataFrame(out, columns=ACTION_COLUMNS)
    frame.attrs.update(events.attrs)
    return frame


def _last(out: list, lane: str) -> int:
    return max(i for i, a in enumerate(out) if a["lane"] == lane)


#: One colour per ring slot (at most 5 slots in the chapter's steps), shared by a slice's copy and
#: its products, so that a reader can follow a slice from the copy engine to the tensor cores.
SLOT_COLORS = ("#4C72B0", "#DD8452", "#55A868", "#8172B3", "#937860", "#DA8BC3")
WAIT_COLOR, EPILOGUE_COLOR, STORE_COLOR = "#BBBBBB", "#333333", "#C44E52"


def drawn_lanes(frame: pd.DataFrame) -> list[str]:
    """The lanes a figure shows, top to bottom: the copy engine, then the producer (or the warp
    whose thread 0 issues the copies) and one warp of each consumer warpgroup (or warp 1 of a
    one-warpgroup block: warps 2 and 3 do as it does)."""
    lanes = list(dict.fromkeys(frame["lane"]))
    shown = ["copy engine", "copy engine: C"] + [l for l in lanes if l.startswith(("producer (", "warp 0"))]
    shown += [l for l in lanes if l.startswith("consumer") and "(warp" in l] or [l for l in lanes if l == "warp 1"]
    return [l for l in shown if l in lanes]


def _lane_title(lane: str, one_group: bool) -> str:
    if lane == "warp 1" and one_group:
        return "warp 1\n(2, 3 alike)"
    if lane == "copy engine: C":
        return "copy engine:\nC of 1, 2"
    return lane.replace(" (thread 0 issues the copies)", "\n(thread 0 copies)").replace(" (", "\n(")


def figure(frame: pd.DataFrame, *, title: str | None = None, caption: str | None = None):
    """Lanes over the record's order of events (:func:`actions`): the copy engine's copies and
    stores, and per drawn lane its waits (grey where a dependency held them), its groups of
    products (issue to retirement; two rows, so that a group in flight beside the next shows),
    its releases of a slot (triangles) and its epilogue (C)."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    lanes = drawn_lanes(frame)
    one_group = frame.attrs.get("threads", 384) <= 128
    step = str(int(frame.attrs["step"])) if "step" in frame.attrs else "?"
    width = int(frame["end"].max()) + 2
    fig, ax = plt.subplots(figsize=(plots.MAX_WIDTH_IN, 0.8 * len(lanes) + 2.6))
    y_of = {lane: len(lanes) - 1 - i for i, lane in enumerate(lanes)}
    sel = frame[frame["lane"].isin(lanes)]
    for a in sel.itertuples(index=False):
        y, x0, w = y_of[a.lane], a.start, a.end - a.start + 1
        color = SLOT_COLORS[a.slot % len(SLOT_COLORS)] if a.slot >= 0 else WAIT_COLOR
        if a.kind == "copy":
            ax.add_patch(plt.Rectangle((x0, y + 0.1), w, 0.8, facecolor=color, edgecolor="white", lw=0.8))
            ax.text(x0 + w / 2, y + 0.5, a.label, ha="center", va="center", fontsize=9, color="white",
                    fontweight="bold")
        elif a.kind == "store":       # one row per consumer; a box's stores overlap the others'
            row = int(a.label) - 1
            ax.add_patch(plt.Rectangle((x0, y + 0.55 - 0.45 * row), w, 0.35, facecolor=STORE_COLOR,
                                       edgecolor="white", lw=0.5, alpha=0.45))
        elif a.kind == "products":
            row = int(a.label) % 2
            ax.add_patch(plt.Rectangle((x0, y + 0.08 + 0.4 * row), w, 0.36, facecolor=color, edgecolor="white",
                                       lw=0.8))
            ax.text(x0 + w / 2, y + 0.26 + 0.4 * row, a.label, ha="center", va="center", fontsize=9,
                    color="white", fontweight="bold")
        elif a.kind == "wait" and a.blocked:
            ax.add_patch(plt.Rectangle((x0, y + 0.3), w, 0.4, facecolor=WAIT_COLOR, edgecolor="#777777", lw=0.6,
                                       hatch="///"))
            if w >= 3:
                ax.text(x0 + w / 2, y + 0.84, a.label.replace("__syncthreads", "sync").split()[0], ha="center",
                        va="center", fontsize=9)
        elif a.kind == "wait" and a.fresh:
            ax.plot(x0 + 0.5, y + 0.5, "o", mfc="white", mec="#333333", ms=5, mew=1)
        elif a.kind == "issue":
            ax.plot(x0 + 0.5, y + 0.5, ">", color=color, ms=7)
        elif a.kind == "release":
            ax.plot(x0 + 0.5, y + 0.82, "v", color=color, ms=6)
        elif a.kind == "epilogue":
            ax.add_patch(plt.Rectangle((x0, y + 0.1), w, 0.8, facecolor=EPILOGUE_COLOR, edgecolor="white"))
            ax.text(x0 + w / 2, y + 0.5, "C", ha="center", va="center", fontsize=9, color="white",
                    fontweight="bold")
    ax.set(xlim=(0, width), ylim=(-0.1, len(lanes)), yticks=[y_of[l] + 0.5 for l in lanes],
           yticklabels=[_lane_title(l, one_group) for l in lanes],
           xlabel="order of events (each column: what had to come before it is to its left)")
    ax.tick_params(labelsize=9)
    ax.xaxis.label.set_size(9.5)
    ax.grid(axis="y", visible=False)
    stages = frame.attrs.get("stages", 1)
    handles = [Patch(facecolor=SLOT_COLORS[s], label=f"slot {s}") for s in range(stages)]
    handles += [Patch(facecolor=WAIT_COLOR, hatch="///", edgecolor="#777777", label="waits (held)"),
                Line2D([], [], ls="", marker="o", mfc="white", mec="#333333", label="wait(1), fresh barrier"),
                Line2D([], [], ls="", marker="v", color="#555555", label="arrives on empty"),
                Patch(facecolor=EPILOGUE_COLOR, label="C leaves")]
    if (frame["kind"] == "store").any():
        handles.append(Patch(facecolor=STORE_COLOR, alpha=0.6, label="TMA store runs"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(-0.12, -0.2), ncol=5, fontsize=9, frameon=False,
              handlelength=1.2, columnspacing=1.0)
    a = frame.attrs
    default_caption = (
        f"Drawn from the CPU backend's record of one block of step {step} (M x N x K = {a.get('M')} x "
        f"{a.get('N')} x {a.get('K')}: {a.get('slices')} slices of k"
        + (f" per tile, {a.get('tiles')} tiles" if a.get("tiles", 1) > 1 else "")
        + f", a {stages}-slot ring), whose C was checked against float64. Each mark sits one column after what it "
        "had to follow: its lane's previous action and, for a wait, the arrival or landed copy that completed "
        "the phase it named. The columns are an order, not time: the CPU backend completes each copy and each "
        "group of products when it is issued, so no duration is drawn to scale. Copy boxes and products: "
        "the slice's number (over all the block's tiles), in its slot's colour; products from issue to the "
        "wgmma_wait that retired them.")
    if not (frame["kind"] == "store").any():
        default_caption += (" C leaves by plain stores from registers, which the record does not hold: drawn "
                            "after the tile's last products.")
    plots._finish(fig, ax, title or f"Step {step}: who waits for which phase, and who runs ahead?",
                  caption or default_caption)
    return fig


def step_figure(step, **shape):
    """:func:`figure` of a fresh record of ``step`` (:func:`record`, then :func:`actions`)."""
    return figure(actions(record(step, **shape)))
