"""Pictures of the hopper chapter's machinery: an mbarrier's state through a phase, a wgmma matrix
descriptor's fields and the k16 steps inside the swizzled 1 KiB atom, and which thread of a
warpgroup holds which accumulator of an m64nNk16 product.

Each is computed, not drawn by hand: the mbarrier's states from the CPU backend's record of a
step's run (:mod:`gpulab.hopper_trace`), replayed with the PTX ISA's rules and checked against the
phase flips the backend recorded; the descriptors from the same record's wgmma events and the
same bit layout as ``smem_desc`` in ``kernels/common/hopper.h``; the accumulator layout from the
formula in that header (the PTX ISA's "WGMMA .m64nNk16 register fragment layout for accumulator
matrix D", CUTLASS's ``CLayout_64xN``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from . import plots
from .errors import GpulabError

# ---------------------------------------------------------------------------------- mbarrier
#: The columns of :func:`barrier_history`.
HISTORY_COLUMNS = ["event", "value", "pending", "tx", "phase", "wait(0)", "wait(1)"]


def replay(count: int, events) -> pd.DataFrame:
    """An mbarrier of ``count`` arrivals through ``events`` ((kind, value) pairs: ``arrive``,
    ``arrive_expect_tx`` (bytes), ``complete_tx`` (bytes)), by the PTX ISA's rules: a phase
    completes when its arrivals have all come and its announced bytes have all landed (the
    transaction count back at 0), and the barrier then starts the next phase, of the other parity,
    with ``count`` arrivals pending again. A row per state (the first: just initialised), with
    whether ``wait(p)`` (mbarrier.try_wait.parity p) would return in it: once the phase of parity
    p has completed, that is, while the current phase has the other parity -- so a fresh
    barrier's wait(1) returns at once."""
    if count < 1:
        raise GpulabError(f"an mbarrier counts at least 1 arrival, got {count}")
    pending, tx, phase = count, 0, 0
    rows = [("init", count, pending, tx, phase)]
    for kind, value in events:
        if kind not in ("arrive", "arrive_expect_tx", "complete_tx"):
            raise GpulabError(f"unknown mbarrier event {kind!r}: arrive, arrive_expect_tx or complete_tx")
        if kind != "complete_tx":
            if pending == 0:
                raise GpulabError("more arrivals in a phase than the barrier's count")
            pending -= 1
            tx += int(value) if kind == "arrive_expect_tx" else 0
        else:
            tx -= int(value)
        rows.append((kind, int(value), pending, tx, phase))
        if pending == 0 and tx == 0:
            phase, pending = phase ^ 1, count
            rows.append(("phase completes", phase ^ 1, pending, tx, phase))
    frame = pd.DataFrame(rows, columns=HISTORY_COLUMNS[:5])
    frame["wait(0)"] = frame["phase"] != 0
    frame["wait(1)"] = frame["phase"] != 1
    return frame


def barrier_history(events: pd.DataFrame, name: str = "full", slot: int = 0, phases: int = 1) -> pd.DataFrame:
    """The states of one barrier of a :func:`gpulab.hopper_trace.record` (``full`` or ``empty``
    of ``slot``) through its first ``phases`` phases: :func:`replay` of the arrivals and landed
    bytes the CPU backend recorded on it, checked against the phase flips it recorded (an error
    where the two disagree)."""
    from .hopper_trace import barrier_names
    names = barrier_names(events)
    address = next((a for a, v in names.items() if v == (name, slot)), None)
    if address is None:
        raise GpulabError(f"the record has no barrier {name}[{slot}]; it has {sorted(names.values())}")
    mine = events[events["a"] == address]
    count = int(mine[mine["kind"] == "init"]["b"].iloc[0])
    stream, flips = [], []
    for e in mine.itertuples(index=False):
        if e.kind == "arrive":
            stream.append(("arrive_expect_tx" if e.b > 0 else "arrive", int(e.b) if e.b > 0 else 1))
        elif e.kind == "landed":
            stream.append(("complete_tx", int(e.b)))
        elif e.kind == "flip":
            flips.append(len(stream))
            if len(flips) == phases:
                break
    history = replay(count, stream)
    completed = [i for i, kind in enumerate(history["event"]) if kind == "phase completes"]
    before = [i - 1 - k for k, i in enumerate(completed)]     # the events replayed before each completion
    if before[:len(flips)] != flips:
        raise GpulabError(f"{name}[{slot}]: the CPU backend's phases completed after events {flips}, the "
                          f"PTX rules say after {before}")
    history.attrs.update(name=f"{name}[{slot}]", count=count, step=events.attrs.get("step"))
    return history


def _event_text(row) -> str:
    if row.event == "init":
        return f"mbarrier.init\ncount {row.value}"
    if row.event == "arrive_expect_tx":
        return f"arrive.expect_tx\n+{row.value:,} bytes"
    if row.event == "complete_tx":
        return f"copy lands\n-{row.value:,} bytes"
    if row.event == "arrive":
        return "arrive"
    return f"phase {row.value} completes:\nnext phase"


def mbarrier_figure(history: pd.DataFrame, *, caption: str | None = None):
    """The states of :func:`barrier_history` (or :func:`replay`) side by side: each box a state
    (arrivals pending, transaction bytes still to land, the phase's parity), the event that led
    to it above, and under it what wait(0) and wait(1) would do."""
    import matplotlib.pyplot as plt
    n = len(history)
    fig, ax = plt.subplots(figsize=(plots.MAX_WIDTH_IN, 3.6))
    for i, row in enumerate(history.itertuples(index=False)):
        flipped = row.event == "phase completes"
        ax.add_patch(plt.Rectangle((i + 0.06, 0.9), 0.88, 1.2, facecolor="#F2D0A9" if flipped else "#DCE6F2",
                                   edgecolor="#333333", lw=1.4 if flipped else 0.8))
        ax.text(i + 0.5, 1.5, f"pending {row.pending}\ntx {row.tx:,}\nphase {row.phase}", ha="center",
                va="center", fontsize=9.5, linespacing=1.5)
        ax.text(i + 0.5, 2.55, _event_text(row), ha="center", va="center", fontsize=9,
                fontweight="bold" if flipped else "normal")
        for k, p in enumerate((0, 1)):
            returns = bool(getattr(row, "_5" if p == 0 else "_6"))
            ax.text(i + 0.5, 0.6 - 0.32 * k, f"wait({p}): " + ("returns" if returns else "blocks"), ha="center",
                    va="center", fontsize=9, color="#2E7D32" if returns else "#B23A3A")
        if i:
            ax.annotate("", xy=(i + 0.06, 1.5), xytext=(i - 0.06, 1.5),
                        arrowprops=dict(arrowstyle="->", color="#555555"))
    ax.set(xlim=(0, n), ylim=(0.1, 3.0))
    ax.axis("off")
    name = history.attrs.get("name", "an mbarrier")
    step = history.attrs.get("step")
    where = (f"{name} of step {int(step)}'s traced run on the CPU backend, replayed with the PTX ISA's rules "
             "(the backend's own phase flips agree)") if step else "the PTX ISA's rules"
    plots._finish(fig, ax, f"How does a phase of {name} complete, and why does a fresh barrier's wait(1) "
                  "return at once?", caption or (
                      f"From {where}. A phase completes when no arrival is pending and no announced byte is "
                      "still to land; the barrier then counts the next phase, of the other parity. wait(p) "
                      "returns once the phase of parity p has completed, i.e. while the current phase has the "
                      "other parity: on a fresh barrier (phase 0) wait(1) returns at once, which is why the "
                      "producer's first round round the ring waits for parity 1 of each empty barrier."),
                  whole_figure=True)
    return fig


# ---------------------------------------------------------------------------------- descriptors
#: A wgmma matrix descriptor's fields (PTX ISA, "Matrix Descriptor Format"): name -> (first bit,
#: bits, what the field holds); the three offsets are in units of 16 bytes.
DESCRIPTOR_FIELDS = {
    "start": (0, 14, "start address / 16"),
    "lbo": (16, 14, "leading byte offset / 16"),
    "sbo": (32, 14, "stride byte offset / 16"),
    "swizzle": (62, 2, "swizzle (1: 128 B)"),
}
SWIZZLE_MODES = {0: "none", 1: "128B", 2: "64B", 3: "32B"}


def smem_desc(address: int, lbo: int, sbo: int, swizzle: int) -> int:
    """``smem_desc`` of kernels/common/hopper.h: the descriptor of a K-major tile at shared-memory
    offset ``address`` (bytes), with leading and stride byte offsets and a swizzle mode."""
    return (((address & 0x3FFFF) >> 4) | ((lbo & 0x3FFFF) >> 4) << 16 | ((sbo & 0x3FFFF) >> 4) << 32
            | (swizzle & 3) << 62)


def descriptor_fields(desc: int) -> dict:
    """A descriptor's fields, in bytes (the offsets) and the swizzle mode's number."""
    out = {name: (desc >> first) & ((1 << bits) - 1) for name, (first, bits, _) in DESCRIPTOR_FIELDS.items()}
    return {"start": out["start"] << 4, "lbo": out["lbo"] << 4, "sbo": out["sbo"] << 4, "swizzle": out["swizzle"]}


def slice_chunks(kk: int, swizzle: int = 128, rows: int = 8) -> np.ndarray:
    """Where the k16 slice ``kk`` (halves 16 kk .. 16 kk + 15: 32 bytes of each 128-byte row) of
    an 8-row swizzled atom lies: for each row, the two 16-byte chunks of shared memory that hold
    it, by the same function of the address the copy engine and the tensor cores apply (the
    descriptor's start is 32 kk bytes in; row r is r x 128 bytes further; then the XOR)."""
    from .workloads.hopper.views import swizzle_chunk
    return np.array([[swizzle_chunk(r, 2 * kk + h, swizzle) for h in (0, 1)] for r in range(rows)])


def descriptor_figure(events: pd.DataFrame | None = None):
    """The descriptor of each of a slice's four k16 products of A (its fields as bits), and where
    each k16 slice's 32 bytes of a row lie in the swizzled 1 KiB atom. With ``events`` (a
    :func:`gpulab.hopper_trace.record`), the start addresses are those the record's first wgmma
    group read; otherwise those ``smem_desc`` gives a tile at offset 0."""
    import matplotlib.pyplot as plt
    if events is not None:
        mma = events[(events["kind"] == "mma") & (events["thread"] == events[events["kind"] == "mma"]["thread"].min())]
        starts = [int(a) for a in mma["a"].iloc[:4]]
        source = (f"the start addresses are those of the first four wgmma of step {int(events.attrs['step'])}'s traced "
                  "run on the CPU backend (warpgroup 1, A)")
    else:
        starts = [32 * kk for kk in range(4)]
        source = "the start addresses smem_desc gives a tile at offset 0"
    descs = [smem_desc(s, 1, 1024, 1) for s in starts]     # as the kernels call it
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(plots.MAX_WIDTH_IN, 6.4), gridspec_kw={"height_ratios": [1, 1.5]})
    colors = plt.get_cmap("tab10")
    # The 64 bits, drawn from bit 63 at the left; one row per k16 slice's descriptor.
    for i, d in enumerate(descs):
        y = len(descs) - 1 - i
        f = descriptor_fields(d)
        for k, (name, (first, bits, what)) in enumerate(DESCRIPTOR_FIELDS.items()):
            x = 63 - (first + bits - 1)
            top.add_patch(plt.Rectangle((x, y + 0.1), bits, 0.8, facecolor=colors(k), alpha=0.35, edgecolor="#333333"))
            value = f[name] if name != "swizzle" else f"{f[name]} ({SWIZZLE_MODES[f[name]]})"
            unit = "" if name == "swizzle" else f" B ({f[name] >> 4})"
            narrow = bits < 8                          # the swizzle's 2 bits: its value beside them
            top.text(x + bits + 0.6 if narrow else x + bits / 2, y + 0.5, f"{name} {value}{unit}",
                     ha="left" if narrow else "center", va="center", fontsize=9)
        top.text(-0.8, y + 0.5, f"kk={i}", ha="right", va="center", fontsize=9)
    for name, (first, bits, what) in DESCRIPTOR_FIELDS.items():
        top.text(63 - (first + bits - 1) + bits / 2, len(descs) + 0.25, f"bits {first}-{first + bits - 1}",
                 ha="center", va="center", fontsize=9)
    top.set(xlim=(-5, 64), ylim=(0, len(descs) + 0.6))
    top.axis("off")
    top.set_title("A's descriptor for each k16 step of a slice: only the start moves, 32 bytes a step",
                  loc="left", fontsize=10)
    # The atom: 8 rows x 8 chunks; each chunk coloured by the k16 slice (kk) it holds.
    for r in range(8):
        for kk in range(4):
            for h, c in enumerate(slice_chunks(kk)[r]):
                bottom.add_patch(plt.Rectangle((c, 7 - r), 1, 1, facecolor=colors(kk + 4), alpha=0.45,
                                               edgecolor="white"))
                bottom.text(c + 0.5, 7.5 - r, f"kk{kk}" + ("a" if h == 0 else "b"), ha="center", va="center",
                            fontsize=9)
    bottom.set(xlim=(0, 8), ylim=(0, 8), xticks=np.arange(8) + 0.5, xticklabels=[f"{16 * c}" for c in range(8)],
               yticks=np.arange(8) + 0.5, yticklabels=[f"row {r} (+{128 * r})" for r in range(8)][::-1])
    bottom.tick_params(labelsize=9)
    bottom.set_xlabel("byte offset within the row's 128 bytes (16-byte chunk)", fontsize=9.5)
    bottom.set_title("Where slice kk's 32 bytes of each row lie in the 1 KiB atom (a: halves 16kk..16kk+7, "
                     "b: the next 8)", loc="left", fontsize=10)
    bottom.grid(False)
    plots._finish(fig, bottom, "What does a wgmma descriptor hold, and where inside the swizzled atom does each "
                  "k16 step read?", (
                      f"Descriptor fields as kernels/common/hopper.h's smem_desc packs them (PTX ISA, Matrix "
                      f"Descriptor Format); {source}: 32 bytes apart, inside one 1024-byte atom. SBO = 1024 (the "
                      "step from one group of 8 rows to the next); LBO is not used by a K-major swizzled operand "
                      "(the kernels pass 1, which the division by 16 stores as 0). The tensor cores compute each row's address from the "
                      "start (start + 128 r + 2 k) and then apply the XOR of the swizzle, as the copy engine did "
                      "when it stored the tile: slice kk's two chunks of row r lie at chunks (2kk) ^ r and "
                      "(2kk + 1) ^ r."), whole_figure=True)
    return fig


# ---------------------------------------------------------------------------------- accumulators
def accumulator_owner(n: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """For the 64 x n accumulator of an m64nNk16 wgmma: (thread of the warpgroup, index of its
    register array d) holding each element, by kernels/common/hopper.h's layout: thread
    t = 32 w + 4 g + q holds d[4 j + e] = D(16 w + g + 8 (e / 2), 8 j + 2 q + e % 2)."""
    if n % 8 or not 8 <= n <= 256:
        raise GpulabError(f"wgmma's N is a multiple of 8 from 8 to 256, got {n}")
    thread = np.full((64, n), -1, np.int64)
    register = np.full((64, n), -1, np.int64)
    for t in range(128):
        w, g, q = t // 32, (t % 32) // 4, t % 4
        for j in range(n // 8):
            for e in range(4):
                row, col = 16 * w + g + 8 * (e // 2), 8 * j + 2 * q + e % 2
                thread[row, col], register[row, col] = t, 4 * j + e
    return thread, register


def accumulator_figure(n: int = 256, shown_columns: int = 16):
    """Which warp holds which rows of the 64 x n accumulator (left: the first ``shown_columns``
    columns), and which thread and register hold each element of warp 0's first 16 rows and 8
    columns (right)."""
    import matplotlib.pyplot as plt
    from . import diagrams
    thread, register = accumulator_owner(n)
    fig, (left, right) = plt.subplots(1, 2, figsize=(plots.MAX_WIDTH_IN, 5.6), gridspec_kw={"width_ratios": [1, 1.9]})
    warp = thread[:, :shown_columns] // 32
    diagrams.ownership(left, warp, group=warp, highlight={}, marks=[(thread[:, :shown_columns] == 0, diagrams.HIGHLIGHT)],
                       title=f"warp of each element (columns 0-{shown_columns - 1} of {n})", aspect="auto")
    for w in range(4):
        left.text(shown_columns - 0.5 + 0.6, 16 * w + 7.5, f"warp {w}", ha="left", va="center", fontsize=9)
    left.tick_params(labelsize=9)
    cmap = plt.get_cmap("tab20")
    for r in range(16):
        for c in range(8):
            t, i = thread[r, c], register[r, c]
            right.add_patch(plt.Rectangle((c, 15 - r), 1, 1, facecolor=cmap(t % 4 * 2 + (r >= 8)), alpha=0.5,
                                          edgecolor="white"))
            right.text(c + 0.5, 15.5 - r, f"t{t} d{i}", ha="center", va="center", fontsize=8.5)
    right.set(xlim=(0, 8), ylim=(0, 16), xticks=np.arange(8) + 0.5, xticklabels=range(8),
              yticks=np.arange(16) + 0.5, yticklabels=range(16)[::-1], xlabel="column", ylabel="row")
    right.tick_params(labelsize=9)
    right.grid(False)
    right.set_title("warp 0, rows 0-15, columns 0-7: thread t, register d[i]", loc="left", fontsize=10)
    plots._finish(fig, right, "Which thread of the warpgroup holds which accumulator of m64nNk16?", (
        "From the layout in kernels/common/hopper.h (the PTX ISA's register fragment of the accumulator D; "
        "CUTLASS's CLayout_64xN says the same), which the CPU backend's wgmma and the epilogues use: thread "
        "t = 32 w + 4 g + q holds d[4 j + e] = D(16 w + g + 8 (e / 2), 8 j + 2 q + e % 2). Warp w owns rows "
        "16 w .. 16 w + 15; each thread two neighbouring columns in each 8-column group j, in two rows 8 apart: "
        f"{n // 2} registers of an m64n{n}. Red, left: thread 0's elements."), whole_figure=True)
    return fig
