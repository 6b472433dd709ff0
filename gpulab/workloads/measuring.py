"""Chapter 1's workload: SAXPY, z = a*x + y, declared once.

The notebook, the tests and ``python -m gpulab record measuring`` all read
this module: the sizes, the FLOP and byte counts, the reference, the ladder
steps with their launch configurations, and the benchmark that the recorded
run comes from.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

from .. import ladder, recorder, roofline, transfers
from ..check import CheckTable, compare
from ..kernels import Backend, Kernel, get_backend, load_module
from ..timing import Timing, benchmark, graph_benchmark, host_timer

CHAPTER = "measuring"
TITLE = "Measuring a GPU kernel"
#: The name the chapter's notebook imports this module under (``from gpulab.workloads import
#: measuring as saxpy``): exercise cells run with it.
IMPORTED_AS = "saxpy"
BLOCK = 256
A = np.float32(2.5)
#: Sizes for the scaling study: 4 K to 64 M elements (256 KB to 768 MB moved).
SIZES = [2**k for k in range(12, 27, 2)]
#: Why the cold table has no graph times for cuBLAS's saxpy.
COLD_GAP = "cuBLAS's saxpy is timed eagerly only, warm and cold, never in a CUDA graph"
#: The size the single-size experiments use: 16 M elements, 201 MB moved.
MAIN_SIZE = 2**24
#: Correctness sizes: 1 element, less than a block, not multiples of 256 or of 4.
CHECK_SIZES = [1, 3, 255, 1000, 4099, 100_003]
FLOPS_PER_ELEMENT = 2      # one multiply, one add
BYTES_PER_ELEMENT = 12     # read x, read y, write z: 3 x 4 bytes


@dataclass(frozen=True)
class Step(ladder.Step):
    """One rung of the ladder: a kernel file, its kernel, and how to launch it."""

    kernel: str
    elements_per_thread: int = 1
    fixed_grid: int | None = None   # grid-stride kernels launch a fixed grid

    def grid(self, n: int) -> int:
        if self.fixed_grid is not None:
            return self.fixed_grid
        threads = -(-n // self.elements_per_thread)
        return max(1, -(-threads // BLOCK))


STEPS = [
    Step("01", "measuring/01_saxpy.cu", "one element per thread", "saxpy"),
    Step("02", "measuring/02_saxpy_float4.cu", "float4: 16-byte accesses", "saxpy_float4", 4),
]
#: The exercise kernel, launched on a deliberately small grid so the loop must stride.
EXERCISE = Step("03", "measuring/03_saxpy_grid_stride.cu", "grid-stride loop (exercise)", "saxpy_grid_stride",
                fixed_grid=8)


def make_inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x and y: float32 in [-1, 1) from a fixed seed (never zeros, which can
    hide unwritten outputs)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, n).astype(np.float32)
    y = rng.uniform(-1, 1, n).astype(np.float32)
    return x, y


def reference(a, x, y) -> np.ndarray:
    """z = a*x + y in float64."""
    return np.float64(a) * x.astype(np.float64) + y.astype(np.float64)


def work(n: int) -> dict:
    return {"flops": FLOPS_PER_ELEMENT * n, "bytes": BYTES_PER_ELEMENT * n}


def kernel(step: Step, backend: str | Backend | None = None) -> Kernel:
    return load_module(step.file, backend).get_function(step.kernel)


def launcher(step: Step, fn: Kernel) -> Callable:
    """``launch(inputs, output)`` for :mod:`gpulab.transfers`: SAXPY on device arrays."""
    def launch(inputs, output):
        x, y = inputs
        fn(step.grid(output.size), BLOCK, (output.size, A, x, y, output))
    return launch


def run(step: Step, x: np.ndarray, y: np.ndarray, backend: str | Backend | None = None) -> np.ndarray:
    """Run one step on host inputs with a NaN-poisoned output; return z on the host."""
    be = get_backend(backend)
    fn = kernel(step, be)
    dx, dy = be.to_device(x), be.to_device(y)
    z = be.poisoned(x.shape, np.float32)
    fn(step.grid(x.size), BLOCK, (x.size, A, dx, dy, z))
    return be.to_host(z)


def check_steps(backend: str | Backend | None = None, steps=None, sizes=CHECK_SIZES,
                seed: int = 0) -> CheckTable:
    """Every step against the reference at every check size, fresh inputs each time."""
    def check_one(step, be):
        for i, n in enumerate(sizes):
            x, y = make_inputs(n, seed + i)
            yield {"kernel": step.kernel, "n": n}, compare(run(step, x, y, be), reference(A, x, y), step.precision,
                                                           name=f"{step.kernel} n={n}")
    return ladder.check_steps(steps or STEPS, check_one, backend)


# ------------------------------------------------------------------ the recorded run
def _setup(rec) -> dict:
    """The run's context: every step compiled for this GPU."""
    return {"fns": {step.kernel: kernel(step, "gpu") for step in STEPS}}


def time_ladder(rec, ctx):
    """The ladder over sizes, with cuBLAS's SAXPY (in place: y += a*x) as the vendor line."""
    for n in (SIZES[:3] if rec.quick else SIZES):
        _ladder_at(rec, ctx["fns"], n)


def _ladder_at(rec, fns, n: int):
    """Every step and cuBLAS at size ``n``, each checked at full size before it is timed: warm,
    in a CUDA graph and (where the arrays fit in L2) cold. (A function, so that its arrays are
    freed before the next size's.)"""
    import cupy
    import cupy.cublas

    from ..check import check

    repeats = rec.repeats
    x_host, y_host = make_inputs(n)
    x, y = cupy.asarray(x_host), cupy.asarray(y_host)
    z = cupy.full(n, cupy.nan, dtype=cupy.float32)
    for step in STEPS:
        launch = fns[step.kernel].bind(step.grid(n), BLOCK, (n, A, x, y, z))
        z.fill(cupy.nan)
        launch()
        if not rec.checked(lambda: check(z, reference(A, x_host, y_host), name=f"{step.kernel} n={n}"),
                           variant=step.title, size=n):
            continue
        rec.add(benchmark(launch, repeats=repeats).row("ladder", step.title, n, **work(n)))
        rec.add(graph_benchmark(launch, repeats=max(10, repeats // 2)).row("graph", step.title, n, **work(n)))
        if fits_in_l2(n):
            rec.add(cold_rows(launch, step.title, n, repeats))
    y_blas = y.copy()
    cupy.cublas.axpy(A, x, y_blas)
    if rec.checked(lambda: check(y_blas, reference(A, x_host, y_host), name=f"cublas axpy n={n}"),
                   variant="cuBLAS saxpy (in place)", size=n):
        axpy = lambda: cupy.cublas.axpy(A, x, y_blas)      # noqa: E731
        rec.add(benchmark(axpy, repeats=repeats).row("ladder", "cuBLAS saxpy (in place)", n, **work(n)))
        if fits_in_l2(n):
            rec.add(benchmark(axpy, repeats=repeats, flush_l2=True)
                    .row("ladder_cold", "cuBLAS saxpy (in place)", n, **work(n)))


class _MainSize:
    """SAXPY's arrays at :data:`MAIN_SIZE` and step 1 bound to them, for the single-size
    experiments (made once, after the ladder)."""

    def __init__(self, fns):
        import cupy
        self.n = MAIN_SIZE
        self.x_host, self.y_host = make_inputs(self.n)
        self.x, self.y = cupy.asarray(self.x_host), cupy.asarray(self.y_host)
        self.z = cupy.empty(self.n, dtype=cupy.float32)
        self.launch = fns["saxpy"].bind(STEPS[0].grid(self.n), BLOCK, (self.n, A, self.x, self.y, self.z))
        self.launch_host = launcher(STEPS[0], fns["saxpy"])


def _main_size(ctx: dict) -> _MainSize:
    if "main" not in ctx:
        ctx["main"] = _MainSize(ctx["fns"])
    return ctx["main"]


def time_timers(rec, ctx):
    """The host timer (without and with a synchronize) against events, at one size."""
    m = _main_size(ctx)
    for t in (host_timer(m.launch, synchronize=False, repeats=rec.repeats),
              host_timer(m.launch, synchronize=True, repeats=rec.repeats),
              benchmark(m.launch, repeats=rec.repeats)):
        rec.add(t.row("timers", t.method, m.n, **work(m.n)))


def time_first_launch(rec, ctx):
    """The first launch: compiling (a fresh source, so no cache helps), loading, launching."""
    m = _main_size(ctx)
    rec.add(first_launch_rows(m.n, m.x, m.y, m.z))


def time_idle(rec, ctx):
    """The first kernel after the GPU sat idle, with and without busy work queued before it."""
    m = _main_size(ctx)
    rec.add(idle_rows(m.launch, m.n))


def time_transfers(rec, ctx):
    """Where the time goes when the data starts on the host: every kind of host memory; the same
    without warming the GPU before the kernel phase (what the kernel phase reads right after a
    copy that left the SMs idle); and the copies overlapped with the kernel on streams."""
    m = _main_size(ctx)
    repeats = max(5, rec.repeats // 5)
    for memory in transfers.MEMORY_KINDS:
        try:
            rec.add(transfers.transfer_breakdown(m.launch_host, [m.x_host, m.y_host], (m.n,), np.float32,
                                                 memory=memory, repeats=repeats, size=m.n))
        except RuntimeError as exc:  # e.g. no prefetch on this platform: say so, no row
            rec.progress(f"skipping {memory}: {exc}")
    for memory in ("pageable", "pinned"):
        rec.add(transfers.transfer_breakdown(m.launch_host, [m.x_host, m.y_host], (m.n,), np.float32,
                                             memory=memory, repeats=repeats, size=m.n, warm=False,
                                             experiment="transfers_unwarmed"))
    for chunks in (1, 2, 4, 8, 16):
        rec.add(transfers.overlap_with_streams(m.launch_host, [m.x_host, m.y_host], (m.n,), np.float32,
                                               chunks=chunks, repeats=repeats, size=m.n))
    del ctx["main"]                  # SAXPY's arrays go before the ceilings allocate their own


def time_ceilings(rec, ctx):
    """The device's measured memory bandwidth and FP32 rate."""
    rec.add(roofline.measure_ceilings(repeats=20))


#: Every experiment of chapter 1 on the GPU, in order: what ``python -m gpulab record measuring``
#: and the notebook's live run measure. Each kernel is checked at full size before it is timed.
benchmark_all = recorder.Recording(CHAPTER, [
    recorder.Experiment("ladder", time_ladder),
    recorder.Experiment("timers", time_timers),
    recorder.Experiment("first_launch", time_first_launch),
    recorder.Experiment("idle", time_idle),
    recorder.Experiment("transfers", time_transfers),
    recorder.Experiment("ceilings", time_ceilings),
], setup=_setup)


def l2_bytes(gpu: str | None = None) -> float | None:
    """The L2 cache's size: of ``gpu`` (a recorded run's GPU) from the datasheet table, else of
    this device; None where neither is known."""
    from .. import datasheet
    from ..device import limits
    sheet = datasheet.lookup(gpu) if gpu else None
    if sheet is not None:
        return sheet.l2_mb * 2**20          # the datasheet's "50 MB" is the 50 MiB CUDA reports
    here = limits()
    return here.l2_bytes if here and here.l2_bytes else None


def fits_in_l2(n: int, gpu: str | None = None) -> bool:
    """Whether SAXPY's arrays at ``n`` (x, y and z: 12 bytes per element) fit in the L2 cache
    (of ``gpu``, or of this device), so that a warm and a cold (L2-flushed) timing can differ."""
    size = l2_bytes(gpu)
    return bool(size and BYTES_PER_ELEMENT * n <= size)


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


def cold_rows(launch, variant: str, n: int, repeats: int) -> list[dict]:
    """``launch`` with L2 flushed before every call: eager (``ladder_cold``) and in a
    one-call CUDA graph, beside the same graph unflushed (``graph_cold``)."""
    out = [benchmark(launch, repeats=repeats, flush_l2=True).row("ladder_cold", variant, n, **work(n))]
    for flush in (False, True):
        out.append(graph_benchmark(launch, launches=1, repeats=max(10, repeats // 2), flush_l2=flush)
                   .row("graph_cold", variant, n, **work(n)))
    return out


def idle_rows(launch, n: int, idles_ms=(0, 20, 200, 1000), repeats: int = 3) -> list[dict]:
    """The first kernel after the GPU sat idle for each of ``idles_ms``, timed with events,
    with nothing queued before it and with 2 ms of busy work queued before it
    (:func:`gpulab.timing.warm_up_gpu`), plus the SM clock NVML reported just before
    and just after. ``repeats`` tries of each; rows of experiment ``idle``."""
    import cupy

    from ..device import gpu_state
    from ..timing import event_region, warm_up_gpu

    out = []
    for idle in idles_ms:
        for warm_ms in (0, 2):
            times, before, after = [], [], []
            for _ in range(repeats):
                cupy.cuda.Device().synchronize()
                time.sleep(idle / 1e3)
                before.append(gpu_state().get("sm_clock_mhz") or np.nan)
                if warm_ms:
                    warm_up_gpu(warm_ms)
                times.append(event_region(launch))
                after.append(gpu_state().get("sm_clock_mhz") or np.nan)
            out.append(Timing(times, method="cuda events, first kernel after idle").row(
                "idle", f"idle {idle} ms, " + ("2 ms of busy work first" if warm_ms else "nothing queued first"),
                n, **work(n), idle_ms=idle, warm_ms=warm_ms, sm_clock_before_mhz=float(np.nanmedian(before)),
                sm_clock_after_mhz=float(np.nanmedian(after))))
    return out


def first_launch_rows(n: int, x, y, z, tries: int = 3) -> list[dict]:
    """Compile time of a never-seen source, then its first launch (module load
    + launch + finish), then a steady-state launch, all on the host clock."""
    import cupy

    from ..kernels import _compile_gpu
    from ..paths import kernel_path

    path = kernel_path(STEPS[0].file)
    compile_ms, first_ms, steady_ms = [], [], []
    for _ in range(tries):
        source = path.read_text() + f"\n// nonce {time.time_ns()}: defeats CuPy's kernel cache\n"
        t0 = time.perf_counter()
        module = _compile_gpu(path, source, ())
        compile_ms.append((time.perf_counter() - t0) * 1e3)
        fn = module.get_function(STEPS[0].kernel)
        args = (np.int32(n), A, x, y, z)
        grid = (STEPS[0].grid(n), 1, 1)
        t0 = time.perf_counter()
        fn(grid, (BLOCK, 1, 1), args)
        cupy.cuda.get_current_stream().synchronize()
        first_ms.append((time.perf_counter() - t0) * 1e3)
        t0 = time.perf_counter()
        fn(grid, (BLOCK, 1, 1), args)
        cupy.cuda.get_current_stream().synchronize()
        steady_ms.append((time.perf_counter() - t0) * 1e3)
    return [Timing(compile_ms, method="host timer").row("first_launch", "compile (NVRTC)", n, "compile"),
            Timing(first_ms, method="host timer").row("first_launch", "first launch", n, "kernel", **work(n)),
            Timing(steady_ms, method="host timer").row("first_launch", "second launch", n, "kernel", **work(n))]


def gpu_comparison(root=None):
    """Per variant and size of the ladder, the H200's recorded time over the H100's
    against the roofline's prediction; None until both runs exist."""
    from ..runs import gpu_comparison as compare_gpus

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


# ------------------------------------------------------------ what each step's prediction claims
# The kernel files' predictions as claims a run can check (gpulab.predictions states the rules),
# at the chapter's main size ("large") and the smallest ("small"); a reason is shown only when the
# run says the claim failed in that direction.
def _predicted():
    from .. import predictions as p
    return {
        "1": p.unjudged("the baseline: step 2 is measured against it"),
        "2": (p.same("1", claim=f"within about 10% of step 1 at n = {MAIN_SIZE:,}", because_faster=(
                  "on this GPU step 1 was still short of the bandwidth floor at this size, and a quarter of "
                  "the requests brought float4 closer to it (the roofline below shows how close each gets)")),
              p.same("1", "small", claim=f"no gain at n = {SIZES[0]:,}, where the launch dominates")),
    }


#: step -> the checkable claim(s) of its kernel file's prediction (see gpulab.predictions)
PREDICTED = _predicted()


def prediction_table(run):
    """Each step's prediction (from its kernel file) against ``run`` at :data:`MAIN_SIZE`, the
    small-array claim judged at the smallest size."""
    from .. import predictions
    rows = run.experiment("ladder")
    step_of = {s.title: str(i) for i, s in enumerate(STEPS, 1)}
    rows = rows[rows["variant"].isin(step_of)]
    measured = pd.concat([rows[rows["size"] == n].assign(case=case)
                          for n, case in ((MAIN_SIZE, "large"), (SIZES[0], "small"))])
    measured = measured.assign(step=measured["variant"].map(step_of))[["step", "case", "median_ms"]]
    steps = [(str(i), s.title, s.file) for i, s in enumerate(STEPS, 1)]
    return predictions.table(steps, measured, PREDICTED, main_case="large")
