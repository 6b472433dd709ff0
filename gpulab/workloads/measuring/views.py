"""What the measuring notebook shows of a recorded run: the fastest rows against the copy
ceiling, step 2 and cuBLAS against step 1 at every size, the H200 against the H100, and each
kernel file's prediction judged."""
from __future__ import annotations

import pandas as pd

from ... import predictions, roofline
from ...runs import gpu_comparison as compare_gpus
from .problem import BYTES_PER_ELEMENT, MAIN_SIZE, NAME as CHAPTER, SIZES, l2_bytes
from .steps import PREDICTED, STEPS

#: Why the cold table has no graph times for cuBLAS's saxpy.
COLD_GAP = "cuBLAS's saxpy is timed eagerly only, warm and cold, never in a CUDA graph"


def fastest_against_ceiling(run) -> tuple[pd.Series, pd.Series]:
    """The fastest SAXPY rows of ``run`` (event-timed ladder and CUDA-graph rows, with a
    ``timed`` column and achieved ``gbs``): the one whose arrays are at least twice the L2, so
    every launch streams them from HBM, and the one whose arrays fit in the L2, which can stay
    there from one launch to the next."""
    rated = roofline.rates(pd.concat([run.experiment("ladder").assign(timed="events"),
                                      run.experiment("graph").assign(timed="CUDA graph of 20 launches")],
                                     ignore_index=True))
    size = l2_bytes(run.gpu)
    if size is None:
        raise ValueError(f"the L2 size of {run.gpu} is unknown (not in gpulab.datasheet, and not this device)")
    working_set = BYTES_PER_ELEMENT * rated["size"]
    from_hbm, in_l2 = rated[working_set >= 2 * size], rated[working_set <= size]
    return from_hbm.loc[from_hbm["gbs"].idxmax()], in_l2.loc[in_l2["gbs"].idxmax()]


def gpu_comparison(root=None):
    """Per variant and size of the ladder, the H200's recorded time over the H100's
    against the roofline's prediction; None until both runs exist."""
    def select(run):
        rows = run.experiment("ladder")
        rows = rows[rows["size"] >= 2**20]
        return rows.assign(variant=rows["variant"] + ", n = " + rows["size"].map("{:,}".format))
    return compare_gpus(CHAPTER, select, root=root,
                        title="Does SAXPY gain what the roofline predicts on the H200? (n >= 1 M)")


def speedup_by_size(run) -> pd.DataFrame:
    """Step 2 and cuBLAS against step 1 at every size, from the event times and from
    the CUDA-graph times where the run has them; sizes where step 1's eager time is
    more than twice its graph time are marked launch-bound (the events then time
    mostly the launch gap, not the kernel)."""
    ladder = run.experiment("ladder").pivot_table(index="size", columns="variant", values="median_ms", sort=False)
    graph = run.experiment("graph").pivot_table(index="size", columns="variant", values="median_ms", sort=False)
    step1, step2 = STEPS[0].title, STEPS[1].title
    table = pd.DataFrame({"step 1, events (ms)": ladder[step1], "step 1, graph (ms)": graph[step1],
                          "step 2 vs step 1, events": ladder[step1] / ladder[step2],
                          "step 2 vs step 1, graph": graph[step1] / graph[step2]})
    vendor = [c for c in ladder.columns if "cuBLAS" in c]
    if vendor:
        table["cuBLAS vs step 1, events"] = ladder[step1] / ladder[vendor[0]]
    table["launch-bound"] = table["step 1, events (ms)"] > 2 * table["step 1, graph (ms)"]
    return table.rename_axis("n").reset_index()


def prediction_table(run):
    """Each step's prediction (from its kernel file) against ``run`` at :data:`MAIN_SIZE`, the
    small-array claim judged at the smallest size."""
    rows = run.experiment("ladder")
    step_of = {s.title: str(i) for i, s in enumerate(STEPS, 1)}
    rows = rows[rows["variant"].isin(step_of)]
    measured = pd.concat([rows[rows["size"] == n].assign(case=case)
                          for n, case in ((MAIN_SIZE, "large"), (SIZES[0], "small"))])
    measured = measured.assign(step=measured["variant"].map(step_of))[["step", "case", "median_ms"]]
    steps = [(str(i), s.title, s.file) for i, s in enumerate(STEPS, 1)]
    return predictions.table(steps, measured, PREDICTED, main_case="large")


def dispatch_table(run) -> pd.DataFrame | None:
    """The dispatch experiment side by side: per call, its events' median with the host waiting
    before each call (the GPU idle) and queued behind a guard kernel, what the first adds
    (``included_us``), and the host's own time to make the call (``dispatch_us``). None for a run
    recorded before the experiment existed."""
    rows = run.timings[run.timings["experiment"] == "dispatch"]
    if rows.empty:
        return None
    by = rows.pivot_table(index="variant", columns="timed", values="median_ms", sort=False)
    host = rows[rows["timed"] == "queued"].set_index("variant")["dispatch_us"]
    table = pd.DataFrame({"host waits (us)": by["host waits"] * 1e3, "queued (us)": by["queued"] * 1e3})
    table["included_us"] = table["host waits (us)"] - table["queued (us)"]
    table["dispatch_us"] = host.reindex(table.index)
    return table.reset_index().rename(columns={"variant": "call", "included_us": "host waits - queued (us)",
                                               "dispatch_us": "host's dispatch (us)"})


def crosscheck_agreement(run) -> tuple[pd.DataFrame | None, dict]:
    """The run's cross-check (the ladder's fastest rows timed again cold by the lab's loop, by
    Triton's do_bench and by the profiler: gpulab.timing.crosscheck), in microseconds, with how far
    apart the two event timers are; and the numbers the prose quotes (None where the run has no
    cross-check: it was recorded before the queued loop)."""
    from ...timing import CROSSCHECK_FLOOR_MS, CROSSCHECK_TOLERANCE, crosscheck_disagreements
    table = run.tables.get("crosscheck")
    quoted = {"xc_rows": None, "xc_within": None, "xc_floor": None, "xc_small_gap": None,
              "xc_small_kernel": None, "xc_floor_us": CROSSCHECK_FLOOR_MS * 1e3}
    if table is None:
        return None, quoted
    us = pd.DataFrame({"variant": table["variant"], "size": table["size"],
                       "lab, cold (us)": table["median_ms"] * 1e3, "do_bench (us)": table["do_bench_ms"] * 1e3,
                       "profiler, kernel alone (us)": table["profiler_ms"] * 1e3})
    us["apart (us)"] = (us["lab, cold (us)"] - us["do_bench (us)"]).abs()
    within = (us["apart (us)"] <= CROSSCHECK_TOLERANCE * us["do_bench (us)"])
    agreeing = len(table) - len(crosscheck_disagreements(table))
    small = us[us["do_bench (us)"] < 10]
    quoted.update(xc_rows=len(us), xc_within=int(within.sum()), xc_floor=int(agreeing - within.sum()),
                  xc_small_gap=f"{small['apart (us)'].max():.2f} µs" if len(small) else None,
                  xc_small_kernel=f"{small['profiler, kernel alone (us)'].median():.1f} µs" if len(small) else None)
    return us, quoted
